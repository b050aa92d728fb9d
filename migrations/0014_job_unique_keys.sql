-- Job uniqueness (seed 002 "Concurrency & uniqueness"): at most one job per (job, key). A row is
-- the lock: the primary key enforces it (no check-then-insert race), an enqueue inserts it in the
-- caller's transaction (a rollback frees it), and it names the message holding it, so it is
-- released when that message ends, and by the reaper once the message is gone.
CREATE TABLE {{schema}}.job_unique_keys (
  job text NOT NULL,
  key text NOT NULL,
  strategy text NOT NULL CHECK (strategy IN ('until_executed', 'while_executing')),
  -- the holder's queue (logical, a priority sub-queue included) and message
  queue text NOT NULL,
  msg_id bigint NOT NULL,
  -- while_executing: the claim mark of the run holding it (fast recovery releases a dead process's)
  holder text,
  acquired_at timestamptz NOT NULL DEFAULT now(),
  -- the uniqueness period (`for`): past it, the key may be taken by a new job
  expires_at timestamptz,
  PRIMARY KEY (job, key)
);

CREATE INDEX job_unique_keys_holder_idx ON {{schema}}.job_unique_keys (queue, msg_id);
