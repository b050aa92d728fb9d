/**
 * Statements for a job's outcome beyond a plain archive: archiving one message with headers
 * of its outcome (a job's result, a discard mark) and a NOTIFY for awaiters, snoozing a
 * message without counting its delivery, and finding where a message ended (queued, archived
 * with its result, dead-lettered). Reached through `QueueStore.outcomes`.
 *
 * @since 0.1.0
 */
import type { SqlClient } from "effect/sql"

/** Where a message is now, with what its outcome left behind. */
export interface OutcomeRow {
  readonly place: "archived" | "queued" | "dead"
  readonly has_result: boolean | null
  readonly result: unknown
  readonly discarded: unknown
  readonly dead: unknown
}

const NOW = (sql: SqlClient.SqlClient, now: Date | null) => sql`coalesce(${now}::timestamptz, now())`

/** Builds the outcome statements for one schema. */
export const makeQueueOutcomeSql = (sql: SqlClient.SqlClient, schema: string, notifyChannel: string) => {
  const messages = (physical: string) => sql(`${schema}.q_${physical}`)
  const archive = (physical: string) => sql(`${schema}.a_${physical}`)

  // One message (by receipt) to the archive with `extra` merged into its headers (headers that
  // are not an object are kept under `pgbus_original_headers`, as a dead letter keeps them),
  // then a NOTIFY of `payload` when it moved: awaiters of the job's result wake at commit.
  const messageArchiveWithHeaders = (
    physical: string,
    msgId: bigint,
    readCt: number,
    extra: string,
    payload: string,
    now: Date | null
  ) =>
    sql<{ readonly msg_id: bigint }>`WITH d AS (
        DELETE FROM ${messages(physical)} WHERE msg_id = ${msgId} AND read_ct = ${readCt}
        RETURNING *),
      a AS (
        INSERT INTO ${archive(physical)} (msg_id, read_ct, enqueued_at, archived_at, vt, message, headers)
        SELECT msg_id, read_ct, enqueued_at, ${NOW(sql, now)}, vt, message,
          (CASE WHEN d.headers IS NULL THEN '{}'::jsonb
                WHEN jsonb_typeof(d.headers) = 'object' THEN d.headers
                ELSE jsonb_build_object('pgbus_original_headers', d.headers) END) || ${extra}::jsonb
        FROM d
        RETURNING msg_id)
      SELECT msg_id${notifyChannel === "" ? sql`` : sql`, pg_notify(${notifyChannel}, ${payload})::text AS notified`} FROM a`

  // Back in the queue after `delayMs` without counting the delivery: the read count goes back
  // by one, so the next claim gives the same attempt number.
  const messageSnooze = (physical: string, msgId: bigint, readCt: number, delayMs: number, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`UPDATE ${messages(physical)}
      SET vt = ${NOW(sql, now)} + ${delayMs}::float8 * interval '1 millisecond',
          read_ct = read_ct - 1,
          claimed_by = NULL
      WHERE msg_id = ${msgId} AND read_ct = ${readCt}
      RETURNING msg_id`

  // Where a message is, in one snapshot (each move between tables is one statement): archived
  // (with its result or discard mark), still queued, or dead-lettered (its copy in the DLQ
  // names it as `source_msg_id`; that search scans the DLQ and runs only when the others miss).
  const messageOutcomeFind = (physical: string, deadLetterPhysical: string, msgId: bigint) =>
    sql<OutcomeRow>`SELECT place, has_result, result, discarded, dead FROM (
        (SELECT 1 AS o, 'archived' AS place, jsonb_typeof(headers) = 'object' AND headers ? 'pgbus_result' AS has_result,
           headers -> 'pgbus_result' AS result, headers -> 'pgbus_discarded' AS discarded, NULL::jsonb AS dead
         FROM ${archive(physical)} WHERE msg_id = ${msgId})
        UNION ALL
        (SELECT 2, 'queued', false, NULL::jsonb, NULL::jsonb, NULL::jsonb FROM ${messages(physical)}
         WHERE msg_id = ${msgId} AND NOT (jsonb_typeof(headers) = 'object' AND headers ? 'pgbus_blocked'))
        UNION ALL
        (SELECT 3, 'dead', false, NULL::jsonb, NULL::jsonb, headers -> 'pgbus_dead_letter'
         FROM ${messages(deadLetterPhysical)}
         WHERE headers -> 'pgbus_dead_letter' ->> 'source_msg_id' = ${String(msgId)}::text
         LIMIT 1)) u
      ORDER BY o LIMIT 1`

  // Keeps an ordering key blocked after its head was dead-lettered: a row under the head's own
  // id (so it stays the oldest of its key), never visible, naming the dead letter. Deleting it
  // releases the key.
  const messageInsertKeyBlocker = (
    physical: string,
    msgId: bigint,
    key: string,
    deadLetterId: bigint | null,
    now: Date | null
  ) =>
    sql<{
      readonly msg_id: bigint
    }>`INSERT INTO ${messages(physical)} (msg_id, read_ct, enqueued_at, vt, message, headers)
      OVERRIDING SYSTEM VALUE
      VALUES (${msgId}, 0, ${NOW(sql, now)}, 'infinity',
        jsonb_build_object('job', 'pgbus.order_blocked', 'pgbus_order_key', ${key}::text),
        jsonb_build_object('pgbus_blocked', jsonb_build_object('dead_letter_id', ${deadLetterId}::int8)))
      ON CONFLICT (msg_id) DO NOTHING
      RETURNING msg_id`

  const messageBlockersList = (physical: string) =>
    sql<{
      readonly msg_id: bigint
      readonly key: string
      readonly dead_letter_id: string | null
      readonly enqueued_at: Date
    }>`
      SELECT msg_id, message ->> 'pgbus_order_key' AS key, headers -> 'pgbus_blocked' ->> 'dead_letter_id' AS dead_letter_id,
        enqueued_at
      FROM ${messages(physical)}
      WHERE vt = 'infinity' AND jsonb_typeof(headers) = 'object' AND headers ? 'pgbus_blocked'
      ORDER BY msg_id`

  const messageBlockersDelete = (physical: string, key: string) =>
    sql<{ readonly msg_id: bigint }>`DELETE FROM ${messages(physical)}
      WHERE ${sql.literal("(message ->> 'pgbus_order_key')")} = ${key}
        AND vt = 'infinity' AND jsonb_typeof(headers) = 'object' AND headers ? 'pgbus_blocked'
      RETURNING msg_id`

  const outcomeNotify = (payload: string) =>
    notifyChannel === "" ? sql`SELECT 1` : sql`SELECT pg_notify(${notifyChannel}, ${payload})::text AS notified`

  return {
    messageArchiveWithHeaders,
    messageSnooze,
    messageOutcomeFind,
    messageInsertKeyBlocker,
    messageBlockersList,
    messageBlockersDelete,
    outcomeNotify
  }
}
