/**
 * The execution's claims made from inside the body: a fresh run claiming itself with the first
 * step its replay reached (alone or in a statement shared with other executions), or alone to
 * replay again from that claim. Each records what the execution then holds, for a drain.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Option } from "effect"
import { isPassingFailure, retryTransient, statementNow, statementNowOf } from "../../../Database.ts"
import type { StepOptions } from "../../Runtime.ts"
import type { EngineContext } from "../Context.ts"
import type { Outcomes } from "../Outcomes.ts"
import type { Stop } from "./End.ts"
import type { ExecutionState } from "./State.ts"

/** Builds the execution's claims, on one execution; `halt` ends it (`Apply.ts`). */
export const makeClaim = (
  ctx: EngineContext,
  outcomes: Outcomes,
  st: ExecutionState,
  halt: (s: Stop) => Effect.Effect<never>
) => {
  const { sql, jobs, statements, db, queueOf } = ctx
  const { claimFirst, claimFirstBatched } = outcomes
  const { ex, runId, defaultQueue } = st

  /** Records the step a claim returned as held by this execution (inside the claim's uninterruptible region). */
  const holding = <A extends { readonly id: bigint } | { readonly step_id: bigint | null }, E, R>(
    claimed: Effect.Effect<ReadonlyArray<A>, E, R>
  ) =>
    Effect.map(claimed, (rows) => {
      const row = rows[0]
      const id = row === undefined ? null : "step_id" in row ? row.step_id : row.id
      if (id !== null) ex.held = id
      return rows
    })

  /** A fresh run claims itself alone, then replays from that claim. */
  const claimForRestart = Effect.gen(function* () {
    st.speculative = false
    const [row] = yield* statements.runClaimContinue(runId, yield* statementNow).pipe(db("claim run"))
    return { _tag: "restart", claim: row } as const
  })
  const restartFromClaim = Effect.matchEffect(claimForRestart, {
    onFailure: (error) => halt({ _tag: "claimFailed", error }),
    onSuccess: halt
  })

  /**
   * A fresh run reached its first step: claim the run with it, if the run has no history. One
   * read of the fiber (the statement time, a caller's transaction), no generator.
   */
  const claimWithFirst = (name: string, options: StepOptions<unknown>) => {
    const { queue } = queueOf(options.queue ?? defaultQueue, options.priority ?? st.runPriority)
    // a queue already known is an Exit: no fiber work
    return Effect.flatMapEager(jobs.ensureQueue(queue), () =>
      Effect.withFiber((fiber) => {
        st.speculative = false
        const timeoutMs =
          options.timeout === undefined ? null : Duration.toMillis(Duration.fromInputUnsafe(options.timeout))
        const now = statementNowOf(fiber)
        const batchable =
          (timeoutMs === null || Number.isFinite(timeoutMs)) &&
          Option.isNone(Context.getOption(fiber.context, sql.transactionService))
        const alone = claimFirst({ runId, name, queue, timeoutMs, claimedBy: ex.mark, now })
        const claimed = (
          batchable
            ? Effect.map(claimFirstBatched({ runId, name, queue, timeoutMs, claimedBy: ex.mark, now }), (r) =>
                r === undefined ? [] : [r]
              )
            : alone
        ).pipe(
          // a reply lost with its connection may hide a commit: sent again, a claim that finds the
          // run taken goes to `unclaimed`, which knows this execution's own claim by its mark
          Effect.catchIf(isPassingFailure, () =>
            Effect.andThen(
              Effect.sync(() => {
                ex.claimLost = true
              }),
              retryTransient(alone)
            )
          ),
          holding,
          Effect.uninterruptible,
          Effect.catch((error) => halt({ _tag: "claimFailed", error }))
        )
        return Effect.flatMap(claimed, ([row]): Effect.Effect<void> => {
          if (row?.step_id === null || row?.step_id === undefined) return halt({ _tag: "restart", claim: row })
          st.preclaimed = row.step_id
          return Effect.void
        })
      })
    )
  }

  return { holding, claimForRestart, restartFromClaim, claimWithFirst }
}
