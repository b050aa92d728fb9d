/**
 * Read-only statements on `outbox_entries` for operators: entries by state and their counts.
 * An entry is `pending` (not yet relayed, no failure), `failing` (its last relay failed) or
 * `published`.
 *
 * @since 0.1.0
 */
import type { SqlClient } from "effect/sql"

/** The states an entry is listed by. */
export const OutboxStates = ["pending", "failing", "published"] as const
export type OutboxState = (typeof OutboxStates)[number]

/** A listed entry. */
export interface OutboxEntryRow {
  readonly id: bigint
  readonly kind: "queue" | "event"
  readonly queue: string | null
  readonly routing_key: string | null
  readonly event_id: string | null
  readonly payload: unknown
  readonly headers: unknown
  readonly deliver_at: Date | null
  readonly created_at: Date
  readonly published_at: Date | null
  readonly attempts: number
  readonly last_error: string | null
  readonly last_attempt_at: Date | null
}

/** Builds the statements for one schema. */
export const makeOutboxQuerySql = (sql: SqlClient.SqlClient, schema: string) => {
  const outbox = sql(`${schema}.outbox_entries`)
  const NOW = (now: Date | null) => sql`coalesce(${now}::timestamptz, now())`

  const ofState = (state: OutboxState | null) =>
    state === null
      ? sql`true`
      : state === "published"
        ? sql`published_at IS NOT NULL`
        : state === "failing"
          ? sql`published_at IS NULL AND last_error IS NOT NULL`
          : sql`published_at IS NULL AND last_error IS NULL`

  /** Entries in id order (newest first for published), after a cursor. */
  const outboxList = (state: OutboxState | null, afterId: bigint | null, limit: number) =>
    sql<OutboxEntryRow>`SELECT id, kind, queue, routing_key, event_id::text AS event_id, payload, headers,
        deliver_at, created_at, published_at, attempts, last_error, last_attempt_at
      FROM ${outbox}
      WHERE ${ofState(state)} AND (${afterId}::int8 IS NULL OR id > ${afterId}::int8)
      ORDER BY id LIMIT ${limit}`

  /** Counts by state and the age of the oldest unpublished entry. */
  const outboxCounts = (now: Date | null) =>
    sql<{
      readonly pending: bigint
      readonly failing: bigint
      readonly published: bigint
      readonly oldest_pending_age_ms: number | null
    }>`SELECT count(*) FILTER (WHERE published_at IS NULL AND last_error IS NULL) AS pending,
        count(*) FILTER (WHERE published_at IS NULL AND last_error IS NOT NULL) AS failing,
        count(*) FILTER (WHERE published_at IS NOT NULL) AS published,
        (extract(epoch FROM ${NOW(now)} - min(created_at) FILTER (WHERE published_at IS NULL)) * 1000)::float8
          AS oldest_pending_age_ms
      FROM ${outbox}`

  return { outboxList, outboxCounts }
}

/** The statements of one schema. */
export type OutboxQuerySql = ReturnType<typeof makeOutboxQuerySql>
