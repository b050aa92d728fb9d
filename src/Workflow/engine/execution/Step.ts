/**
 * Running the claimed step: its attempt (`Attempt.ts`: the signal gate and guards, the step's
 * effect) ends in a typed `StepEnd`, and `applyEnd` applies it in one place (a value for the
 * body, a control verb or a failure `Resolve.ts` writes, a poll's next check, a fan-out's batch,
 * a child).
 *
 * @since 0.1.0
 */
import { Clock, Effect } from "effect"
import { statementNow } from "../../../Database.ts"
import type { StepOptions } from "../../Runtime.ts"
import { makeChild } from "../../verbs/child.ts"
import { makeFanOut } from "../../verbs/fanOut.ts"
import { makePoll } from "../../verbs/poll.ts"
import { makeSignalGate } from "../../verbs/signalGate.ts"
import type { EngineContext } from "../Context.ts"
import type { Outcomes } from "../Outcomes.ts"
import type { Apply } from "./Apply.ts"
import { makeAttempt } from "./Attempt.ts"
import type { StepEnd } from "./End.ts"
import { makeResolve } from "./Resolve.ts"
import type { ExecutionState, RunnerStepOptions, Target } from "./State.ts"

/** Builds this part of one execution. */
export const makeStep = (ctx: EngineContext, outcomes: Outcomes, st: ExecutionState, apply: Apply) => {
  const { ex, runId } = st
  const { halt, applyOutcome, recordStep } = apply
  const { lateCompletion } = outcomes
  const { nextCheck } = makePoll(ctx, st)
  const { openFanOut } = makeFanOut(ctx, st)
  const { openChild } = makeChild(ctx, st)
  const { gate, renewDeadline } = makeSignalGate(ctx, st, apply)
  const { attempt } = makeAttempt(ctx, st, gate)
  const { controlled, failed } = makeResolve(ctx, st, apply)

  /** Runs the step whose turn it is (claimed): its attempt ends in a `StepEnd`, applied by `applyEnd`. */
  const runTarget = <A, E, R>(step: Target, effect: Effect.Effect<A, E, R>, options: RunnerStepOptions<A>) =>
    Effect.withFiber((fiber) => {
      st.targetReached = true
      const startedAt = fiber.getRef(Clock.Clock).currentTimeMillisUnsafe()
      return attempt(
        step,
        effect,
        options,
        (end) => applyEnd(step, end, options as StepOptions<unknown>, startedAt) as Effect.Effect<A>
      )
    })

  /**
   * Applies how the claimed step's attempt ended: the one place a step's end is written. A
   * completed (or skipped) attempt's outcome waits for the next step (`ex.pending`) and its value
   * goes back to the body; every other end is written here and halts the execution.
   */
  const applyEnd = (step: Target, first: StepEnd, options: StepOptions<unknown>, startedAt: number) => {
    // the common end, with no loop: the value goes back to the body
    if (first._tag === "Completed") {
      ex.pending = { step, status: "completed", output: first.output }
      return recordStep(step, "completed", startedAt, first.value)
    }
    return applyOtherEnd(step, first, options, startedAt)
  }

  /** `applyEnd` of every end but a plain completion (which it may still come to, after a poll). */
  const applyOtherEnd = (step: Target, first: StepEnd, options: StepOptions<unknown>, startedAt: number) =>
    Effect.gen(function* () {
      let end: StepEnd = first
      while (true) {
        switch (end._tag) {
          case "Completed":
            ex.pending = { step, status: "completed", output: end.output }
            yield* recordStep(step, "completed", startedAt)
            return end.value
          case "Skipped":
            ex.pending = { step, status: "skipped", output: null }
            yield* recordStep(step, "skipped", startedAt)
            return undefined
          case "Parked":
            yield* recordStep(step, end.outcome, startedAt)
            return yield* halt({ _tag: "applied" })
          case "Late":
            yield* lateCompletion(runId, step, yield* statementNow)
            return yield* halt({ _tag: "applied" })
          case "Cancelled":
            yield* applyOutcome(step, "cancelled", null, null, { _tag: "cancel", reason: "cancelIf" })
            yield* recordStep(step, "cancelled", startedAt)
            return yield* halt({ _tag: "applied" })
          case "PollAgain":
            // found nothing yet: checked again later, or past its deadline it ends
            end = yield* nextCheck(step, end.request)
            break
          case "FanOut":
            end = yield* openFanOut(step, end.members)
            break
          case "Child":
            end = yield* openChild(step, end.request)
            break
          case "Control":
            if (end.verb._tag === "skip") {
              end = { _tag: "Skipped" }
              break
            }
            return yield* controlled(step, end.verb, startedAt)
          case "Failed": {
            const next = yield* failed(step, end.error, options, startedAt)
            if (next === undefined) return yield* halt({ _tag: "applied" })
            end = next
            break
          }
        }
      }
    })

  return { renewDeadline, runTarget }
}

/** Running the claimed step. */
export type StepRun = ReturnType<typeof makeStep>
