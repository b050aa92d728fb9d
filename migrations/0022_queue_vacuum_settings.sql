-- Queue tables under MVCC pressure (issue 24). A queue table empties from its tail and fills
-- again all day; when autovacuum finds empty pages at the end it truncates them, which takes an
-- ACCESS EXCLUSIVE lock on the table: every claim, enqueue and archive of the queue waits behind
-- it (and behind the vacuum's wait for that lock). Queues are created with `vacuum_truncate =
-- false` from now on (QueueSql.queueCreateMessageTable); this sets it on the queue tables that
-- exist, with the autovacuum settings new queues get, so old and new queues vacuum alike.
-- ALTER TABLE ... SET of these options takes SHARE UPDATE EXCLUSIVE: workers keep running.
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT name FROM {{schema}}.queues LOOP
    IF to_regclass(format('%s.%I', '{{schema}}', 'q_' || r.name)) IS NOT NULL THEN
      EXECUTE format(
        'ALTER TABLE %s.%I SET (vacuum_truncate = false, autovacuum_vacuum_scale_factor = 0.01, '
        'autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0.02)',
        '{{schema}}', 'q_' || r.name);
    END IF;
  END LOOP;
END $$;
