-- The registry of queues. Each queue's own tables (q_<queue> for messages, a_<queue> for the
-- archive) are created by the queue store when the queue is created, so that adding a queue
-- needs no migration; this table lists them for listing, metrics and maintenance.
-- {{schema}} is replaced by the configured schema (a validated identifier), quoted.

CREATE TABLE {{schema}}.queues (
  name text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]*$' AND length(name) <= 47),
  -- the queue whose dead letters this queue holds; null for an ordinary queue
  dead_letter_of text NULL REFERENCES {{schema}}.queues (name) ON DELETE CASCADE,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX queues_dead_letter_of_idx ON {{schema}}.queues (dead_letter_of) WHERE dead_letter_of IS NOT NULL;
