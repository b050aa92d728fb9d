/**
 * Running the claimed step: its attempt (the signal gate and guards, the step's effect) ends in a
 * typed `StepEnd`, and `applyEnd` applies it in one place (a value for the body, a control verb,
 * a poll's next check, a fan-out's batch, a child, a failure the policies resolve).
 *
 * @since 0.1.0
 */
import { Cause, Clock, Duration, Effect, Exit, Metric, Schema } from "effect"
import { statementNow } from "../../../Database.ts"
import { jsonMismatch } from "../../../internal/jsonSafe.ts"
import { stepSpan } from "../../../internal/span.ts"
import { isStorableJson } from "../../../internal/storable.ts"
import { resolve as resolvePolicy } from "../../Policies.ts"
import { type ControlVerb, type ReceivedSignal, SignalReaders, StepContext, type StepOptions } from "../../Runtime.ts"
import { makeChild } from "../../verbs/child.ts"
import { makeFanOut } from "../../verbs/fanOut.ts"
import { makePoll } from "../../verbs/poll.ts"
import { makeSignalGate } from "../../verbs/signalGate.ts"
import { OutputNotJson, OutputNotStorable, OutputTooLarge, StepTimeout } from "../../WorkflowError.ts"
import type { NextAction } from "../../WorkflowSql.ts"
import type { EngineContext } from "../Context.ts"
import { ErrorReporter, messageOf, textOf } from "../Errors.ts"
import { pausedTotal } from "../Metrics.ts"
import type { Outcomes } from "../Outcomes.ts"
import { matchSignal } from "../Signals.ts"
import type { Apply } from "./Apply.ts"
import { requestInCause, requestOf, type StepEnd } from "./End.ts"
import type { ExecutionState, RunnerStepOptions, Target } from "./State.ts"

