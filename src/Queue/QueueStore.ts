/**
 * The queue store: the one door to queue tables. PGMQ's model written from scratch: per queue
 * a message table and an archive, a dead-letter queue `<queue>_dlq`, claims with
 * `FOR UPDATE SKIP LOCKED` and a visibility timeout, a NOTIFY with every committed send.
 * Every operation runs in the caller's SQL transaction when one is open.
 *
 * @since 0.1.0
 */
import { Clock, Context, Duration, Effect, Layer, Option, Schema } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { PgBusConfig } from "../Config.ts"
import { serverError, statementNow, toDatabaseError, withTransaction } from "../Database.ts"
import * as Input from "../Input.ts"
import { hotSpan } from "../internal/span.ts"
import * as ClaimCursor from "./ClaimCursor.ts"
import { type FairClaim, FairCursor } from "./FairShare.ts"
import {
  DEAD_LETTER_HEADER,
  DeadLetterBlock,
  type DeadLetterReason,
  type DeadLetterSource,
  encodeFailure,
  type Failure,
  FailureRecord,
  type Message,
  type Receipt
} from "./Message.ts"
import { Notifier, pollDelay } from "./Notifier.ts"
import { makeQueueControls, type RateOverride } from "./QueueControls.ts"
import { InvalidMessage, PayloadTooLarge, type QueueError, QueueNotFound } from "./QueueError.ts"
import { makeQueueFeed, type QueueFeed } from "./QueueFeed.ts"
import { type FairIndexStatus, makeQueueIndexes } from "./QueueIndexes.ts"
import * as QueueName from "./QueueName.ts"
import { makeQueueOrderSql } from "./QueueOrderSql.ts"
import { makeQueueOutcomes, type QueueOutcomes } from "./QueueOutcomes.ts"
import type {
  ClaimedMessageRow,
  EncodedMessage,
  FairMessageRow,
  MessageCtes,
  MessageRow,
  ReceiptParams
} from "./QueueRows.ts"
import { makeQueueSql } from "./QueueSql.ts"

export type { RateOverride } from "./QueueControls.ts"

/** When a sent message becomes visible: after `delay`, or at `at`. */
export interface SendOptions {
  readonly delay?: Duration.Input | undefined
  readonly at?: Date | undefined
  readonly headers?: Readonly<Record<string, unknown>> | undefined
}

/** One message of a batch, with its own options. */
export interface BatchEntry extends SendOptions {
  readonly message: unknown
}

/** How many messages to claim and for how long. */
export interface ReadOptions {
  /** Most messages to claim (default 1). */
  readonly limit?: number | undefined
  /** How long claimed messages stay invisible (default the config's visibility timeout). */
  readonly visibilityTimeout?: Duration.Input | undefined
  /** Recorded on each claimed message, so a dead process's claims can be found. */
  readonly claimedBy?: string | undefined
  /**
   * Interleave the claim across fair-share keys (`pgbus_fair_key`) instead of oldest first:
   * `true` for one read on its own, or a `FairCursor` that successive reads share, so that
   * even reads of one message alternate between keys (see `FairShare.ts`).
   */
  readonly fair?: boolean | FairCursor | undefined
  /**
   * Honour the concurrency limits that messages carry (`pgbus_limit_key`, `pgbus_limit_to`):
   * a key's messages are claimed only while fewer than its limit run. Takes precedence over
   * `fair` (the limited claim is oldest first).
   */
  readonly limited?: boolean | undefined
  /**
   * With `limited`: told, after a claim that left messages behind for want of rate tokens, how
   * long until the next token (the caller claims again then: no NOTIFY announces a token).
   */
  readonly onRateWait?: ((ms: number) => void) | undefined
  /** Per-key FIFO: claim a message with `pgbus_order_key` only as its key's head (QueueOrderSql.ts); `limited` and `fair` win. */
  readonly ordered?: boolean | undefined
}

/** How a queue is created. */
export interface CreateOptions {
  /** Also build the fair read's index (`q_<queue>_fair_idx`) when the queue is new. */
  readonly fairIndex?: boolean | undefined
  /** Also build the ordered read's index (`q_<queue>_order_idx`) when the queue is new. */
  readonly orderIndex?: boolean | undefined
}

export type { FairIndexStatus } from "./QueueIndexes.ts"

/** A read that waits for messages. */
export interface PollOptions extends ReadOptions {
  /** Longest wait for a first message. */
  readonly maxWait: Duration.Input
  /** Polling interval while waiting (default the config's). */
  readonly pollInterval?: Duration.Input | undefined
}

/** A registered queue. */
export interface QueueInfo {
  readonly name: string
  readonly physical: string
  /** For a dead-letter queue, the queue it serves. */
  readonly deadLetterOf: string | undefined
  readonly createdAt: Date
}

/** A queue's figures. */
export interface QueueMetrics {
  readonly queue: string
  /** Messages in the queue, visible or not. */
  readonly depth: number
  /** Messages that a read could claim now. */
  readonly visible: number
  /** Age of the oldest message, in milliseconds. */
  readonly oldestAgeMs: number | undefined
  /** Age of the oldest claimable message, in milliseconds. */
  readonly oldestVisibleAgeMs: number | undefined
  /** Rows in the archive. */
  readonly archiveSize: number
}

/** A message in a dead-letter queue with its decoded block. */
export interface DeadLetter extends Message {
  readonly deadLetter: DeadLetterBlock | undefined
}

/** What to write into the dead-letter block. */
export interface DeadLetterOptions {
  readonly reason?: DeadLetterReason | undefined
  readonly source: DeadLetterSource
  /** The failure to name; defaults to the last failure recorded on the message. */
  readonly failure?: Failure | undefined
  /** The limit to name as `max_retries`: the job's own policy's; defaults to the config's `maxRetries`. */
  readonly maxRetries?: number | undefined
}

/** Where a message is: still in its queue, archived, in the queue's DLQ, or nowhere. */
export type MessagePlace = "queued" | "archived" | "dead" | "missing"

