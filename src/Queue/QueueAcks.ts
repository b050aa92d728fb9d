/**
 * Acknowledgements of claimed messages: archive, delete, set visibility, release, record a
 * failure, and releasing the claims of dead processes or of one lost claim.
 * Part of the queue store (`QueueStore.ts` assembles it).
 *
 * @since 0.1.0
 */
import { Clock, type Duration, Effect } from "effect"
import type { SqlError } from "effect/sql/SqlError"
import { statementNow } from "../Database.ts"
import * as Input from "../Input.ts"
import { hotSpan } from "../internal/span.ts"
import { encodeFailure, type Failure, type Receipt } from "./Message.ts"
import type { QueueError } from "./QueueError.ts"
import type { ReceiptParams } from "./QueueRows.ts"
import type { QueueInfo, Target } from "./QueueStore.ts"
import { type QueueStoreContext, splitTargets } from "./QueueStoreContext.ts"

/** Builds this part of the queue store on its shared context. */
export const makeQueueAcks = (
  { statements, validateName, fail, durationMs, refuse, noteDue }: QueueStoreContext,
  list: Effect.Effect<ReadonlyArray<QueueInfo>, QueueError>
) => {
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
        (p, r) =>
          Effect.tap(statements.messageReleaseReceipts(p, r, now), (rows) =>
            // visible again at once, likely below this store's claim floor
            rows.length === 0 ? Effect.void : Effect.map(Clock.currentTimeMillis, (at) => noteDue(p, r.ids, at))
          ),
        () => Effect.succeed([])
      )(queue, receipts)
    })

  const processIdProblem = (processId: unknown) =>
    typeof processId === "string" && processId !== "" && !processId.includes("#")
      ? Input.textProblem(processId, "processId")
      : "processId must be a process id (a non-empty string without '#')"

  const giveBackUnread = (queue: string, receipts: ReadonlyArray<Receipt>, processId: string) =>
    Effect.gen(function* () {
      yield* refuse(queue, Input.listProblem(receipts, Input.receiptProblem, "receipts") ?? processIdProblem(processId))
      const now = yield* statementNow
      return yield* acknowledge(
        "give back in",
        (p, r) =>
          Effect.tap(statements.messageGiveBackUnreadReceipts(p, r, processId, now), (rows) =>
            // visible again at once, likely below this store's claim floor
            rows.length === 0 ? Effect.void : Effect.map(Clock.currentTimeMillis, (at) => noteDue(p, r.ids, at))
          ),
        () => Effect.succeed([])
      )(queue, receipts)
    })

  const markProblem = (claimedBy: unknown) =>
    typeof claimedBy === "string" && claimedBy !== ""
      ? Input.textProblem(claimedBy, "claimedBy")
      : "claimedBy must be a claim's mark (a non-empty string)"

  const unclaim = (queue: string, receipt: Receipt, claimedBy: string) =>
    Effect.gen(function* () {
      yield* refuse(queue, Input.receiptProblem(receipt) ?? markProblem(claimedBy))
      const name = yield* validateName(queue)
      const now = yield* statementNow
      const rows = yield* statements
        .messageUnclaim(name.physical, receipt.msgId, receipt.readCt, claimedBy, now)
        .pipe(Effect.mapError(fail("unclaim in", queue)))
      // visible again at once, likely below this store's claim floor
      if (rows.length > 0) noteDue(name.physical, [receipt.msgId], yield* Clock.currentTimeMillis)
      return rows.length > 0
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
      // its retry comes due below this store's claim floor: the first claim after it starts there
      if (rows.length > 0) noteDue(name.physical, [receipt.msgId], (yield* Clock.currentTimeMillis) + delayMs)
      return rows.length > 0
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

  return {
    archive,
    delete: remove,
    setVisibility,
    release,
    giveBackUnread,
    unclaim,
    recordFailure,
    releaseClaimsOf,
    releaseClaim
  }
}
