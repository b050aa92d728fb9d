/**
 * The sweep: stalled steps, lost messages, wait deadlines, fan-outs whose callback was lost, lost
 * child wake-ups, retention. Each repair is its own part under `sweep/`; this is their order.
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import { statementNow } from "../../Database.ts"
import type { QueueError } from "../../Queue/QueueError.ts"
import { makeChildWake } from "../verbs/child.ts"
import type { DatabaseError } from "../WorkflowError.ts"
import type { EngineContext } from "./Context.ts"
import type { makeOutcomes } from "./Outcomes.ts"
import type { makeQueries } from "./Queries.ts"
import type { SweepReport } from "./Services.ts"
import { makeFanOuts } from "./sweep/FanOuts.ts"
import { makeRepairs } from "./sweep/Repairs.ts"
import { makeTimeouts } from "./sweep/Timeouts.ts"
import type { makeVerbs } from "./Verbs.ts"

const SWEEP_BATCH = 200

/** The sweep: stalled steps, lost messages, wait deadlines, fan-outs whose callback was lost, retention. */
export const makeSweep = (
  ctx: EngineContext,
  outcomes: ReturnType<typeof makeOutcomes>,
  queries: ReturnType<typeof makeQueries>,
  verbs: ReturnType<typeof makeVerbs>
) => {
  const { config, statements, db } = ctx
  const { getRow } = queries
  const { repairLostWakes } = makeChildWake(ctx)
  const { applyTimeout } = makeTimeouts(ctx)
  const { fanOutFinished, repairLostCallbacks } = makeFanOuts(ctx, queries, verbs)
  const { stalledSteps, lostMessages, retention, waitingOverdue } = makeRepairs(ctx, outcomes, SWEEP_BATCH)

  const sweepOnce: Effect.Effect<SweepReport, DatabaseError | QueueError> = Effect.gen(function* () {
    const now = yield* statementNow
    const thresholdMs = Duration.toMillis(config.workflowStallThreshold)
    const stalled = yield* stalledSteps(thresholdMs, now)
    const resent = yield* lostMessages(thresholdMs, now)
    let timedOut = 0
    for (const step of yield* statements
      .waitsTimedOut(now, thresholdMs, SWEEP_BATCH)
      .pipe(db("find timed-out waits"))) {
      if (yield* applyTimeout(step, now)) timedOut++
    }
    const deleted = yield* retention(now)
    const fanOutsResolved = yield* repairLostCallbacks(thresholdMs, now, SWEEP_BATCH)
    // lost child wake-ups: a parent still waiting on a child that ended (an end the runner did not make)
    const childrenWoken = yield* repairLostWakes(SWEEP_BATCH)
    const overdue = yield* waitingOverdue(now)
    return {
      stalled,
      resent,
      timedOut,
      deleted,
      waitingOverdue: overdue,
      fanOutsResolved,
      childrenWoken
    } satisfies SweepReport
  }).pipe(Effect.withSpan("pgbus.workflow.sweep", {}, { captureStackTrace: false }))

  /** Applies the waiting step's onTimeout now, whatever its deadline (test helpers, support tooling). */
  const expireWait = (runId: string) =>
    Effect.gen(function* () {
      const run = yield* getRow(runId, null)
      const [waiting] = yield* statements.stepWaitingOf(runId).pipe(db("find waiting step"))
      if (waiting === undefined) return false
      const now = yield* statementNow
      return yield* applyTimeout({ ...waiting, workflow: run.workflow }, now)
    })

  return { applyTimeout, fanOutFinished, sweepOnce, expireWait }
}
