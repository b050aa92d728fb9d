/**
 * Every SQL statement on `outbox_entries`, the transactional outbox: entries written in the
 * app's transaction, claimed by pollers with `FOR UPDATE SKIP LOCKED`, marked published,
 * purged after the retention.
 *
 * Time: every statement takes `$now` and uses `coalesce($now, now())`.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { Result } from "effect"
import type { SqlClient } from "effect/sql"

/** An outbox entry as claimed. */
export interface OutboxRow {
  readonly id: bigint
  readonly kind: "queue" | "event"
  readonly queue: string | null
  readonly routing_key: string | null
  readonly event_id: string | null
  readonly payload: unknown
  readonly headers: unknown
  readonly context: unknown
  readonly fair_key: string | null
  readonly fair_weight: number | null
  readonly deliver_at: Date | null
  readonly attempts: number
}

/** An entry to write; JSON columns already serialised. */
export interface OutboxInsert {
  readonly kind: "queue" | "event"
  readonly queue: string | null
  readonly routingKey: string | null
  readonly eventId: string | null
  readonly payload: string
  readonly headers: string | null
  readonly context: string | null
  readonly fairKey: string | null
  readonly fairWeight: number | null
  /** Delay from now, or an absolute time; both null: at once. */
  readonly delayMs: number | null
  readonly at: Date | null
}

const int8Array = (values: ReadonlyArray<bigint>): unknown => Result.getOrThrow(PgTypes.array(values, PgTypes.OID.int8))

/** Builds the statements for one schema; each returns an Effect running one statement. */
export const makeOutboxSql = (sql: SqlClient.SqlClient, schema: string) => {
  const outbox = sql(`${schema}.outbox_entries`)
  const NOW = (now: Date | null) => sql`coalesce(${now}::timestamptz, now())`

  const outboxInsert = (e: OutboxInsert, now: Date | null) =>
    sql<{ readonly id: bigint }>`INSERT INTO ${outbox}
        (kind, queue, routing_key, event_id, payload, headers, context, fair_key, fair_weight, deliver_at, created_at)
      VALUES (${e.kind}, ${e.queue}, ${e.routingKey}, ${e.eventId}::uuid, ${e.payload}::jsonb, ${e.headers}::jsonb,
        ${e.context}::jsonb, ${e.fairKey}, ${e.fairWeight === null ? null : PgTypes.float8(e.fairWeight)}::float8,
        coalesce(${e.at}::timestamptz,
          ${NOW(now)} + ${e.delayMs === null ? null : PgTypes.float8(e.delayMs)}::float8 * interval '1 millisecond'),
        ${NOW(now)})
      RETURNING id`

  /** Claims the oldest unpublished entries; concurrent pollers skip each other's rows. */
  const outboxClaim = (limit: number) =>
    sql<OutboxRow>`SELECT id, kind, queue, routing_key, event_id::text AS event_id, payload, headers, context,
        fair_key, fair_weight, deliver_at, attempts
      FROM ${outbox}
      WHERE published_at IS NULL
      ORDER BY id
      LIMIT ${limit}
      FOR UPDATE SKIP LOCKED`

  const outboxMarkPublished = (ids: ReadonlyArray<bigint>, now: Date | null) =>
    sql`UPDATE ${outbox} SET published_at = ${NOW(now)}, attempts = attempts + 1, last_attempt_at = ${NOW(now)}
      WHERE id = ANY(${int8Array(ids)}::int8[]) AND published_at IS NULL`

  const outboxRecordFailure = (id: bigint, error: string, now: Date | null) =>
    sql`UPDATE ${outbox} SET attempts = attempts + 1, last_error = ${error}, last_attempt_at = ${NOW(now)}
      WHERE id = ${id}`

  /** Deletes up to `limit` entries published longer than `retentionMs` ago. */
  const outboxPurge = (retentionMs: number, limit: number, now: Date | null) =>
    sql<{ readonly n: number }>`WITH d AS (
        DELETE FROM ${outbox} WHERE id IN (
          SELECT id FROM ${outbox}
          WHERE published_at IS NOT NULL
            AND published_at < ${NOW(now)} - ${PgTypes.float8(retentionMs)} * interval '1 millisecond'
          LIMIT ${limit})
        RETURNING 1)
      SELECT count(*)::int AS n FROM d`

  const outboxPending = () =>
    sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM ${outbox} WHERE published_at IS NULL`

  return { outboxInsert, outboxClaim, outboxMarkPublished, outboxRecordFailure, outboxPurge, outboxPending }
}

/** The statements of one schema. */
export type OutboxSql = ReturnType<typeof makeOutboxSql>
