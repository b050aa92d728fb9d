/**
 * Read-only statements on the event bus's tables for operators: subscriptions with the
 * processed-events records of their handlers (completed, being handled, gone silent).
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import type { SqlClient } from "effect/sql"

/** A subscription and its handler's processed-events records. */
export interface SubscriptionFiguresRow {
  readonly handler: string
  readonly pattern: string
  readonly queue: string
  readonly registered_at: Date
  readonly completed: bigint
  /** Pending claims whose holder beat within the window. */
  readonly handling: bigint
  /** Pending claims whose holder went silent (a retry takes them over). */
  readonly silent: bigint
}

/** A processed-event record. */
export interface ProcessedRow {
  readonly event_id: string
  readonly handler: string
  readonly claimed_by: string
  readonly claimed_at: Date
  readonly heartbeat_at: Date
  readonly completed_at: Date | null
}

/** Builds the statements for one schema. */
export const makeEventQuerySql = (sql: SqlClient.SqlClient, schema: string) => {
  const subscriptions = sql(`${schema}.event_subscriptions`)
  const processed = sql(`${schema}.processed_events`)
  const NOW = (now: Date | null) => sql`coalesce(${now}::timestamptz, now())`

  /** Every subscription with its handler's record counts; a claim silent past `silentMs` counts as silent. */
  const subscriptionFigures = (silentMs: number, now: Date | null) =>
    sql<SubscriptionFiguresRow>`SELECT s.handler, s.pattern, s.queue, s.registered_at,
        count(p.event_id) FILTER (WHERE p.completed_at IS NOT NULL) AS completed,
        count(p.event_id) FILTER (WHERE p.completed_at IS NULL
          AND p.heartbeat_at >= ${NOW(now)} - ${PgTypes.float8(silentMs)} * interval '1 millisecond') AS handling,
        count(p.event_id) FILTER (WHERE p.completed_at IS NULL
          AND p.heartbeat_at < ${NOW(now)} - ${PgTypes.float8(silentMs)} * interval '1 millisecond') AS silent
      FROM ${subscriptions} s LEFT JOIN ${processed} p ON p.handler = s.handler
      GROUP BY s.handler, s.pattern, s.queue, s.registered_at ORDER BY s.handler`

  /** The newest processed-event records of a handler (all handlers when null). */
  const processedRecent = (handler: string | null, limit: number) =>
    sql<ProcessedRow>`SELECT event_id::text AS event_id, handler, claimed_by, claimed_at, heartbeat_at, completed_at
      FROM ${processed} WHERE ${handler}::text IS NULL OR handler = ${handler}::text
      ORDER BY claimed_at DESC LIMIT ${limit}`

  return { subscriptionFigures, processedRecent }
}

/** The statements of one schema. */
export type EventQuerySql = ReturnType<typeof makeEventQuerySql>
