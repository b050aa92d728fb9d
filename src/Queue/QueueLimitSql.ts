/**
 * The queue statements of the flow-controlled claim (concurrency limits, rate buckets) and its
 * run-time rates (`rate_overrides`), counts, lock and wake-up.
 * Part of `QueueSql.ts`, which assembles every family into one set of statements for a schema.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { MAX_DURATION_MS } from "../Input.ts"
import type { MessageRow, RateOverrideRow, ReceiptParams } from "./QueueRows.ts"
import { LIMIT_TO_EXPR, NOW, type QueueSqlContext, typedArray } from "./QueueSqlContext.ts"

/** Builds the flow control statements on the shared context. */
export const makeQueueLimitSql = ({
  sql,
  schema,
  notifyChannel,
  messages,
  archive,
  receipts,
  receiptMatch
}: QueueSqlContext) => {
  // The claim of a queue whose jobs carry flow controls. Concurrency limits (`pgbus_limit_key`,
  // at most `pgbus_limit_to` running at once): the messages running now (claimed, their lease
  // `vt` not lapsed) are counted per key, keys at their limit are passed over (their jobs stay
  // visible, parked), and the oldest of the rest are taken, each key up to its free slots. Rate
  // limits (`pgbus_rate_key`, `pgbus_rate_limit` per `pgbus_rate_period_ms`, or the job's row of
  // `rate_overrides`): each key's bucket of the queue is refilled to now and the claim takes at
  // most its whole tokens, then stores what is left, in this one statement. It must run after
  // `queueLockLimits` in the same transaction: the count is then of committed claims only, and
  // no other claim of the queue runs meanwhile (counting in the claim's own snapshot alone would
  // let two concurrent claims both take the last slot or token). The last row is a summary
  // (`msg_id` null): `more`, admissible messages were left behind (parked ones are not news: the
  // end of a run wakes the readers); `wait_ms`, when the next token of a key that had to leave
  // messages behind comes.
  // The candidates (cand) skip full keys with a scalar subquery, not NOT EXISTS: the planner then
  // walks the msg_id index and stops at the LIMIT; as an anti-join it scanned and sorted every
  // visible message (168 of a claim's 196 ms behind 20k jobs, EXPLAIN ANALYZE). The claim's own
  // successes (d) are left out by c, not cand: they are running (their vt ahead), and checking
  // every candidate against the receipts cost more than checking the claimed rows. A claim's
  // lease (u) is a limited job's own (`pgbus_limit_lease_ms`, `limit.duration`) raised to two
  // heartbeats (SlotLease.ts), else the visibility timeout.
  const messageReadLimited = (
    physical: string,
    limit: number,
    visibilityMs: number,
    // the shortest lease of a job's own (`pgbus_limit_lease_ms`, see SlotLease.ts)
    leaseFloorMs: number,
    claimedBy: string | null,
    now: Date | null,
    // the worker's successes, archived first in this statement; they no longer hold a slot
    r: ReceiptParams = { ids: [], readCounts: [] }
  ) => {
    const q = messages(physical)
    const done = sql`${typedArray(r.ids, PgTypes.OID.int8)}::int8[]`
    const buckets = sql(`${schema}.rate_buckets`)
    const overrides = sql(`${schema}.rate_overrides`)
    // the bucket's clock: this statement's start, after the lock was taken (the transaction's
    // `now()` is from before a wait for it); a bucket never goes back in time
    const at = sql`coalesce(${now}::timestamptz, statement_timestamp())`
    return sql<
      MessageRow & { readonly more: boolean | null; readonly wait_ms: number | null; readonly archived: bigint | null }
    >`WITH d AS (
        DELETE FROM ${q} q USING ${receipts(r)}
        WHERE ${receiptMatch(r)}
        RETURNING q.*),
      a AS (
        INSERT INTO ${archive(physical)} (msg_id, read_ct, enqueued_at, archived_at, vt, message, headers)
        SELECT msg_id, read_ct, enqueued_at, ${NOW(sql, now)}, vt, message, headers FROM d
        RETURNING msg_id),
      running AS (
        SELECT r.message ->> 'pgbus_limit_key' AS k, count(*) AS n
        FROM ${q} r
        WHERE r.vt > ${NOW(sql, now)} AND r.claimed_by IS NOT NULL AND r.message ? 'pgbus_limit_key'
          AND NOT EXISTS (SELECT 1 FROM d WHERE d.msg_id = r.msg_id)
        GROUP BY 1),
      cand AS (
        SELECT t.msg_id, t.message ->> 'job' AS job, t.message ->> 'pgbus_limit_key' AS k,
          ${sql.literal(LIMIT_TO_EXPR)} AS lim, t.message ->> 'pgbus_rate_key' AS rk,
          CASE WHEN jsonb_typeof(t.message -> 'pgbus_rate_limit') = 'number'
               THEN greatest((t.message ->> 'pgbus_rate_limit')::float8, 1) ELSE 1 END AS rlim,
          CASE WHEN jsonb_typeof(t.message -> 'pgbus_rate_period_ms') = 'number'
               THEN greatest((t.message ->> 'pgbus_rate_period_ms')::float8, 1) ELSE 1000 END AS rper
        FROM ${q} t
        WHERE t.vt <= ${NOW(sql, now)}
          AND coalesce((SELECT running.n FROM running WHERE running.k = t.message ->> 'pgbus_limit_key'), 0)
            < ${sql.literal(LIMIT_TO_EXPR)}
        ORDER BY t.msg_id
        LIMIT ${limit * 2 + 64}),
      conc AS (
        SELECT r.* FROM (
          SELECT cand.*, row_number() OVER (PARTITION BY cand.k ORDER BY cand.msg_id) AS rn FROM cand) r
        LEFT JOIN running ON running.k = r.k
        WHERE r.k IS NULL OR coalesce(running.n, 0) + r.rn <= r.lim),
      rates AS (
        SELECT DISTINCT ON (conc.rk) conc.rk, coalesce(o.rate_limit, conc.rlim) AS rl,
          coalesce(o.period_ms, conc.rper) AS rp
        FROM conc LEFT JOIN ${overrides} o ON o.job = conc.job
        WHERE conc.rk IS NOT NULL
        ORDER BY conc.rk, conc.msg_id),
      avail AS (
        SELECT rates.rk, rates.rl, rates.rp,
          least(rates.rl, coalesce(b.tokens + greatest(extract(epoch FROM ${at} - b.refilled_at) * 1000, 0)
            * rates.rl / rates.rp, rates.rl)) AS tokens,
          greatest(b.refilled_at, ${at}) AS refilled_at
        FROM rates LEFT JOIN ${buckets} b ON b.queue = ${physical} AND b.key = rates.rk),
      ok AS (
        SELECT r.msg_id, r.rk FROM (
          SELECT conc.msg_id, conc.rk, row_number() OVER (PARTITION BY conc.rk ORDER BY conc.msg_id) AS rr FROM conc) r
        LEFT JOIN avail a ON a.rk = r.rk
        WHERE r.rk IS NULL OR r.rr <= floor(a.tokens)
        ORDER BY r.msg_id
        LIMIT ${limit + 1}),
      c AS (
        SELECT msg_id FROM ${q}
        WHERE msg_id = ANY(ARRAY(SELECT msg_id FROM ok)) AND vt <= ${NOW(sql, now)} AND msg_id <> ALL(${done})
        ORDER BY msg_id
        LIMIT ${limit}
        FOR UPDATE SKIP LOCKED),
      u AS (
        UPDATE ${q} q
        SET vt = ${NOW(sql, now)} + (CASE WHEN jsonb_typeof(q.message -> 'pgbus_limit_lease_ms') = 'number'
              THEN CASE WHEN (q.message ->> 'pgbus_limit_lease_ms')::float8 > 0
                THEN least(greatest((q.message ->> 'pgbus_limit_lease_ms')::float8, ${PgTypes.float8(leaseFloorMs)}),
                  ${PgTypes.float8(MAX_DURATION_MS)})
                ELSE ${PgTypes.float8(visibilityMs)} END
              ELSE ${PgTypes.float8(visibilityMs)} END) * interval '1 millisecond',
            read_ct = q.read_ct + 1,
            claimed_by = ${claimedBy}
        WHERE q.msg_id = ANY(ARRAY(SELECT msg_id FROM c))
        RETURNING q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers, q.last_error,
          q.message ->> 'pgbus_rate_key' AS rk),
      spent AS (
        SELECT a.rk, a.rl, a.rp, a.refilled_at, a.tokens - (SELECT count(*) FROM u WHERE u.rk = a.rk) AS left_tokens,
          (SELECT count(*) FROM conc WHERE conc.rk = a.rk) > (SELECT count(*) FROM u WHERE u.rk = a.rk) AS behind
        FROM avail a),
      b AS (
        INSERT INTO ${buckets} AS bk (queue, key, tokens, refilled_at)
        SELECT ${physical}, spent.rk, spent.left_tokens, spent.refilled_at FROM spent
        ON CONFLICT (queue, key) DO UPDATE SET tokens = excluded.tokens, refilled_at = excluded.refilled_at
        RETURNING 1)
      SELECT msg_id, read_ct, enqueued_at, vt, message, headers, last_error, NULL::bool AS more,
        NULL::float8 AS wait_ms, NULL::int8 AS archived FROM u
      UNION ALL
      SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, (SELECT count(*) FROM ok) > ${limit},
        (SELECT min((1 - spent.left_tokens) * spent.rp / spent.rl) FROM spent
         WHERE spent.behind AND spent.left_tokens < 1), (SELECT count(*) FROM a)`
  }

  /** A job's rate changed at run time (see `messageReadLimited`). */
  const rateOverrideSet = (
    job: string,
    limit: number,
    periodMs: number,
    actor: string,
    reason: string | null,
    now: Date | null
  ) =>
    sql<RateOverrideRow>`INSERT INTO ${sql(`${schema}.rate_overrides`)} AS o (job, rate_limit, period_ms, actor, reason, updated_at)
      VALUES (${job}, ${limit}, ${PgTypes.float8(periodMs)}, ${actor}, ${reason}, ${NOW(sql, now)})
      ON CONFLICT (job) DO UPDATE SET rate_limit = excluded.rate_limit, period_ms = excluded.period_ms,
        actor = excluded.actor, reason = excluded.reason, updated_at = excluded.updated_at
      RETURNING job, rate_limit, period_ms, actor, reason, updated_at`

  /** Back to the definition's rate. */
  const rateOverrideClear = (job: string) =>
    sql<RateOverrideRow>`DELETE FROM ${sql(`${schema}.rate_overrides`)} WHERE job = ${job}
      RETURNING job, rate_limit, period_ms, actor, reason, updated_at`

  const rateOverrideList = () =>
    sql<RateOverrideRow>`SELECT job, rate_limit, period_ms, actor, reason, updated_at
      FROM ${sql(`${schema}.rate_overrides`)} ORDER BY job`

  /**
   * The unfinished messages of concurrency keys in a queue (running, waiting, retrying or
   * scheduled) and the oldest's id: the enqueue-time check of `onConflict: discard | raise`,
   * run under `queueLockLimits`. A scan of the queue.
   */
  const messageLimitCounts = (physical: string, keys: ReadonlyArray<string>) =>
    sql<{
      readonly key: string
      readonly n: bigint
      readonly first: bigint
    }>`SELECT message ->> 'pgbus_limit_key' AS key,
        count(*) AS n, min(msg_id) AS first
      FROM ${messages(physical)}
      WHERE message ->> 'pgbus_limit_key' = ANY(${typedArray(keys, PgTypes.OID.text)}::text[])
      GROUP BY 1`

  /** Serialises the limited claims of one queue across processes (xact-scoped; see messageReadLimited). */
  const queueLockLimits = (physical: string) =>
    sql`SELECT pg_advisory_xact_lock(hashtext(${`${schema}.limits:${physical}`}))`

  /** Wakes a queue's readers (the end of a limited run frees a slot for a parked job). */
  const queueWake = (physical: string) =>
    notifyChannel === "" ? sql`SELECT 1` : sql`SELECT pg_notify(${notifyChannel}, ${physical})`

  return {
    messageReadLimited,
    rateOverrideSet,
    rateOverrideClear,
    rateOverrideList,
    messageLimitCounts,
    queueLockLimits,
    queueWake
  }
}
