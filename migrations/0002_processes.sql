-- Supervisors heartbeat into this table. A process whose beat is older than the stale
-- threshold is dead: a live process's dispatcher releases the messages it had claimed
-- (queue rows carry claimed_by = processes.id) and deletes its row.

CREATE TABLE {{schema}}.processes (
  id text PRIMARY KEY,
  pid integer NOT NULL,
  host text NOT NULL,
  roles text[] NOT NULL,
  capsules jsonb NOT NULL DEFAULT '[]'::jsonb,
  busy integer NOT NULL DEFAULT 0,
  capacity integer NOT NULL DEFAULT 0,
  app_revision text,
  version text NOT NULL,
  started_at timestamptz NOT NULL DEFAULT now(),
  last_beat_at timestamptz NOT NULL DEFAULT now(),
  CHECK (busy >= 0 AND capacity >= 0)
);

CREATE INDEX processes_last_beat_at_idx ON {{schema}}.processes (last_beat_at);
