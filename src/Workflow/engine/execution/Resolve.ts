/**
 * The written ends of a claimed step that halt the execution: a control verb called inside the
 * step (pause, cancel, finish, reattempt), and a failure the policies resolve (reattempt, cancel,
 * pause; a skip goes back to `Step.ts` as the step's `Skipped` end).
 *
 * @since 0.1.0
 */
import { Duration, Effect, Metric } from "effect"
import { resolve as resolvePolicy } from "../../Policies.ts"
import type { ControlVerb, StepOptions } from "../../Runtime.ts"
import type { NextAction } from "../../WorkflowSql.ts"
import type { EngineContext } from "../Context.ts"
import { ErrorReporter, messageOf, textOf } from "../Errors.ts"
import { pausedTotal } from "../Metrics.ts"
import type { Apply } from "./Apply.ts"
import type { ExecutionState, Target } from "./State.ts"

/** Builds the step's written ends, on one execution. */
export const makeResolve = (ctx: EngineContext, st: ExecutionState, apply: Apply) => {
  const { queueOf, errorJson } = ctx
  const { def, runId, defaultQueue } = st
  const { halt, applyOutcome, recordStep } = apply

  /** The step's next attempt, due after `delayMs` (a reattempt the step asked for, or its policy's). */
  const reattemptOf = (step: Target, delayMs: number): NextAction => ({
    _tag: "schedule",
    name: step.name,
    attempt: step.attempt + 1,
    position: step.position,
    queue: step.queue || defaultQueue,
    physicalQueue: queueOf(step.queue || defaultQueue).physical,
    delayMs,
    reattempts: step.reattempts + 1,
    reattempt: true
  })

  /** A flow-control verb called inside the step (a skip is `Skipped`): applied, the execution halts. */
  const controlled = (step: Target, verbCalled: Exclude<ControlVerb, { readonly _tag: "skip" }>, startedAt: number) =>
    Effect.gen(function* () {
      switch (verbCalled._tag) {
        case "pause":
          yield* applyOutcome(step, "completed", null, null, {
            _tag: "pause",
            reason: "step_pause",
            error: null,
            message: textOf(verbCalled.reason)
          })
          yield* recordStep(step, "paused", startedAt)
          break
        case "cancel":
          yield* applyOutcome(step, "cancelled", null, null, { _tag: "cancel", reason: textOf(verbCalled.reason) })
          yield* recordStep(step, "cancelled", startedAt)
          break
        case "finish":
          yield* applyOutcome(step, "completed", null, null, { _tag: "finish", output: null })
          yield* recordStep(step, "completed", startedAt)
          break
        case "reattempt": {
          const delayMs =
            verbCalled.wait === undefined ? 0 : Duration.toMillis(Duration.fromInputUnsafe(verbCalled.wait))
          yield* applyOutcome(
            step,
            "failed",
            null,
            errorJson(new Error("reattempt requested by the step")),
            reattemptOf(step, delayMs)
          )
          yield* recordStep(step, "reattempted", startedAt)
          break
        }
      }
      return yield* halt({ _tag: "applied" })
    })

  /**
   * A step failed: the policies decide. A skip is the step's end (`Skipped`); any other
   * resolution is written here (none is returned).
   */
  const failed = (step: Target, error: unknown, options: StepOptions<unknown>, startedAt: number) =>
    Effect.gen(function* () {
      const resolution = yield* resolvePolicy(error, options.onError ?? [], def.onError, step.reattempts)
      const reporter = yield* ErrorReporter
      if (resolution.report) {
        yield* reporter.report(error, {
          workflow: def.name,
          workflowId: runId,
          step: step.name,
          attempt: step.attempt,
          outcome: resolution.action
        })
      }
      const errorText = errorJson(error)
      const message = messageOf(error)
      switch (resolution.action) {
        case "skip":
          return { _tag: "Skipped" } as const
        case "reattempt":
          yield* applyOutcome(step, "failed", null, errorText, reattemptOf(step, resolution.waitMs))
          yield* recordStep(step, "reattempted", startedAt)
          return undefined
        case "cancel":
          yield* applyOutcome(step, "failed", null, errorText, { _tag: "cancel", reason: message })
          yield* recordStep(step, "cancelled", startedAt)
          return undefined
        case "pause":
          yield* applyOutcome(step, "failed", null, errorText, {
            _tag: "pause",
            reason: "error",
            error: errorText,
            message
          })
          yield* Metric.update(
            pausedTotal.pipe(
              Metric.withAttributes({ workflow_class: def.name, error_class: JSON.parse(errorText).tag })
            ),
            1
          )
          yield* recordStep(step, "paused", startedAt)
          return undefined
      }
    })

  return { controlled, failed }
}