/** A message to acknowledge: a receipt (guarded by its read count) or a bare id. */
export type Target = Receipt | bigint

const toNumber = (n: bigint | number): number => Number(n)

const isObject = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

const decodeFailure = Schema.decodeUnknownOption(FailureRecord)
const decodeDeadLetter = Schema.decodeUnknownOption(DeadLetterBlock)

const toMessage = (queue: string, row: MessageRow): Message => ({
  queue,
  msgId: row.msg_id,
  readCt: row.read_ct,
  enqueuedAt: row.enqueued_at,
  vt: row.vt,
  message: row.message,
  headers: isObject(row.headers) ? row.headers : {},
  lastError: row.last_error === null ? undefined : Option.getOrUndefined(decodeFailure(row.last_error))
})

const claimedMessage = (queue: string, row: ClaimedMessageRow): Message | undefined =>
  row.claimed_msg_id === null || row.claimed_msg_id === undefined
    ? undefined
    : toMessage(queue, {
        msg_id: row.claimed_msg_id,
        read_ct: row.claimed_read_ct ?? 1,
        enqueued_at: row.claimed_enqueued_at ?? new Date(0),
        vt: row.claimed_vt ?? new Date(0),
        message: row.claimed_message,
        headers: row.claimed_headers,
        last_error: null
      })

const byMsgId = (a: Message, b: Message) => (a.msgId < b.msgId ? -1 : a.msgId > b.msgId ? 1 : 0)

const byStart = (a: FairMessageRow, b: FairMessageRow) =>
  a.fair_start !== b.fair_start ? a.fair_start - b.fair_start : a.msg_id < b.msg_id ? -1 : a.msg_id > b.msg_id ? 1 : 0

const claimOf = (row: FairMessageRow): FairClaim => ({
  key: row.fair_key,
  weight: row.fair_weight,
  start: row.fair_start
})

const splitTargets = (targets: ReadonlyArray<Target>): { receipts: ReceiptParams; ids: Array<bigint> } => {
  const ids: Array<bigint> = []
  const receiptIds: Array<bigint> = []
  const readCounts: Array<number> = []
  for (const t of targets) {
    if (typeof t === "bigint") ids.push(t)
    else {
      receiptIds.push(t.msgId)
      readCounts.push(t.readCt)
    }
  }
  return { receipts: { ids: receiptIds, readCounts }, ids }
}

/**
 * The queue store service.
 *
 * @category services
 */
