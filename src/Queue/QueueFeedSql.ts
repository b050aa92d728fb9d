/**
 * The statements that read a queue as a feed rather than as work: rows by id order past a
 * cursor without claiming them, rows of one key (a top-level field of the message) from the
 * queue and its archive, expiry by `vt`, the snapshot's running transactions, and a NOTIFY with
 * a payload of the caller's. Streams are built on them (see `src/Streams/`); like every
 * statement on queue tables they live in `src/Queue/`.
 *
 * Time: every time-dependent statement takes `$now` and uses `coalesce($now, now())`.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { Result } from "effect"
import type { SqlClient } from "effect/sql"

/** A row of the feed: its id, its key and (when asked for) its message. */
export interface FeedRowSql {
  readonly msg_id: bigint
  readonly key: string | null
  readonly message: unknown
}

/** A row of one key. */
export interface KeyRowSql {
  readonly msg_id: bigint
  readonly message: unknown
}

const int8Array = (values: ReadonlyArray<bigint>): unknown => Result.getOrThrow(PgTypes.array(values, PgTypes.OID.int8))
const textArray = (values: ReadonlyArray<string>): unknown => Result.getOrThrow(PgTypes.array(values, PgTypes.OID.text))

const NOW = (sql: SqlClient.SqlClient, now: Date | null) => sql`coalesce(${now}::timestamptz, now())`

/**
 * Builds the feed statements of one schema. `field` (the key's top-level message field) reaches
 * here validated as an identifier: it is spelled into the expression as text, so that the
 * planner matches it with the key index.
 */
export const makeQueueFeedSql = (sql: SqlClient.SqlClient, schema: string, notifyChannel: string) => {
  const messages = (physical: string) => sql(`${schema}.q_${physical}`)
  const archive = (physical: string) => sql(`${schema}.a_${physical}`)
  const key = (field: string) => sql.literal(`(message ->> '${field}')`)
  const keyIndexName = (table: "q" | "a", physical: string, field: string) => `${table}_${physical}_${field}_idx`

  // Rows past the cursor, oldest first, plus rows named by id (ids the reader saw missing and
  // that may still commit); the message only for the keys asked for.
  const feedReadAfter = (
    physical: string,
    field: string,
    after: bigint,
    ids: ReadonlyArray<bigint>,
    keys: ReadonlyArray<string> | "all",
    limit: number
  ) =>
    sql<FeedRowSql>`SELECT msg_id, ${key(field)} AS key,
        CASE WHEN ${keys === "all"}::bool OR ${key(field)} = ANY(${textArray(keys === "all" ? [] : keys)}::text[])
             THEN message END AS message
      FROM ((SELECT msg_id, message FROM ${messages(physical)} WHERE msg_id > ${after}::int8 ORDER BY msg_id LIMIT ${limit})
            UNION ALL
            SELECT msg_id, message FROM ${messages(physical)} WHERE msg_id = ANY(${int8Array(ids)}::int8[])) m
      ORDER BY msg_id`

  // One key's rows from the queue and its archive in (after, upTo] or named by id, skipping the
  // ids in `skip`; oldest first, or the newest `limit` when `newest`.
  const feedReadKey = (
    physical: string,
    field: string,
    value: string,
    range: {
      readonly after: bigint
      readonly upTo: bigint
      readonly ids: ReadonlyArray<bigint>
      readonly skip: ReadonlyArray<bigint>
    },
    limit: number,
    newest: boolean
  ) => {
    const from = (table: ReturnType<typeof messages>) =>
      sql`SELECT msg_id, message FROM ${table}
        WHERE ${key(field)} = ${value} AND msg_id <= ${range.upTo}::int8
          AND (msg_id > ${range.after}::int8 OR msg_id = ANY(${int8Array(range.ids)}::int8[]))
          AND msg_id <> ALL(${int8Array(range.skip)}::int8[])`
    return sql<KeyRowSql>`SELECT msg_id, message FROM (${from(messages(physical))} UNION ALL ${from(archive(physical))}) r
      ORDER BY msg_id ${newest ? sql`DESC` : sql`ASC`} LIMIT ${limit}`
  }

  // The last id the queue's sequence handed out (committed or not) and the ids visible in the
  // `span` before it: where a feed starts, and which ids may still commit below it.
  const feedTail = (physical: string, span: number) =>
    sql<{ readonly last: bigint | null; readonly visible: ReadonlyArray<bigint> }>`WITH s AS (
        SELECT pg_sequence_last_value(pg_get_serial_sequence(${`${schema}.q_${physical}`}, 'msg_id')) AS last)
      SELECT s.last, ARRAY(SELECT msg_id FROM ${messages(physical)}
        WHERE msg_id > s.last - ${span} AND msg_id <= s.last ORDER BY msg_id) AS visible
      FROM s`

  // The transactions running at this statement's snapshot, and which of `xids` still run.
  const feedTransactions = (xids: ReadonlyArray<string>) =>
    sql<{ readonly in_progress: ReadonlyArray<string>; readonly running: ReadonlyArray<string> }>`SELECT
        ARRAY(SELECT x::text FROM pg_snapshot_xip(pg_current_snapshot()) x) AS in_progress,
        ARRAY(SELECT w FROM unnest(${textArray(xids)}::text[]) w WHERE pg_xact_status(w::xid8) = 'in progress') AS running`

  // Deletes rows whose vt has passed (a feed row's vt is its expiry) from the queue and its
  // archive, at most `limit` of each; per key the highest id deleted and how many went.
  const feedDeleteExpired = (physical: string, field: string, limit: number, now: Date | null) =>
    sql<{ readonly key: string | null; readonly max_id: bigint; readonly n: bigint }>`WITH d AS (
        DELETE FROM ${messages(physical)} WHERE msg_id IN (
          SELECT msg_id FROM ${messages(physical)} WHERE vt <= ${NOW(sql, now)} ORDER BY vt LIMIT ${limit})
        RETURNING msg_id, ${key(field)} AS key),
      e AS (
        DELETE FROM ${archive(physical)} WHERE msg_id IN (
          SELECT msg_id FROM ${archive(physical)} WHERE vt <= ${NOW(sql, now)} LIMIT ${limit})
        RETURNING msg_id, ${key(field)} AS key)
      SELECT key, max(msg_id) AS max_id, count(*) AS n FROM (SELECT * FROM d UNION ALL SELECT * FROM e) x GROUP BY key`

  const feedKeyIndexCount = (physical: string, field: string) =>
    sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = ${schema}
        AND c.relname IN (${keyIndexName("q", physical, field)}, ${keyIndexName("a", physical, field)})`

  const feedCreateKeyIndex = (table: "q" | "a", physical: string, field: string) =>
    sql`CREATE INDEX IF NOT EXISTS ${sql(keyIndexName(table, physical, field))}
      ON ${table === "q" ? messages(physical) : archive(physical)} ((${key(field)}), msg_id)`

  // Delivered at commit when the caller's transaction is open (never on rollback).
  const feedNotify = (payload: string) => sql`SELECT pg_notify(${notifyChannel}, ${payload})`

  return {
    feedReadAfter,
    feedReadKey,
    feedTail,
    feedTransactions,
    feedDeleteExpired,
    feedKeyIndexCount,
    feedCreateKeyIndex,
    feedNotify
  }
}
