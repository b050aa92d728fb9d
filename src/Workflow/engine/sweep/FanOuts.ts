/**
 * A fan-out's batch that finished: its outcome to the waiting step as a signal (the batch's
 * callback), and the sweep's make-up for a callback that was lost.
 *
 * @since 0.1.0
 */
import { Clock, Effect } from "effect"
import { type Finished as BatchFinished, BatchNotFound } from "../../../Batch/Batch.ts"
import { FAN_OUT_WAIT } from "../../WorkflowSql.ts"
import type { EngineContext } from "../Context.ts"
import type { makeQueries } from "../Queries.ts"
import { fanOutOutcomeOf } from "../Services.ts"
import type { makeVerbs } from "../Verbs.ts"

/** Builds the fan-outs' ends. */
export const makeFanOuts = (
  ctx: EngineContext,
  queries: ReturnType<typeof makeQueries>,
  verbs: ReturnType<typeof makeVerbs>
) => {
  const { batches, statements, db } = ctx
  const { isUuid } = queries
  const { sendSignal } = verbs

  /**
   * A fan-out's batch finished: its outcome goes to the step waiting on it as a signal (one per
   * batch: the callback and the sweep's make-up share the key). A callback for another attempt's
   * batch, or a run that is over, changes nothing.
   */
  const fanOutFinished = (
    outcome:
      | BatchFinished
      | { readonly batchId: string; readonly gone: true; readonly properties: BatchFinished["properties"] }
  ) =>
    Effect.gen(function* () {
      const runId = String(outcome.properties.workflow_id ?? "")
      const stepId = String(outcome.properties.step_id ?? "")
      if (!isUuid(runId)) return false
      const [waiting] = yield* statements.stepWaitingOf(runId).pipe(db("find waiting step"))
      if (waiting === undefined || waiting.wait_for !== FAN_OUT_WAIT || String(waiting.id) !== stepId) {
        yield* Effect.logDebug(`pgbus: fan-out callback for batch ${outcome.batchId} found no step waiting on it`)
        return false
      }
      const sent = yield* sendSignal(runId, FAN_OUT_WAIT, outcome, {
        idempotencyKey: `fan-out:${outcome.batchId}`,
        actor: "system",
        reason: "gone" in outcome ? "the batch row is gone" : "the batch finished"
      }).pipe(
        Effect.map((receipt) => !receipt.duplicate),
        Effect.catchTag(["NotOngoing", "RunNotFound", "InvalidSignal"], () => Effect.succeed(false))
      )
      return sent
    })

  /** Lost fan-out callbacks: the batch finished long ago (or is gone) and the step still waits. */
  const repairLostCallbacks = (thresholdMs: number, now: Date | null, limit: number) =>
    Effect.gen(function* () {
      let resolved = 0
      for (const step of yield* statements.fanOutsWaiting(thresholdMs, now, limit).pipe(db("find fan-outs"))) {
        const batchId = step.batch_id!
        const properties = { workflow_id: step.run_id, step_id: String(step.id) }
        const found = yield* batches.find(batchId).pipe(Effect.result)
        const nowMs = now?.getTime() ?? (yield* Clock.currentTimeMillis)
        if (found._tag === "Failure") {
          // a database error is for the next sweep; a batch row that is gone pauses the run
          if (found.failure instanceof BatchNotFound && (yield* fanOutFinished({ batchId, gone: true, properties }))) {
            resolved++
          }
          continue
        }
        const batch = found.success
        if (!batch.finished || batch.finishedAt === undefined || nowMs - batch.finishedAt.getTime() < thresholdMs)
          continue
        if (yield* fanOutFinished(fanOutOutcomeOf(batch))) resolved++
      }
      return resolved
    })

  return { fanOutFinished, repairLostCallbacks }
}
