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
import { claimScan, LIMIT_TO_EXPR, NOW, type QueueSqlContext, typedArray } from "./QueueSqlContext.ts"

/**
 * What a limited claim enforces: `limits` (concurrency limits, and rates), or `rates` alone (a
 * queue whose jobs have rates but no limits: the running messages are not counted).
 */
export type LimitedClaimMode = "limits" | "rates"

/** Builds the flow control statements on the shared context. */
export const makeQueueLimitSql = ({
  sql,
  schema,
  notifyChannel,
  messages,
  archive,
  receiptIdsCte,
  receiptMatch
}: QueueSqlContext) => {
  // The claim of a queue whose jobs carry flow controls. Concurrency limits (`pgbus_limit_key`,
  // at most `pgbus_limit_to` running at once): the messages running now (claimed, their lease
  // `vt` not lapsed) are counted per key, keys at their limit are passed over (their jobs stay
  // visible, parked), and the oldest of the rest are taken, each key up to its free slots. Rate
  // limits (`pgbus_rate_key`, `pgbus_rate_limit` per `pgbus_rate_period_ms`, or the job's row of
  // `rate_overrides`): one upsert per claim (took) refills each key's bucket of the queue to now
  // and takes at most its whole tokens, for as many messages as the claim wants of the key; its
  // update reads the bucket's latest committed row, not this statement's snapshot (PostgreSQL's
  // ON CONFLICT DO UPDATE locks and reads that row), and returns what it took (`taken`), so two
  // concurrent claims take a bucket's tokens one after the other without a lock. The count of
  // running messages has no such row: mode `limits` takes the queue's limits lock (the one
  // `queueLockLimits` takes) in this statement (lk), and counts in `limit_running` (migration
  // 0024), whose query takes its own snapshot once the lock is held. So it counts every claim
  // committed before, and no other claim of the queue runs meanwhile (counting in this
  // statement's snapshot, taken before it waited for the lock, would let two concurrent claims
  // both take a key's last slot; the candidates need no fresher view: a row claimed meanwhile
  // fails its recheck under FOR UPDATE). Mode `rates` (a queue whose jobs have rates but no
  // limits) neither locks nor counts. Either is one round trip, where a transaction (begin,
  // lock, claim, commit) was four: most of their cost over the plain claim.
  // The last row is a summary (`msg_id` null): `more`, admissible messages were left behind
  // (parked ones are not news: the end of a run wakes the readers), or a key with free slots
  // reached its limit within this claim (the next passes it over); `wait_ms`, when the next
  // token of a key that had to leave messages behind comes, or the earliest slot lease of a full
  // key lapses (its parked jobs may run then: no NOTIFY says so when the holder went silent
  // without dying, so the claimer wakes itself; a lease its holder renews meanwhile only costs
  // an empty claim); `lo`, the lowest visible id from `from` on (the claim cursor's floor, see
  // ClaimCursor.ts: a limited claim starts there too, so it does not walk the finished and
  // running rows below it each time).
  // The candidates (cand) are locked as the index is walked, as PGMQ's read does, and the rows
  // that a slot or a token then refuses are left locked until the commit (relocking the taken
  // ones by id cost a second index probe per row). Full keys are passed over by a filter the
  // planner takes as cheap (`<> ALL` of an array computed once), so that it walks the msg_id
  // index and stops at the LIMIT: costed per row (a scalar subquery, or NOT EXISTS), it chose
  // to scan and sort every visible message (72 of a claim's 76 ms behind 20k jobs). A key is full
  // when its running messages reach their own largest limit; each candidate is then checked
  // against its own limit (conc). A key's oldest candidate is read again by its id, one probe
  // per key (a LATERAL that the planner cannot turn around: joined, the statistics of a drained
  // table made it walk the whole queue for every claim). A claim's lease (u) is a limited job's own
  // (`pgbus_limit_lease_ms`, `limit.duration`) raised to two heartbeats (SlotLease.ts), else the
  // visibility timeout. A key's rate is read from its oldest candidate's message, once per key.
  const messageReadLimited = (
    physical: string,
    limit: number,
    visibilityMs: number,
    // the shortest lease of a job's own (`pgbus_limit_lease_ms`, see SlotLease.ts)
    leaseFloorMs: number,
    claimedBy: string | null,
    now: Date | null,
    // the worker's successes, archived first in this statement; they no longer hold a slot
    r: ReceiptParams = { ids: [], readCounts: [] },
    options: { readonly mode?: LimitedClaimMode | undefined; readonly from?: bigint | undefined } = {}
  ) => {
    const q = messages(physical)
    const buckets = sql(`${schema}.rate_buckets`)
    const overrides = sql(`${schema}.rate_overrides`)
    const from = options.from ?? 0n
    // the scan reads the primary key whatever the statistics (claimScan)
    const scan = claimScan(sql, q, "t", from, limit + 1, now, true)
    const limits = options.mode !== "rates"
    // the bucket's clock: this statement's start, after the lock was taken (the transaction's
    // `now()` is from before a wait for it); a bucket never goes back in time
    const at = sql`coalesce(${now}::timestamptz, statement_timestamp())`
    // a bucket's tokens refilled to the claim's clock, from its latest committed row (in the
    // upsert's update, bk is that row even when this statement's snapshot is older)
    const rate = (column: "rl" | "rp") => sql`(SELECT rates.${sql.literal(column)} FROM rates WHERE rates.rk = bk.key)`
    const refilled = sql`least(${rate("rl")}, bk.tokens + greatest(extract(epoch FROM excluded.refilled_at - bk.refilled_at) * 1000, 0)
            * ${rate("rl")} / ${rate("rp")})`
    const limited = limits
      ? {
          // the queue's limits lock, then the count in a snapshot taken once it is held
          running: sql`lk AS (
        SELECT 1 AS held FROM (SELECT pg_advisory_xact_lock(hashtext(${`${schema}.limits:${physical}`}))) l),
      running AS (
        SELECT r.k, r.n, r.lim, r.lapse
        FROM lk CROSS JOIN LATERAL ${sql(`${schema}.limit_running`)}(${`"${schema}"."q_${physical}"`}::regclass,
          ${NOW(sql, now)}, ARRAY(SELECT msg_id FROM d), lk.held) r),`,
          columns: sql`, t.message ->> 'pgbus_limit_key' AS k, ${sql.literal(LIMIT_TO_EXPR)} AS lim`,
          filter: sql`
          AND coalesce(t.message ->> 'pgbus_limit_key', '') <> ALL(ARRAY(SELECT k FROM running WHERE n >= lim))`,
          conc: sql`ranked AS (
        SELECT cand.*, coalesce(running.n, 0) AS n0,
          row_number() OVER (PARTITION BY cand.k ORDER BY cand.msg_id) AS rn
        FROM cand LEFT JOIN running ON running.k = cand.k),
      conc AS (SELECT * FROM ranked WHERE k IS NULL OR n0 + rn <= lim),`,
          // a key with free slots that this claim filled: the next claim passes it over
          filled: sql` OR EXISTS (SELECT 1 FROM ranked WHERE k IS NOT NULL AND n0 < lim AND n0 + rn > lim)`
        }
      : {
          running: sql``,
          columns: sql``,
          filter: sql``,
          conc: sql`conc AS (SELECT * FROM cand),`,
          filled: sql``
        }
    return sql<
      MessageRow & {
        readonly more: boolean | null
        readonly wait_ms: number | null
        readonly archived: bigint | null
        readonly lo: bigint | null
      }
    >`WITH ${receiptIdsCte(r)},
      d AS (
        DELETE FROM ${q} q
        WHERE ${receiptMatch}
        RETURNING q.*),
      a AS (
        INSERT INTO ${archive(physical)} (msg_id, read_ct, enqueued_at, archived_at, vt, message, headers)
        SELECT msg_id, read_ct, enqueued_at, ${NOW(sql, now)}, vt, message, headers FROM d
        RETURNING msg_id),
      ${limited.running}
      cand AS (
        SELECT t.msg_id, t.message ->> 'pgbus_rate_key' AS rk${limited.columns}
        FROM ${q} t
        WHERE ${scan.where}${limited.filter}
        ORDER BY t.msg_id
        LIMIT ${scan.limit}
        FOR UPDATE SKIP LOCKED),
      ${limited.conc}
      head AS (
        SELECT conc.msg_id, conc.rk, row_number() OVER (ORDER BY conc.msg_id) AS pos,
          row_number() OVER (PARTITION BY conc.rk ORDER BY conc.msg_id) AS rr
        FROM conc),
      rates AS (
        SELECT f.rk, coalesce(o.rate_limit,
            CASE WHEN jsonb_typeof(m.message -> 'pgbus_rate_limit') = 'number'
                 THEN greatest((m.message ->> 'pgbus_rate_limit')::float8, 1) ELSE 1 END) AS rl,
          coalesce(o.period_ms,
            CASE WHEN jsonb_typeof(m.message -> 'pgbus_rate_period_ms') = 'number'
                 THEN greatest((m.message ->> 'pgbus_rate_period_ms')::float8, 1) ELSE 1000 END) AS rp
        FROM (SELECT DISTINCT ON (head.rk) head.rk, head.msg_id FROM head
              WHERE head.rk IS NOT NULL ORDER BY head.rk, head.msg_id) f
        CROSS JOIN LATERAL (SELECT m.message FROM ${q} m WHERE m.msg_id = f.msg_id OFFSET 0) m
        LEFT JOIN ${overrides} o ON o.job = m.message ->> 'job'),
      want AS (
        SELECT head.rk, count(*) FILTER (WHERE head.pos <= ${limit}) AS n, count(*) AS n_all
        FROM head WHERE head.rk IS NOT NULL GROUP BY head.rk),
      took AS (
        INSERT INTO ${buckets} AS bk (queue, key, tokens, refilled_at, taken)
        SELECT ${physical}, want.rk, rates.rl - least(floor(rates.rl), want.n), ${at}, least(floor(rates.rl), want.n)
        FROM want JOIN rates ON rates.rk = want.rk
        ORDER BY want.rk
        ON CONFLICT (queue, key) DO UPDATE SET
          taken = least(floor(${refilled}), excluded.taken),
          tokens = ${refilled} - least(floor(${refilled}), excluded.taken),
          refilled_at = greatest(bk.refilled_at, excluded.refilled_at)
        RETURNING bk.key AS rk, bk.tokens, bk.taken),
      ok AS (
        SELECT head.msg_id FROM head LEFT JOIN took ON took.rk = head.rk
        WHERE head.pos <= ${limit} AND (head.rk IS NULL OR head.rr <= took.taken)),
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
        WHERE q.msg_id = ANY(ARRAY(SELECT msg_id FROM ok))
        RETURNING q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers, q.last_error)
      SELECT msg_id, read_ct, enqueued_at, vt, message, headers, last_error, NULL::bool AS more,
        NULL::float8 AS wait_ms, NULL::int8 AS archived, NULL::int8 AS lo FROM u
      UNION ALL
      SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL,
        EXISTS (SELECT 1 FROM head WHERE head.pos > ${limit}
          AND NOT EXISTS (SELECT 1 FROM took WHERE took.rk = head.rk AND took.tokens < 1))${limited.filled},
        (SELECT min(w) FROM (
          SELECT (1 - took.tokens) * rates.rp / rates.rl AS w
          FROM took JOIN rates ON rates.rk = took.rk JOIN want ON want.rk = took.rk
          WHERE want.n_all > took.taken AND took.tokens < 1${
            limits
              ? sql`
          UNION ALL
          SELECT (extract(epoch FROM running.lapse - ${NOW(sql, now)}) * 1000)::float8 FROM running WHERE running.n >= running.lim`
              : sql``
          }) waits), (SELECT count(*) FROM a),
        (SELECT min(msg_id) FROM ${q} WHERE msg_id >= ${scan.from} AND vt <= ${NOW(sql, now)})`
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
