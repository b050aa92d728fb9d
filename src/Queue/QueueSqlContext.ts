/**
 * What every family of queue statements shares: the schema's table references, the NOTIFY that
 * rides with an insert, the receipt parameters, the clock, and the SQL expressions read from
 * messages. Time: every statement takes `$now` and uses `coalesce($now, now())`, so production
 * uses the database's clock and tests can bind TestClock's.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { Result } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import { READ_COUNT_LIMIT } from "./Message.ts"
import type { ReceiptParams } from "./QueueRows.ts"

/** A typed PostgreSQL array parameter (`oid` is the element type's), for `unnest` and `= ANY`. */
export const typedArray = (values: ReadonlyArray<unknown>, oid: number): unknown =>
  Result.getOrThrow(PgTypes.array(values, oid))

/** The statement's clock: the given time (a test's `Clock`), else the server's `now()`. */
export const NOW = (sql: SqlClient.SqlClient, now: Date | null) => sql`coalesce(${now}::timestamptz, now())`

/** `col` is not among the ids of the statement's receipts (the `rids` CTE): one map lookup per row. */
export const receiptSkip = (sql: SqlClient.SqlClient, col: Statement.Fragment) =>
  sql`NOT ((SELECT rc FROM rids) ? ${col}::text)`

// Why claimScan (issue 24, the steady pressure run's collapse): autoanalyze follows each vacuum,
// and a queue table is vacuumed when its backlog has drained: the statistics then see a few
// hundred rows, most of them claimed (`vt` in the future). Planned with those statistics and the
// statement's values (a prepared statement's custom plan), `vt <= now()` looked empty and the
// LIMIT above every row, so the claim read every visible row through the vt index and sorted
// them by id (or scanned the table and sorted): cheap with no backlog, O(backlog) per claim once
// one builds (0.4-1.6 s with 100-300k queued), so throughput fell below the load and the backlog
// grew until the next analyze saw it. The bounds are unseen (scalar subqueries: default
// selectivities, a LIMIT taken as a tenth of the rows) and `vt` is compared through an
// expression no index answers (PGMQ's `vt <= clock_timestamp()` is unindexable too): the scan is
// the primary key's in id order whatever the statistics say.
// A full claim (from 0, see ClaimCursor) first reads the queue's earliest `vt` (issue 24's
// delayed follow-up): walking the primary key from 0 read every row scheduled for later (1M
// delayed messages: 1M rows per claim, and an idle worker with no floor claims from 0 at every
// poll). `min(vt)` is the vt index's first entry (an index-only scan under LIMIT 1, the plan
// PostgreSQL takes for min() whatever the statistics); when it is in the future nothing is due
// and the scan starts past the last id (an empty scan), else from 0 as before. (Starting at the
// lowest due id instead, from the earliest-due rows under ORDER BY vt LIMIT n, was tried: with
// statistics of a nearly empty table its generic plan read every due row by bitmap and sorted
// them, collapse24's plan again.) Under a held snapshot the index's first entries can be dead
// ones with a past `vt` (one per finished job), visited until the first live one, as the walk
// from 0 visits the dead rows below the first due one: the same order of cost, in full claims only.
const INT8_MAX = "9223372036854775807"

/**
 * The scan of a claim of `table` in id order: the condition (`msg_id >= from`, visible at `now`,
 * not among the statement's receipts when `skipReceipts`) and the LIMIT, in forms the planner
 * cannot misjudge from statistics. `from` 0 is a full claim, which reads nothing when the vt
 * index's first entry is not due.
 */
export const claimScan = (
  sql: SqlClient.SqlClient,
  table: Statement.Identifier,
  alias: string,
  from: bigint,
  limit: number,
  now: Date | null,
  skipReceipts = false
) => {
  const col = (name: string) => sql.literal(alias === "" ? name : `${alias}.${name}`)
  const start =
    from === 0n
      ? sql`(SELECT CASE WHEN min(vt) > ${NOW(sql, now)} THEN ${sql.literal(INT8_MAX)} ELSE 0 END FROM ${table})`
      : sql`(SELECT ${from}::int8)`
  return {
    /** The first id the scan reads (a scalar subquery). */
    from: start,
    where: sql`${col("msg_id")} >= ${start} AND ${col("vt")} + interval '0 s' <= (SELECT ${NOW(sql, now)})${
      skipReceipts ? sql` AND ${receiptSkip(sql, col("msg_id"))}` : sql``
    }`,
    limit: sql`(SELECT ${limit}::int8)`
  }
}

