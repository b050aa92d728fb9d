/**
 * A job's outcome beyond a plain archive, on the queue tables: a message archived with the
 * headers of its outcome (a result, a discard mark) and a NOTIFY for awaiters, a snooze that
 * does not count the delivery, and where a message ended. Reached as `QueueStore.outcomes`.
 *
 * @since 0.1.0
 */
import { Effect, Option } from "effect"
import type { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { statementNow } from "../Database.ts"
import type { Receipt } from "./Message.ts"
import { InvalidMessage, type QueueError } from "./QueueError.ts"
import type * as QueueName from "./QueueName.ts"
import { makeQueueOutcomeSql } from "./QueueOutcomeSql.ts"

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
}

/** What the outcome operations need of the queue store. */
export interface QueueOutcomesDeps {
  readonly sql: SqlClient.SqlClient
  readonly schema: string
  readonly notifyChannel: string
  readonly validateName: (queue: string) => Effect.Effect<QueueName.QueueName, QueueError>
  readonly deadLetterOf: (name: QueueName.QueueName) => QueueName.QueueName
  readonly fail: (operation: string, queue: string) => (error: SqlError) => QueueError
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

  return { archiveWith, snooze, find, notify }
}
