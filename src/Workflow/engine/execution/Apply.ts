/**
 * The execution's ends: halting it, claiming with the first step, pausing on an error, applying
 * a finished attempt and what follows it.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect, Metric, Option } from "effect"
import { isPassingFailure, retryTransient, statementNow } from "../../../Database.ts"
import type { StepOptions } from "../../Runtime.ts"
import { makeChildWake } from "../../verbs/child.ts"
import { type DatabaseError, ReplayDivergence } from "../../WorkflowError.ts"
import type { FinishRow, NextAction } from "../../WorkflowSql.ts"
import type { EngineContext } from "../Context.ts"
import { messageOf } from "../Errors.ts"
import { cancelledTotal, finishedOf, pausedTotal, stepMetrics } from "../Metrics.ts"
import type { Outcomes } from "../Outcomes.ts"
import { Halted, type Stop } from "./End.ts"
import type { ExecutionState } from "./State.ts"
import { hashNames, type Target } from "./State.ts"

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

/** Builds this part of one execution. */
export const makeApply = (ctx: EngineContext, outcomes: Outcomes, st: ExecutionState) => {
  const { sql, jobs, statements, db, queueOf, errorJson } = ctx
  const { finish, finishBatched, claimFirst, claimFirstBatched, lateCompletion } = outcomes
  const { ex, def, runId, namesSeen, signalFree, defaultQueue } = st
  const { withParentWake } = makeChildWake(ctx)
  /** A child run: its end (or pause) wakes its parent in the same transaction. */
  const isChild = st.claim.parent_run_id !== null && st.claim.parent_run_id !== undefined
  /** A transition that may end (or pause) the run: a child's wakes its parent with it. */
  const ending = <A, E, R>(write: Effect.Effect<A, E, R>) => withParentWake(runId, isChild, write)

  /**
   * The execution ended: its end is recorded and the body unwound by a defect carrying it (not
   * an interruption, which is left for real cancellation); `Execute.ts` reads the end.
   */
  const halt = (s: Stop): Effect.Effect<never> => {
    st.stop = s
    return Effect.die(new Halted(s))
  }

  /** Records the step a claim returned as held by this execution (inside the claim's uninterruptible region). */
  const holding = <A extends { readonly id: bigint } | { readonly step_id: bigint | null }, E, R>(
    claimed: Effect.Effect<ReadonlyArray<A>, E, R>
  ) =>
    Effect.tap(claimed, (rows) =>
      Effect.sync(() => {
        const row = rows[0]
        const id = row === undefined ? null : "step_id" in row ? row.step_id : row.id
        if (id !== null) ex.held = id
      })
    )

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

  /** A fresh run reached its first step: claim the run with it, if the run has no history. */
  const claimWithFirst = (name: string, options: StepOptions<unknown>) =>
    Effect.gen(function* () {
      const { queue } = queueOf(options.queue ?? defaultQueue, options.priority ?? st.runPriority)
      yield* jobs.ensureQueue(queue)
      st.speculative = false
      const timeoutMs =
        options.timeout === undefined ? null : Duration.toMillis(Duration.fromInputUnsafe(options.timeout))
      const now = yield* statementNow
      const batchable =
        (timeoutMs === null || Number.isFinite(timeoutMs)) &&
        Option.isNone(yield* Effect.serviceOption(sql.transactionService))
      const alone = claimFirst({ runId, name, queue, timeoutMs, claimedBy: ex.mark, now })
      const [row] = yield* (
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
      if (row?.step_id === null || row?.step_id === undefined) {
        return yield* halt({ _tag: "restart", claim: row })
      }
      st.preclaimed = row.step_id
    })

  /** Pauses the run on an error that is not a step's (divergence, a bad option, a glue error). */
  const pauseWith = (error: unknown, reason: string) =>
    Effect.gen(function* () {
      const now = yield* statementNow
      const errorText = errorJson(error)
      const message = messageOf(error)
      if (ex.pending !== undefined) {
        const r = yield* ending(
          finish({
            workflow: def.name,
            runId,
            stepId: ex.pending.step.id,
            status: ex.pending.status,
            output: ex.pending.output,
            error: null,
            definitionHash: hashNames(namesSeen),
            next: { _tag: "pause", reason, error: errorText, message },
            now
          })
        )
        if (r[0]?.applied === 0n) yield* lateCompletion(runId, ex.pending.step, now)
        ex.pending = undefined
      } else if (st.target !== undefined) {
        const r = yield* ending(
          finish({
            workflow: def.name,
            runId,
            stepId: st.target.id,
            status: "failed",
            output: null,
            error: errorText,
            definitionHash: hashNames(namesSeen),
            next: { _tag: "pause", reason, error: errorText, message },
            now
          })
        )
        if (r[0]?.applied === 0n) yield* lateCompletion(runId, st.target, now)
      } else {
        yield* ending(
          statements
            .runEndFromPerforming({
              runId,
              to: "paused",
              output: null,
              error: errorText,
              pausedReason: reason,
              reason: message,
              definitionHash: hashNames(namesSeen),
              now
            })
            .pipe(db("pause run"))
        )
      }
      yield* Metric.update(
        pausedTotal.pipe(Metric.withAttributes({ workflow_class: def.name, error_class: reason })),
        1
      )
    })

  const divergence = (expected: string, found: string, position: number) =>
    Effect.gen(function* () {
      yield* pauseWith(new ReplayDivergence({ run: runId, position, expected, found }), "version_mismatch")
      return yield* halt({ _tag: "applied" })
    })

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

  /** Applies a finished attempt (or a skip) and what follows it. */
  const applyOutcome = (
    step: Target,
    status: "completed" | "skipped" | "failed" | "cancelled",
    output: string | null,
    error: string | null,
    next: NextAction
  ) =>
    Effect.gen(function* () {
      const now = yield* statementNow
      const definitionHash = hashNames(namesSeen)
      const inTransaction = Option.isSome(yield* Effect.serviceOption(sql.transactionService))
      // a child's end (or pause) wakes its parent in its transaction: never in a shared statement
      const wakes = isChild && (next._tag === "finish" || next._tag === "cancel" || next._tag === "pause")
      const batchable =
        !wakes &&
        status === "completed" &&
        error === null &&
        signalFree.has(step.id) &&
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
            (w) => (wakes ? ending(w) : w)
          )
      // uninterruptible: a drain must know what this execution holds afterwards (the next step
      // claimed with it); a reply lost with its connection may hide a commit: sent again, an
      // outcome that finds its step moved on looks for its own commit before calling it late
      const r = yield* (
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
        Effect.tap((r) =>
          Effect.sync(() => {
            if (ex.pending?.step.id === step.id) ex.pending = undefined
            if (r?.next_status === "in_progress" && r.next_id !== null) ex.held = r.next_id
          })
        ),
        Effect.uninterruptible
      )
      if (r === undefined || r.applied === 0n) {
        yield* lateCompletion(runId, step, now)
        return undefined
      }
      if (r.after === "finished") yield* Metric.update(finishedOf(def.name), 1)
      if (r.after === "cancelled")
        yield* Metric.update(cancelledTotal.pipe(Metric.withAttributes({ workflow_class: def.name })), 1)
      yield* logRunEnd(def.name, runId, step.name, r.after, next)
      return r
    })

  const recordStep = (step: Target, outcome: string, startedAt: number) =>
    Effect.flatMap(Clock.currentTimeMillis, (end) => {
      const metrics = stepMetrics(def.name, step.name, outcome)
      return Effect.all([Metric.update(metrics.total, 1), Metric.update(metrics.duration, (end - startedAt) / 1000)], {
        discard: true
      })
    })

  return {
    halt,
    holding,
    claimForRestart,
    restartFromClaim,
    claimWithFirst,
    pauseWith,
    divergence,
    ownOutcome,
    applyOutcome,
    recordStep,
    ending
  }
}

/** The execution's ends. */
export type Apply = ReturnType<typeof makeApply>