export class QueueStore extends Context.Service<
  QueueStore,
  {
    /** Creates a queue, its archive and its dead-letter queue; does nothing if they exist. */
    readonly create: (queue: string, options?: CreateOptions) => Effect.Effect<void, QueueError>
    /**
     * Builds a queue's fair index CONCURRENTLY if it is missing (writes go on meanwhile). Runs
     * outside any transaction; reports an INVALID index rather than touching it.
     */
    readonly ensureFairIndex: (queue: string) => Effect.Effect<FairIndexStatus, QueueError>
    /** Builds a queue's order index (per-key FIFO) CONCURRENTLY if it is missing; outside any transaction. */
    readonly ensureOrderIndex: (queue: string) => Effect.Effect<"ready" | "built" | "invalid", QueueError>
    /** Drops a queue with its archive and its dead-letter queue; false if it did not exist. */
    readonly drop: (queue: string) => Effect.Effect<boolean, QueueError>
    /** The registered queues (dead-letter queues included). */
    readonly list: Effect.Effect<ReadonlyArray<QueueInfo>, QueueError>
    /** Sends one message; returns its id. */
    readonly send: (queue: string, message: unknown, options?: SendOptions) => Effect.Effect<bigint, QueueError>
    /**
     * Sends one message already claimed for a reader of this process (local dispatch: no NOTIFY,
     * no read) and returns it as that reader's read would have. Due at once: no delay.
     */
    readonly sendClaimed: (
      queue: string,
      message: unknown,
      headers: Readonly<Record<string, unknown>> | undefined,
      claim: { readonly claimedBy: string; readonly visibilityMs: number }
    ) => Effect.Effect<Message, QueueError>
    /** Sends many messages in one statement; returns their ids in order. */
    readonly sendBatch: (
      queue: string,
      entries: ReadonlyArray<BatchEntry>
    ) => Effect.Effect<ReadonlyArray<bigint>, QueueError>
    /** Claims up to `limit` visible messages, oldest first (or fairly across keys), and hides them for the visibility timeout. */
    readonly read: (queue: string, options?: ReadOptions) => Effect.Effect<ReadonlyArray<Message>, QueueError>
    /**
     * Archives finished messages (by receipt) and claims up to `limit` more, oldest first, in one
     * statement; a fair read claims in a statement of its own after the archive. `more`: the
     * read left visible messages behind (a fair read: it got `limit`).
     */
    readonly archiveAndRead: (
      queue: string,
      receipts: ReadonlyArray<Receipt>,
      options?: ReadOptions
    ) => Effect.Effect<
      { readonly archived: number; readonly messages: ReadonlyArray<Message>; readonly more: boolean },
      QueueError
    >
    /**
     * Sets a job's rate at run time (every limited claim from then on), or clears it (`undefined`:
     * back to the definition's); who and why are kept on the row. Returns the row set or cleared.
     */
    readonly setRate: (
      job: string,
      rate: { readonly limit: number; readonly periodMs: number } | undefined,
      change: { readonly actor: string; readonly reason?: string | undefined }
    ) => Effect.Effect<RateOverride | undefined, QueueError>
    /** The rates set at run time. */
    readonly rateOverrides: Effect.Effect<ReadonlyArray<RateOverride>, QueueError>
    /**
     * Runs `effect` in a transaction (a savepoint inside the caller's) holding the queue's limits
     * lock, the one limited claims take.
     */
    readonly withLimitLock: <A, E, R>(
      queue: string,
      effect: Effect.Effect<A, E, R>
    ) => Effect.Effect<A, E | QueueError, R>
    /** The unfinished messages of each concurrency key in a queue, and the oldest's id. */
    readonly limitCounts: (
      queue: string,
      keys: ReadonlyArray<string>
    ) => Effect.Effect<ReadonlyMap<string, { readonly n: number; readonly first: bigint }>, QueueError>
    /** Wakes the readers of a queue, as a send does (a freed concurrency slot). */
    readonly wake: (queue: string) => Effect.Effect<void, QueueError>
    /** Like `read`, but waits up to `maxWait` for a message (woken by NOTIFY, else polling). */
    readonly readWithPoll: (queue: string, options: PollOptions) => Effect.Effect<ReadonlyArray<Message>, QueueError>
    /** Moves messages to the archive; returns how many moved. */
    readonly archive: (queue: string, targets: ReadonlyArray<Target>) => Effect.Effect<number, QueueError>
    /** Deletes messages; returns how many went. */
    readonly delete: (queue: string, targets: ReadonlyArray<Target>) => Effect.Effect<number, QueueError>
    /** Sets messages' visibility to now + `delay` (heartbeats); returns how many changed. */
    readonly setVisibility: (
      queue: string,
      targets: ReadonlyArray<Target>,
      delay: Duration.Input
    ) => Effect.Effect<number, QueueError>
    /** Makes claimed messages visible again at once (read counts kept); returns how many. */
    readonly release: (queue: string, receipts: ReadonlyArray<Receipt>) => Effect.Effect<number, QueueError>
    /** Records a failed delivery and hides the message for `retryDelay`; false if the claim was lost. */
    readonly recordFailure: (
      queue: string,
      receipt: Receipt,
      failure: Failure,
      retryDelay: Duration.Input
    ) => Effect.Effect<boolean, QueueError>
    /** Moves a message to `<queue>_dlq` with the dead-letter block; returns its id there. */
    readonly moveToDeadLetter: (
      queue: string,
      target: Target,
      options: DeadLetterOptions
    ) => Effect.Effect<Option.Option<bigint>, QueueError>
    /** Puts dead letters back on their origin queue without the block; returns the new ids. */
    readonly retryDeadLetters: (
      deadLetterQueue: string,
      ids: ReadonlyArray<bigint> | "all"
    ) => Effect.Effect<ReadonlyArray<bigint>, QueueError>
    /** Makes every message claimed by the given (dead) processes visible at once; per queue counts. */
    readonly releaseClaimsOf: (
      processIds: ReadonlyArray<string>
    ) => Effect.Effect<ReadonlyArray<{ readonly queue: string; readonly released: number }>, QueueError>
    /** Makes the messages of one claim (by its `claimedBy` mark) visible at once; returns how many. */
    readonly releaseClaim: (queue: string, claimedBy: string) => Effect.Effect<number, QueueError>
    /** Deletes every message of a queue; returns how many. */
    readonly purge: (queue: string) => Effect.Effect<number, QueueError>
    /** One message by id (not claimed). */
    readonly get: (queue: string, msgId: bigint) => Effect.Effect<Option.Option<Message>, QueueError>
    /** Messages of a queue by id order, a page at a time (not claimed). */
    readonly browse: (
      queue: string,
      options?: { readonly limit?: number; readonly after?: bigint }
    ) => Effect.Effect<ReadonlyArray<Message>, QueueError>
    /** Reads a dead-letter block from a message's headers. */
    readonly deadLetterOf: (message: Message) => DeadLetter
    /** Whether an archived copy of a message exists. */
    readonly isArchived: (queue: string, msgId: bigint) => Effect.Effect<boolean, QueueError>
    /** Which of `values` a queued (not archived) message carries as `payload[field]`. */
    readonly payloadValuesQueued: (
      queue: string,
      field: string,
      values: ReadonlyArray<string>
    ) => Effect.Effect<ReadonlySet<string>, QueueError>
    /**
     * Where messages are now (one snapshot): `archived`, `queued`, `dead` (in the queue's DLQ)
     * or `missing`, in order. Each is found by id, or by its `markerHeader` value for a copy
     * with another id (a dead letter); a null id is looked for by marker only.
     */
    readonly locate: (
      queue: string,
      targets: ReadonlyArray<{ readonly msgId: bigint | null; readonly marker: string }>,
      markerHeader: string
    ) => Effect.Effect<ReadonlyArray<MessagePlace>, QueueError>
    /** A queue's figures. */
    readonly metrics: (queue: string) => Effect.Effect<QueueMetrics, QueueError>
    /** Deletes archived messages older than the retention; returns how many per queue. */
    readonly cleanupArchive: (
      retention?: Duration.Input
    ) => Effect.Effect<ReadonlyArray<{ readonly queue: string; readonly deleted: number }>, QueueError>
    /**
     * CTEs that send messages into a queue from another module's statement (one per row of
     * `rows`, which yields `vt` and `message`), and the reference that makes its NOTIFY run.
     * The queue must exist; `physical` is its physical name. With `claim`, the one message is
     * inserted claimed for a local reader (see `QueueSql.messageSendCtes`): select `claimed` and
     * decode it with `claimedMessage`.
     */
    readonly messageCtes: MessageCtes
    /**
     * CTEs that send messages with ids drawn beforehand by `nextMsgId` (so that another table's
     * row in the same statement can name its message): `rows` yields `msg_id`, `vt`, `message`
     * (jsonb) and `headers` (jsonb); the CTE `name` returns the ids sent. The queue must exist.
     */
    readonly messageCtesWithIds: (
      physical: string,
      name: string,
      rows: Statement.Fragment,
      now: Date | null
    ) => { readonly ctes: Statement.Fragment; readonly notifyRef: Statement.Fragment }
    /** An expression drawing the next message id of a queue (by its physical name). */
    readonly nextMsgId: (physical: string) => Statement.Fragment
    /** Which of `ids` are still in the queue (not archived, deleted or dead-lettered). */
    readonly present: (queue: string, ids: ReadonlyArray<bigint>) => Effect.Effect<ReadonlySet<bigint>, QueueError>
    /** The message a `messageCtes` claim inserted, from its `claimed` columns (undefined: none was sent). */
    readonly claimedMessage: (queue: string, row: ClaimedMessageRow) => Message | undefined
    /** Validates a queue name (no SQL). */
    readonly validateName: (queue: string) => Effect.Effect<QueueName.QueueName, QueueError>
    /** A queue read as a feed (by id past a cursor, or by key), without claims: what streams read. */
    readonly feed: QueueFeed
    /** A job's outcome beyond a plain archive: archived with a result or mark, snoozed, found. */
    readonly outcomes: QueueOutcomes
  }
