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
import type { SqlClient } from "effect/sql"
import { READ_COUNT_LIMIT } from "./Message.ts"
import type { ReceiptParams } from "./QueueRows.ts"

export const typedArray = (values: ReadonlyArray<unknown>, oid: number): unknown =>
  Result.getOrThrow(PgTypes.array(values, oid))

export const NOW = (sql: SqlClient.SqlClient, now: Date | null) => sql`coalesce(${now}::timestamptz, now())`

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
// the primary key's in id order whatever the statistics say. A queue of many delayed messages
// pays for it in its full claims only (ClaimCursor bounds their share).
/**
 * The scan of a claim of a queue table in id order: the condition (`msg_id >= from`, visible at
 * `now`, not among `skip`) and the LIMIT, in forms the planner cannot misjudge from statistics.
 */
export const claimScan = (
  sql: SqlClient.SqlClient,
  alias: string,
  from: bigint,
  limit: number,
  now: Date | null,
  skip?: ReadonlyArray<bigint>
) => {
  const col = (name: string) => sql.literal(alias === "" ? name : `${alias}.${name}`)
  return {
    where: sql`${col("msg_id")} >= (SELECT ${from}::int8) AND ${col("vt")} + interval '0 s' <= (SELECT ${NOW(sql, now)})${
      skip === undefined
        ? sql``
        : sql` AND ${col("msg_id")} <> ALL((SELECT ${typedArray(skip, PgTypes.OID.int8)}::int8[])::int8[])`
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

  const receipts = (r: ReceiptParams) =>
    sql`unnest(${typedArray(r.ids, PgTypes.OID.int8)}::int8[], ${typedArray(r.readCounts, PgTypes.OID.int4)}::int4[]) AS r(msg_id, read_ct)`

  // The rows of `q` that the receipts `r` name. The `= ANY` of the ids makes the table side an
  // index scan of those ids: joined with the unnest alone, from about a hundred receipts on
  // Postgres joined by hashing a sequential scan of the whole queue table (dead rows included),
  // which made every archive-and-claim of W1 at read-ahead 190 scan the backlog.
  const receiptMatch = (r: ReceiptParams) =>
    sql`q.msg_id = ANY(${typedArray(r.ids, PgTypes.OID.int8)}::int8[]) AND q.msg_id = r.msg_id AND q.read_ct = r.read_ct`

  // The receipts of a statement that names their ids more than once, sent once: the CTE `rids`
  // holds the ids, which `receiptsOnce` and `receiptMatchOnce` read (an InitPlan each; the
  // table side is still an index scan of the ids). Each interpolation is a parameter of its own,
  // encoded again: a worker's archive-and-claim sent its few hundred int8 ids three times, a
  // few per cent of its CPU in bench:jobs W1.
  const receiptIdsCte = (r: ReceiptParams) =>
    sql`rids AS (SELECT ${typedArray(r.ids, PgTypes.OID.int8)}::int8[] AS ids)`
  const RECEIPT_IDS = sql.literal("(SELECT ids FROM rids)::int8[]")
  const receiptsOnce = (r: ReceiptParams) =>
    sql`unnest(${RECEIPT_IDS}, ${typedArray(r.readCounts, PgTypes.OID.int4)}::int4[]) AS r(msg_id, read_ct)`
  const receiptMatchOnce = sql`q.msg_id = ANY(${RECEIPT_IDS}) AND q.msg_id = r.msg_id AND q.read_ct = r.read_ct`

  return {
    sql,
    schema,
    notifyChannel,
    registry,
    messages,
    archive,
    index,
    notifyFilter,
    receipts,
    receiptMatch,
    receiptIdsCte,
    RECEIPT_IDS,
    receiptsOnce,
    receiptMatchOnce
  }
}

/** The shared context of one schema's queue statements. */
export type QueueSqlContext = ReturnType<typeof makeQueueSqlContext>
