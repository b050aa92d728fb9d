-- The audit trail under one index. workflow_events had two: its primary key on `id` and
-- (run_id, id). Every read of the trail is a run's (`WHERE run_id = ... ORDER BY id`) and the
-- retention sweep deletes by run_id, so nothing ever looked an event up by `id` alone, yet each
-- event (eleven per run of a 3-step workflow) inserted an entry into both. The primary key is now
-- (run_id, id): the index the reads use, one entry per event, and a replica identity still (a
-- logical replication of the schema keeps replicating the sweep's deletes). `id` stays an
-- identity column, unique by its sequence, and orders a run's events as before.
ALTER TABLE {{schema}}.workflow_events DROP CONSTRAINT workflow_events_pkey;
DROP INDEX {{schema}}.workflow_events_run_idx;
ALTER TABLE {{schema}}.workflow_events ADD CONSTRAINT workflow_events_pkey PRIMARY KEY (run_id, id);
