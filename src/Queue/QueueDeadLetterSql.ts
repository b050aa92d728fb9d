/**
 * The queue statements of moving a message to its dead-letter queue and retrying dead letters.
 * Part of `QueueSql.ts`, which assembles every family into one set of statements for a schema.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { DLQ_RETRIES_EXPR, NOW, type QueueSqlContext, typedArray } from "./QueueSqlContext.ts"

/** Builds the dead-letter statements on the shared context. */
export const makeQueueDeadLetterSql = ({ sql, messages, notifyFilter }: QueueSqlContext) => {
  // Moves one message to the dead-letter queue with the `pgbus_dead_letter` block. The
  // message's own headers stay beside the block; headers that are not an object are kept
  // under `pgbus_original_headers`. Error fields come from the given error, else from the
  // last failure recorded on the row.
  const messageMoveToDeadLetter = (
    physical: string,
    deadLetterPhysical: string,
    msgId: bigint,
    readCt: number | null,
    block: {
      readonly reason: string
      readonly source: string
      readonly maxRetries: number
      readonly error: string | null
    },
    now: Date | null
  ) =>
    sql<{ readonly msg_id: bigint }>`WITH d AS (
        DELETE FROM ${messages(physical)}
        WHERE msg_id = ${msgId} AND (${readCt}::int4 IS NULL OR read_ct = ${readCt}::int4)
        RETURNING *)
      INSERT INTO ${messages(deadLetterPhysical)} (enqueued_at, vt, message, headers)
      SELECT ${NOW(sql, now)}, ${NOW(sql, now)}, d.message,
        (CASE WHEN d.headers IS NULL THEN '{}'::jsonb
              WHEN jsonb_typeof(d.headers) = 'object' THEN d.headers
              ELSE jsonb_build_object('pgbus_original_headers', d.headers) END)
        || jsonb_build_object('pgbus_dead_letter',
             jsonb_strip_nulls(jsonb_build_object(
               'version', 1,
               'reason', ${block.reason}::text,
               'source', ${block.source}::text,
               'source_queue', ${physical}::text,
               'source_msg_id', d.msg_id,
               'attempts', d.read_ct,
               'max_retries', ${block.maxRetries}::int4,
               'dead_lettered_at', to_char(${NOW(sql, now)} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
               'retries_from_dlq', CASE WHEN jsonb_typeof(d.headers) = 'object'
                                        THEN ${sql.literal(DLQ_RETRIES_EXPR)} END))
             || coalesce(${block.error}::jsonb, d.last_error, '{}'::jsonb))
      FROM d
      RETURNING msg_id`

  // Puts a dead letter back on a queue: a live message must not claim to be dead, so the
  // block goes and `pgbus_dlq_retries` counts the trip.
  const messageRetryDeadLetter = (
    deadLetterPhysical: string,
    targetPhysical: string,
    ids: ReadonlyArray<bigint> | null,
    now: Date | null
  ) =>
    sql<{ readonly msg_id: bigint }>`WITH d AS (
        DELETE FROM ${messages(deadLetterPhysical)}
        WHERE ${ids === null ? sql`true` : sql`msg_id = ANY(${typedArray(ids, PgTypes.OID.int8)}::int8[])`}
        RETURNING *),
      m AS (
        INSERT INTO ${messages(targetPhysical)} (enqueued_at, vt, message, headers)
        SELECT ${NOW(sql, now)}, ${NOW(sql, now)}, d.message,
          (coalesce(d.headers, '{}'::jsonb) - 'pgbus_dead_letter')
            || jsonb_build_object('pgbus_dlq_retries', coalesce(${sql.literal(DLQ_RETRIES_EXPR)}, 0) + 1)
        FROM d ORDER BY d.msg_id
        RETURNING msg_id)
      SELECT msg_id FROM m ${notifyFilter(targetPhysical)}`

  return {
    messageMoveToDeadLetter,
    messageRetryDeadLetter
  }
}
