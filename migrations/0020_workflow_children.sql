-- Child workflows: a run started by a parent's `Workflow.child` step records the parent run and
-- the step's name. One child per parent step (the unique index): a replay or a retry of the
-- parent's step finds the child it started rather than starting a second one. The parent's
-- step waits on `pgbus.child:<step>`; the child's end (and, when the parent asked for it, the
-- child's pause) wakes it in the same transaction, and the sweep repairs a lost wake-up.
ALTER TABLE {{schema}}.workflow_runs
  ADD COLUMN parent_run_id uuid,
  ADD COLUMN parent_step text,
  -- the parent raises the child's pause as a failure (`onChildPause: "fail"`): a pause wakes it
  ADD COLUMN parent_wake_on_pause boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX workflow_runs_parent_step_idx ON {{schema}}.workflow_runs (parent_run_id, parent_step)
  WHERE parent_run_id IS NOT NULL;
