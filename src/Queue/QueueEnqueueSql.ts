/**
 * The queue statements of inserts into `q_<queue>`: single sends, a claimed send (local
 * dispatch), batches, the CTEs other modules' statements insert with, the next id, and which
 * ids are still queued.
 * Part of `QueueSql.ts`, which assembles every family into one set of statements for a schema.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import type { Statement } from "effect/sql"
import type { EncodedMessage, MessageCtes, MessageRow } from "./QueueRows.ts"
import { NOW, type QueueSqlContext, typedArray } from "./QueueSqlContext.ts"

/** Builds the enqueue statements on the shared context. */
export const makeQueueEnqueueSql = ({ sql, schema, notifyChannel, messages, notifyFilter }: QueueSqlContext) => {
  const messageSendOne = (physical: string, m: EncodedMessage, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`WITH m AS (
        INSERT INTO ${messages(physical)} (enqueued_at, vt, message, headers)
        VALUES (${NOW(sql, now)},
                coalesce(${m.at}::timestamptz, ${NOW(sql, now)} + ${PgTypes.float8(m.delayMs)} * interval '1 millisecond'),
                ${m.message}::jsonb, ${m.headers}::jsonb)
        RETURNING msg_id)
      SELECT msg_id FROM m ${notifyFilter(physical)}`

  // Local dispatch of a job: inserted as a read by `claimedBy` would leave it (read_ct 1,
  // invisible for the visibility timeout), with no NOTIFY: no other reader is to wake for it.
  const messageSendOneClaimed = (
    physical: string,
    m: Pick<EncodedMessage, "message" | "headers">,
    claim: { readonly claimedBy: string; readonly visibilityMs: number },
    now: Date | null
  ) =>
    sql<MessageRow>`INSERT INTO ${messages(physical)} (enqueued_at, vt, message, headers, read_ct, claimed_by)
      VALUES (${NOW(sql, now)}, ${NOW(sql, now)} + ${PgTypes.float8(claim.visibilityMs)} * interval '1 millisecond',
              ${m.message}::jsonb, ${m.headers}::jsonb, 1, ${claim.claimedBy})
      RETURNING msg_id, read_ct, enqueued_at, vt, message, headers, last_error`

  const messageSendBatch = (physical: string, batch: ReadonlyArray<EncodedMessage>, now: Date | null) =>
    sql<{ readonly msg_id: bigint }>`WITH m AS (
        INSERT INTO ${messages(physical)} (enqueued_at, vt, message, headers)
        SELECT ${NOW(sql, now)},
               coalesce(u.at, ${NOW(sql, now)} + u.delay_ms * interval '1 millisecond'),
               u.message::jsonb, u.headers::jsonb
        FROM unnest(${typedArray(
          batch.map((b) => b.message),
          PgTypes.OID.text
        )}::text[], ${typedArray(
          batch.map((b) => b.headers),
          PgTypes.OID.text
        )}::text[], ${typedArray(
          batch.map((b) => b.delayMs),
          PgTypes.OID.float8
        )}::float8[], ${typedArray(
          batch.map((b) => b.at),
          PgTypes.OID.timestamptz
        )}::timestamptz[]) WITH ORDINALITY AS u(message, headers, delay_ms, at, ord)
        ORDER BY u.ord
        RETURNING msg_id)
      SELECT msg_id FROM m ${notifyFilter(physical)} ORDER BY msg_id`

  // The common batch: one headers value and one schedule for every message (Job.enqueueMany).
  // The messages in one JSON array parameter (no per-element array encoding in the driver, one
  // parse in the server), the ids back as one array (one row to decode instead of one per
  // message).
  const messageSendBatchUniform = (
    physical: string,
    batchJson: string,
    shared: Pick<EncodedMessage, "headers" | "delayMs" | "at">,
    now: Date | null
  ) =>
    sql<{ readonly ids: ReadonlyArray<bigint> }>`WITH m AS (
        INSERT INTO ${messages(physical)} (enqueued_at, vt, message, headers)
        SELECT ${NOW(sql, now)},
               coalesce(${shared.at}::timestamptz, ${NOW(sql, now)} + ${PgTypes.float8(shared.delayMs)} * interval '1 millisecond'),
               u.message, ${shared.headers}::jsonb
        FROM jsonb_array_elements(${batchJson}::jsonb) WITH ORDINALITY AS u(message, ord)
        ORDER BY u.ord
        RETURNING msg_id)
      SELECT coalesce(array_agg(msg_id ORDER BY msg_id), '{}') AS ids FROM m ${notifyFilter(physical)}`

  /**
   * CTEs that send messages from another statement (a workflow transition): `<name>` inserts
   * one message per row of `rows` (which yields `vt` and `message` columns) and
   * `<name>_notify` wakes the queue's readers when at least one was sent. The caller
   * references `notifyRef` in its final SELECT so that the notify CTE runs.
   *
   * With `claim` (local dispatch: `rows` yields one row at most), the message is inserted
   * claimed, as a read by `claimedBy` would leave it (read_ct 1, invisible for `visibilityMs`),
   * with no NOTIFY; the caller selects `claimed` (the `claimed_*` columns of a MessageRow,
   * null when nothing was sent) to hand it to that reader.
   */
  const messageSendCtes: MessageCtes = (physical, name, rows, now, claim) => {
    if (claim !== undefined) {
      const one = (column: string) => sql`(SELECT ${sql(column)} FROM ${sql(name)})`
      const ctes = sql`${sql(name)} AS (
        INSERT INTO ${messages(physical)} (enqueued_at, vt, message, read_ct, claimed_by)
        SELECT ${NOW(sql, now)},
               greatest(src.vt, ${NOW(sql, now)}) + ${PgTypes.float8(claim.visibilityMs)} * interval '1 millisecond',
               src.message, 1, ${claim.claimedBy}
        FROM (${rows}) AS src
        RETURNING msg_id, read_ct, enqueued_at, vt, message, headers)`
      const claimed = sql`${one("msg_id")} AS claimed_msg_id, ${one("read_ct")} AS claimed_read_ct,
        ${one("enqueued_at")} AS claimed_enqueued_at, ${one("vt")} AS claimed_vt,
        ${one("message")} AS claimed_message, ${one("headers")} AS claimed_headers`
      return { ctes, notifyRef: sql`0`, claimed }
    }
    const ctes = sql`${sql(name)} AS (
        INSERT INTO ${messages(physical)} (enqueued_at, vt, message)
        SELECT ${NOW(sql, now)}, greatest(src.vt, ${NOW(sql, now)}), src.message FROM (${rows}) AS src
        RETURNING msg_id)${
          notifyChannel === ""
            ? sql``
            : sql`, ${sql(`${name}_notify`)} AS (
        SELECT pg_notify(${notifyChannel}, ${physical}) FROM (SELECT 1 FROM ${sql(name)} LIMIT 1) AS any_sent)`
        }`
    const notifyRef = notifyChannel === "" ? sql`0` : sql`(SELECT count(*) FROM ${sql(`${name}_notify`)})`
    return { ctes, notifyRef, claimed: sql`NULL::int8 AS claimed_msg_id` }
  }

  /**
   * Like `messageSendCtes`, for a statement that draws the ids first (`messageNextId`) so that
   * another table's row can name its message in the same statement (a uniqueness key): `rows`
   * yields `msg_id`, `vt`, `message` and `headers`; the CTE `<name>` returns the `msg_id`s sent.
   */
  const messageSendWithIdsCtes = (physical: string, name: string, rows: Statement.Fragment, now: Date | null) => {
    const ctes = sql`${sql(name)} AS (
        INSERT INTO ${messages(physical)} (msg_id, enqueued_at, vt, message, headers) OVERRIDING SYSTEM VALUE
        SELECT src.msg_id, ${NOW(sql, now)}, greatest(src.vt, ${NOW(sql, now)}), src.message, src.headers
        FROM (${rows}) AS src
        RETURNING msg_id)${
          notifyChannel === ""
            ? sql``
            : sql`, ${sql(`${name}_notify`)} AS (
        SELECT pg_notify(${notifyChannel}, ${physical}) FROM (SELECT 1 FROM ${sql(name)} LIMIT 1) AS any_sent)`
        }`
    const notifyRef = notifyChannel === "" ? sql`0` : sql`(SELECT count(*) FROM ${sql(`${name}_notify`)})`
    return { ctes, notifyRef }
  }

  /** The next message id of a queue (its identity sequence), for `messageSendWithIdsCtes`. */
  const messageNextId = (physical: string) =>
    sql`nextval(pg_get_serial_sequence(${`"${schema}"."q_${physical}"`}, 'msg_id'))`

  /** Which of `ids` are still in the queue (not archived, deleted or dead-lettered). */
  const messageIdsPresent = (physical: string, ids: ReadonlyArray<bigint>) =>
    sql<{ readonly msg_id: bigint }>`SELECT msg_id FROM ${messages(physical)}
      WHERE msg_id = ANY(${typedArray(ids, PgTypes.OID.int8)}::int8[])`

  return {
    messageSendOne,
    messageSendOneClaimed,
    messageSendBatch,
    messageSendBatchUniform,
    messageSendCtes,
    messageSendWithIdsCtes,
    messageNextId,
    messageIdsPresent
  }
}