// A claim's next read count, capped at int4's maximum: a row already there (written by hand,
// or after two billion deliveries) is still claimed, and the worker dead-letters it
// (`read_count_limit`), instead of failing every claim of its queue with "integer out of range".
export const READ_COUNT_NEXT_EXPR = `least(q.read_ct, ${READ_COUNT_LIMIT - 1}) + 1`

// `pgbus_dlq_retries` of hand-written headers may be anything: only an integral JSON number in
// int4's range counts, else none (a cast of another value would fail the dead-lettering).
export const DLQ_RETRIES_EXPR = `CASE WHEN jsonb_typeof(d.headers -> 'pgbus_dlq_retries') = 'number'
    AND (d.headers ->> 'pgbus_dlq_retries')::numeric BETWEEN 0 AND ${READ_COUNT_LIMIT - 1}
  THEN floor((d.headers ->> 'pgbus_dlq_retries')::numeric)::int4 END`

// The fair-share key of a message, spelled exactly as the fair index's expression, so that the
// planner matches it (a bound parameter would not match).
export const FAIR_KEY_EXPR = "COALESCE(message ->> 'pgbus_fair_key', '')"

// A message's weight, clamped to 1..1,000,000; anything but a JSON number (written by hand) is 1.
export const FAIR_WEIGHT_EXPR = `CASE WHEN jsonb_typeof(message -> 'pgbus_fair_weight') = 'number'
  THEN least(greatest(floor((message ->> 'pgbus_fair_weight')::numeric), 1), 1000000)::float8 ELSE 1 END`

// A limited message's limit (`t` is its row): at least 1; anything but a JSON number is 1.
export const LIMIT_TO_EXPR = `CASE WHEN jsonb_typeof(t.message -> 'pgbus_limit_to') = 'number'
  THEN greatest(floor((t.message ->> 'pgbus_limit_to')::numeric), 1)::int8 ELSE 1 END`

/** The shared context of one schema's queue statements. */
export const makeQueueSqlContext = (sql: SqlClient.SqlClient, schema: string, notifyChannel: string) => {
  const registry = sql(`${schema}.queues`)
  const messages = (physical: string) => sql(`${schema}.q_${physical}`)
  const archive = (physical: string) => sql(`${schema}.a_${physical}`)
  const index = (name: string) => sql(name)

  // A wake-up rides in the same statement as the insert, so it is sent at commit and never
  // for a rolled-back send. The uncorrelated sub-select is an InitPlan: one pg_notify per
  // statement, not one per row.
  const notifyFilter = (physical: string) =>
    notifyChannel === "" ? sql`` : sql`WHERE (SELECT true FROM pg_notify(${notifyChannel}, ${physical}))`

  // The receipts (id, read count) of a statement, sent once: the CTE `rids` holds the ids and a
  // map from id to read count, which `receiptMatch` and `receiptSkip` read (an InitPlan each).
  // Each row of `q` is checked against the map by one lookup, with no join: joined with an
  // `unnest` of the receipts, the planner's choice decided the cost, and under the statistics
  // of a drained table vacuumed and analyzed nearly empty (the index scan of the ids estimated
  // at one row) it chose a nested loop that read the unnest again for every row: quadratic in
  // the receipts (5,000 took 29 s). A worker whose archive then outran the statement timeout
  // put its successes back, archived them with the next ones, and never caught up (issue 24's
  // steady pressure run: no job done for a minute). The `= ANY` of the ids is an index scan
  // of those ids in every plan (a join with the table could hash a scan of the whole queue).
  const receiptIdsCte = (r: ReceiptParams) =>
    sql`rids AS (SELECT p.ids, jsonb_object(p.ids::text[], p.rcs::text[]) AS rc
        FROM (SELECT ${typedArray(r.ids, PgTypes.OID.int8)}::int8[] AS ids, ${typedArray(r.readCounts, PgTypes.OID.int4)}::int4[] AS rcs) p)`
  const RECEIPT_IDS = sql.literal("(SELECT ids FROM rids)::int8[]")
  // `q` is a row named by its id and the read count of its receipt (a row delivered again since
  // has a higher read count and is left alone)
  const receiptMatch = sql`q.msg_id = ANY(${RECEIPT_IDS}) AND q.read_ct = ((SELECT rc FROM rids) ->> q.msg_id::text)::int4`

  return {
    sql,
    schema,
    notifyChannel,
    registry,
    messages,
    archive,
    index,
    notifyFilter,
    receiptMatch,
    receiptIdsCte
  }
}

/** The shared context of one schema's queue statements. */
export type QueueSqlContext = ReturnType<typeof makeQueueSqlContext>
