/**
 * Every SQL statement on the streams' own tables: `stream_trims` (how far retention deleted
 * each stream) and `stream_presence` (who is on a stream). The broadcasts themselves live in a
 * queue, read through `QueueStore.feed`.
 *
 * Time: every statement takes `$now` and uses `coalesce($now, now())`.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { Result } from "effect"
import type { SqlClient } from "effect/sql"

/** A presence row. */
export interface PresenceRow {
  readonly stream: string
  readonly member_id: string
  readonly connection_id: string
  readonly seat: string | null
  readonly metadata: unknown
  readonly joined_at: Date
  readonly last_seen_at: Date
}

const textArray = (values: ReadonlyArray<string>): unknown => Result.getOrThrow(PgTypes.array(values, PgTypes.OID.text))
const int8Array = (values: ReadonlyArray<bigint>): unknown => Result.getOrThrow(PgTypes.array(values, PgTypes.OID.int8))

const NOW = (sql: SqlClient.SqlClient, now: Date | null) => sql`coalesce(${now}::timestamptz, now())`

const PRESENCE_COLUMNS = "stream, member_id, connection_id, seat, metadata, joined_at, last_seen_at"

/** Builds the statements of one schema. */
export const makeStreamsSql = (sql: SqlClient.SqlClient, schema: string) => {
  const trims = sql(`${schema}.stream_trims`)
  const presence = sql(`${schema}.stream_presence`)
  const columns = sql.literal(PRESENCE_COLUMNS)

  // Raises each stream's trim mark to the highest id retention deleted.
  const trimRecord = (streams: ReadonlyArray<string>, maxIds: ReadonlyArray<bigint>, now: Date | null) =>
    sql`INSERT INTO ${trims} (stream, trimmed_through, trimmed_at)
      SELECT s, m, ${NOW(sql, now)} FROM unnest(${textArray(streams)}::text[], ${int8Array(maxIds)}::int8[]) AS u(s, m)
      ON CONFLICT (stream) DO UPDATE
        SET trimmed_through = greatest(${trims}.trimmed_through, excluded.trimmed_through),
            trimmed_at = excluded.trimmed_at`

  const trimGet = (stream: string) =>
    sql<{ readonly trimmed_through: bigint }>`SELECT trimmed_through FROM ${trims} WHERE stream = ${stream}`

  const trimDeleteOlderThan = (ageMs: number, now: Date | null) =>
    sql<{ readonly n: bigint }>`WITH d AS (
        DELETE FROM ${trims}
        WHERE trimmed_at < ${NOW(sql, now)} - ${PgTypes.float8(ageMs)} * interval '1 millisecond'
        RETURNING 1)
      SELECT count(*) AS n FROM d`

  // Joins (or refreshes) a member; `inserted` says whether it was not there.
  const presenceUpsert = (
    row: {
      readonly stream: string
      readonly memberId: string
      readonly connectionId: string
      readonly seat: string | null
      readonly metadata: string
      readonly ttlMs: number
    },
    now: Date | null
  ) =>
    sql<{ readonly inserted: boolean }>`INSERT INTO ${presence}
        (stream, member_id, connection_id, seat, metadata, joined_at, last_seen_at, ttl_ms, expires_at)
      VALUES (${row.stream}, ${row.memberId}, ${row.connectionId}, ${row.seat}, ${row.metadata}::jsonb,
        ${NOW(sql, now)}, ${NOW(sql, now)}, ${row.ttlMs},
        ${NOW(sql, now)} + ${PgTypes.float8(row.ttlMs)} * interval '1 millisecond')
      ON CONFLICT (stream, member_id, connection_id) DO UPDATE
        SET seat = excluded.seat, metadata = excluded.metadata, last_seen_at = excluded.last_seen_at,
            ttl_ms = excluded.ttl_ms, expires_at = excluded.expires_at
      RETURNING (xmax = 0) AS inserted`

  const presenceDelete = (stream: string, memberId: string, connectionId: string) =>
    sql<PresenceRow>`DELETE FROM ${presence}
      WHERE stream = ${stream} AND member_id = ${memberId} AND connection_id = ${connectionId}
      RETURNING ${columns}`

  const presenceDeleteConnections = (connectionIds: ReadonlyArray<string>) =>
    sql<PresenceRow>`DELETE FROM ${presence}
      WHERE connection_id = ANY(${textArray(connectionIds)}::text[]) AND connection_id <> ''
      RETURNING ${columns}`

  // A heartbeat of this process's seats: each lives another ttl.
  const presenceTouch = (connectionIds: ReadonlyArray<string>, now: Date | null) =>
    sql`UPDATE ${presence}
      SET last_seen_at = ${NOW(sql, now)}, expires_at = ${NOW(sql, now)} + ttl_ms * interval '1 millisecond'
      WHERE connection_id = ANY(${textArray(connectionIds)}::text[]) AND connection_id <> ''`

  const presenceList = (stream: string, now: Date | null) =>
    sql<PresenceRow>`SELECT ${columns} FROM ${presence}
      WHERE stream = ${stream} AND expires_at > ${NOW(sql, now)}
      ORDER BY joined_at, member_id, connection_id`

  const presenceCount = (stream: string, now: Date | null) =>
    sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM ${presence}
      WHERE stream = ${stream} AND expires_at > ${NOW(sql, now)}`

  const presenceDeleteExpired = (limit: number, now: Date | null) =>
    sql<PresenceRow>`DELETE FROM ${presence} WHERE (stream, member_id, connection_id) IN (
        SELECT stream, member_id, connection_id FROM ${presence}
        WHERE expires_at <= ${NOW(sql, now)} ORDER BY expires_at LIMIT ${limit})
      RETURNING ${columns}`

  return {
    trimRecord,
    trimGet,
    trimDeleteOlderThan,
    presenceUpsert,
    presenceDelete,
    presenceDeleteConnections,
    presenceTouch,
    presenceList,
    presenceCount,
    presenceDeleteExpired
  }
}

/** The statements of one schema. */
export type StreamsSql = ReturnType<typeof makeStreamsSql>