>()("effect-pgbus/QueueStore") {
  /** The queue store, on the configured schema. */
  static readonly layer: Layer.Layer<QueueStore, never, PgBusConfig | SqlClient.SqlClient | Notifier> = Layer.effect(
    QueueStore,
    Effect.gen(function* () {
      const config = yield* PgBusConfig
      const sql = yield* SqlClient.SqlClient
      const notifier = yield* Notifier
      const statements = makeQueueSql(sql, config.schema, notifier.channel)
      const orderStatements = makeQueueOrderSql(sql, config.schema)
      const prefix = config.queuePrefix
      const defaultVisibilityMs = Duration.toMillis(config.visibilityTimeout)

      const validNames = new Map<string, Effect.Effect<QueueName.QueueName>>()
      const validateName = (queue: string): Effect.Effect<QueueName.QueueName, QueueError> => {
        const known = validNames.get(queue)
        if (known) return known
        return QueueName.validate(queue, prefix).pipe(
          Effect.tap((name) =>
            Effect.sync(() => validNames.size < 10_000 && validNames.set(queue, Effect.succeed(name)))
          )
        )
      }

      const fail =
        (operation: string, queue: string) =>
        (error: SqlError): QueueError => {
          const server = serverError(error)
          if (server.code === "42P01" && !server.message.includes(`"${config.schema}.queues"`)) {
            return new QueueNotFound({ queue })
          }
          return toDatabaseError(`${operation} ${queue}`)(error)
        }

      // Synchronous on purpose: it runs for every message of every batch (bench:queue).
      const encodeUnsafe = (
        queue: string,
        entry: BatchEntry,
        last?: { headers: BatchEntry["headers"]; text: string | null }
      ): EncodedMessage | QueueError => {
        if (!Input.isPlainObject(entry)) return new InvalidMessage({ queue, reason: "an entry must be an object" })
        const json = Input.storableJson(entry.message, "message")
        if (json.problem !== undefined) return new InvalidMessage({ queue, reason: json.problem })
        const message = json.text
        let headers: string | null = null
        // a batch usually shares one headers object (Job.enqueueMany): encoded once
        if (last !== undefined && entry.headers !== undefined && entry.headers === last.headers) {
          headers = last.text
        } else if (entry.headers !== undefined) {
          if (!isObject(entry.headers)) return new InvalidMessage({ queue, reason: "headers must be a JSON object" })
          const text = Input.storableJson(entry.headers, "headers")
          if (text.problem !== undefined) return new InvalidMessage({ queue, reason: text.problem })
          headers = text.text
          if (last !== undefined) {
            last.headers = entry.headers
            last.text = text.text
          }
        }
        // the headers count towards maxPayloadSize too (they are stored beside the message)
        const length = message.length + (headers?.length ?? 0)
        if (length * 3 > config.maxPayloadSize) {
          const size = Buffer.byteLength(message, "utf8") + (headers === null ? 0 : Buffer.byteLength(headers, "utf8"))
          if (size > config.maxPayloadSize) return new PayloadTooLarge({ queue, size, limit: config.maxPayloadSize })
        }
        let delayMs = 0
        if (entry.delay !== undefined) {
          const ms = Input.durationMillis(entry.delay)
          if (ms === undefined) {
            return new InvalidMessage({ queue, reason: "delay must be a finite, non-negative duration" })
          }
          delayMs = ms
        }
        let at: Date | null = null
        if (entry.at !== undefined) {
          if (!Input.isValidDate(entry.at)) {
            return new InvalidMessage({ queue, reason: "at must be a valid Date" })
          }
          if (entry.delay !== undefined)
            return new InvalidMessage({ queue, reason: "give either delay or at, not both" })
          at = entry.at
        }
        return { message, headers, delayMs, at }
      }

      const encodeAll = (
        queue: string,
        entries: ReadonlyArray<BatchEntry>
      ): Effect.Effect<ReadonlyArray<EncodedMessage>, QueueError> => {
        const out: Array<EncodedMessage> = new Array(entries.length)
        const last: { headers: BatchEntry["headers"]; text: string | null } = { headers: undefined, text: null }
        for (let i = 0; i < entries.length; i++) {
          const encoded = encodeUnsafe(queue, entries[i]!, last)
          if ("_tag" in encoded) return Effect.fail(encoded)
          out[i] = encoded
        }
        return Effect.succeed(out)
      }

      const durationMs = (queue: string, input: Duration.Input | undefined, fallback: number, what: string) => {
        if (input === undefined) return Effect.succeed(fallback)
        const ms = Input.durationMillis(input)
        return ms === undefined
          ? Effect.fail(new InvalidMessage({ queue, reason: `${what} must be a finite, non-negative duration` }))
          : Effect.succeed(ms)
      }

      /** Fails with InvalidMessage when `problem` names one. */
      const refuse = (queue: string, problem: string | undefined) =>
        problem === undefined ? Effect.void : Effect.fail(new InvalidMessage({ queue, reason: problem }))

      const create = (queue: string, options?: CreateOptions) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          const dead = QueueName.deadLetterOf(name)
          const physicals = QueueName.isDeadLetter(name) ? [name.physical] : [name.physical, dead.physical]
          const lookUp = statements
            .queueObjectsPresent(physicals)
            .pipe(Effect.map((rows) => new Set(rows.map((row) => `${row.kind}:${row.name}`))))
          const missingOf = (present: ReadonlySet<string>) =>
            physicals.flatMap((physical) => {
              const names = statements.queueRelationNames(physical)
              return [
                ...(present.has(`queue:${physical}`) ? [] : [`queue:${physical}`]),
                ...Object.values(names).flatMap((n) => (present.has(`relation:${n}`) ? [] : [`relation:${n}`]))
              ]
            })
          // An existing queue (every boot of every supervisor): a catalog read, no DDL, no lock
          // on its tables, so nothing a busy worker's statements can meet in the other order.
          if (missingOf(yield* lookUp.pipe(Effect.mapError(fail("create queue", queue)))).length === 0) return
          yield* withTransaction(
            sql,
            Effect.gen(function* () {
              yield* statements.queueLockTransaction(name.physical)
              // again under the lock: another process may have made some of it meanwhile
              const present = yield* lookUp
              const makeTables = (physical: string) => {
                const names = statements.queueRelationNames(physical)
                const step = (relation: string, statement: Effect.Effect<unknown, SqlError>) =>
                  present.has(`relation:${relation}`) ? Effect.void : statement
                return Effect.all(
                  [
                    step(names.messages, statements.queueCreateMessageTable(physical)),
                    step(names.visibilityIndex, statements.queueCreateVisibilityIndex(physical)),
                    step(names.archive, statements.queueCreateArchiveTable(physical)),
                    step(names.archiveIndex, statements.queueCreateArchiveIndex(physical))
                  ],
                  { discard: true }
                )
              }
              const register = (physical: string, deadLetterOf: string | null) =>
                present.has(`queue:${physical}`)
                  ? Effect.succeed(false)
                  : Effect.map(statements.queueRegister(physical, deadLetterOf), (rows) => rows.length > 0)
              yield* makeTables(name.physical)
              const fresh = yield* register(name.physical, null)
              // only on a new queue: on a populated one a plain build would block its writes
              if (options?.fairIndex === true && fresh && !QueueName.isDeadLetter(name)) {
                yield* statements.queueCreateFairIndex(name.physical)
              }
              if (options?.orderIndex === true && fresh && !QueueName.isDeadLetter(name)) {
                yield* orderStatements.queueCreateOrderIndex(name.physical)
              }
              if (!QueueName.isDeadLetter(name)) {
                yield* makeTables(dead.physical)
                yield* register(dead.physical, name.physical)
              }
            })
          ).pipe(Effect.mapError(fail("create queue", queue)))
        }).pipe(Effect.withSpan("QueueStore.create", { attributes: { queue } }))

      const { ensureFairIndex, ensureOrderIndex } = makeQueueIndexes({
        statements,
        orderStatements,
        validateName,
        fail
      })

      const drop = (queue: string) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          const dead = QueueName.deadLetterOf(name)
          return yield* withTransaction(
            sql,
            Effect.gen(function* () {
              yield* statements.queueLockTransaction(name.physical)
              const removed = yield* statements.queueUnregister(name.physical)
              yield* statements.queueDropTables(name.physical)
              if (!QueueName.isDeadLetter(name)) {
                yield* statements.queueUnregister(dead.physical)
                yield* statements.queueDropTables(dead.physical)
              }
              return removed.length > 0
            })
          ).pipe(Effect.mapError(fail("drop queue", queue)))
        }).pipe(Effect.withSpan("QueueStore.drop", { attributes: { queue } }))

      const list = statements.queueList().pipe(
        Effect.map((rows) =>
          rows.flatMap((row): Array<QueueInfo> => {
            const name = QueueName.fromPhysical(row.name, prefix)
            if (name === undefined) return []
            const parent = row.dead_letter_of === null ? undefined : QueueName.fromPhysical(row.dead_letter_of, prefix)
            return [{ name, physical: row.name, deadLetterOf: parent, createdAt: row.created_at }]
          })
        ),
        Effect.mapError(fail("list queues", "*"))
      )

      const send = (queue: string, message: unknown, options?: SendOptions) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          const [encoded] = yield* encodeAll(queue, [{ ...options, message }])
          const now = yield* statementNow
          const rows = yield* statements
            .messageSendOne(name.physical, encoded!, now)
            .pipe(Effect.mapError(fail("send to", queue)))
          return rows[0]!.msg_id
        }).pipe(hotSpan("QueueStore.send", { queue }))

      const sendClaimed = (
        queue: string,
        message: unknown,
        headers: Readonly<Record<string, unknown>> | undefined,
        claim: { readonly claimedBy: string; readonly visibilityMs: number }
      ) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          const [encoded] = yield* encodeAll(queue, [{ message, headers }])
          const now = yield* statementNow
          const rows = yield* statements
            .messageSendOneClaimed(name.physical, encoded!, claim, now)
            .pipe(Effect.mapError(fail("send to", queue)))
          return toMessage(queue, rows[0]!)
        }).pipe(hotSpan("QueueStore.sendClaimed", { queue }))

      const sendBatch = (queue: string, entries: ReadonlyArray<BatchEntry>) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          if (!Array.isArray(entries)) return yield* new InvalidMessage({ queue, reason: "entries must be an array" })
          if (entries.length === 0) return [] as ReadonlyArray<bigint>
          const encoded = yield* encodeAll(queue, entries)
          const now = yield* statementNow
          // one headers value and one schedule for all (Job.enqueueMany): the messages as one
          // JSON array parameter, the rest as scalars
          const first = encoded[0]!
          const uniform = encoded.every(
            (e) => e.headers === first.headers && e.delayMs === first.delayMs && e.at === first.at
          )
          if (uniform) {
            const [row] = yield* statements
              .messageSendBatchUniform(name.physical, `[${encoded.map((e) => e.message).join(",")}]`, first, now)
              .pipe(Effect.mapError(fail("send batch to", queue)))
            return row?.ids ?? []
          }
          const rows = yield* statements
            .messageSendBatch(name.physical, encoded, now)
            .pipe(Effect.mapError(fail("send batch to", queue)))
          return rows.map((r) => r.msg_id)
        }).pipe(hotSpan("QueueStore.sendBatch", { queue, size: entries.length }))

      /** A read's checked inputs: the queue's name, the limit, the visibility timeout and the statement time. */
      const readParams = (queue: string, options: ReadOptions | undefined) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          const limit = options?.limit ?? 1
          if (!Number.isInteger(limit) || limit < 1) {
            return yield* new InvalidMessage({ queue, reason: "limit must be a positive integer" })
          }
          const vtMs = yield* durationMs(queue, options?.visibilityTimeout, defaultVisibilityMs, "visibilityTimeout")
          const now = yield* statementNow
          return { name, limit, vtMs, now }
        })

      const read = (queue: string, options?: ReadOptions) =>
        Effect.gen(function* () {
          const { name, limit, vtMs, now } = yield* readParams(queue, options)
          if (options?.limited === true) {
            const claimed = yield* readLimited(
              queue,
              name.physical,
              limit,
              vtMs,
              options.claimedBy ?? null,
              now,
              options.onRateWait
            )
            return claimed.messages
          }
          const fair = options?.fair
          if (fair !== undefined && fair !== false) {
            return yield* readFair(queue, name.physical, limit, vtMs, options?.claimedBy ?? null, fair, now)
          }
          const rows = yield* (
            options?.ordered === true
              ? orderStatements.messageReadOrdered(name.physical, limit, vtMs, options?.claimedBy ?? null, now)
              : statements.messageRead(name.physical, limit, vtMs, options?.claimedBy ?? null, now)
          ).pipe(Effect.mapError(fail("read from", queue)))
          return rows.map((row) => toMessage(queue, row)).sort(byMsgId) as ReadonlyArray<Message>
        }).pipe(hotSpan("QueueStore.read", { queue }))

      // where each plain claim of this store starts (see ClaimCursor)
      const floors = ClaimCursor.make()
      const archiveAndRead = (queue: string, receipts: ReadonlyArray<Receipt>, options?: ReadOptions) =>
        Effect.gen(function* () {
          const fair = options?.fair
          if (options?.limited === true) {
            // the limited claim archives the successes in its own statement (their slots free)
            const p = yield* readParams(queue, options)
            const claimed = yield* readLimited(
              queue,
              p.name.physical,
              p.limit,
              p.vtMs,
              options.claimedBy ?? null,
              p.now,
              options.onRateWait,
              splitTargets(receipts).receipts
            )
            return { ...claimed, more: claimed.messages.length >= p.limit }
          }
          // fair and ordered reads archive first, then claim: an ordered claim must see its key's
          // head gone to hand the key on
          if ((fair !== undefined && fair !== false) || options?.ordered === true) {
            const archived = receipts.length === 0 ? 0 : yield* archive(queue, receipts)
            const messages = yield* read(queue, options)
            return { archived, messages, more: messages.length >= (options?.limit ?? 1) }
          }
          const { name, limit, vtMs, now } = yield* readParams(queue, options)
          const startedAt = yield* Clock.currentTimeMillis
          const from = floors.start(name.physical, startedAt)
          const ended = (messages: ReadonlyArray<Message>) =>
            Effect.map(Clock.currentTimeMillis, (at) =>
              floors.claimed(
                name.physical,
                from,
                startedAt,
                at - startedAt,
                messages.map((m) => m.msgId)
              )
            )
          if (receipts.length === 0) {
            const claimed = yield* statements
              .messageRead(name.physical, limit, vtMs, options?.claimedBy ?? null, now, from)
              .pipe(Effect.mapError(fail("read from", queue)))
            const messages = claimed.map((row) => toMessage(queue, row)).sort(byMsgId) as ReadonlyArray<Message>
            yield* ended(messages)
            return { archived: 0, messages, more: claimed[0]?.more === true }
          }
          const rows = yield* statements
            .messageArchiveAndRead(
              name.physical,
              splitTargets(receipts).receipts,
              limit,
              vtMs,
              options?.claimedBy ?? null,
              now,
              from
            )
            .pipe(Effect.mapError(fail("archive and read in", queue)))
          let archived = 0
          let more = false
          const messages: Array<Message> = []
          for (const row of rows) {
            if (row.archived !== null) {
              archived = toNumber(row.archived)
              more = row.more === true
            } else messages.push(toMessage(queue, row))
          }
          yield* ended(messages)
          return { archived, messages: messages.sort(byMsgId) as ReadonlyArray<Message>, more }
        }).pipe(hotSpan("QueueStore.archiveAndRead", { queue }))

      const readFair = (
        queue: string,
        physical: string,
        limit: number,
        vtMs: number,
        claimedBy: string | null,
        fair: true | FairCursor,
        now: Date | null
      ) =>
        Effect.gen(function* () {
          const cursor = fair === true ? new FairCursor() : fair
          const rows = yield* statements
            .messageReadFair(physical, limit, vtMs, claimedBy, cursor.snapshot(), now)
            .pipe(Effect.mapError(fail("read from", queue)))
          // claim order: by start tag, ties to the oldest (the executors take them in this order)
          const ordered = [...rows].sort(byStart)
          cursor.advance(ordered.map(claimOf), rows.length < limit)
          return ordered.map((row) => toMessage(queue, row)) as ReadonlyArray<Message>
        })

      // flow controls: the limited claim, run-time rates, wake-ups, presence (QueueControls.ts)
      const { readLimited, setRate, rateOverrides, wake, present, withLimitLock, limitCounts } = makeQueueControls({
        sql,
        statements,
        validateName,
        fail,
        toMessage
      })

      const readWithPoll = (queue: string, options: PollOptions) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          const maxWaitMs = yield* durationMs(queue, options.maxWait, 0, "maxWait")
          const pollMs = yield* durationMs(
            queue,
            options.pollInterval,
            Duration.toMillis(config.pollingInterval),
            "pollInterval"
          )
          // subscribe before the first read, so a send committed in between still wakes us
          const wakeups = yield* notifier.subscribe([name.physical])
          const deadline = (yield* Clock.currentTimeMillis) + maxWaitMs
          while (true) {
            const messages = yield* read(queue, options)
            if (messages.length > 0) return messages
            const remaining = deadline - (yield* Clock.currentTimeMillis)
            if (remaining <= 0) return messages
            const status = yield* notifier.status
            const wait = Duration.min(Duration.millis(remaining), pollDelay(status, Duration.millis(pollMs)))
            yield* wakeups.await(wait)
          }
        }).pipe(Effect.scoped, Effect.withSpan("QueueStore.readWithPoll"))

      const acknowledge =
        (
          operation: string,
          byReceipts: (physical: string, r: ReceiptParams) => Effect.Effect<ReadonlyArray<unknown>, SqlError>,
          byIds: (physical: string, ids: ReadonlyArray<bigint>) => Effect.Effect<ReadonlyArray<unknown>, SqlError>
        ) =>
        (queue: string, targets: ReadonlyArray<Target>) =>
          Effect.gen(function* () {
            const name = yield* validateName(queue)
            yield* refuse(queue, Input.listProblem(targets, Input.targetProblem, "targets"))
            if (targets.length === 0) return 0
            const { receipts, ids } = splitTargets(targets)
            let n = 0
            if (receipts.ids.length > 0) {
              n += (yield* byReceipts(name.physical, receipts).pipe(Effect.mapError(fail(operation, queue)))).length
            }
            if (ids.length > 0) {
              n += (yield* byIds(name.physical, ids).pipe(Effect.mapError(fail(operation, queue)))).length
            }
            return n
          })

      const archive = (queue: string, targets: ReadonlyArray<Target>) =>
        Effect.flatMap(statementNow, (now) =>
          acknowledge(
            "archive in",
            (p, r) => statements.messageArchiveReceipts(p, r, now),
            (p, ids) => statements.messageArchiveIds(p, ids, now)
          )(queue, targets)
        ).pipe(hotSpan("QueueStore.archive", { queue }))

      const remove = acknowledge("delete from", statements.messageDeleteReceipts, statements.messageDeleteIds)

      const setVisibility = (queue: string, targets: ReadonlyArray<Target>, delay: Duration.Input) =>
        Effect.gen(function* () {
          const delayMs = yield* durationMs(queue, delay, 0, "delay")
          const now = yield* statementNow
          return yield* acknowledge(
            "set visibility in",
            (p, r) => statements.messageSetVisibilityReceipts(p, r, delayMs, now),
            (p, ids) => statements.messageSetVisibilityIds(p, ids, delayMs, now)
          )(queue, targets)
        })

      const release = (queue: string, receipts: ReadonlyArray<Receipt>) =>
        Effect.gen(function* () {
          yield* refuse(queue, Input.listProblem(receipts, Input.receiptProblem, "receipts"))
          const now = yield* statementNow
          return yield* acknowledge(
            "release in",
            (p, r) => statements.messageReleaseReceipts(p, r, now),
            () => Effect.succeed([])
          )(queue, receipts)
        })

      const recordFailure = (queue: string, receipt: Receipt, failure: Failure, retryDelay: Duration.Input) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          const delayMs = yield* durationMs(queue, retryDelay, 0, "retryDelay")
          const now = yield* statementNow
          const rows = yield* statements
            .messageRecordFailure(
              name.physical,
              receipt.msgId,
              receipt.readCt,
              delayMs,
              JSON.stringify(encodeFailure(failure)),
              now
            )
            .pipe(Effect.mapError(fail("record failure in", queue)))
          return rows.length > 0
        })

      const moveToDeadLetter = (queue: string, target: Target, options: DeadLetterOptions) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          const dead = QueueName.deadLetterOf(name)
          yield* refuse(queue, Input.targetProblem(target))
          const now = yield* statementNow
          const msgId = typeof target === "bigint" ? target : target.msgId
          const readCt = typeof target === "bigint" ? null : target.readCt
          const rows = yield* statements
            .messageMoveToDeadLetter(
              name.physical,
              dead.physical,
              msgId,
              readCt,
              {
                reason: options.reason ?? "max_retries_exceeded",
                source: options.source,
                maxRetries: options.maxRetries ?? config.maxRetries,
                error: options.failure ? JSON.stringify(encodeFailure(options.failure)) : null
              },
              now
            )
            .pipe(Effect.mapError(fail("dead-letter in", queue)))
          return Option.fromNullishOr(rows[0]?.msg_id)
        }).pipe(Effect.withSpan("QueueStore.moveToDeadLetter"))

      const retryDeadLetters = (deadLetterQueue: string, ids: ReadonlyArray<bigint> | "all") =>
        Effect.gen(function* () {
          const dead = yield* validateName(deadLetterQueue)
          if (ids !== "all") yield* refuse(deadLetterQueue, Input.listProblem(ids, Input.messageIdProblem, "ids"))
          const found = yield* statements
            .queueFind(dead.physical)
            .pipe(Effect.mapError(fail("find queue", deadLetterQueue)))
          const origin = found[0]?.dead_letter_of
          if (!origin) return yield* new QueueNotFound({ queue: deadLetterQueue })
          if (ids !== "all" && ids.length === 0) return [] as ReadonlyArray<bigint>
          const now = yield* statementNow
          const rows = yield* statements
            .messageRetryDeadLetter(dead.physical, origin, ids === "all" ? null : ids, now)
            .pipe(Effect.mapError(fail("retry dead letters of", deadLetterQueue)))
          return rows.map((r) => r.msg_id)
        })

      const releaseClaimsOf = (processIds: ReadonlyArray<string>) =>
        Effect.gen(function* () {
          if (processIds.length === 0) return []
          const queues = yield* list
          const report: Array<{ queue: string; released: number }> = []
          for (const q of queues) {
            if (q.deadLetterOf !== undefined) continue
            const now = yield* statementNow
            const rows = yield* statements
              .messageReleaseClaimedBy(q.physical, processIds, now)
              .pipe(Effect.mapError(fail("release claims in", q.name)))
            if (rows.length > 0) report.push({ queue: q.name, released: rows.length })
          }
          return report as ReadonlyArray<{ readonly queue: string; readonly released: number }>
        })

      const releaseClaim = (queue: string, claimedBy: string) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          const now = yield* statementNow
          const rows = yield* statements
            .messageReleaseClaim(name.physical, claimedBy, now)
            .pipe(Effect.mapError(fail("release a claim in", queue)))
          return rows.length
        })

      const purge = (queue: string) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          const rows = yield* statements.messagePurge(name.physical).pipe(Effect.mapError(fail("purge", queue)))
          return toNumber(rows[0]?.n ?? 0n)
        })

      const get = (queue: string, msgId: bigint) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          yield* refuse(queue, Input.messageIdProblem(msgId, "msgId"))
          const rows = yield* statements.messageGet(name.physical, msgId).pipe(Effect.mapError(fail("get from", queue)))
          return Option.map(Option.fromNullishOr(rows[0]), (row) => toMessage(queue, row))
        })

      const browse = (queue: string, options?: { readonly limit?: number; readonly after?: bigint }) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          yield* refuse(
            queue,
            Input.optionsProblem(options, ["limit", "after"], "browse options") ??
              (options?.limit === undefined
                ? undefined
                : Input.intProblem(options.limit, 1, Input.INT4_MAX, "limit")) ??
              (options?.after === undefined ? undefined : Input.messageIdProblem(options.after, "after"))
          )
          const rows = yield* statements
            .messageList(name.physical, options?.limit ?? 100, options?.after ?? null)
            .pipe(Effect.mapError(fail("browse", queue)))
          return rows.map((row) => toMessage(queue, row))
        })

      const deadLetterOf = (message: Message): DeadLetter => ({
        ...message,
        deadLetter: Option.getOrUndefined(decodeDeadLetter(message.headers[DEAD_LETTER_HEADER]))
      })

      const isArchived = (queue: string, msgId: bigint) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          const rows = yield* statements
            .archiveGet(name.physical, msgId)
            .pipe(Effect.mapError(fail("read archive of", queue)))
          return rows.length > 0
        })

      const payloadValuesQueued = (queue: string, field: string, values: ReadonlyArray<string>) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          if (values.length === 0) return new Set<string>()
          const rows = yield* statements
            .messagePayloadValues(name.physical, field, values)
            .pipe(Effect.mapError(fail("search", queue)))
          return new Set(rows.map((r) => r.value))
        })

      const locate = (
        queue: string,
        targets: ReadonlyArray<{ readonly msgId: bigint | null; readonly marker: string }>,
        markerHeader: string
      ) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          if (targets.length === 0) return [] as ReadonlyArray<MessagePlace>
          const rows = yield* statements
            .messageLocate(
              name.physical,
              QueueName.deadLetterOf(name).physical,
              targets.map((t) => t.msgId),
              markerHeader,
              targets.map((t) => t.marker)
            )
            .pipe(Effect.mapError(fail("locate messages in", queue)))
          return rows.map((r) => r.place) as ReadonlyArray<MessagePlace>
        })

      const metrics = (queue: string) =>
        Effect.gen(function* () {
          const name = yield* validateName(queue)
          const now = yield* statementNow
          const [row] = yield* statements
            .queueMetrics(name.physical, now)
            .pipe(Effect.mapError(fail("metrics of", queue)))
          return {
            queue,
            depth: toNumber(row?.depth ?? 0n),
            visible: toNumber(row?.visible ?? 0n),
            oldestAgeMs: row?.oldest_age_ms ?? undefined,
            oldestVisibleAgeMs: row?.oldest_visible_age_ms ?? undefined,
            archiveSize: toNumber(row?.archive_size ?? 0n)
          } satisfies QueueMetrics
        })

      const CLEANUP_BATCH = 5_000
      const cleanupArchive = (retention?: Duration.Input) =>
        Effect.gen(function* () {
          const keep = retention === undefined ? config.archiveRetention : Duration.fromInputUnsafe(retention)
          if (keep === undefined) return []
          const retentionMs = Duration.toMillis(keep)
          const queues = yield* list
          const report: Array<{ queue: string; deleted: number }> = []
          for (const q of queues) {
            let deleted = 0
            while (true) {
              const now = yield* statementNow
              const [row] = yield* statements
                .archiveDeleteOlderThan(q.physical, retentionMs, CLEANUP_BATCH, now)
                .pipe(Effect.mapError(fail("clean archive of", q.name)))
              const n = toNumber(row?.n ?? 0n)
              deleted += n
              if (n < CLEANUP_BATCH) break
            }
            if (deleted > 0) report.push({ queue: q.name, deleted })
          }
          return report as ReadonlyArray<{ readonly queue: string; readonly deleted: number }>
        })

      return QueueStore.of({
        create,
        ensureFairIndex,
        ensureOrderIndex,
        drop,
        list,
        send,
        sendClaimed,
        sendBatch,
        read,
        archiveAndRead,
        wake,
        withLimitLock,
        limitCounts,
        setRate,
        rateOverrides,
        readWithPoll,
        archive,
        delete: remove,
        setVisibility,
        release,
        recordFailure,
        moveToDeadLetter,
        retryDeadLetters,
        releaseClaimsOf,
        releaseClaim,
        purge,
        get,
        browse,
        deadLetterOf,
        isArchived,
        payloadValuesQueued,
        locate,
        metrics,
        cleanupArchive,
        messageCtes: statements.messageSendCtes,
        messageCtesWithIds: statements.messageSendWithIdsCtes,
        nextMsgId: statements.messageNextId,
        present,
        claimedMessage,
        validateName: (queue) => validateName(queue),
        feed: makeQueueFeed({
          sql,
          schema: config.schema,
          notifyChannel: notifier.channel,
          validateName,
          fail,
          lockQueue: statements.queueLockTransaction
        }),
        outcomes: makeQueueOutcomes({
          sql,
          schema: config.schema,
          notifyChannel: notifier.channel,
          validateName,
          deadLetterOf: QueueName.deadLetterOf,
          fail,
          moveToDeadLetter
        })
      })
    })
  )
}
