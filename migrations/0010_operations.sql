-- Operations: the state an operator (or, later, a per-queue circuit breaker) puts a queue in, and
-- the figures a process reports with its beat.

-- One row per queue acted on; no row is an active queue. A queue is paused while paused_at is set
-- and paused_until is null (until resumed) or still ahead. Workers of every process read the
-- paused set about twice a second and stop claiming from a paused queue; what they hold runs on.
CREATE TABLE {{schema}}.queue_states (
  queue text PRIMARY KEY REFERENCES {{schema}}.queues (name) ON DELETE CASCADE,
  paused_at timestamptz,
  -- an end to the pause (a circuit breaker's cool-off); null pauses until someone resumes
  paused_until timestamptz,
  reason text,
  actor text NOT NULL,
  updated_at timestamptz NOT NULL,
  CHECK (paused_until IS NULL OR paused_at IS NOT NULL)
);

-- Jobs a process finished since it started (succeeded, failed: retried or dead-lettered), and its
-- rate over the last beat interval: the processes page's jobs/s without a per-job write.
ALTER TABLE {{schema}}.processes
  ADD COLUMN succeeded bigint NOT NULL DEFAULT 0,
  ADD COLUMN failed bigint NOT NULL DEFAULT 0,
  ADD COLUMN jobs_per_second double precision NOT NULL DEFAULT 0;
