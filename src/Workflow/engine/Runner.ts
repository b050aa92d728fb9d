/**
 * The runner: a step message's execution, from its claim to its release.
 *
 * @since 0.1.0
 */
import { Cause, Clock, Effect } from "effect"
import { isPassingFailure, retryTransient, statementNow } from "../../Database.ts"
import { runSpan, withHotSpan } from "../../internal/span.ts"
import { Settling } from "../../Job/Settling.ts"
import type { QueueError } from "../../Queue/QueueError.ts"
import { type DatabaseError, type RunNotFound, WorkflowNotRegistered } from "../WorkflowError.ts"
import type { EngineContext } from "./Context.ts"
import type { makeExecute } from "./Execute.ts"
import type { Stop } from "./execution/End.ts"
import type { Execution } from "./execution/State.ts"
import { type Claimed, claimMarkOf, type Delivery, deliveryKey, type StepMessage } from "./Messages.ts"
import type { makeOutcomes } from "./Outcomes.ts"
import type { makeQueries } from "./Queries.ts"
import { makeRecovery } from "./Recovery.ts"
import type { NextWork, RegisteredWorkflow } from "./Services.ts"

/**
 * A woken step the worker's read claimed shares the workers' outcome statement (Outcome.ts) only
 * when no signal of this process handed a step over within this window: waiting for the shared
 * statement holds an executor, and a process whose signals hand steps over needs its executors
 * free for them (with no window, bench:signals in-process went from 2.2 to 2.5 ms at p50 and from
 * 11 to 16 ms at p95, in 7 of 8 alternated pairs).
 */
export const HAND_OVER_QUIET_MS = 1_000

