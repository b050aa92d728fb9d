/**
 * One batch sweep: repairs what crashes leave (members' ends not recorded, blocks never
 * closed, callbacks not sent) and deletes finished batches past the retention.
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import { type DatabaseError, statementNow } from "../Database.ts"
import { BATCH_EXECUTION_HEADER } from "../Job/BatchMembership.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import type { MessagePlace } from "../Queue/QueueStore.ts"
import type { BatchSweepReport } from "./Batch.ts"
import type { BatchCallbacks } from "./BatchCallbacks.ts"
import { type BatchContext, SWEEP_PAGE } from "./BatchContext.ts"
import { type BatchOutcomes, byBatch } from "./BatchOutcomes.ts"
import type { ExecutionOutcome } from "./BatchSql.ts"

/** The end a member's message place shows, if any (a missing message only once stale). */
const placeOutcome = (place: MessagePlace, stale: boolean): ExecutionOutcome | undefined => {
  switch (place) {
    case "archived":
      return "completed"
    case "dead":
      return "failed"
    case "missing":
      // a row commits with its message, so this one was deleted (by hand, a purge); as the
      // seed does for an unsent row, it is only given up after the stall threshold
      return stale ? "uncounted" : undefined
    case "queued":
      return undefined
  }
}

/** Builds the batch sweep's `runOnce` over the batch context. */
export const makeBatchSweepOnce = (
  { config, store, statements, db }: BatchContext,
  { sendCallbacks }: BatchCallbacks,
  { recordBatch }: BatchOutcomes
): Effect.Effect<BatchSweepReport, DatabaseError | QueueError> =>
  Effect.gen(function* () {
    const stallMs = Duration.toMillis(config.batchStallThreshold)
    let recovered = 0
    let uncounted = 0
    let finished = 0
    let callbacksSent = 0

    // 1. members whose message ended (or never was) without their end being recorded
    let after = 0n
    while (true) {
      const now = yield* statementNow
      const rows = yield* statements
        .batchExecutionsPending(after, SWEEP_PAGE, stallMs, now)
        .pipe(db("read batch members"))
      if (rows.length === 0) break
      after = rows[rows.length - 1]!.id
      const ends: Array<{ batchId: string; execution: bigint; outcome: ExecutionOutcome }> = []
      const byQueue = new Map<string, Array<(typeof rows)[number]>>()
      for (const row of rows) {
        const list = byQueue.get(row.queue)
        if (list) list.push(row)
        else byQueue.set(row.queue, [row])
      }
      for (const [queue, members] of byQueue) {
        const places = yield* store
          .locate(
            queue,
            members.map((m) => ({ msgId: m.msg_id, marker: String(m.id) })),
            BATCH_EXECUTION_HEADER
          )
          .pipe(
            Effect.catchTag("QueueNotFound", () => Effect.succeed(members.map((): MessagePlace => "missing"))),
            Effect.catchTag("InvalidQueueName", () => Effect.succeed(members.map((): MessagePlace => "missing")))
          )
        members.forEach((m, i) => {
          const outcome = placeOutcome(places[i]!, m.stale)
          if (outcome !== undefined) ends.push({ batchId: m.batch_id, execution: m.id, outcome })
        })
      }
      for (const [batchId, list] of byBatch(ends)) {
        if (yield* recordBatch(batchId, list)) finished++
        for (const e of list) if (e.outcome === "uncounted") uncounted++
        recovered += list.filter((e) => e.outcome !== "uncounted").length
      }
      if (rows.length < SWEEP_PAGE) break
    }

    // 2. batches with no new member for the stall threshold: blocks that never closed
    const now = yield* statementNow
    const stalled = yield* statements.batchesRepairStalled(stallMs, SWEEP_PAGE, now).pipe(db("repair stalled batches"))
    for (const b of stalled) {
      if (b.status !== "finished") continue
      finished++
      yield* sendCallbacks(b.id)
    }

    // 3. finished batches whose callbacks were never sent (the finisher died in between)
    for (const { id } of yield* statements.batchesCallbacksDue(SWEEP_PAGE).pipe(db("find due callbacks"))) {
      if (yield* sendCallbacks(id)) callbacksSent++
    }

    // 4. retention
    let deleted = 0
    if (config.batchRetention !== undefined) {
      const retentionMs = Duration.toMillis(config.batchRetention)
      while (true) {
        const [row] = yield* statements
          .batchesDeleteFinished(retentionMs, SWEEP_PAGE, yield* statementNow)
          .pipe(db("delete old batches"))
        const n = Number(row?.n ?? 0n)
        deleted += n
        if (n < SWEEP_PAGE) break
      }
    }
    return {
      recovered,
      uncounted,
      unstuck: stalled.length,
      finished,
      callbacksSent,
      deleted
    } satisfies BatchSweepReport
  }).pipe(Effect.withSpan("pgbus.batch.sweep", {}, { captureStackTrace: false }))
