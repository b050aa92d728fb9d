/**
 * The runner's primitives under `Workflow.waitForSignal` (`waitForSignal.ts`): the signal gate
 * every step with a guard or a wait passes (`makeSignalGate`: cancel, skip, take a signal, or
 * park), a per-run deadline's late notice (`renewDeadline`) and the deadline of a wait
 * (`waitDeadline`).
 *
 * @since 0.1.0
 */
import { Cause, Duration, Effect, Exit, Metric } from "effect"
import { statementNow, withTransaction } from "../../Database.ts"
import type { EngineContext } from "../engine/Context.ts"
import type { Apply } from "../engine/execution/Apply.ts"
import type { StepEnd } from "../engine/execution/End.ts"
import type { ExecutionState, RunnerStepOptions, Target } from "../engine/execution/State.ts"
import { waitOverdueTotal } from "../engine/Metrics.ts"
import { declaredMatcher, matchSignal, NO_MATCH } from "../engine/Signals.ts"
import { type ReceivedSignal, type RunContext, SignalReaders, type StepOptions } from "../Runtime.ts"
import type { SignalRow } from "../WorkflowSql.ts"

/** What the gate decided: the step runs (with the signal it took), or its attempt ended there. */
export type Gate =
  | {
      readonly _tag: "Opened"
      readonly received: ReceivedSignal | undefined
      readonly readers: SignalReaders["Service"]
    }
  | StepEnd

// the runner's primitives under the verb

/** The signal gate and a per-run deadline's late notice, on one execution. */
export const makeSignalGate = (ctx: EngineContext, st: ExecutionState, apply: Apply) => {
  const { sql, statements, errorJson } = ctx
  const { def, runId, signalFree, runContext } = st
  const { halt } = apply

  /** Guards and the signal gate, under the run's row lock: cancel, skip, take a signal, or park. */
  const gate = <A>(step: Target, options: RunnerStepOptions<A>, timedOut: boolean) =>
    Effect.gen(function* () {
      // the gate may claim a signal for the attempt
      signalFree.delete(step.id)
      const waitName =
        options.waitFor === undefined
          ? undefined
          : typeof options.waitFor === "string"
            ? options.waitFor
            : options.waitFor.name
      let readers: SignalReaders["Service"] = { woken: false, signalReady: false }
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
            return { _tag: "Cancelled" } as const
          }
          if (options.skipIf !== undefined && (yield* withReaders(options.skipIf(runContext)))) {
            return { _tag: "Skipped" } as const
          }
          if (waitName === undefined && held !== undefined) {
            return { _tag: "signal", signal: { id: String(held.id), name: held.name, payload: held.payload } } as const
          }
          if (waitName === undefined || timedOut) return { _tag: "run" } as const
          const now = yield* statementNow
          if (held !== undefined) {
            const payload = yield* matchSignal(def, options.waitFor!, held.payload, { decodeOnly: true })
            return {
              _tag: "signal",
              signal: { id: String(held.id), name: held.name, payload: payload === NO_MATCH ? held.payload : payload }
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
          return { _tag: "Parked", outcome: "waiting" } as const
        })
      ).pipe(Effect.exit)
      if (Exit.isFailure(guard)) return { _tag: "Failed", error: Cause.squash(guard.cause) } satisfies Gate as Gate
      const decided = guard.value
      switch (decided._tag) {
        case "signal":
          return { _tag: "Opened", received: decided.signal, readers } satisfies Gate as Gate
        case "run":
          return { _tag: "Opened", received: undefined, readers } satisfies Gate as Gate
        default:
          return decided satisfies Gate as Gate
      }
    })

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

  return { gate, renewDeadline }
}

/** The deadline of a wait when the step parks: a delay (database clock) or a date; a notify period. */
export const waitDeadline = (
  options: StepOptions<unknown>,
  run: RunContext<unknown>
): Effect.Effect<{ readonly ms: number | null; readonly at: Date | null; readonly periodMs: number | null }, unknown> =>
  // the deadline function's services are the workflow's, provided where it runs
  Effect.gen(function* () {
    const timeout = options.waitTimeout
    if (timeout === undefined) return { ms: null, at: null, periodMs: null }
    const value = typeof timeout === "function" ? yield* timeout(run) : timeout
    if (value === undefined) return { ms: null, at: null, periodMs: null }
    if (value instanceof Date) {
      if (Number.isNaN(value.getTime())) return yield* Effect.fail(new Error("waitTimeout gave an invalid Date"))
      return { ms: null, at: value, periodMs: null }
    }
    const d = Duration.fromInput(value)
    if (d._tag === "None" || !Duration.isFinite(d.value) || !Duration.isPositive(d.value)) {
      return yield* Effect.fail(new Error(`waitTimeout must give a positive duration, a Date or undefined`))
    }
    const ms = Duration.toMillis(d.value)
    return { ms, at: null, periodMs: ms }
  }) as Effect.Effect<
    { readonly ms: number | null; readonly at: Date | null; readonly periodMs: number | null },
    unknown
  >
