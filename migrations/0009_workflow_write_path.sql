-- The write path of a step (W3 of bench:workflows: 3 step rows, 11 events and 4 run updates a
-- run). Measured on 1,000 runs of a 3-step workflow, each of these was paid on every step:
--
-- * The foreign keys of workflow_steps and workflow_events to workflow_runs: a trigger and a
--   `SELECT ... FOR KEY SHARE` of the run for each of the 14 rows a run inserts. Every insert
--   into these tables is made by the workflow module (WorkflowSql) from the run's row (locked, or
--   just inserted) in the same statement, and the retention sweep deletes a run's steps and
--   events with the run, so the module keeps the integrity the keys checked.
ALTER TABLE {{schema}}.workflow_steps DROP CONSTRAINT workflow_steps_run_id_fkey;
ALTER TABLE {{schema}}.workflow_events DROP CONSTRAINT workflow_events_run_id_fkey;
-- * A second index led by run_id on workflow_steps: the unique (run_id, name, attempt) index
--   finds a run's steps as well (a run has few), and the history sorts them by position.
DROP INDEX {{schema}}.workflow_steps_run_idx;
-- * Room on each page of workflow_runs for the updates that change no indexed column (a step
--   completed and the next one claimed at once: performing → performing), which are HOT then.
ALTER TABLE {{schema}}.workflow_runs SET (fillfactor = 80);
