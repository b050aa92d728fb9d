/**
 * What the runner repairs around an execution: a message whose claim found nothing (its own
 * lost claim, a dead worker's step: the stall action), what a drain's interruption leaves
 * behind, and a run whose message failed on its last delivery (paused as undeliverable).
 *
 * @since 0.1.0
 */
import { Cause, Effect, Metric } from "effect"
import { statementNow } from "../../Database.ts"
import { makeChildWake } from "../verbs/child.ts"
import { type DatabaseError, StepStalled } from "../WorkflowError.ts"
import type { EngineContext } from "./Context.ts"
import { messageOf } from "./Errors.ts"
import type { Execution } from "./execution/State.ts"
import { type Claimed, type Delivery, isDeliveryMark, messageMarkOf, type StepMessage } from "./Messages.ts"
import { stallsTotal } from "./Metrics.ts"
import type { makeOutcomes } from "./Outcomes.ts"
import type { RegisteredWorkflow } from "./Services.ts"

/** The runner's repairs around an execution, given how a claimed run is executed. */
export const makeRecovery = (
  ctx: EngineContext,
  outcomes: ReturnType<typeof makeOutcomes>,
  runClaimed: (registered: RegisteredWorkflow, claim: Claimed, ex: Execution) => Effect.Effect<unknown, DatabaseError>
) => {
  const { config, statements, db, queueOf, errorJson } = ctx
  const { finish, releaseStep, stallNext } = outcomes
  const { withParentWake } = makeChildWake(ctx)

  /**
   * A message whose claim found nothing to claim: this execution's own claim whose reply was lost
   * (the step is in progress under this delivery's mark: it runs), the redelivery of a message
   * whose earlier delivery's worker died holding a step (under that delivery's mark, or the step
   * the message names when a hand-over claimed it: the stall action applies), or a duplicate.
   */
  const unclaimed = (registered: RegisteredWorkflow, message: StepMessage, delivery: Delivery, ex: Execution) =>
    Effect.gen(function* () {
      const now = yield* statementNow
      const [step] = yield* statements.stepInProgress(message.run).pipe(db("find step"))
      const mark = step?.claimed_by ?? null
      if (step !== undefined && mark !== null && mark === ex.mark) {
        const [claim] = yield* statements.runLoadClaimed(message.run, mark).pipe(db("find own claim"))
        if (claim !== undefined) yield* runClaimed(registered, claim, ex)
        return
      }
      // a first delivery finds nothing of its own to repair, unless its own claim was lost
      if (delivery.attempt <= 1 && !ex.claimLost) return
      const earlier = messageMarkOf(delivery)
      const heldByThisMessage =
        step !== undefined &&
        delivery.attempt > 1 &&
        (mark === null
          ? // claimed before claim marks: the step the message names, or any step for a start or continue
            message.step === null || String(step.id) === message.step
          : isDeliveryMark(mark)
            ? earlier !== null && mark.startsWith(earlier)
            : // claimed by a local hand-over of the very message that names it
              String(step.id) === message.step)
      if (step === undefined || !heldByThisMessage) {
        // a start or continue whose claim died with its worker (or lost its reply) before any step:
        // claimed again
        if (
          message.step === null &&
          step === undefined &&
          (yield* statements.runReleaseContinue(message.run, now).pipe(db("release run"))).length > 0
        ) {
          const [claim] = yield* statements.runClaimContinue(message.run, now).pipe(db("claim run"))
          if (claim !== undefined) yield* runClaimed(registered, claim, ex)
        }
        return
      }
      // a delivery of this message claimed the step, and the message came back while the step is in
      // progress: that delivery's worker died (or lost its heartbeat); the stall action applies
      yield* statements
        .eventInsert({
          runId: message.run,
          type: "stall_detected",
          step: step.name,
          attempt: step.attempt,
          actor: "system",
          reason: "the message whose execution claimed the step was delivered again",
          details: JSON.stringify({ detection: "redelivery", action: config.workflowStallAction }),
          now
        })
        .pipe(db("record stall"))
      const stalled = new StepStalled({ step: step.name, detection: "redelivery" })
      const next = stallNext(step, stalled)
      // a child's stall that cancels or pauses it wakes its parent with it
      const [r] = yield* withParentWake(
        message.run,
        next._tag === "cancel" || next._tag === "pause",
        finish({
          workflow: registered.workflow.name,
          runId: message.run,
          stepId: step.id,
          status: "failed",
          output: null,
          error: errorJson(stalled),
          definitionHash: null,
          next,
          now
        })
      )
      if (r?.applied === 1n) {
        yield* Metric.update(
          stallsTotal.pipe(
            Metric.withAttributes({
              workflow_class: registered.workflow.name,
              step: step.name,
              detection: "redelivery"
            })
          ),
          1
        )
      }
    })

  /**
   * What a drain that interrupts an execution leaves behind: a completed attempt whose outcome
   * waited for the next step is written (the run continues from a continue message); an attempt
   * it claimed and has not ended is released, as a new attempt due at once.
   */
  const releaseInterrupted = (workflow: string, runId: string, ex: Execution) =>
    Effect.suspend(() => {
      const done = ex.pending
      if (done !== undefined) {
        return Effect.flatMap(statementNow, (now) =>
          finish({
            workflow,
            runId,
            stepId: done.step.id,
            status: done.status,
            output: done.output,
            error: null,
            definitionHash: null,
            next: { _tag: "continue", physicalQueue: queueOf(ex.queue ?? config.workflowQueue).physical },
            now
          })
        )
      }
      const held = ex.held
      return held === undefined
        ? Effect.void
        : releaseStep({
            workflow,
            stepId: held,
            reason: "its execution was interrupted: the worker stopped (a drain past its timeout) before it finished"
          })
    }).pipe(
      Effect.catchCause((cause) =>
        Effect.logWarning("pgbus: releasing the step of an interrupted execution failed", Cause.pretty(cause))
      ),
      Effect.asVoid
    )

  /**
   * The message failed on its last delivery: rather than leave the run stranded with its message
   * dead-lettered, the run pauses as `undeliverable` with the error (an attempt this execution
   * holds fails with it). False when the run is in no state to pause that way.
   */
  const pauseUndeliverable = (message: StepMessage, ex: Execution, error: unknown) =>
    withParentWake(message.run, true, pauseUndeliverableRun(message, ex, error))
  const pauseUndeliverableRun = (message: StepMessage, ex: Execution, error: unknown) =>
    Effect.gen(function* () {
      const errorText = errorJson(error)
      const reason = `its message failed on its last delivery: ${messageOf(error)}`
      const now = yield* statementNow
      if (ex.held !== undefined) {
        const [r] = yield* finish({
          workflow: message.workflow,
          runId: message.run,
          stepId: ex.held,
          status: "failed",
          output: null,
          error: errorText,
          definitionHash: null,
          next: { _tag: "pause", reason: "undeliverable", error: errorText, message: reason },
          now
        })
        if (r?.applied === 1n) return true
      }
      const paused = yield* statements
        .runPauseUndeliverable({
          runId: message.run,
          error: errorText,
          reason,
          now
        })
        .pipe(db("pause undeliverable run"))
      return paused.length > 0
    })

  return { unclaimed, releaseInterrupted, pauseUndeliverable }
}
