-- Recurring tasks (seed 002): the definitions the scheduler's leader last synced from its code,
-- and the ledger of fires. A fire is its ledger row and its job's message, committed together;
-- the primary key (task_key, run_at) makes a slot fire once however many schedulers try it.

CREATE TABLE {{schema}}.recurring_tasks (
  key text PRIMARY KEY,
  schedule text NOT NULL,
  -- the schedule as cron (phrases and macros translated), in time_zone
  cron text NOT NULL,
  time_zone text NOT NULL,
  job text NOT NULL,
  -- the physical queue the job goes to, and its payload encoded by the job's Schema
  queue text NOT NULL,
  payload jsonb NOT NULL,
  description text,
  catch_up text NOT NULL CHECK (catch_up IN ('one', 'none', 'all')),
  catch_up_limit integer NOT NULL CHECK (catch_up_limit >= 1),
  -- slots at or before it never fire: when the task was first seen, or its schedule last changed
  active_since timestamptz NOT NULL,
  synced_at timestamptz NOT NULL
);

CREATE TABLE {{schema}}.recurring_executions (
  task_key text NOT NULL,
  run_at timestamptz NOT NULL,
  -- run-now fires are recorded at the time they were asked for and do not move the schedule
  manual boolean NOT NULL DEFAULT false,
  queue text NOT NULL,
  msg_id bigint,
  created_at timestamptz NOT NULL,
  PRIMARY KEY (task_key, run_at)
);

-- retention
CREATE INDEX recurring_executions_created_at_idx ON {{schema}}.recurring_executions (created_at);
