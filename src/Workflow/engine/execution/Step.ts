/**
 * Running the claimed step: the signal gate and guards, the body, and what its end leads to
 * (a control verb, a poll's next check, a fan-out, a failure the policies resolve).
 *
 * @since 0.1.0
 */
import { Cause, Clock, Duration, Effect, Exit, Metric, Schema } from "effect"
import { statementNow, withTransaction } from "../../../Database.ts"
import { jsonMismatch } from "../../../internal/jsonSafe.ts"
import { stepSpan } from "../../../internal/span.ts"
import { isStorableJson } from "../../../internal/storable.ts"
import { resolve as resolvePolicy } from "../../Policies.ts"
import { type ControlVerb, type ReceivedSignal, SignalReaders, StepContext, type StepOptions } from "../../Runtime.ts"
import { makeChild } from "../../verbs/child.ts"
import { makeFanOut } from "../../verbs/fanOut.ts"
import { makePoll } from "../../verbs/poll.ts"
import { OutputNotJson, OutputNotStorable, OutputTooLarge, StepTimeout } from "../../WorkflowError.ts"
import type { SignalRow } from "../../WorkflowSql.ts"
import type { EngineContext } from "../Context.ts"
import type { Outcomes } from "../Outcomes.ts"
import {
  declaredMatcher,
  ErrorReporter,
  matchSignal,
  messageOf,
  NO_MATCH,
  pausedTotal,
  type RunnerStepOptions,
  type Target,
  textOf,
  waitDeadline,
  waitOverdueTotal
} from "../Shared.ts"
import type { Apply } from "./Apply.ts"
import type { ExecutionState } from "./State.ts"

