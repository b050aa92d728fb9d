-- Workflow schedules, singleton workflows, workflow priority (seed 004).
--
-- * priority: the run's priority sub-queue (0 highest, as jobs'), resolved once at start (the
--   start's, else the definition's) and kept for every later message of the run; NULL is the
--   config's default.
-- * singleton: at most one run of the workflow holds the slot; held while ready, performing or
--   waiting, released when the run pauses or ends. The unique index is the guard, not a check
--   before the insert: two starts at once cannot both get in.
-- * scheduled_for: the slot of a run started by the workflow's schedule (the body sees it).
-- * recurring_tasks.kind: a recurring task enqueues a job, or starts a workflow run.
ALTER TABLE {{schema}}.workflow_runs
  ADD COLUMN priority integer CHECK (priority >= 0),
  ADD COLUMN singleton boolean NOT NULL DEFAULT false,
  ADD COLUMN scheduled_for timestamptz;

CREATE UNIQUE INDEX workflow_runs_singleton_idx ON {{schema}}.workflow_runs (workflow)
  WHERE singleton AND status IN ('ready', 'performing', 'waiting');

ALTER TABLE {{schema}}.recurring_tasks
  ADD COLUMN kind text NOT NULL DEFAULT 'job' CHECK (kind IN ('job', 'workflow'));
