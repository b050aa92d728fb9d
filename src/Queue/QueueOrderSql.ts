/**
 * Statements of ordered queues (per-key FIFO): a message carrying an ordering key
 * (`pgbus_order_key` beside the envelope) is claimable only as the head of its key, the oldest
 * message of that key still in the queue, visible or not. So a key's messages run one at a
 * time in enqueue order, a head waiting for its retry holds its key (and only its key), and a
 * head that leaves the queue (archived, dead-lettered) hands the key to the next. Messages
 * without a key are claimed as usual. Reached through `QueueStore.read({ ordered: true })`.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import type { SqlClient } from "effect/sql"
import type { MessageRow } from "./QueueSql.ts"

/** The ordering key of a message, spelled as the order index's expression so that the planner matches it. */
export const ORDER_KEY_EXPR = "(message ->> 'pgbus_order_key')"

/** The order index of a queue. */
export const orderIndexName = (physical: string): string => `q_${physical}_order_idx`

const NOW = (sql: SqlClient.SqlClient, now: Date | null) => sql`coalesce(${now}::timestamptz, now())`

/** Builds the ordered-queue statements for one schema. */
export const makeQueueOrderSql = (sql: SqlClient.SqlClient, schema: string) => {
  const messages = (physical: string) => sql(`${schema}.q_${physical}`)
  const key = sql.literal(ORDER_KEY_EXPR)

  // Per key, its messages by id: the head test below is one probe of it. Built with a new
  // queue (in its creation's transaction), or CONCURRENTLY (writes go on, outside any
  // transaction) by a worker that serves an older queue in order.
  const queueCreateOrderIndex = (physical: string) =>
    sql`CREATE INDEX IF NOT EXISTS ${sql(orderIndexName(physical))} ON ${messages(physical)} (${key}, msg_id)`

  const queueOrderIndexExists = (physical: string) =>
    sql<{ readonly valid: boolean }>`SELECT i.indisvalid AS valid
      FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace
      JOIN pg_index i ON i.indexrelid = c.oid
      WHERE n.nspname = ${schema} AND c.relname = ${orderIndexName(physical)}`

  const queueCreateOrderIndexConcurrently = (physical: string) =>
    sql`CREATE INDEX CONCURRENTLY IF NOT EXISTS ${sql(orderIndexName(physical))}
        ON ${messages(physical)} (${key}, msg_id)`

  // PGMQ's read (oldest visible first, rows locked by another reader skipped, vt moved on),
  // where a keyed message is a candidate only when no older message of its key is in the queue:
  // an older one still running, waiting for its retry, or scheduled later holds the key. The
  // probe sees rows other readers hold locked, so two readers never claim two of one key. One
  // row more than the limit is locked (not claimed): `more` says whether the read left any.
  const messageReadOrdered = (
    physical: string,
    limit: number,
    visibilityMs: number,
    claimedBy: string | null,
    now: Date | null
  ) =>
    sql<MessageRow & { readonly more: boolean }>`WITH c AS (
        SELECT q.msg_id FROM ${messages(physical)} q
        WHERE q.vt <= ${NOW(sql, now)}
          AND NOT EXISTS (
            SELECT 1 FROM ${messages(physical)} p
            WHERE ${sql.literal("(p.message ->> 'pgbus_order_key')")} = ${sql.literal("(q.message ->> 'pgbus_order_key')")}
              AND p.msg_id < q.msg_id)
        ORDER BY q.msg_id
        LIMIT ${limit + 1}
        FOR UPDATE OF q SKIP LOCKED),
      t AS (SELECT msg_id FROM c ORDER BY msg_id LIMIT ${limit})
      UPDATE ${messages(physical)} q
      SET vt = ${NOW(sql, now)} + ${PgTypes.float8(visibilityMs)} * interval '1 millisecond',
          read_ct = q.read_ct + 1,
          claimed_by = ${claimedBy}
      WHERE q.msg_id = ANY(ARRAY(SELECT msg_id FROM t))
      RETURNING q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers, q.last_error,
        (SELECT count(*) FROM c) > ${limit} AS more`

  return { queueCreateOrderIndex, queueOrderIndexExists, queueCreateOrderIndexConcurrently, messageReadOrdered }
}
