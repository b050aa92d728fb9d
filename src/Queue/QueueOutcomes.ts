/**
 * A job's outcome beyond a plain archive, on the queue tables: a message archived with the
 * headers of its outcome (a result, a discard mark) and a NOTIFY for awaiters, a snooze that
 * does not count the delivery, and where a message ended. Reached as `QueueStore.outcomes`.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Option } from "effect"
import type { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { statementNow, withTransaction } from "../Database.ts"
import type { Receipt } from "./Message.ts"
import { InvalidMessage, type QueueError } from "./QueueError.ts"
import type * as QueueName from "./QueueName.ts"
import { makeQueueOutcomeSql } from "./QueueOutcomeSql.ts"
import type { DeadLetterOptions } from "./QueueStore.ts"

/** Prefix of the NOTIFY payload sent when a message's outcome is written (`<prefix><physical>:<msg id>`). */
export const OUTCOME_PREFIX = "pgbus_outcome:"

/** The NOTIFY payload of one message's outcome. */
export const outcomePayload = (physical: string, msgId: bigint): string => `${OUTCOME_PREFIX}${physical}:${msgId}`

/**
 * Where a message ended, with what its outcome left: archived (its headers' result, when one
 * was kept, and discard mark), still queued, dead-lettered (its block), or nowhere.
 *
 * @category models
 */
export type StoredOutcome =
  | {
      readonly _tag: "Archived"
      readonly result: Option.Option<unknown>
      readonly discarded: unknown
    }
  | { readonly _tag: "Queued" }
  | { readonly _tag: "Dead"; readonly block: unknown }
  | { readonly _tag: "Missing" }

/**
 * The outcome operations on queues.
 *
 * @category models
 */
export interface QueueOutcomes {
  /**
   * Archives one claimed message (by receipt) with `headers` merged into its own and wakes the
   * awaiters of its outcome; false when the claim was lost. The caller bounds their size.
   */
  readonly archiveWith: (
    queue: string,
    receipt: Receipt,
    headers: Readonly<Record<string, unknown>>
  ) => Effect.Effect<boolean, QueueError>
  /** Hides a claimed message for `delayMs` without counting its delivery; false when the claim was lost. */
  readonly snooze: (queue: string, receipt: Receipt, delayMs: number) => Effect.Effect<boolean, QueueError>
  /** Where a message (by its id in `queue`) ended. */
  readonly find: (queue: string, msgId: bigint) => Effect.Effect<StoredOutcome, QueueError>
  /** Wakes the awaiters of a message's outcome (a dead letter, written by the dead-letter move). */
  readonly notify: (queue: string, msgId: bigint) => Effect.Effect<void, QueueError>
  /**
   * Keeps an ordering key blocked after its head (`msgId`) was dead-lettered (`onDeadLetter:
   * "block"`): a never-visible row under the head's id. False when the id was taken meanwhile.
   */
  readonly blockKey: (
    queue: string,
    msgId: bigint,
    key: string,
    deadLetterId: bigint | undefined
  ) => Effect.Effect<boolean, QueueError>
  /** The blocked ordering keys of a queue, oldest first, with the dead letter that blocked each. */
  readonly blockedKeys: (queue: string) => Effect.Effect<ReadonlyArray<BlockedKey>, QueueError>
  /**
   * Dead-letters an ordered key's head and keeps its key blocked, in one transaction; the dead
   * letter's id (none when the claim was lost).
   */
  readonly deadLetterBlocking: (
    queue: string,
    receipt: Receipt,
    key: string,
    options: DeadLetterOptions
  ) => Effect.Effect<Option.Option<bigint>, QueueError>
  /** Releases a blocked ordering key (its next job becomes the head); false when it was not blocked. */
  readonly releaseKey: (queue: string, key: string) => Effect.Effect<boolean, QueueError>
}

/** An ordering key kept blocked after its head was dead-lettered. */
export interface BlockedKey {
  readonly key: string
  /** The id of the blocking head (its place in the queue). */
  readonly msgId: bigint
  /** The dead letter's id in the queue's DLQ, when known. */
  readonly deadLetterId: bigint | undefined
  readonly blockedAt: Date
}

