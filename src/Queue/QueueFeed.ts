/**
 * A queue read as a feed: by id order past a cursor, without claiming, and by a key (a
 * top-level field of the message) with the archive included. Streams keep their broadcasts in
 * a queue and read them this way (see `src/Streams/`). Reached as `QueueStore.feed`.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { statementNow, withTransaction } from "../Database.ts"
import { InvalidMessage, type QueueError } from "./QueueError.ts"
import { makeQueueFeedSql } from "./QueueFeedSql.ts"
import type { QueueName } from "./QueueName.ts"

/** A row of the feed; `message` is undefined when its key was not asked for. */
export interface FeedRow {
  readonly msgId: bigint
  readonly key: string | undefined
  readonly message: unknown
}

/** Where a feed starts: the last id handed out, and the ids below it (within the span) not visible yet. */
export interface FeedTail {
  readonly last: bigint
  readonly missing: ReadonlyArray<bigint>
}

/** What `deleteExpired` removed, per key. */
export interface ExpiredKey {
  readonly key: string | undefined
  readonly maxId: bigint
  readonly count: number
}

/**
 * The feed operations on queues.
 *
 * @category models
 */
export interface QueueFeed {
  /** Builds the index of `message ->> field` (then the id) on the queue and its archive, if missing. */
  readonly ensureKeyIndex: (queue: string, field: string) => Effect.Effect<void, QueueError>
  /** Rows with an id past `after`, and those among `ids`, oldest first; the message only for `keys`. */
  readonly readAfter: (
    queue: string,
    options: {
      readonly field: string
      readonly after: bigint
      readonly ids: ReadonlyArray<bigint>
      readonly keys: ReadonlyArray<string> | "all"
      readonly limit: number
    }
  ) => Effect.Effect<ReadonlyArray<FeedRow>, QueueError>
  /**
   * One key's rows, from the queue and its archive, with an id in (after, upTo] or among `ids`,
   * none of `skip`; oldest first, or the newest `limit` (still returned oldest first).
   */
  readonly readKey: (
    queue: string,
    options: {
      readonly field: string
      readonly key: string
      readonly after: bigint
      readonly upTo: bigint
      readonly ids: ReadonlyArray<bigint>
      readonly skip: ReadonlyArray<bigint>
      readonly limit: number
      readonly newest?: boolean | undefined
    }
  ) => Effect.Effect<ReadonlyArray<{ readonly msgId: bigint; readonly message: unknown }>, QueueError>
  /** The last id handed out and which of the `span` ids before it are not visible now. */
  readonly tail: (queue: string, span: number) => Effect.Effect<FeedTail, QueueError>
  /** The transactions running now (xid8 as text), and which of `xids` still run. */
  readonly transactions: (
    xids: ReadonlyArray<string>
  ) => Effect.Effect<{ readonly inProgress: ReadonlyArray<string>; readonly running: ReadonlySet<string> }, QueueError>
  /** Deletes rows whose vt has passed (at most `limit` from the queue and from its archive). */
  readonly deleteExpired: (
    queue: string,
    field: string,
    limit: number
  ) => Effect.Effect<ReadonlyArray<ExpiredKey>, QueueError>
  /** NOTIFY on the wake-up channel with this payload, at commit of the caller's transaction; false when LISTEN/NOTIFY is off. */
  readonly notify: (payload: string) => Effect.Effect<boolean, QueueError>
}

const FIELD_PATTERN = /^[a-z][a-z0-9_]{0,15}$/

