/**
 * The runner's primitive under `poll`: a check that found nothing yet schedules the attempt for
 * its next check (the execution halts), or past the poll's deadline ends it with `timedOut`.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { statementNow } from "../../../Database.ts"
import type { EngineContext } from "../Context.ts"
import type { Target } from "../Shared.ts"
import type { Apply } from "./Apply.ts"
import type { ExecutionState } from "./State.ts"

/** The next check of a poll. */
export const makePoll = (ctx: EngineContext, st: ExecutionState, apply: Apply) => {
  const { statements, db, queueOf } = ctx
  const { ex, def, runId, defaultQueue } = st
  const { halt, recordStep } = apply

  /** Schedules the poll's next check and halts; past its deadline, records the poll ended (timed out). */
  const nextCheck = (
    step: Target,
    request: { readonly intervalMs: number; readonly timeoutMs: number | null },
    startedAt: number
  ) =>
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
      if (again !== undefined) {
        yield* recordStep(step, "polled", startedAt)
        return yield* halt({ _tag: "applied" })
      }
      // past its deadline: the poll ends with timedOut
      ex.pending = { step, status: "completed", output: JSON.stringify({ timedOut: true }) }
      yield* recordStep(step, "completed", startedAt)
    })

  return { nextCheck }
}
