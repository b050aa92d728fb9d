/**
 * Applying a finished attempt (or a skip) and what follows it, in one statement: shared with
 * other executions in the runner's common case, alone otherwise; kept through a lost connection
 * (an outcome sent again finds its own commit before calling itself late).
 *
 * @since 0.1.0
 */
import { Context, Effect, Fiber, Metric, Option } from "effect"
import { isPassingFailure, retryTransient, statementNowOf } from "../../../Database.ts"
import type { makeChildWake } from "../../verbs/child.ts"
import type { DatabaseError } from "../../WorkflowError.ts"
import type { FinishRow, NextAction } from "../../WorkflowSql.ts"
import type { EngineContext } from "../Context.ts"
import { cancelledTotal, finishedOf } from "../Metrics.ts"
import type { Outcomes } from "../Outcomes.ts"
import type { ExecutionState, Target } from "./State.ts"
import { hashNames } from "./State.ts"

/** One info line when a run finishes, pauses (with its reason) or is cancelled by a step's outcome. */
const logRunEnd = (workflow: string, runId: string, step: string, after: string | null, next: NextAction) =>
  after === "finished"
    ? Effect.logInfo(`pgbus: workflow ${workflow} run ${runId} finished (last step ${step})`)
    : after === "paused"
      ? Effect.logInfo(
          `pgbus: workflow ${workflow} run ${runId} paused at step ${step}${next._tag === "pause" ? `: ${next.reason}${next.message ? `: ${next.message}` : ""}` : ""}`
        )
      : after === "cancelled"
        ? Effect.logInfo(`pgbus: workflow ${workflow} run ${runId} cancelled at step ${step}`)
        : Effect.void

type ChildWake = ReturnType<typeof makeChildWake>

/** What a run's last outcome left in flight answers its execution: applied, for all it can tell. */
const LEFT_SETTLING: FinishRow = { before: null, applied: 1n, next_id: null, next_status: null, after: null }

/**
 * Builds the outcome writer, on one execution. A child run's (`isChild`) end or pause wakes its
 * parent in the same transaction (`withParentWake`, as `Apply.ts`'s `ending`).
 */
