/**
 * Read-only statements on the batch tables for operators: batches listed newest first, by
 * status, and their counts. A pending batch is `stalled` when nothing joined it for longer than
 * the stall threshold (the batch sweep repairs it).
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import type { SqlClient } from "effect/sql"
import type { BatchRow } from "./BatchSql.ts"

/** A listed batch, with whether it looks stalled and its cursor. */
export interface BatchListRow extends BatchRow {
  readonly stalled: boolean
  readonly cursor_at: string
}

/** Builds the statements for one schema. */
export const makeBatchQuerySql = (sql: SqlClient.SqlClient, schema: string) => {
  const batches = sql(`${schema}.batches`)
  const NOW = (now: Date | null) => sql`coalesce(${now}::timestamptz, now())`
  const stalled = (stallMs: number, now: Date | null) =>
    sql`(status = 'pending' AND last_enqueued_at < ${NOW(now)} - ${PgTypes.float8(stallMs)} * interval '1 millisecond')`

  /** Batches newest first, optionally of one status, before a cursor (created_at as text, id). */
  const batchList = (p: {
    readonly status: "pending" | "finished" | null
    readonly before: { readonly createdAt: string; readonly id: string } | null
    readonly limit: number
    readonly stallMs: number
    readonly now: Date | null
  }) =>
    sql<BatchListRow>`SELECT id::text AS id, description, properties, status, total_jobs, completed_jobs, failed_jobs,
        open_blocks, on_finish, on_success, on_failure, created_at, last_enqueued_at, finished_at,
        callbacks_enqueued_at, ${stalled(p.stallMs, p.now)} AS stalled, created_at::text AS cursor_at
      FROM ${batches}
      WHERE (${p.status}::text IS NULL OR status = ${p.status}::text)
        AND ${p.before === null ? sql`true` : sql`(created_at, id) < (${p.before.createdAt}::timestamptz, ${p.before.id}::uuid)`}
      ORDER BY created_at DESC, id DESC LIMIT ${p.limit}`

  /** Counts of pending, stalled and finished batches. */
  const batchCounts = (stallMs: number, now: Date | null) =>
    sql<{ readonly pending: bigint; readonly stalled: bigint; readonly finished: bigint }>`SELECT
        count(*) FILTER (WHERE status = 'pending') AS pending,
        count(*) FILTER (WHERE ${stalled(stallMs, now)}) AS stalled,
        count(*) FILTER (WHERE status = 'finished') AS finished
      FROM ${batches}`

  return { batchList, batchCounts }
}

/** The statements of one schema. */
export type BatchQuerySql = ReturnType<typeof makeBatchQuerySql>