/** Builds this part of one execution. */
export const makeStep = (ctx: EngineContext, outcomes: Outcomes, st: ExecutionState, apply: Apply) => {
  const { config, queueOf, errorJson } = ctx
  const { claim, ex, def, runId, runContext, defaultQueue } = st
  const { halt, applyOutcome, recordStep } = apply
  const { lateCompletion } = outcomes
  const { nextCheck } = makePoll(ctx, st)
  const { openFanOut } = makeFanOut(ctx, st)
  const { openChild } = makeChild(ctx, st)
  const { gate, renewDeadline } = makeSignalGate(ctx, st, apply)

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

  /** How a failed attempt ends, before the policies resolve it. */
  const failedWith = (error: unknown): StepEnd => ({ _tag: "Failed", error })

  /** Runs the step whose turn it is (claimed): its attempt ends in a `StepEnd`, applied by `applyEnd`. */
  const runTarget = <A, E, R>(step: Target, effect: Effect.Effect<A, E, R>, options: RunnerStepOptions<A>) =>
    Effect.gen(function* () {
      st.targetReached = true
      const startedAt = yield* Clock.currentTimeMillis
      const end = yield* attempt(step, effect, options)
      return (yield* applyEnd(step, end, options as StepOptions<unknown>, startedAt)) as A
    })

  /**
   * The claimed step's attempt, up to how it ended: the signal gate and guards (under the run's
   * row lock), then the step's effect and its output's checks. Writes nothing but what the gate
   * writes (a signal claimed, the step parked).
   */
  const attempt = <A, E, R>(step: Target, effect: Effect.Effect<A, E, R>, options: RunnerStepOptions<A>) =>
    Effect.gen(function* () {
      let received: ReceivedSignal | undefined
      let readers: SignalReaders["Service"] = { woken: false, signalReady: false }
      const timedOut = claim.step_id === step.id ? claim.step_timed_out === true : false
      // woken with its signal and no guards: the claim read the held signal, which cannot
      // change while the step is in progress, so the gate needs no transaction of its own
      const heldAtClaim =
        claim.step_id === step.id && !timedOut && def.cancelIf === undefined && options.skipIf === undefined
          ? claim.held_signal
          : null
      if (heldAtClaim !== null && (options.waitFor !== undefined || options.takesHeldSignal === true)) {
        const decoded = yield* (
          options.waitFor === undefined
            ? Effect.succeed(heldAtClaim.payload)
            : matchSignal(def, options.waitFor, heldAtClaim.payload, { decodeOnly: true })
        ).pipe(Effect.exit)
        if (Exit.isFailure(decoded)) return failedWith(Cause.squash(decoded.cause))
        received = { id: String(heldAtClaim.id), name: heldAtClaim.name, payload: decoded.value }
        readers = { woken: options.waitFor !== undefined, signalReady: options.waitFor !== undefined }
      } else if (
        def.cancelIf !== undefined ||
        options.skipIf !== undefined ||
        options.waitFor !== undefined ||
        options.takesHeldSignal === true
      ) {
        const guard = yield* gate(step, options, timedOut)
        if (guard._tag !== "Opened") return guard
        received = guard.received
        readers = guard.readers
      }
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
        signal: received,
        timedOut
      }
      const timeoutMs =
        options.timeout === undefined ? undefined : Duration.toMillis(Duration.fromInputUnsafe(options.timeout))
      st.inStep = true
      const ran = effect.pipe(
        Effect.provideService(StepContext, stepContext),
        Effect.provideService(SignalReaders, readers)
      )
      const exit = yield* (
        timeoutMs === undefined
          ? ran
          : ran.pipe(
              Effect.timeoutOrElse({
                duration: Duration.millis(timeoutMs),
                orElse: () => Effect.fail(new StepTimeout({ step: step.name, timeoutMs }))
              })
            )
      ).pipe(Effect.withSpan(...stepSpan(def.name, runId, step), { captureStackTrace: false }), Effect.exit)
      st.inStep = false
      if (Exit.isFailure(exit)) {
        // a control verb called inside the step ends it with its request
        const requested = requestInCause(exit.cause)
        if (requested !== undefined) return requested
        // an interruption from outside never gets here (the execution stops, and `execute`
        // releases the step): this one came from inside the body, a failure of the step
        return failedWith(
          Cause.hasInterruptsOnly(exit.cause)
            ? new Error(`step ${step.name} was interrupted from inside its body`)
            : Cause.squash(exit.cause)
        )
      }
      const value = exit.value
      // a verb's own step body (poll, fanOut, child) asks for what follows
      const requested = requestOf(value)
      if (requested !== undefined) return requested
      return yield* completed(step, value, options)
    })

  /** A step's value, encoded and checked: what is stored must come back the same from JSON. */
  const completed = <A>(step: Target, value: A, options: RunnerStepOptions<A>) =>
    Effect.gen(function* () {
      const encodedOutput = yield* (
        options.output === undefined
          ? Effect.succeed(value as unknown)
          : Schema.encodeEffect(options.output)(value).pipe(Effect.mapError((e) => e as unknown))
      ).pipe(Effect.result)
      if (encodedOutput._tag === "Failure") return failedWith(encodedOutput.failure)
      // what is stored must come back the same from JSON, or replay sees another value (or
      // fails to decode it): the output itself, or what its Schema encodes it to
      const mismatch =
        encodedOutput.success === undefined
          ? undefined
          : jsonMismatch(encodedOutput.success, options.output === undefined ? "output" : "encoded output")
      if (mismatch !== undefined) return failedWith(new OutputNotJson({ step: step.name, detail: mismatch }))
      let outputText: string | undefined
      try {
        outputText = encodedOutput.success === undefined ? undefined : JSON.stringify(encodedOutput.success)
      } catch (e) {
        return failedWith(e)
      }
      if (outputText !== undefined) {
        if (!isStorableJson(outputText)) return failedWith(new OutputNotStorable({ step: step.name }))
        const size = Buffer.byteLength(outputText, "utf8")
        if (size > config.maxPayloadSize) {
          return failedWith(new OutputTooLarge({ step: step.name, size, limit: config.maxPayloadSize }))
        }
      }
      return { _tag: "Completed", value, output: outputText ?? null } as const
    })

  /**
   * Applies how the claimed step's attempt ended: the one place a step's end is written. A
   * completed (or skipped) attempt's outcome waits for the next step (`ex.pending`) and its value
   * goes back to the body; every other end is written here and halts the execution.
   */
  const applyEnd = (step: Target, first: StepEnd, options: StepOptions<unknown>, startedAt: number) =>
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

  return { renewDeadline, runTarget }
}

/** Running the claimed step. */
export type StepRun = ReturnType<typeof makeStep>
