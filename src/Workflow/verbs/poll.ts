/**
 * `Workflow.poll`: a step whose check runs until it finds a result; a check that finds nothing
 * asks for the next one (`nextCheck`), the step ends `timedOut` past its deadline.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option, type Schema } from "effect"
import { statementNow } from "../../Database.ts"
import type { EngineContext } from "../engine/Context.ts"
import { type PollRequest, type StepEnd, StepRequest } from "../engine/execution/End.ts"
import type { ExecutionState, Target } from "../engine/execution/State.ts"
import { StepContext, type WorkflowRuntime } from "../Runtime.ts"
import type { VerbEnv } from "./Env.ts"

/** The body's `poll`, on one execution. */
export const makePollVerb = ({ reach }: VerbEnv) => {
  const { runtimeStep } = reach
  const poll: WorkflowRuntime["Service"]["poll"] = <A, E, R>(
    name: string,
    check: Effect.Effect<Option.Option<A>, E, R>,
    options: {
      readonly interval?: Duration.Input | undefined
      readonly timeout?: Duration.Input | undefined
      readonly output?: Schema.ConstraintCodec<unknown, unknown> | undefined
    }
  ) => {
    const intervalMs =
      options.interval === undefined ? 30_000 : Duration.toMillis(Duration.fromInputUnsafe(options.interval))
    const timeoutMs =
      options.timeout === undefined ? null : Duration.toMillis(Duration.fromInputUnsafe(options.timeout))
    const body = Effect.gen(function* () {
      // fast-forwarded: the result was handed over as a signal the step holds
      const given = (yield* StepContext).signal
      if (given !== undefined) return { timedOut: false as const, data: given.payload as A }
      const result = yield* check
      if (Option.isSome(result)) return { timedOut: false as const, data: result.value }
      return new StepRequest({ _tag: "PollAgain", request: { intervalMs, timeoutMs } })
    })
    return runtimeStep(name, body, { takesHeldSignal: true }) as Effect.Effect<
      { readonly timedOut: false; readonly data: A } | { readonly timedOut: true },
      never,
      R
    >
  }
  return poll
}

// the runner's primitive under the verb: what the step's end asks for, applied

/** The next check of a poll. */
export const makePoll = (ctx: EngineContext, st: ExecutionState) => {
  const { statements, db, queueOf } = ctx
  const { def, runId, defaultQueue } = st

  /** Schedules the poll's next check (the step's end is `Parked`); past its deadline, the poll ends timed out. */
  const nextCheck = (step: Target, request: PollRequest) =>
    Effect.gen(function* () {
      const now = yield* statementNow
      const [again] = yield* statements
        .stepPollAgain({
          workflow: def.name,
          runId,
          stepId: step.id,
          intervalMs: request.intervalMs,
          timeoutMs: request.timeoutMs,
          physicalQueue: queueOf(step.queue || defaultQueue).physical,
          now
        })
        .pipe(db("schedule the next check"))
      if (again !== undefined) return { _tag: "Parked", outcome: "polled" } as const satisfies StepEnd
      // past its deadline: the poll ends with timedOut
      const timedOut = { timedOut: true } as const
      return { _tag: "Completed", value: timedOut, output: JSON.stringify(timedOut) } as const satisfies StepEnd
    })

  return { nextCheck }
}