export const makeOutcome = (
  ctx: EngineContext,
  outcomes: Outcomes,
  st: ExecutionState,
  isChild: boolean,
  withParentWake: ChildWake["withParentWake"]
) => {
  const { sql, statements, db } = ctx
  const { finish, finishBatched, lateCompletion } = outcomes
  const { ex, def, runId, namesSeen, signalFree } = st

  /**
   * An outcome sent again after a lost reply found its step moved on: if its first sending had
   * committed (the step has the status it wrote), that outcome is this one, with the next step
   * it claimed for this execution, found by the execution's mark.
   */
  const ownOutcome = (step: Target, status: "completed" | "skipped" | "failed" | "cancelled") =>
    Effect.gen(function* () {
      const [row] = yield* statements.stepGet(step.id).pipe(db("find step"))
      if (row?.status !== status) return undefined
      const [next] = ex.mark === null ? [] : yield* statements.runLoadClaimed(runId, ex.mark).pipe(db("find own claim"))
      return {
        before: null,
        applied: 1n,
        next_id: next?.step_id ?? null,
        next_status: next === undefined ? null : ("in_progress" as const),
        after: null
      } satisfies FinishRow
    })

  /**
   * Applies a finished attempt (or a skip) and what follows it. One read of the fiber (the
   * statement time, a caller's transaction) and no generator: every step of every run comes here.
   */
  const applyOutcome = (
    step: Target,
    status: "completed" | "skipped" | "failed" | "cancelled",
    output: string | null,
    error: string | null,
    next: NextAction
  ) =>
    Effect.withFiber((fiber) => {
      const now = statementNowOf(fiber)
      const definitionHash = hashNames(namesSeen)
      const inTransaction = Option.isSome(Context.getOption(fiber.context, sql.transactionService))
      // a child's end (or pause) wakes its parent in its transaction: never in a shared statement
      const wakes = isChild && (next._tag === "finish" || next._tag === "cancel" || next._tag === "pause")
      // a step holding a signal shares the statement only when the worker's read claimed it, in a
      // process whose signals hand no steps over (Runner.ts): one handed over waiting for the shared
      // statement held its executor while the next signals looked for a free one (issue 24:
      // in-process p50 1.2 -> 2.2 ms), where read-claimed steps, off-process, went faster with
      // less PostgreSQL CPU per signal
      const shareable = signalFree.has(step.id) || ex.claimedInRead === step.id
      const batchable =
        !wakes &&
        shareable &&
        status === "completed" &&
        error === null &&
        (next._tag === "finish" ||
          (next._tag === "claim" && (next.timeoutMs === null || Number.isFinite(next.timeoutMs)))) &&
        !inTransaction
      // the step has run: a lost connection or a restarting server must not lose its outcome
      // (if a lost reply hid a commit, the retry finds the step moved on: a late completion);
      // not in a caller's transaction, which a lost connection has ended
      const write: Effect.Effect<FinishRow | undefined, DatabaseError> = batchable
        ? finishBatched({
            runId,
            stepId: step.id,
            output,
            definitionHash,
            next: next._tag === "claim" ? { ...next } : (next as Extract<NextAction, { _tag: "finish" }>),
            ...(signalFree.has(step.id) ? {} : { mayHoldSignal: true }),
            now
          })
        : finish({
            workflow: def.name,
            runId,
            stepId: step.id,
            status,
            output,
            error,
            definitionHash,
            next,
            mayHoldSignal: !signalFree.has(step.id),
            now
          }).pipe(
            Effect.map((rows) => rows[0]),
            (w) => (wakes ? withParentWake(runId, true, w) : w)
          )
      // uninterruptible: a drain must know what this execution holds afterwards (the next step
      // claimed with it); a reply lost with its connection may hide a commit: sent again, an
      // outcome that finds its step moved on looks for its own commit before calling it late
      const written = (
        inTransaction
          ? write
          : write.pipe(
              Effect.catchIf(isPassingFailure, () =>
                retryTransient(write).pipe(
                  Effect.flatMap((again) =>
                    again !== undefined && again.applied === 1n ? Effect.succeed(again) : ownOutcome(step, status)
                  )
                )
              )
            )
      ).pipe(
        Effect.map((r) => {
          if (ex.pending?.step.id === step.id) ex.pending = undefined
          if (r?.next_status === "in_progress" && r.next_id !== null) ex.held = r.next_id
          return r
        }),
        Effect.uninterruptible
      )
      const applied = Effect.flatMap(written, (r): Effect.Effect<FinishRow | undefined, DatabaseError> => {
        if (r === undefined || r.applied === 0n) return Effect.as(lateCompletion(runId, step, now), undefined)
        // the common outcome: the run goes on (nothing to count, nothing to log)
        if (r.after !== "finished" && r.after !== "cancelled" && r.after !== "paused") return Effect.succeed(r)
        const counted =
          r.after === "finished"
            ? Metric.update(finishedOf(def.name), 1)
            : r.after === "cancelled"
              ? Metric.update(cancelledTotal.pipe(Metric.withAttributes({ workflow_class: def.name })), 1)
              : Effect.void
        return Effect.as(Effect.andThen(counted, logRunEnd(def.name, runId, step.name, r.after, next)), r)
      })
      // The run's last outcome, shared: nothing in this execution follows it, so its worker may
      // free the executor now and acknowledge the message once it commits (`Job/Settling.ts`):
      // the outcome's round trip no longer holds a slot the next woken step waits for (issue 24,
      // signals from another process at saturation, 10 alternated pairs: p50 median 5.84 -> 5.05
      // ms, p99 38.8 -> 27.3).
      // It leaves at once (a fiber started here joins the batch being formed), and the worker
      // joins it.
      if (batchable && next._tag === "finish" && ex.mayLeaveSettling === true && ex.settling === undefined) {
        return Effect.map(Effect.forkDetach(applied, { startImmediately: true }), (inFlight) => {
          ex.settling = Effect.asVoid(Fiber.join(inFlight))
          return LEFT_SETTLING
        })
      }
      return applied
    })

  return { ownOutcome, applyOutcome }
}