/** What the outcome operations need of the queue store. */
export interface QueueOutcomesDeps {
  readonly sql: SqlClient.SqlClient
  readonly schema: string
  readonly notifyChannel: string
  readonly validateName: (queue: string) => Effect.Effect<QueueName.QueueName, QueueError>
  readonly deadLetterOf: (name: QueueName.QueueName) => QueueName.QueueName
  readonly fail: (operation: string, queue: string) => (error: SqlError) => QueueError
  /** Notes rows made claimable again at `atMs` for the store's next claim (ClaimCursor's `due`). */
  readonly noteDue: (physical: string, ids: ReadonlyArray<bigint>, atMs: number) => void
  readonly moveToDeadLetter: (
    queue: string,
    target: Receipt,
    options: DeadLetterOptions
  ) => Effect.Effect<Option.Option<bigint>, QueueError>
}

/** Makes the outcome operations. */
export const makeQueueOutcomes = (deps: QueueOutcomesDeps): QueueOutcomes => {
  const statements = makeQueueOutcomeSql(deps.sql, deps.schema, deps.notifyChannel)
  const { validateName, fail } = deps

  const archiveWith: QueueOutcomes["archiveWith"] = (queue, receipt, headers) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      let text: string
      try {
        text = JSON.stringify(headers)
      } catch {
        return yield* new InvalidMessage({ queue, reason: "the outcome headers are not JSON" })
      }
      const now = yield* statementNow
      const rows = yield* statements
        .messageArchiveWithHeaders(
          name.physical,
          receipt.msgId,
          receipt.readCt,
          text,
          outcomePayload(name.physical, receipt.msgId),
          now
        )
        .pipe(Effect.mapError(fail("archive in", queue)))
      return rows.length > 0
    }).pipe(Effect.withSpan("QueueStore.outcomes.archiveWith"))

  const snooze: QueueOutcomes["snooze"] = (queue, receipt, delayMs) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const now = yield* statementNow
      const rows = yield* statements
        .messageSnooze(name.physical, receipt.msgId, receipt.readCt, Math.max(0, delayMs), now)
        .pipe(Effect.mapError(fail("snooze in", queue)))
      if (rows.length > 0)
        deps.noteDue(name.physical, [receipt.msgId], (yield* Clock.currentTimeMillis) + Math.max(0, delayMs))
      return rows.length > 0
    })

  const find: QueueOutcomes["find"] = (queue, msgId) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const rows = yield* statements
        .messageOutcomeFind(name.physical, deps.deadLetterOf(name).physical, msgId)
        .pipe(Effect.mapError(fail("find the outcome in", queue)))
      const row = rows[0]
      if (row === undefined) return { _tag: "Missing" } as const
      switch (row.place) {
        case "archived":
          return {
            _tag: "Archived",
            result: row.has_result === true ? Option.some(row.result) : Option.none(),
            discarded: row.discarded ?? undefined
          } as const
        case "queued":
          return { _tag: "Queued" } as const
        case "dead":
          return { _tag: "Dead", block: row.dead } as const
      }
    })

  const notify: QueueOutcomes["notify"] = (queue, msgId) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      yield* statements
        .outcomeNotify(outcomePayload(name.physical, msgId))
        .pipe(Effect.mapError(fail("notify in", queue)))
    })

  const blockKey: QueueOutcomes["blockKey"] = (queue, msgId, key, deadLetterId) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const now = yield* statementNow
      const rows = yield* statements
        .messageInsertKeyBlocker(name.physical, msgId, key, deadLetterId ?? null, now)
        .pipe(Effect.mapError(fail("block a key in", queue)))
      return rows.length > 0
    })

  const blockedKeys: QueueOutcomes["blockedKeys"] = (queue) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const rows = yield* statements
        .messageBlockersList(name.physical)
        .pipe(Effect.mapError(fail("list blocked keys of", queue)))
      return rows.map((r) => ({
        key: r.key,
        msgId: r.msg_id,
        deadLetterId: r.dead_letter_id === null ? undefined : BigInt(r.dead_letter_id),
        blockedAt: r.enqueued_at
      }))
    })

  const releaseKey: QueueOutcomes["releaseKey"] = (queue, key) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const rows = yield* statements
        .messageBlockersDelete(name.physical, key)
        .pipe(Effect.mapError(fail("release a key in", queue)))
      return rows.length > 0
    })

  const deadLetterBlocking: QueueOutcomes["deadLetterBlocking"] = (queue, receipt, key, options) =>
    withTransaction(
      deps.sql,
      Effect.gen(function* () {
        const moved = yield* deps.moveToDeadLetter(queue, receipt, options)
        if (Option.isSome(moved)) yield* blockKey(queue, receipt.msgId, key, moved.value)
        return moved
      })
    ).pipe(Effect.catchTag("SqlError", (error) => Effect.fail(fail("dead-letter in", queue)(error))))

  return { archiveWith, snooze, find, notify, blockKey, blockedKeys, releaseKey, deadLetterBlocking }
}