/** Builds this part of one execution. */
export const makeStep = (ctx: EngineContext, outcomes: Outcomes, st: ExecutionState, apply: Apply) => {
  const { config, sql, statements, queueOf, errorJson } = ctx
  const { claim, ex, def, runId, signalFree, runContext, defaultQueue } = st
  const { halt, applyOutcome, recordStep } = apply
  const { nextCheck } = makePoll(ctx, st, apply)
  const { openFanOut } = makeFanOut(ctx, outcomes, st, apply, (step, error, options, startedAt) =>
    failed(step, error, options, startedAt)
  )
  const { openChild } = makeChild(ctx, outcomes, st, apply, (step, error, options, startedAt) =>
    failed(step, error, options, startedAt)
  )

  /** Runs the step whose turn it is (claimed), returning its output to the body. */
  /**
   * A notify notice of the waiting st.target's per-run deadline: under the run's row lock, the
   * deadline is evaluated again and the notice written with the next deadline (or the run paused
   * with the evaluation's error), as the sweep does for a static one.
   */
  const renewDeadline = (step: Target, options: StepOptions<unknown>, missedAt: Date) =>
    Effect.gen(function* () {
      st.targetReached = true
      const noticed = yield* withTransaction(
        sql,
        Effect.gen(function* () {
          yield* statements.runLock(runId, null)
          const answer = yield* Effect.exit(waitDeadline(options, runContext))
          const renewal = Exit.isSuccess(answer)
            ? { at: answer.value.at, periodMs: answer.value.periodMs, pauseError: null }
            : { at: null, periodMs: null, pauseError: errorJson(Cause.squash(answer.cause)) }
          const now = yield* statementNow
          const [row] = yield* statements.stepNotifyLate({ runId, stepId: step.id, missedAt, renewal, now })
          if (row !== undefined && Exit.isFailure(answer)) {
            yield* Effect.logError(
              `pgbus: workflow ${def.name} step ${step.name}: waitTimeout failed at a late notice (run paused)`,
              Cause.squash(answer.cause)
            )
          }
          return row !== undefined
        })
      )
      if (noticed) {
        yield* Metric.update(
          waitOverdueTotal.pipe(Metric.withAttributes({ workflow_class: def.name, step: step.name })),
          1
        )
      }
      return yield* halt({ _tag: "applied" })
    })

  const runTarget = <A, E, R>(step: Target, effect: Effect.Effect<A, E, R>, options: RunnerStepOptions<A>) =>
    Effect.gen(function* () {
      st.targetReached = true
      const startedAt = yield* Clock.currentTimeMillis
      // guards and the signal gate, under the run's row lock
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
        if (Exit.isFailure(decoded)) return yield* failed(step, Cause.squash(decoded.cause), options, startedAt)
        received = { id: String(heldAtClaim.id), name: heldAtClaim.name, payload: decoded.value }
        readers = { woken: options.waitFor !== undefined, signalReady: options.waitFor !== undefined }
      } else if (
        def.cancelIf !== undefined ||
        options.skipIf !== undefined ||
        options.waitFor !== undefined ||
        options.takesHeldSignal === true
      ) {
        // the gate may claim a signal for the attempt
        signalFree.delete(step.id)
        const waitName =
          options.waitFor === undefined
            ? undefined
            : typeof options.waitFor === "string"
              ? options.waitFor
              : options.waitFor.name
        const guard = yield* withTransaction(
          sql,
          Effect.gen(function* () {
            yield* statements.runLock(runId, null)
            let held: SignalRow | undefined
            let candidate: { readonly row: SignalRow; readonly payload: unknown } | undefined
            if (waitName === undefined && options.takesHeldSignal === true) {
              held = (yield* statements.signalHeldBy(step.id))[0]
            }
            if (waitName !== undefined) {
              held = (yield* statements.signalHeldBy(step.id))[0]
              if (held === undefined && !timedOut) {
                for (const row of yield* statements.signalsPending(runId, waitName)) {
                  const decoded = yield* matchSignal(def, options.waitFor!, row.payload)
                  if (decoded !== NO_MATCH) {
                    candidate = { row, payload: decoded }
                    break
                  }
                }
              }
            }
            readers = { woken: held !== undefined, signalReady: held !== undefined || candidate !== undefined }
            const withReaders = <X, Y, Z>(e: Effect.Effect<X, Y, Z>) => Effect.provideService(e, SignalReaders, readers)
            if (def.cancelIf !== undefined && (yield* withReaders(def.cancelIf(runContext as never)))) {
              return { _tag: "cancel" } as const
            }
            if (options.skipIf !== undefined && (yield* withReaders(options.skipIf(runContext)))) {
              return { _tag: "skip" } as const
            }
            if (waitName === undefined && held !== undefined) {
              return {
                _tag: "signal",
                signal: { id: String(held.id), name: held.name, payload: held.payload }
              } as const
            }
            if (waitName === undefined || timedOut) return { _tag: "run" } as const
            const now = yield* statementNow
            if (held !== undefined) {
              const payload = yield* matchSignal(def, options.waitFor!, held.payload, { decodeOnly: true })
              return {
                _tag: "signal",
                signal: {
                  id: String(held.id),
                  name: held.name,
                  payload: payload === NO_MATCH ? held.payload : payload
                }
              } as const
            }
            if (candidate !== undefined) {
              yield* statements.signalClaim({ runId, signalId: candidate.row.id, stepId: step.id, now })
              return {
                _tag: "signal",
                signal: { id: String(candidate.row.id), name: candidate.row.name, payload: candidate.payload }
              } as const
            }
            // no signal: the step parks (nothing is sent until a signal or the deadline wakes it)
            const deadline = yield* waitDeadline(options, runContext)
            yield* statements.stepPark({
              runId,
              stepId: step.id,
              waitFor: waitName,
              matcher: typeof options.waitFor !== "string" || declaredMatcher(def, waitName),
              timeoutMs: deadline.ms,
              timeoutAt: deadline.at,
              onTimeout: options.onTimeout ?? (deadline.at === null && deadline.ms === null ? null : "pause"),
              periodMs: deadline.periodMs,
              perRun: typeof options.waitTimeout === "function",
              now
            })
            return { _tag: "parked" } as const
          })
        ).pipe(Effect.exit)
        if (Exit.isFailure(guard)) {
          return yield* failed(step, Cause.squash(guard.cause), options, startedAt)
        }
        switch (guard.value._tag) {
          case "cancel":
            yield* applyOutcome(step, "cancelled", null, null, { _tag: "cancel", reason: "cancelIf" })
            yield* recordStep(step, "cancelled", startedAt)
            return yield* halt({ _tag: "applied" })
          case "skip":
            ex.pending = { step, status: "skipped", output: null }
            yield* recordStep(step, "skipped", startedAt)
            return undefined
          case "parked":
            yield* recordStep(step, "waiting", startedAt)
            return yield* halt({ _tag: "applied" })
          case "signal":
            received = guard.value.signal
            break
          case "run":
            break
        }
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
      st.control = undefined
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
      const verbCalled = st.control as ControlVerb | undefined
      st.control = undefined
      if (verbCalled !== undefined) return yield* controlled(step, verbCalled, startedAt)
      const pollAgain = st.pollRequest
      st.pollRequest = undefined
      if (pollAgain !== undefined) {
        // found nothing yet: checked again later (halts), or past its deadline it ends
        yield* nextCheck(step, pollAgain, startedAt)
        return { timedOut: true } as A
      }
      const fanOut = st.fanOutRequest
      st.fanOutRequest = undefined
      if (fanOut !== undefined) return yield* openFanOut(step, fanOut, options, startedAt)
      const child = st.childRequest
      st.childRequest = undefined
      if (child !== undefined) return yield* openChild(step, child, options, startedAt)
      if (Exit.isFailure(exit)) {
        // an interruption from outside never gets here (the execution stops, and `execute`
        // releases the step): this one came from inside the body, a failure of the step
        const error = Cause.hasInterruptsOnly(exit.cause)
          ? new Error(`step ${step.name} was interrupted from inside its body`)
          : Cause.squash(exit.cause)
        return yield* failed(step, error, options, startedAt)
      }
      const value = exit.value
      const encodedOutput = yield* (
        options.output === undefined
          ? Effect.succeed(value as unknown)
          : Schema.encodeEffect(options.output)(value).pipe(Effect.mapError((e) => e as unknown))
      ).pipe(Effect.result)
      if (encodedOutput._tag === "Failure") return yield* failed(step, encodedOutput.failure, options, startedAt)
      // what is stored must come back the same from JSON, or replay sees another value (or
      // fails to decode it): the output itself, or what its Schema encodes it to
      const mismatch =
        encodedOutput.success === undefined
          ? undefined
          : jsonMismatch(encodedOutput.success, options.output === undefined ? "output" : "encoded output")
      if (mismatch !== undefined) {
        return yield* failed(step, new OutputNotJson({ step: step.name, detail: mismatch }), options, startedAt)
      }
      let outputText: string | undefined
      try {
        outputText = encodedOutput.success === undefined ? undefined : JSON.stringify(encodedOutput.success)
      } catch (e) {
        return yield* failed(step, e, options, startedAt)
      }
      if (outputText !== undefined) {
        if (!isStorableJson(outputText)) {
          return yield* failed(step, new OutputNotStorable({ step: step.name }), options, startedAt)
        }
        const size = Buffer.byteLength(outputText, "utf8")
        if (size > config.maxPayloadSize) {
          return yield* failed(
            step,
            new OutputTooLarge({ step: step.name, size, limit: config.maxPayloadSize }),
            options,
            startedAt
          )
        }
      }
      ex.pending = { step, status: "completed", output: outputText ?? null }
      yield* recordStep(step, "completed", startedAt)
      return value
    })

  /** A flow-st.control verb called inside the step. */
  const controlled = (step: Target, verbCalled: ControlVerb, startedAt: number) =>
    Effect.gen(function* () {
      switch (verbCalled._tag) {
        case "skip":
          ex.pending = { step, status: "skipped", output: null }
          yield* recordStep(step, "skipped", startedAt)
          return undefined
        case "pause":
          yield* applyOutcome(step, "completed", null, null, {
            _tag: "pause",
            reason: "step_pause",
            error: null,
            message: textOf(verbCalled.reason)
          })
          yield* recordStep(step, "paused", startedAt)
          return yield* halt({ _tag: "applied" })
        case "cancel":
          yield* applyOutcome(step, "cancelled", null, null, { _tag: "cancel", reason: textOf(verbCalled.reason) })
          yield* recordStep(step, "cancelled", startedAt)
          return yield* halt({ _tag: "applied" })
        case "finish":
          yield* applyOutcome(step, "completed", null, null, { _tag: "finish", output: null })
          yield* recordStep(step, "completed", startedAt)
          return yield* halt({ _tag: "applied" })
        case "reattempt": {
          const delayMs =
            verbCalled.wait === undefined ? 0 : Duration.toMillis(Duration.fromInputUnsafe(verbCalled.wait))
          yield* applyOutcome(step, "failed", null, errorJson(new Error("reattempt requested by the step")), {
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
          yield* recordStep(step, "reattempted", startedAt)
          return yield* halt({ _tag: "applied" })
        }
      }
    })

  /** A step failed: the policies decide. */
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
          ex.pending = { step, status: "skipped", output: null }
          yield* recordStep(step, "skipped", startedAt)
          return undefined
        case "reattempt":
          yield* applyOutcome(step, "failed", null, errorText, {
            _tag: "schedule",
            name: step.name,
            attempt: step.attempt + 1,
            position: step.position,
            queue: step.queue || defaultQueue,
            physicalQueue: queueOf(step.queue || defaultQueue).physical,
            delayMs: resolution.waitMs,
            reattempts: step.reattempts + 1,
            reattempt: true
          })
          yield* recordStep(step, "reattempted", startedAt)
          return yield* halt({ _tag: "applied" })
        case "cancel":
          yield* applyOutcome(step, "failed", null, errorText, { _tag: "cancel", reason: message })
          yield* recordStep(step, "cancelled", startedAt)
          return yield* halt({ _tag: "applied" })
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
          return yield* halt({ _tag: "applied" })
      }
    })

  return { renewDeadline, runTarget, controlled, failed }
}

/** Running the claimed step. */
export type StepRun = ReturnType<typeof makeStep>