/** Builds the feed of a queue store (its name check and error mapping). */
export const makeQueueFeed = (options: {
  readonly sql: SqlClient.SqlClient
  readonly schema: string
  readonly notifyChannel: string
  readonly validateName: (queue: string) => Effect.Effect<QueueName, QueueError>
  readonly fail: (operation: string, queue: string) => (error: SqlError) => QueueError
  readonly lockQueue: (physical: string) => Effect.Effect<unknown, SqlError>
}): QueueFeed => {
  const { sql, fail, validateName } = options
  const statements = makeQueueFeedSql(sql, options.schema, options.notifyChannel)

  const checkField = (queue: string, field: string) =>
    FIELD_PATTERN.test(field)
      ? Effect.void
      : Effect.fail(new InvalidMessage({ queue, reason: `key field must match ${FIELD_PATTERN.source}` }))

  const checkLimit = (queue: string, limit: number) =>
    Number.isInteger(limit) && limit >= 1
      ? Effect.void
      : Effect.fail(new InvalidMessage({ queue, reason: "limit must be a positive integer" }))

  const ensureKeyIndex = (queue: string, field: string) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      yield* checkField(queue, field)
      const [found] = yield* statements
        .feedKeyIndexCount(name.physical, field)
        .pipe(Effect.mapError(fail("inspect the key index of", queue)))
      if ((found?.n ?? 0) === 2) return
      // a stream queue's table holds minutes of broadcasts: a plain build under the queue's DDL lock
      yield* withTransaction(
        sql,
        Effect.gen(function* () {
          yield* options.lockQueue(name.physical)
          yield* statements.feedCreateKeyIndex("q", name.physical, field)
          yield* statements.feedCreateKeyIndex("a", name.physical, field)
        })
      ).pipe(Effect.mapError(fail("build the key index of", queue)))
    })

  const readAfter: QueueFeed["readAfter"] = (queue, o) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      yield* checkField(queue, o.field)
      yield* checkLimit(queue, o.limit)
      const rows = yield* statements
        .feedReadAfter(name.physical, o.field, o.after, o.ids, o.keys, o.limit)
        .pipe(Effect.mapError(fail("read the feed of", queue)))
      return rows.map(
        (row): FeedRow => ({
          msgId: row.msg_id,
          key: row.key ?? undefined,
          message: row.message ?? undefined
        })
      )
    })

  const readKey: QueueFeed["readKey"] = (queue, o) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      yield* checkField(queue, o.field)
      yield* checkLimit(queue, o.limit)
      const rows = yield* statements
        .feedReadKey(
          name.physical,
          o.field,
          o.key,
          { after: o.after, upTo: o.upTo, ids: o.ids, skip: o.skip },
          o.limit,
          o.newest === true
        )
        .pipe(Effect.mapError(fail("read a key of", queue)))
      const out = rows.map((row) => ({ msgId: row.msg_id, message: row.message }))
      return o.newest === true ? out.reverse() : out
    })

  const tail = (queue: string, span: number) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      yield* checkLimit(queue, span)
      const [row] = yield* statements
        .feedTail(name.physical, span)
        .pipe(Effect.mapError(fail("read the tail of", queue)))
      const last = row?.last ?? 0n
      const visible = new Set((row?.visible ?? []).map(BigInt))
      const missing: Array<bigint> = []
      for (let id = last > BigInt(span) ? last - BigInt(span) + 1n : 1n; id <= last; id++) {
        if (!visible.has(id)) missing.push(id)
      }
      return { last, missing } satisfies FeedTail
    })

  const transactions = (xids: ReadonlyArray<string>) =>
    statements.feedTransactions(xids).pipe(
      Effect.map(([row]) => ({ inProgress: row?.in_progress ?? [], running: new Set(row?.running ?? []) })),
      Effect.mapError(fail("read the running transactions for", "*"))
    )

  const deleteExpired = (queue: string, field: string, limit: number) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      yield* checkField(queue, field)
      yield* checkLimit(queue, limit)
      const now = yield* statementNow
      const rows = yield* statements
        .feedDeleteExpired(name.physical, field, limit, now)
        .pipe(Effect.mapError(fail("delete expired rows of", queue)))
      return rows.map((row): ExpiredKey => ({ key: row.key ?? undefined, maxId: row.max_id, count: Number(row.n) }))
    })

  const notify = (payload: string) =>
    options.notifyChannel === ""
      ? Effect.succeed(false)
      : statements.feedNotify(payload).pipe(Effect.as(true), Effect.mapError(fail("notify", "*")))

  return { ensureKeyIndex, readAfter, readKey, tail, transactions, deleteExpired, notify }
}
