-- Rate limits of jobs: a token bucket per queue and rate key, taken by the queue's limited claim
-- in the claim statement itself (src/Queue/QueueSql.ts, messageReadLimited), so that enforcing
-- a rate across every process costs no round trip per job. Tokens refill continuously at
-- `limit` per `period` up to `limit`; the claim stores what it left and when.
CREATE TABLE {{schema}}.rate_buckets (
  queue text NOT NULL,
  key text NOT NULL,
  tokens double precision NOT NULL,
  refilled_at timestamptz NOT NULL,
  PRIMARY KEY (queue, key)
);

-- A job's rate changed at run time (the operations service): wins over its definition's for
-- every claim from then on. Who changed it, when and why is kept on the row (and logged).
CREATE TABLE {{schema}}.rate_overrides (
  job text PRIMARY KEY,
  rate_limit integer NOT NULL CHECK (rate_limit > 0),
  period_ms double precision NOT NULL CHECK (period_ms > 0),
  actor text NOT NULL,
  reason text,
  updated_at timestamptz NOT NULL DEFAULT now()
);
