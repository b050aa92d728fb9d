-- The limited claim as one statement (src/Queue/QueueLimitSql.ts, messageReadLimited), instead
-- of a transaction of four round trips (begin, the queue's limits lock, the claim, commit).

-- What a claim took from a rate bucket: the claim takes its tokens in one upsert whose update
-- reads the bucket's latest committed row (refilled there, then taken) and returns what it took
-- from this column, so that concurrent claims need no lock to share a bucket. A constant
-- default rewrites nothing.
ALTER TABLE {{schema}}.rate_buckets
  ADD COLUMN taken double precision NOT NULL DEFAULT 0;

-- The messages of a queue running now (claimed, their lease not lapsed), per concurrency key:
-- how many, their largest limit and their earliest lapse. Called by the limited claim once it
-- holds the queue's limits lock (`after` is that lock's row, so the call waits for it): a
-- VOLATILE function's query takes a snapshot of its own, taken then, so it counts every claim
-- committed before the lock was granted, which the claim statement's own snapshot (taken before
-- it waited for the lock) would miss. `gone`: the messages the claim archives in the same
-- statement (their slots are free). The limit expression is QueueSqlContext's LIMIT_TO_EXPR.
CREATE FUNCTION {{schema}}.limit_running(messages regclass, at timestamptz, gone int8[], after int)
RETURNS TABLE (k text, n int8, lim int8, lapse timestamptz)
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
  RETURN QUERY EXECUTE format(
    'SELECT t.message ->> ''pgbus_limit_key'', count(*),
       max(CASE WHEN jsonb_typeof(t.message -> ''pgbus_limit_to'') = ''number''
         THEN greatest(floor((t.message ->> ''pgbus_limit_to'')::numeric), 1)::int8 ELSE 1 END),
       min(t.vt)
     FROM %s t
     WHERE t.vt > $1 AND t.claimed_by IS NOT NULL AND t.message ? ''pgbus_limit_key''
       AND t.msg_id <> ALL($2)
     GROUP BY 1', messages)
  USING at, gone;
END
$fn$;
