-- A per-run wait deadline (waitTimeout given as a function) is evaluated again at each notify
-- notice. Only a worker has the workflow's code, so the sweep hands the notice over with a step
-- message and records which missed deadline it handed over, and when, so that it hands each one
-- over once (again only if the message is gone past the stall threshold).
ALTER TABLE {{schema}}.workflow_steps
  ADD COLUMN wait_deadline_per_run boolean NOT NULL DEFAULT false,
  ADD COLUMN deadline_renewal_for timestamptz,
  ADD COLUMN deadline_renewal_at timestamptz;