/** The runner: a step message's execution, from its claim to its release. */
export const makeRunner = (
  ctx: EngineContext,
  outcomes: ReturnType<typeof makeOutcomes>,
  execution: ReturnType<typeof makeExecute>,
  queries: ReturnType<typeof makeQueries>
) => {
  const { config, statements, worker, preclaimed, revision, db, handOvers } = ctx
  const { getRow } = queries
  const { executeClaimed } = execution

  /** `executeClaimed`, typed: the registered workflow's services were captured where it was registered. */
  const runClaimed = (
    registered: RegisteredWorkflow,
    claim: Claimed,
    ex: Execution,
    speculative = false,
    renewalOf?: Date
  ) => executeClaimed(registered, claim, ex, speculative, renewalOf) as Effect.Effect<Stop | undefined, DatabaseError>

  const { unclaimed, releaseInterrupted, pauseUndeliverable } = makeRecovery(ctx, outcomes, runClaimed)

  const execute = (
    workflows: ReadonlyMap<string, RegisteredWorkflow>,
    message: StepMessage,
    delivery: Delivery
  ): Effect.Effect<Settling | undefined, DatabaseError | QueueError | WorkflowNotRegistered> => {
    const ex: Execution = {
      mark: claimMarkOf(delivery),
      claimLost: false,
      held: undefined,
      pending: undefined,
      queue: undefined,
      workflows,
      // on its last delivery a failure pauses the run (below): its outcome is awaited here
      mayLeaveSettling: delivery.settles === true && delivery.last !== true
    }
    const executed = Effect.gen(function* () {
      const registered = workflows.get(message.workflow)
      // another process may have it: the message is retried, and its last delivery pauses the run
      if (registered === undefined) return yield* new WorkflowNotRegistered({ workflow: message.workflow })
      ex.queue = registered.workflow.queue ?? config.workflowQueue
      const run = (claim: Claimed, speculative: boolean, renewalOf?: Date) =>
        runClaimed(registered, claim, ex, speculative, renewalOf)
      if (message.deadline !== undefined && message.step !== null) {
        // a notify notice of a per-run deadline: replay to the waiting step and evaluate it again
        const missedAt = new Date(message.deadline)
        if (Number.isNaN(missedAt.getTime())) return
        const [loaded] = yield* statements
          .runLoadForRenewal(message.run, BigInt(message.step), missedAt)
          .pipe(db("load run for a deadline"))
        // already handled (a duplicate delivery), or the wait moved on
        if (loaded === undefined) return
        yield* run(loaded, false, missedAt)
        return
      }
      if (message.step === null && message.input !== undefined) {
        // a start's message: replay to the first step, then claim the run with it
        const input = message.input
        const outcome = yield* run(
          {
            id: message.run,
            payload: input.payload,
            subject: input.subject,
            resource_id: input.resource_id,
            // a prioritized or scheduled run's start carries no input (its claim reads them)
            priority: null,
            scheduled_for: null,
            parent_run_id: input.parent_run_id ?? null,
            history: [],
            held_signal: null,
            step_id: null,
            step_name: null,
            step_attempt: null,
            step_position: null,
            step_reattempts: null,
            step_timed_out: null
          },
          true
        )
        if (outcome?._tag !== "restart") return
        if (outcome.claim === undefined) return yield* unclaimed(registered, message, delivery, ex)
        yield* run(outcome.claim, false)
        return
      }
      // claimed by the signal that woke it, in this process (local dispatch), or by the worker's
      // read that delivered its message (ReadClaims.ts)
      const key = delivery.msgId === undefined ? undefined : deliveryKey(delivery.msgId, delivery.attempt)
      const pre = key === undefined ? undefined : preclaimed.get(key)
      if (pre !== undefined && key !== undefined) {
        preclaimed.delete(key)
        const { claim } = pre
        if (message.step !== null && String(claim.step_id) === message.step) {
          ex.held = claim.step_id ?? undefined
          if (pre.inRead && (yield* Clock.currentTimeMillis) - handOvers.lastAt > HAND_OVER_QUIET_MS) {
            ex.claimedInRead = claim.step_id ?? undefined
          }
          return yield* run(claim, false).pipe(Effect.asVoid)
        }
      }
      const now = yield* statementNow
      const claimOnce =
        message.step === null
          ? statements.runClaimContinue(message.run, now).pipe(db("claim run"))
          : statements
              .stepClaim({
                runId: message.run,
                stepId: BigInt(message.step),
                worker,
                appRevision: revision,
                claimedBy: ex.mark,
                now
              })
              .pipe(db("claim step"))
      // uninterruptible, so that a drain knows what it holds; a reply lost with its connection may
      // hide a commit: sent again, a claim that finds its step taken goes to `unclaimed`, which
      // knows this execution's own claim by its mark
      const [claim] = yield* claimOnce.pipe(
        Effect.catchIf(isPassingFailure, () =>
          Effect.andThen(
            Effect.sync(() => {
              ex.claimLost = true
            }),
            retryTransient(claimOnce)
          )
        ),
        Effect.tap((rows) =>
          Effect.sync(() => {
            const id = rows[0]?.step_id
            if (id !== null && id !== undefined) ex.held = id
          })
        ),
        Effect.uninterruptible
      )
      if (claim === undefined) return yield* unclaimed(registered, message, delivery, ex)
      yield* run(claim, false)
    })
    // interrupted from outside (a drain past its timeout): what it holds is released, not left
    // for the next delivery to take for a dead worker's (the stall action)
    const released = executed.pipe(Effect.onInterrupt(() => releaseInterrupted(message.workflow, message.run, ex)))
    const lastChance =
      delivery.last !== true
        ? released
        : Effect.catchCause(released, (cause) =>
            Cause.hasInterruptsOnly(cause)
              ? Effect.failCause(cause)
              : pauseUndeliverable(message, ex, Cause.squash(cause)).pipe(
                  Effect.catchCause(() => Effect.succeed(false)),
                  Effect.flatMap((paused) =>
                    paused
                      ? Effect.logWarning(
                          `pgbus: workflow run ${message.run} paused as undeliverable: its message failed on its last delivery`,
                          Cause.pretty(cause)
                        )
                      : Effect.failCause(cause)
                  )
                )
          )
    // the run's last outcome left in flight goes back to the worker, which awaits it
    const result = Effect.map(lastChance, () => (ex.settling === undefined ? undefined : new Settling(ex.settling)))
    // no span without a tracing backend (see hotSpan)
    return withHotSpan(result, ...runSpan(message.workflow, message.run))
  }

  const next = (runId: string): Effect.Effect<NextWork, DatabaseError | RunNotFound> =>
    Effect.gen(function* () {
      const run = yield* getRow(runId, null)
      const [latest] = yield* statements.stepLatest(runId).pipe(db("find step"))
      if (run.status === "finished" || run.status === "cancelled" || run.status === "paused") {
        return { _tag: "Stopped", status: run.status } as const
      }
      if (
        latest?.status === "waiting" &&
        latest.timeout_at !== null &&
        latest.deadline_renewal_for?.getTime() === latest.timeout_at.getTime()
      ) {
        // a late notice handed over by the sweep: the deadline is evaluated again
        return {
          _tag: "Step",
          step: latest.name,
          message: {
            workflow: run.workflow,
            run: runId,
            step: String(latest.id),
            deadline: latest.timeout_at.toISOString()
          }
        } as const
      }
      if (latest?.status === "waiting") {
        return { _tag: "Waiting", step: latest.name, waitingFor: "a signal" } as const
      }
      if (latest?.status === "in_progress") return { _tag: "Running", step: latest.name } as const
      if (latest?.status === "scheduled") {
        const now = yield* statementNow
        yield* statements.stepMakeDue(latest.id, now).pipe(db("make step due"))
        return {
          _tag: "Step",
          step: latest.name,
          message: { workflow: run.workflow, run: runId, step: String(latest.id) }
        } as const
      }
      return { _tag: "Continue", message: { workflow: run.workflow, run: runId, step: null } } as const
    })

  return { execute, next }
}
