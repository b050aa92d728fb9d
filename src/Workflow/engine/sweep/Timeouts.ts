/**
 * A waiting step's deadline: its `onTimeout` applied (notify, run, cancel, pause), by the sweep
 * at the deadline or by `expireWait` at once.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Metric } from "effect"
import { makeChildWake } from "../../verbs/child.ts"
import { WaitTimedOut } from "../../WorkflowError.ts"
import type { StepRow } from "../../WorkflowSql.ts"
import type { EngineContext } from "../Context.ts"
import { waitOverdueTotal } from "../Metrics.ts"

/** Builds the deadline's resolution. */
export const makeTimeouts = (ctx: EngineContext) => {
  const { config, statements, db, queueOf, errorJson } = ctx
  const { withParentWake } = makeChildWake(ctx)

  /** Applies a waiting step's onTimeout (the sweep at its deadline; `expireWait` at once). */
  const applyTimeout = (step: StepRow & { readonly workflow: string }, now: Date | null) =>
    Effect.gen(function* () {
      const action = step.on_timeout ?? "pause"
      const physical = queueOf(step.queue || config.workflowQueue).physical
      const details = JSON.stringify({ wait_for: step.wait_for, action, timeout_at: step.timeout_at })
      if (action === "notify" && step.wait_deadline_per_run && step.timeout_at !== null) {
        // only a worker has the code of a per-run deadline: it writes the notice as it evaluates it
        const [handed] = yield* statements
          .stepRequestRenewal({
            workflow: step.workflow,
            runId: step.run_id,
            stepId: step.id,
            missedAt: step.timeout_at,
            physicalQueue: physical,
            thresholdMs: Duration.toMillis(config.workflowStallThreshold),
            now
          })
          .pipe(db("hand over a late notice"))
        return handed !== undefined
      }
      if (action === "notify") {
        const [noticed] = yield* statements
          .stepNotifyLate({ runId: step.run_id, stepId: step.id, missedAt: step.timeout_at, now })
          .pipe(db("late notice"))
        if (noticed !== undefined) {
          yield* Metric.update(
            waitOverdueTotal.pipe(Metric.withAttributes({ workflow_class: step.workflow, step: step.name })),
            1
          )
        }
        return noticed !== undefined
      }
      if (action === "run") {
        const [woke] = yield* statements
          .stepWake({
            workflow: step.workflow,
            runId: step.run_id,
            stepId: step.id,
            timedOut: true,
            physicalQueue: physical,
            now
          })
          .pipe(db("wake timed-out step"))
        if (woke !== undefined) {
          yield* statements
            .eventInsert({
              runId: step.run_id,
              type: "wait_timed_out",
              step: step.name,
              attempt: step.attempt,
              actor: "system",
              reason: null,
              details,
              now
            })
            .pipe(db("record timeout"))
        }
        return woke !== undefined
      }
      const error =
        action === "pause"
          ? errorJson(
              new WaitTimedOut({
                step: step.name,
                waitFor: step.wait_for ?? "",
                timeoutAt: step.timeout_at?.toISOString() ?? "now"
              })
            )
          : null
      // a child's wait that cancels or pauses it wakes its parent with it
      const [resolved] = yield* withParentWake(
        step.run_id,
        action === "cancel" || action === "pause",
        statements
          .stepResolveWaiting({
            workflow: step.workflow,
            runId: step.run_id,
            stepId: step.id,
            outcome: action,
            error,
            actor: "system",
            reason: null,
            eventType: "wait_timed_out",
            eventDetails: details,
            physicalQueue: physical,
            now
          })
          .pipe(db("apply timeout"))
      )
      return resolved !== undefined
    })

  return { applyTimeout }
}
