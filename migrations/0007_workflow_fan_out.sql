-- Fan-out steps: a step that waits for a batch of jobs records the batch it opened, so the
-- workflow sweep can make up a lost callback (or pause the run when the batch row is gone).
ALTER TABLE {{schema}}.workflow_steps ADD COLUMN batch_id uuid;
