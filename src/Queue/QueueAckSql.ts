/**
 * The queue statements of what a worker does with its claimed messages: archive, delete, set
 * visibility, release, unclaim, record a failure, and releasing the claims of dead processes.
 * Part of `QueueSql.ts`, which assembles every family into one set of statements for a schema.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import type { ReceiptParams } from "./QueueRows.ts"
import { NOW, type QueueSqlContext, typedArray } from "./QueueSqlContext.ts"

/** Builds the acknowledgement statements on the shared context. */
export const makeQueueAckSql = ({
  sql,
  messages,
  archive,
  notifyFilter,
  receiptMatch,
  receiptIdsCte
}: QueueSqlContext) => {
  // a worker's flush archives a few hundred successes at a time (thousands behind a slow one)
  const messageArchiveReceipts = (physical: string, r: ReceiptParams, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`WITH ${receiptIdsCte(r)},
      d AS (
        DELETE FROM ${messages(physical)} q
        WHERE ${receiptMatch}
        RETURNING q.*)
      INSERT INTO ${archive(physical)} (msg_id, read_ct, enqueued_at, archived_at, vt, message, headers)
      SELECT msg_id, read_ct, enqueued_at, ${NOW(sql, now)}, vt, message, headers FROM d
      RETURNING msg_id`

  const messageArchiveIds = (physical: string, ids: ReadonlyArray<bigint>, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`WITH d AS (
        DELETE FROM ${messages(physical)} WHERE msg_id = ANY(${typedArray(ids, PgTypes.OID.int8)}::int8[])
        RETURNING *)
      INSERT INTO ${archive(physical)} (msg_id, read_ct, enqueued_at, archived_at, vt, message, headers)
      SELECT msg_id, read_ct, enqueued_at, ${NOW(sql, now)}, vt, message, headers FROM d
      RETURNING msg_id`

  const messageDeleteReceipts = (physical: string, r: ReceiptParams) =>
    sql<{ readonly msg_id: bigint }>`WITH ${receiptIdsCte(r)}
      DELETE FROM ${messages(physical)} q
      WHERE ${receiptMatch} RETURNING q.msg_id`

  const messageDeleteIds = (physical: string, ids: ReadonlyArray<bigint>) =>
    sql<{ readonly msg_id: bigint }>`DELETE FROM ${messages(physical)}
      WHERE msg_id = ANY(${typedArray(ids, PgTypes.OID.int8)}::int8[]) RETURNING msg_id`

  const messageSetVisibilityReceipts = (physical: string, r: ReceiptParams, delayMs: number, now: Date | null) =>
    sql<{ readonly msg_id: bigint; readonly vt: Date }>`WITH ${receiptIdsCte(r)}
      UPDATE ${messages(physical)} q
      SET vt = ${NOW(sql, now)} + ${PgTypes.float8(delayMs)} * interval '1 millisecond'
      WHERE ${receiptMatch}
      RETURNING q.msg_id, q.vt`

  const messageSetVisibilityIds = (physical: string, ids: ReadonlyArray<bigint>, delayMs: number, now: Date | null) =>
    sql<{ readonly msg_id: bigint; readonly vt: Date }>`UPDATE ${messages(physical)}
      SET vt = ${NOW(sql, now)} + ${PgTypes.float8(delayMs)} * interval '1 millisecond'
      WHERE msg_id = ANY(${typedArray(ids, PgTypes.OID.int8)}::int8[])
      RETURNING msg_id, vt`

  // Visible at once as if unread: the read count as before the claim (for messages no job saw)
  const UNREAD = (now: Date | null) => sql`vt = ${NOW(sql, now)}, claimed_by = NULL, read_ct = greatest(read_ct - 1, 0)`

  const messageReleaseReceipts = (physical: string, r: ReceiptParams, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`WITH ${receiptIdsCte(r)}
      UPDATE ${messages(physical)} q
      SET vt = ${NOW(sql, now)}, claimed_by = NULL
      WHERE ${receiptMatch}
      RETURNING q.msg_id`

  // Read-ahead no job saw (a drain's or a paused queue's buffer) goes back as if unread: its next delivery is its
  // first again, not taken for one that followed a dead worker's, and it costs no retry. Only
  // where this process still holds it (its marks are `<process id>#<n>`): a message read again
  // since by another claim is that claim's, even with the same read count (after an unclaim).
  const messageGiveBackUnreadReceipts = (physical: string, r: ReceiptParams, processId: string, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`WITH ${receiptIdsCte(r)}
      UPDATE ${messages(physical)} q
      SET ${UNREAD(now)}
      WHERE ${receiptMatch} AND split_part(q.claimed_by, '#', 1) = ${processId}
      RETURNING q.msg_id`

  // A claim no job ever saw (a hand-over refused after its sender's commit) is undone: the
  // message is visible at once with its read count as before, so that its next delivery is not
  // taken for one that followed a dead worker's (zombie detection) and costs no retry. Matched by
  // the claim's mark too: the next read gives the same read count, so the id and read count
  // alone would also match that later claim.
  const messageUnclaim = (physical: string, msgId: bigint, readCt: number, claimedBy: string, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`UPDATE ${messages(physical)}
      SET ${UNREAD(now)}
      WHERE msg_id = ${msgId} AND read_ct = ${readCt} AND claimed_by = ${claimedBy}
      RETURNING msg_id`

  // Fast recovery: the claims of processes found dead become visible at once. A message whose
  // vt already lapsed, or that a live process re-claimed since, is left alone. A claim's mark is
  // `<process id>#<n>` (a worker's claim or local hand-over, see messageReleaseClaim) or the id alone.
  // Both releases wake the queue's readers when they released any (as a send does).
  const messageReleaseClaimedBy = (physical: string, processIds: ReadonlyArray<string>, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`WITH r AS (
        UPDATE ${messages(physical)}
        SET vt = ${NOW(sql, now)}, claimed_by = NULL
        WHERE split_part(claimed_by, '#', 1) = ANY(${typedArray(processIds, PgTypes.OID.text)}::text[])
          AND vt > ${NOW(sql, now)}
        RETURNING msg_id)
      SELECT msg_id FROM r ${notifyFilter(physical)}`

  // The messages of one claim, by its mark, become visible at once: a claim whose reply was lost
  // with its connection may have committed, and no one else would release them before their vt.
  // As if unread: no job saw them (the claimer never got them), so their next delivery is no
  // zombie's and costs no retry. A mark names one claim, so no later claim matches it.
  const messageReleaseClaim = (physical: string, claimedBy: string, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`WITH r AS (
        UPDATE ${messages(physical)}
        SET ${UNREAD(now)}
        WHERE claimed_by = ${claimedBy} AND vt > ${NOW(sql, now)}
        RETURNING msg_id)
      SELECT msg_id FROM r ${notifyFilter(physical)}`

  const messageRecordFailure = (
    physical: string,
    msgId: bigint,
    readCt: number,
    retryDelayMs: number,
    error: string,
    now: Date | null
  ) =>
    sql<{ readonly msg_id: bigint; readonly vt: Date }>`UPDATE ${messages(physical)}
      SET vt = ${NOW(sql, now)} + ${PgTypes.float8(retryDelayMs)} * interval '1 millisecond',
          claimed_by = NULL,
          last_error = ${error}::jsonb || jsonb_build_object('error_recorded_at',
            to_char(${NOW(sql, now)} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
      WHERE msg_id = ${msgId} AND read_ct = ${readCt}
      RETURNING msg_id, vt`

  return {
    messageArchiveReceipts,
    messageArchiveIds,
    messageDeleteReceipts,
    messageDeleteIds,
    messageSetVisibilityReceipts,
    messageSetVisibilityIds,
    messageReleaseReceipts,
    messageGiveBackUnreadReceipts,
    messageUnclaim,
    messageReleaseClaimedBy,
    messageReleaseClaim,
    messageRecordFailure
  }
}
