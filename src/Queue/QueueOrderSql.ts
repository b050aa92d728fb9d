/**
 * Statements of ordered queues (per-key FIFO): a message carrying an ordering key
 * (`pgbus_order_key` beside the envelope) is claimable only as the head of its key, the oldest
 * message of that key still in the queue, visible or not (found by a skip scan of the keys). So a key's messages run one at a
 * time in enqueue order, a head waiting for its retry holds its key (and only its key), and a
 * head that leaves the queue (archived, dead-lettered) hands the key to the next. Messages
 * without a key are claimed as usual. Reached through `QueueStore.read({ ordered: true })`.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import type { SqlClient, Statement } from "effect/sql"
import type { MessageRow, ReceiptParams } from "./QueueRows.ts"
import { NOW, READ_COUNT_NEXT_EXPR, typedArray } from "./QueueSqlContext.ts"

/** The ordering key of a message, spelled as the order index's expression so that the planner matches it. */
export const ORDER_KEY_EXPR = "(message ->> 'pgbus_order_key')"

/** The order index of a queue. */
export const orderIndexName = (physical: string): string => `q_${physical}_order_idx`

/** Builds the ordered-queue statements for one schema. */
export const makeQueueOrderSql = (sql: SqlClient.SqlClient, schema: string) => {
  const messages = (physical: string) => sql(`${schema}.q_${physical}`)
  const archives = (physical: string) => sql(`${schema}.a_${physical}`)
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

  // Two sources of candidates, one statement. First a window of the oldest visible messages
  // (a few times the limit), each kept when it is unkeyed or the head of its key (one probe of
  // the order index): with keys interleaved, as usual, it fills the claim at the cost of a
  // PGMQ read. Only when the window is full and still short of the limit (a backlog of a few
  // keys, most messages waiting behind their heads), a skip scan of the order index (one probe
  // per key) adds the heads past the window (and unkeyed messages past it), so a key with a deep backlog never hides the
  // others (pg-boss's strict FIFO let one key stop them all). The union stops pulling once it
  // has enough, so the skip scan does not run when the window suffices. A head is claimable
  // when visible; an older message of its key still in the queue (running, retrying,
  // scheduled) is its head instead, so the key waits. The candidates are locked as PGMQ's
  // read locks (rows other readers hold are skipped, a head claimed meanwhile fails the
  // re-checked `vt`), so two readers never claim two of one key. `more`: candidates were left.
  // The candidates are looked up by id (`= ANY`), not joined: estimated at a hundred rows, the
  // join was a hash join over a bitmap scan of every visible row (30 of 54 ms of a claim of 300
  // on W1's 20,000 keyed jobs; 6 ms by id).
  // The candidate chain of an ordered claim, from the window to `picked`. `gone`: the rows a
  // statement removes before it claims (the archive of archive-and-claim): its snapshot still
  // sees them, so every scan leaves them out by id (`ids`, from the receipts, where the row
  // need not be read; `d`, the rows the delete removed, where a row that stayed must count).
  const orderedCandidates = (
    q: ReturnType<typeof messages>,
    limit: number,
    now: Date | null,
    gone: { readonly ids: Statement.Fragment; readonly deleted: string } | null
  ) => {
    const window = limit * 2 + 64
    const notGoneById = (col: string) => (gone ? sql` AND ${sql.literal(col)} <> ALL(${gone.ids})` : sql``)
    const notDeleted = (col: string) =>
      gone ? sql` AND ${sql.literal(col)} NOT IN (SELECT msg_id FROM ${sql.literal(gone.deleted)})` : sql``
    return sql`win AS (
        SELECT msg_id, ${key} AS k FROM ${q}
        WHERE vt <= ${NOW(sql, now)}${notGoneById("msg_id")}
        ORDER BY msg_id LIMIT ${window}),
      edge AS (SELECT count(*) AS n, max(msg_id) AS last FROM win),
      keys(k, id, vt) AS (
        (SELECT ${key}, msg_id, vt FROM ${q}
         WHERE ${key} IS NOT NULL${notDeleted("msg_id")}
         ORDER BY ${key}, msg_id LIMIT 1)
        UNION ALL
        SELECT n.k, n.id, n.vt FROM keys
        CROSS JOIN LATERAL (
          SELECT ${key} AS k, msg_id AS id, vt FROM ${q}
          WHERE ${key} > keys.k${notDeleted("msg_id")}
          ORDER BY ${key}, msg_id LIMIT 1) n),
      cand AS (
        (SELECT w.msg_id FROM win w
         WHERE w.k IS NULL OR NOT EXISTS (
           SELECT 1 FROM ${q} p
           WHERE ${sql.literal("(p.message ->> 'pgbus_order_key')")} = w.k AND p.msg_id < w.msg_id${notDeleted("p.msg_id")}))
        UNION ALL
        (SELECT id FROM keys
         WHERE (SELECT n FROM edge) >= ${window} AND vt <= ${NOW(sql, now)} AND id > (SELECT last FROM edge))
        UNION ALL
        (SELECT msg_id FROM ${q}
         WHERE (SELECT n FROM edge) >= ${window} AND ${key} IS NULL AND vt <= ${NOW(sql, now)}
           AND msg_id > (SELECT last FROM edge)
         ORDER BY msg_id LIMIT ${limit + 1})
        LIMIT ${limit + 1}),
      c AS (
        SELECT m.msg_id FROM ${q} m
        WHERE m.msg_id = ANY(ARRAY(SELECT msg_id FROM cand ORDER BY msg_id LIMIT ${limit + 1}))
          AND m.vt <= ${NOW(sql, now)}${notGoneById("m.msg_id")}
        ORDER BY m.msg_id
        FOR UPDATE OF m SKIP LOCKED),
      picked AS (SELECT msg_id FROM c ORDER BY msg_id LIMIT ${limit})`
  }

  // The claim of the picked candidates, as PGMQ's read sets it.
  const claimPicked = (
    q: ReturnType<typeof messages>,
    visibilityMs: number,
    claimedBy: string | null,
    now: Date | null
  ) =>
    sql`UPDATE ${q} q
      SET vt = ${NOW(sql, now)} + ${PgTypes.float8(visibilityMs)} * interval '1 millisecond',
          read_ct = ${sql.literal(READ_COUNT_NEXT_EXPR)},
          claimed_by = ${claimedBy}
      WHERE q.msg_id = ANY(ARRAY(SELECT msg_id FROM picked))
      RETURNING q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers, q.last_error`

  const messageReadOrdered = (
    physical: string,
    limit: number,
    visibilityMs: number,
    claimedBy: string | null,
    now: Date | null
  ) => {
    const q = messages(physical)
    return sql<MessageRow & { readonly more: boolean }>`WITH RECURSIVE ${orderedCandidates(q, limit, now, null)}
      ${claimPicked(q, visibilityMs, claimedBy, now)},
        (SELECT count(*) FROM c) > ${limit} AS more`
  }

  // The worker's successes archived and the next heads claimed, in one statement (one round
  // trip and one commit per claim, as the plain claim's archive-and-read): the ordered claim
  // above, with the archived rows (`d`, by receipt) taken as gone. The statement's snapshot
  // still sees them, so the head test and the skip scan pass over them: a key whose head this
  // statement archives hands on to its next message at once. Only rows the delete removed
  // count as gone (a receipt that no longer matches leaves its row, and its key, held).
  const messageArchiveAndReadOrdered = (
    physical: string,
    r: ReceiptParams,
    limit: number,
    visibilityMs: number,
    claimedBy: string | null,
    now: Date | null
  ) => {
    const q = messages(physical)
    const ids = sql`${typedArray(r.ids, PgTypes.OID.int8)}::int8[]`
    return sql<MessageRow & { readonly archived: bigint | null; readonly more: boolean | null }>`WITH RECURSIVE d AS (
        DELETE FROM ${q} q
        USING unnest(${ids}, ${typedArray(r.readCounts, PgTypes.OID.int4)}::int4[]) AS r(msg_id, read_ct)
        WHERE q.msg_id = ANY(${ids}) AND q.msg_id = r.msg_id AND q.read_ct = r.read_ct
        RETURNING q.*),
      a AS (
        INSERT INTO ${archives(physical)} (msg_id, read_ct, enqueued_at, archived_at, vt, message, headers)
        SELECT msg_id, read_ct, enqueued_at, ${NOW(sql, now)}, vt, message, headers FROM d
        RETURNING msg_id),
      ${orderedCandidates(q, limit, now, { ids, deleted: "d" })},
      u AS (${claimPicked(q, visibilityMs, claimedBy, now)})
      SELECT msg_id, read_ct, enqueued_at, vt, message, headers, last_error, NULL::int8 AS archived,
        NULL::bool AS more FROM u
      UNION ALL
      SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, (SELECT count(*) FROM a), (SELECT count(*) FROM c) > ${limit}`
  }

  return {
    queueCreateOrderIndex,
    queueOrderIndexExists,
    queueCreateOrderIndexConcurrently,
    messageReadOrdered,
    messageArchiveAndReadOrdered
  }
}
