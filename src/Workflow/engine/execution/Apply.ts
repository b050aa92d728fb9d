/**
 * The execution's ends, in one record every verb uses: halting it (`Halted`), pausing the run on
 * an error that is not a step's (divergence, a bad option), the step metrics; the claims made
 * from the body (`Claim.ts`) and a finished attempt's outcome (`Outcome.ts`) are composed here.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Metric } from "effect"
import { statementNow } from "../../../Database.ts"
import { makeChildWake } from "../../verbs/child.ts"
import { ReplayDivergence } from "../../WorkflowError.ts"
import type { EngineContext } from "../Context.ts"
import { messageOf } from "../Errors.ts"
import { pausedTotal, stepMetrics } from "../Metrics.ts"
import type { Outcomes } from "../Outcomes.ts"
import { makeClaim } from "./Claim.ts"
import { Halted, type Stop } from "./End.ts"
import { makeOutcome } from "./Outcome.ts"
import type { ExecutionState } from "./State.ts"
import { hashNames, type Target } from "./State.ts"

/** Builds this part of one execution. */
export const makeApply = (ctx: EngineContext, outcomes: Outcomes, st: ExecutionState) => {
  const { statements, db, errorJson } = ctx
  const { finish, lateCompletion } = outcomes
  const { ex, def, runId, namesSeen } = st
  const { withParentWake } = makeChildWake(ctx)
  /** A child run: its end (or pause) wakes its parent in the same transaction. */
  const isChild = st.claim.parent_run_id !== null && st.claim.parent_run_id !== undefined
  /** A transition that may end (or pause) the run: a child's wakes its parent with it. */
  const ending = <A, E, R>(write: Effect.Effect<A, E, R>) => withParentWake(runId, isChild, write)

  /**
   * The execution ended: its end is recorded and the body unwound by a defect carrying it (not
   * an interruption, which is left for real cancellation); `Execute.ts` reads the end.
   */
  const halt = (s: Stop): Effect.Effect<never> => {
    st.stop = s
    return Effect.die(new Halted(s))
  }

  /** Pauses the run on an error that is not a step's (divergence, a bad option, a glue error). */
  const pauseWith = (error: unknown, reason: string) =>
    Effect.gen(function* () {
      const now = yield* statementNow
      const errorText = errorJson(error)
      const message = messageOf(error)
      if (ex.pending !== undefined) {
        const r = yield* ending(
          finish({
            workflow: def.name,
            runId,
            stepId: ex.pending.step.id,
            status: ex.pending.status,
            output: ex.pending.output,
            error: null,
            definitionHash: hashNames(namesSeen),
            next: { _tag: "pause", reason, error: errorText, message },
            now
          })
        )
        if (r[0]?.applied === 0n) yield* lateCompletion(runId, ex.pending.step, now)
        ex.pending = undefined
      } else if (st.target !== undefined) {
        const r = yield* ending(
          finish({
            workflow: def.name,
            runId,
            stepId: st.target.id,
            status: "failed",
            output: null,
            error: errorText,
            definitionHash: hashNames(namesSeen),
            next: { _tag: "pause", reason, error: errorText, message },
            now
          })
        )
        if (r[0]?.applied === 0n) yield* lateCompletion(runId, st.target, now)
      } else {
        yield* ending(
          statements
            .runEndFromPerforming({
              runId,
              to: "paused",
              output: null,
              error: errorText,
              pausedReason: reason,
              reason: message,
              definitionHash: hashNames(namesSeen),
              now
            })
            .pipe(db("pause run"))
        )
      }
      yield* Metric.update(
        pausedTotal.pipe(Metric.withAttributes({ workflow_class: def.name, error_class: reason })),
        1
      )
    })

  const divergence = (expected: string, found: string, position: number) =>
    Effect.gen(function* () {
      yield* pauseWith(new ReplayDivergence({ run: runId, position, expected, found }), "version_mismatch")
      return yield* halt({ _tag: "applied" })
    })

  const { holding, claimForRestart, restartFromClaim, claimWithFirst } = makeClaim(ctx, outcomes, st, halt)
  const { ownOutcome, applyOutcome } = makeOutcome(ctx, outcomes, st, isChild, withParentWake)

  /**
   * Records a step's end in the step metrics (count and duration by outcome): one read of the
   * fiber, as the worker records a job (two `Metric.update`s were a tenth of a step's Effect work).
   * Succeeds with `value` (a completed step's, for the body).
   */
  const recordStep = <A = void>(step: Target, outcome: string, startedAt: number, value?: A) =>
    Effect.withFiberSucceed((fiber) => {
      const end = fiber.getRef(Clock.Clock).currentTimeMillisUnsafe()
      const metrics = stepMetrics(def.name, step.name, outcome)
      metrics.total.updateUnsafe(1, fiber.context)
      metrics.duration.updateUnsafe((end - startedAt) / 1000, fiber.context)
      return value as A
    })

  return {
    halt,
    holding,
    claimForRestart,
    restartFromClaim,
    claimWithFirst,
    pauseWith,
    divergence,
    ownOutcome,
    applyOutcome,
    recordStep,
    ending
  }
}

/** The execution's ends. */
export type Apply = ReturnType<typeof makeApply>
