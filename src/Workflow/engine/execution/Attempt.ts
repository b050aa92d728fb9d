/**
 * The claimed step's attempt, up to how it ended (a `StepEnd`): the signal gate and guards
 * (under the run's row lock), then the step's effect and its output's checks. Writes nothing
 * but what the gate writes (a signal claimed, the step parked); `Step.ts` applies the end.
 *
 * @since 0.1.0
 */
import { Cause, Context, Duration, Effect, Exit } from "effect"
import { stepSpan, withHotSpan } from "../../../internal/span.ts"
import { type ReceivedSignal, SignalReaders, StepContext } from "../../Runtime.ts"
import type { makeSignalGate } from "../../verbs/signalGate.ts"
import { StepTimeout } from "../../WorkflowError.ts"
import type { EngineContext } from "../Context.ts"
import { matchSignal } from "../Signals.ts"
import { requestInCause, requestOf, type StepEnd } from "./End.ts"
import { completedEnd, failedWith } from "./Output.ts"
import type { ExecutionState, RunnerStepOptions, Target } from "./State.ts"

/** The gate a step passes before its effect runs (`verbs/signalGate.ts`). */
type Gate = ReturnType<typeof makeSignalGate>["gate"]

/** What the step's effect reads: the signal it was woken with, and the readers' flags. */
interface Opened {
  readonly received: ReceivedSignal | undefined
  readonly readers: SignalReaders["Service"]
}

/** What a step with no signal and no guard reads. */
const openAtOnce: Effect.Effect<Opened> = Effect.succeed({
  received: undefined,
  readers: { woken: false, signalReady: false }
})

/** Builds the claimed step's attempt, on one execution. */
export const makeAttempt = (ctx: EngineContext, st: ExecutionState, gate: Gate) => {
  const { config } = ctx
  const { claim, def, runId, runContext } = st

  /**
   * The signal gate and guards: what the step reads, or the step's end (parked, cancelled, ...).
   * A step with no signal and no guard (the common case) opens at once, with no Effect of its own.
   */
  const open = <A>(step: Target, options: RunnerStepOptions<A>, timedOut: boolean) => {
    // woken with its signal and no guards: the claim read the held signal, which cannot
    // change while the step is in progress, so the gate needs no transaction of its own
    const heldAtClaim =
      claim.step_id === step.id && !timedOut && def.cancelIf === undefined && options.skipIf === undefined
        ? claim.held_signal
        : null
    if (heldAtClaim !== null && (options.waitFor !== undefined || options.takesHeldSignal === true)) {
      return Effect.gen(function* () {
        const decoded = yield* (
          options.waitFor === undefined
            ? Effect.succeed(heldAtClaim.payload)
            : matchSignal(def, options.waitFor, heldAtClaim.payload, { decodeOnly: true })
        ).pipe(Effect.exit)
        if (Exit.isFailure(decoded)) return failedWith(Cause.squash(decoded.cause))
        const woken = options.waitFor !== undefined
        return {
          received: { id: String(heldAtClaim.id), name: heldAtClaim.name, payload: decoded.value },
          readers: { woken, signalReady: woken }
        } satisfies Opened
      })
    }
    if (
      def.cancelIf !== undefined ||
      options.skipIf !== undefined ||
      options.waitFor !== undefined ||
      options.takesHeldSignal === true
    ) {
      return Effect.map(gate(step, options, timedOut), (guard) =>
        guard._tag !== "Opened" ? guard : ({ received: guard.received, readers: guard.readers } satisfies Opened)
      )
    }
    return openAtOnce as Effect.Effect<Opened>
  }

  /**
   * The claimed step's attempt, up to how it ended. Called as it runs (inside `runTarget`'s read
   * of the fiber), so a step that opens at once goes on with no Effect of its own; `then` applies
   * the end (called at once with an end known at once: a completed step's, most often).
   */
  const attempt = <A, E, R, B, E2, R2>(
    step: Target,
    effect: Effect.Effect<A, E, R>,
    options: RunnerStepOptions<A>,
    then: (end: StepEnd) => Effect.Effect<B, E2, R2>
  ) => {
    const timedOut = claim.step_id === step.id ? claim.step_timed_out === true : false
    return Effect.flatMapEager(open(step, options, timedOut), (opened): Effect.Effect<B, E2, unknown> => {
      if ("_tag" in opened) return then(opened)
      const stepContext: StepContext["Service"] = {
        workflowId: runId,
        workflow: def.name,
        subject: runContext.subject,
        resourceId: runContext.resourceId,
        payload: runContext.payload,
        step: step.name,
        attempt: step.attempt,
        stepIdempotencyKey: `pgbus-wf:${runId}:${step.name}`,
        attemptIdempotencyKey: `pgbus-wf:${runId}:${step.name}:${step.attempt}`,
        signal: opened.received,
        timedOut
      }
      const timeoutMs =
        options.timeout === undefined ? undefined : Duration.toMillis(Duration.fromInputUnsafe(options.timeout))
      st.inStep = true
      st.controlInStep = undefined
      // the step's two services in one context update
      const readers = opened.readers
      const ran = Effect.updateContext(effect, (context) =>
        Context.add(Context.add(context, StepContext, stepContext), SignalReaders, readers)
      )
      const timed =
        timeoutMs === undefined
          ? ran
          : ran.pipe(
              Effect.timeoutOrElse({
                duration: Duration.millis(timeoutMs),
                orElse: () => Effect.fail(new StepTimeout({ step: step.name, timeoutMs }))
              })
            )
      // no span without a tracing backend (see hotSpan); one frame for both ends (not exit, then flatMap)
      return Effect.matchCauseEffect(withHotSpan(timed, ...stepSpan(def.name, runId, step)), {
        onSuccess: (value) => Effect.flatMapEager(ended(step, options, Exit.succeed(value)), then),
        onFailure: (cause) => Effect.flatMapEager(ended(step, options, Exit.failCause(cause)), then)
      })
    })
  }

  /** How the step's effect ended, as a `StepEnd` (the value checked and encoded for storage). */
  const ended = <A, E>(step: Target, options: RunnerStepOptions<A>, exit: Exit.Exit<A, E>): Effect.Effect<StepEnd> => {
    st.inStep = false
    // a control verb the step called ends it, whatever the step's code did with its defect
    // (set by the verb while the step ran: read past the reset above)
    const control = st.controlInStep as ExecutionState["controlInStep"]
    st.controlInStep = undefined
    if (control !== undefined) {
      if (Exit.isSuccess(exit) || requestInCause(exit.cause) === undefined) {
        return Effect.as(
          Effect.logWarning(
            `pgbus: workflow ${def.name} run ${runId} step ${step.name}: Workflow.${control.verb._tag}() was caught inside the step; it ends the step all the same`
          ),
          control
        )
      }
      return Effect.succeed(control)
    }
    if (Exit.isFailure(exit)) {
      // a control verb called inside the step ends it with its request
      const requested = requestInCause(exit.cause)
      if (requested !== undefined) return Effect.succeed(requested)
      // an interruption from outside never gets here (the execution stops, and `execute`
      // releases the step): this one came from inside the body, a failure of the step
      return Effect.succeed(
        failedWith(
          Cause.hasInterruptsOnly(exit.cause)
            ? new Error(`step ${step.name} was interrupted from inside its body`)
            : Cause.squash(exit.cause)
        )
      )
    }
    const value = exit.value
    // a verb's own step body (poll, fanOut, child) asks for what follows
    const requested = requestOf(value)
    if (requested !== undefined) return Effect.succeed(requested)
    return completedEnd(step, value, options, config.maxPayloadSize)
  }

  return { attempt }
}
