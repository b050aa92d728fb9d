-- Job statistics for the dashboard's charts (seed 002 "Stats buffering"): each worker buffers the
-- deliveries that ended and adds them, every few seconds, to one row per minute, queue and job.
-- Run times and pickup latencies are kept as histograms (counts per bucket of fixed boundaries,
-- src/Job/JobStats.ts), so percentiles over any window come from a few rows, never a row per job.
CREATE TABLE {{schema}}.job_stats (
  bucket timestamptz NOT NULL,
  queue text NOT NULL,
  job text NOT NULL,
  completed bigint NOT NULL DEFAULT 0,
  retried bigint NOT NULL DEFAULT 0,
  dead_lettered bigint NOT NULL DEFAULT 0,
  duration_ms_sum double precision NOT NULL DEFAULT 0,
  duration_hist bigint[] NOT NULL,
  -- first deliveries only: enqueued -> started
  latency_count bigint NOT NULL DEFAULT 0,
  latency_ms_sum double precision NOT NULL DEFAULT 0,
  latency_hist bigint[] NOT NULL,
  PRIMARY KEY (bucket, queue, job)
);
