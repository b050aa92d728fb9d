-- Waiting steps and signals. A step that waits for a signal parks as `waiting` with what it
-- waits for, an optional deadline and what to do when it passes; signals are stored per run.

ALTER TABLE {{schema}}.workflow_steps
  ADD COLUMN wait_for text,
  -- the wait has a matcher beyond the name (evaluated where the workflow's code is loaded)
  ADD COLUMN wait_matcher boolean NOT NULL DEFAULT false,
  ADD COLUMN timeout_at timestamptz,
  ADD COLUMN on_timeout text CHECK (on_timeout IN ('pause', 'cancel', 'skip', 'run', 'notify')),
  -- for notify: how far a late notice moves the deadline
  ADD COLUMN wait_period_ms double precision,
  -- the attempt runs after its wait timed out (on_timeout run)
  ADD COLUMN timed_out boolean NOT NULL DEFAULT false,
  -- when the step parked (waiting_overdue)
  ADD COLUMN waiting_since timestamptz;

CREATE INDEX workflow_steps_timeout_idx ON {{schema}}.workflow_steps (timeout_at)
  WHERE status = 'waiting' AND timeout_at IS NOT NULL;

CREATE TABLE {{schema}}.workflow_signals (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  run_id uuid NOT NULL REFERENCES {{schema}}.workflow_runs (id) ON DELETE CASCADE,
  name text NOT NULL,
  payload jsonb NOT NULL,
  status text NOT NULL CHECK (status IN ('pending', 'claimed', 'consumed')),
  idempotency_key text,
  claimed_by_step bigint REFERENCES {{schema}}.workflow_steps (id) ON DELETE CASCADE,
  actor text NOT NULL DEFAULT 'app',
  reason text,
  received_at timestamptz NOT NULL,
  claimed_at timestamptz,
  consumed_at timestamptz,
  CHECK ((status = 'pending') = (claimed_by_step IS NULL AND claimed_at IS NULL))
);

CREATE UNIQUE INDEX workflow_signals_idempotency_idx ON {{schema}}.workflow_signals (run_id, idempotency_key)
  WHERE idempotency_key IS NOT NULL;
CREATE INDEX workflow_signals_pending_idx ON {{schema}}.workflow_signals (run_id, name, id) WHERE status = 'pending';
CREATE INDEX workflow_signals_step_idx ON {{schema}}.workflow_signals (claimed_by_step) WHERE claimed_by_step IS NOT NULL;
