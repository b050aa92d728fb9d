/**
 * The statements of `job_debounce`: the enqueue that sends a debounced job's message and makes
 * it its key's last, in one statement (the message inserted through the queue store's CTEs),
 * and the run-time check that closes the window.
 *
 * Time: every statement takes `$now` and uses `coalesce($now, now())`.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import type { SqlClient } from "effect/sql"
import type { SendCtes } from "./UniqueKeySql.ts"

/** One debounced send. */
export interface DebounceSend {
  readonly job: string
  readonly key: string
  readonly queue: string
  readonly physical: string
  readonly message: string
  readonly headers: string | null
  readonly periodMs: number
  readonly maxWaitMs: number | null
}

/** Builds the statements for one schema. */
export const makeDebounceSql = (sql: SqlClient.SqlClient, schema: string, queue: SendCtes) => {
  const table = sql(`${schema}.job_debounce`)
  const NOW = (now: Date | null) => sql`coalesce(${now}::timestamptz, now())`

  // The key's row names the newest message (concurrent enqueues of one key queue on the row's
  // lock: the last to take it is the last); the message is due `period` from now, but no later
  // than `maxWait` after the window's first enqueue.
  const debounceSend = (s: DebounceSend, now: Date | null) => {
    const rows = sql`SELECT src.msg_id,
        ${
          s.maxWaitMs === null
            ? sql`${NOW(now)} + ${PgTypes.float8(s.periodMs)} * interval '1 millisecond'`
            : sql`least(${NOW(now)} + ${PgTypes.float8(s.periodMs)} * interval '1 millisecond',
                    (SELECT first_at FROM d) + ${PgTypes.float8(s.maxWaitMs)} * interval '1 millisecond')`
        } AS vt,
        ${s.message}::jsonb AS message, ${s.headers}::jsonb AS headers
      FROM src`
    const send = queue.messageCtesWithIds(s.physical, "m", rows, now)
    return sql<{ readonly msg_id: bigint; readonly first: boolean }>`WITH src AS (
        SELECT ${queue.nextMsgId(s.physical)} AS msg_id),
      d AS (
        INSERT INTO ${table} AS t (job, key, queue, msg_id, first_at)
        SELECT ${s.job}, ${s.key}, ${s.queue}, src.msg_id, ${NOW(now)} FROM src
        ON CONFLICT (job, key) DO UPDATE SET queue = excluded.queue, msg_id = excluded.msg_id
        RETURNING t.first_at, (t.first_at = ${NOW(now)}) AS first),
      ${send.ctes}
      SELECT m.msg_id, (SELECT first FROM d) AS first, ${send.notifyRef} AS notified FROM m`
  }

  // A delivery closes the window if it is still its key's last; else it was superseded.
  const debounceClose = (job: string, key: string, queueName: string, msgId: bigint) =>
    sql<{ readonly msg_id: bigint }>`DELETE FROM ${table}
      WHERE job = ${job} AND key = ${key} AND queue = ${queueName} AND msg_id = ${msgId}
      RETURNING msg_id`

  return { debounceSend, debounceClose }
}

/** The statements of one schema. */
export type DebounceSql = ReturnType<typeof makeDebounceSql>
