/**
 * The queue store: the one door to queue tables. PGMQ's model written from scratch: per queue
 * a message table and an archive, a dead-letter queue `<queue>_dlq`, claims with
 * `FOR UPDATE SKIP LOCKED` and a visibility timeout, a NOTIFY with every committed send.
 * Every operation runs in the caller's SQL transaction when one is open.
 *
 * @since 0.1.0
 */
import { Context, type Duration, Effect, Layer, type Option } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import { PgBusConfig } from "../Config.ts"
import type { FairCursor } from "./FairShare.ts"
import type { DeadLetterBlock, DeadLetterReason, DeadLetterSource, Failure, Message, Receipt } from "./Message.ts"
import { Notifier } from "./Notifier.ts"
import { makeQueueAcks } from "./QueueAcks.ts"
import { makeQueueClaims } from "./QueueClaims.ts"
import { makeQueueControls, type RateOverride } from "./QueueControls.ts"
import { makeQueueDeadLetters } from "./QueueDeadLetters.ts"
import { makeQueueEnqueue } from "./QueueEnqueue.ts"
import type { QueueError } from "./QueueError.ts"
import { makeQueueFeed, type QueueFeed } from "./QueueFeed.ts"
import { type FairIndexStatus, makeQueueIndexes } from "./QueueIndexes.ts"
import { makeQueueLifecycle } from "./QueueLifecycle.ts"
import { makeQueueLookups } from "./QueueLookups.ts"
import * as QueueName from "./QueueName.ts"
import { makeQueueOutcomes, type QueueOutcomes } from "./QueueOutcomes.ts"
import type { ClaimedMessageRow, MessageCtes, ReadClaim } from "./QueueRows.ts"
import { claimedMessage, makeQueueStoreContext, toMessage } from "./QueueStoreContext.ts"
import { leaseFloorMs } from "./SlotLease.ts"

export type { RateOverride } from "./QueueControls.ts"
export type { ReadClaim, ReadClaimRow } from "./QueueRows.ts"

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
   * a key's messages are claimed only while fewer than its limit run, and the rates
   * (`pgbus_rate_key`). Takes precedence over `fair` (the limited claim is oldest first).
   * `"rates"`: the rates alone (a queue whose jobs have no concurrency limit; the claim does not
   * count the running messages).
   */
  readonly limited?: boolean | "rates" | undefined
  /**
   * With `limited`: told, after a claim that left messages behind for want of rate tokens, how
   * long until the next token, or, with keys at their limit, until the earliest of their slot
   * leases lapses (the caller claims again then: no NOTIFY announces either).
   */
  readonly onRateWait?: ((ms: number) => void) | undefined
  /** Per-key FIFO: claim a message with `pgbus_order_key` only as its key's head (QueueOrderSql.ts); `limited` and `fair` win. */
  readonly ordered?: boolean | undefined
  /**
   * `archiveAndRead`'s plain claim: the archived messages' archive is not their outcome (it is
   * written elsewhere, durably), so the statement commits without waiting for the WAL flush, as
   * a claim alone does (internal/leaseCommit.ts). Ignored inside a caller's transaction.
   */
  readonly archiveIsLease?: boolean | undefined
  /**
   * `archiveAndRead`'s plain claim: another module's claim made in the same statement for the
   * messages among the first `limit` it claims (a woken workflow step's, see `ReadClaim`).
   */
  readonly readClaim?:
    | {
        readonly claim: ReadClaim
        readonly limit: number
        /** The messages after the first `limit` expected to wait in the buffer briefly (default 0). */
        readonly soon?: number | undefined
      }
    | undefined
  /**
   * `archiveAndRead`: successes deleted with the archived ones, not archived: their outcome is
   * written elsewhere, durably (a workflow step's, with its run), so an archive row would only
   * be a copy for `cleanupArchive` to delete later. Counted in `archived`.
   */
  readonly deleted?: ReadonlyArray<Receipt> | undefined
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
     * read left visible messages behind (a fair read: it got `limit`). `options.deleted`: more
     * finished messages, deleted instead (in the same statement when the claim is a plain one).
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
    /**
     * Gives back claimed messages that no job saw (read-ahead, at a drain or a pause) and this process
     * (`processId`, the prefix of its claims' marks) still holds: visible at once, their read
     * counts as before their claim, so that their next delivery is their first again. Their
     * receipts are void afterwards. Returns how many.
     */
    readonly giveBackUnread: (
      queue: string,
      receipts: ReadonlyArray<Receipt>,
      processId: string
    ) => Effect.Effect<number, QueueError>
    /**
     * Gives back a message claimed under `claimedBy` that no job saw (a hand-over refused after
     * its sender's commit): visible at once, its read count as before the claim, so that its next
     * delivery is its first again. The receipt is void afterwards (the next read gives the same
     * read count). False if the claim was no longer this one.
     */
    readonly unclaim: (queue: string, receipt: Receipt, claimedBy: string) => Effect.Effect<boolean, QueueError>
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
    /**
     * Makes the messages of one claim (by its `claimedBy` mark) that no job saw (its reply was
     * lost) visible at once, their read counts as before the claim; returns how many.
     */
    readonly releaseClaim: (queue: string, claimedBy: string) => Effect.Effect<number, QueueError>
    /** The messages one claim (by its `claimedBy` mark) holds now, not released (a lost reply's). */
    readonly claimedBy: (queue: string, claimedBy: string) => Effect.Effect<ReadonlyArray<Message>, QueueError>
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
      const context = makeQueueStoreContext(config, sql, notifier)
      const { statements, orderStatements, validateName, fail } = context
      const lifecycle = makeQueueLifecycle(context)
      const { ensureFairIndex, ensureOrderIndex } = makeQueueIndexes({
        statements,
        orderStatements,
        validateName,
        fail
      })
      const acks = makeQueueAcks(context, lifecycle.list)
      const deadLetters = makeQueueDeadLetters(context)

      // flow controls: the limited claim, run-time rates, wake-ups, presence (QueueControls.ts)
      const { readLimited, setRate, rateOverrides, wake, present, withLimitLock, limitCounts } = makeQueueControls({
        sql,
        statements,
        validateName,
        fail,
        toMessage,
        leaseFloorMs: leaseFloorMs(config)
      })
      const claims = makeQueueClaims(context, { archive: acks.archive, remove: acks.delete, readLimited })

      return QueueStore.of({
        ...lifecycle,
        ensureFairIndex,
        ensureOrderIndex,
        ...makeQueueEnqueue(context),
        ...claims,
        wake,
        withLimitLock,
        limitCounts,
        setRate,
        rateOverrides,
        ...acks,
        ...deadLetters,
        ...makeQueueLookups(context),
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
          noteDue: context.noteDue,
          moveToDeadLetter: deadLetters.moveToDeadLetter
        })
      })
    })
  )
}
