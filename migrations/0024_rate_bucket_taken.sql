-- What a claim took from a rate bucket: the limited claim takes its tokens in one upsert whose
-- update reads the bucket's latest committed row (refilled there, then taken), and returns what it
-- took from this column, so that concurrent claims need no lock to share a bucket
-- (src/Queue/QueueLimitSql.ts, messageReadLimited). A constant default rewrites nothing.
ALTER TABLE {{schema}}.rate_buckets
  ADD COLUMN taken double precision NOT NULL DEFAULT 0;
