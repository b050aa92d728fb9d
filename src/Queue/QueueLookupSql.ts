/**
 * The queue statements of reads and upkeep of one queue: purge, get, browse, the archive
 * (lookup, retention), payload search, locate, metrics.
 * Part of `QueueSql.ts`, which assembles every family into one set of statements for a schema.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { Result } from "effect"
import type { ArchivedRow, MessageRow, MetricsRow } from "./QueueRows.ts"
import { NOW, type QueueSqlContext, typedArray } from "./QueueSqlContext.ts"

/** Builds the lookup statements on the shared context. */
export const makeQueueLookupSql = ({ sql, messages, archive }: QueueSqlContext) => {
  const messagePurge = (physical: string) =>
    sql<{ readonly n: bigint }>`WITH d AS (DELETE FROM ${messages(physical)} RETURNING 1) SELECT count(*) AS n FROM d`

  const messageGet = (physical: string, msgId: bigint) =>
    sql<MessageRow>`SELECT msg_id, read_ct, enqueued_at, vt, message, headers, last_error
      FROM ${messages(physical)} WHERE msg_id = ${msgId}`

  // the messages one claim holds, by its mark (a claim whose reply was lost: what it claimed);
  // a scan, on that rare path only
  const messageClaimedBy = (physical: string, claimedBy: string) =>
    sql<MessageRow>`SELECT msg_id, read_ct, enqueued_at, vt, message, headers, last_error
      FROM ${messages(physical)} WHERE claimed_by = ${claimedBy} ORDER BY msg_id`

  const messageList = (physical: string, limit: number, afterId: bigint | null) =>
    sql<MessageRow>`SELECT msg_id, read_ct, enqueued_at, vt, message, headers, last_error
      FROM ${messages(physical)}
      WHERE ${afterId}::int8 IS NULL OR msg_id > ${afterId}::int8
      ORDER BY msg_id LIMIT ${limit}`

  const archiveGet = (physical: string, msgId: bigint) =>
    sql<ArchivedRow>`SELECT msg_id, read_ct, enqueued_at, archived_at, message, headers
      FROM ${archive(physical)} WHERE msg_id = ${msgId}`

  // one scan for many values: the workflow sweep asks which of its steps still have a message
  const messagePayloadValues = (physical: string, field: string, values: ReadonlyArray<string>) =>
    sql<{ readonly value: string }>`SELECT DISTINCT message -> 'payload' ->> ${field} AS value
      FROM ${messages(physical)}
      WHERE message -> 'payload' ->> ${field} = ANY(${Result.getOrThrow(PgTypes.array(values, PgTypes.OID.text))}::text[])`

  const archiveDeleteOlderThan = (physical: string, retentionMs: number, limit: number, now: Date | null) =>
    sql<{ readonly n: bigint }>`WITH d AS (
        DELETE FROM ${archive(physical)} WHERE msg_id IN (
          SELECT msg_id FROM ${archive(physical)}
          WHERE archived_at < ${NOW(sql, now)} - ${PgTypes.float8(retentionMs)} * interval '1 millisecond'
          LIMIT ${limit})
        RETURNING 1)
      SELECT count(*) AS n FROM d`

  // Where each message is now, in one snapshot (a move between tables is one statement, so
  // a message is seen in exactly one place): by id in the archive and the queue, then by a
  // marker header for copies that changed id (the dead-letter copy, one retried from it).
  // The header searches scan; they run only for ids found in neither.
  const messageLocate = (
    physical: string,
    deadLetterPhysical: string,
    ids: ReadonlyArray<bigint | null>,
    markerHeader: string,
    markers: ReadonlyArray<string>
  ) =>
    sql<{ readonly ord: bigint; readonly place: "queued" | "archived" | "dead" | "missing" }>`SELECT u.ord,
        CASE WHEN EXISTS (SELECT 1 FROM ${archive(physical)} a WHERE a.msg_id = u.msg_id) THEN 'archived'
             WHEN EXISTS (SELECT 1 FROM ${messages(physical)} q WHERE q.msg_id = u.msg_id) THEN 'queued'
             WHEN EXISTS (SELECT 1 FROM ${messages(deadLetterPhysical)} d
                          WHERE d.headers ->> ${markerHeader}::text = u.marker) THEN 'dead'
             WHEN EXISTS (SELECT 1 FROM ${messages(physical)} q
                          WHERE q.headers ->> ${markerHeader}::text = u.marker) THEN 'queued'
             ELSE 'missing' END AS place
      FROM unnest(${typedArray(ids, PgTypes.OID.int8)}::int8[], ${typedArray(markers, PgTypes.OID.text)}::text[])
        WITH ORDINALITY AS u(msg_id, marker, ord)
      ORDER BY u.ord`

  const queueMetrics = (physical: string, now: Date | null) =>
    sql<MetricsRow>`SELECT count(*) AS depth,
        count(*) FILTER (WHERE vt <= ${NOW(sql, now)}) AS visible,
        (extract(epoch FROM ${NOW(sql, now)} - min(enqueued_at)) * 1000)::float8 AS oldest_age_ms,
        (extract(epoch FROM ${NOW(sql, now)} - min(enqueued_at) FILTER (WHERE vt <= ${NOW(sql, now)})) * 1000)::float8
          AS oldest_visible_age_ms,
        (SELECT count(*) FROM ${archive(physical)}) AS archive_size
      FROM ${messages(physical)}`

  return {
    messagePurge,
    messageGet,
    messageClaimedBy,
    messageList,
    archiveGet,
    messagePayloadValues,
    archiveDeleteOlderThan,
    messageLocate,
    queueMetrics
  }
}
