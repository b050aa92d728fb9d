/**
 * Waking the step a signal matched, inside the signal's transaction: through the queue (NOTIFY,
 * read, claim), or, when a reader of this process has a free slot (local dispatch), woken and
 * claimed for that reader and handed over after the commit.
 *
 * @since 0.1.0
 */
import { Cause, Clock, Effect, Exit } from "effect"
import { isPassingFailure, retryTransient } from "../../../Database.ts"
import type { Message } from "../../../Queue/Message.ts"
import type { LocalSlot } from "../../../Queue/Notifier.ts"
import type { ClaimRow, RunRow } from "../../WorkflowSql.ts"
import type { EngineContext } from "../Context.ts"
import { deliveryKey } from "../Messages.ts"
import type { Outcomes } from "../Outcomes.ts"

/** What one signal's transaction reserved and claimed for a reader of this process (local dispatch). */
export interface HandOver {
  slot: LocalSlot | undefined
  /** The woken step's message, inserted claimed, and its claim. */
  handover: { readonly message: Message; readonly claim: ClaimRow } | undefined
  /** The step a hand-over woke and claimed, and its queue (released by the slot's mark if the reply is lost). */
  handedStep: { readonly workflow: string; readonly stepId: bigint; readonly queue: string } | undefined
}

/** A hand-over with nothing reserved yet. */
export const emptyHandOver = (): HandOver => ({ slot: undefined, handover: undefined, handedStep: undefined })

/** Waking a signalled step, and handing it over to a reader of this process after the commit. */
export const makeSignalWake = (ctx: EngineContext, outcomes: Outcomes) => {
  const { config, store, notifier, statements, worker, preclaimed, revision, queueOf, handOvers } = ctx
  const { releaseStep } = outcomes

  /**
   * Wakes the waiting step of a waiting run, and has it take the pending signal `claimSignal`
   * (none: a matcher this process cannot run, judged at the gate): claimed for a reader of this
   * process when `local` and one has a free slot (recorded in `state`), else through its
   * queue's message (the signal's claim, the wake and the message in one statement).
   */
  const wake = (
    run: RunRow,
    waiting: { readonly id: bigint; readonly queue: string | null },
    claimSignal: bigint | undefined,
    local: boolean,
    state: HandOver,
    now: Date | null
  ) =>
    Effect.gen(function* () {
      const { queue, physical } = queueOf(waiting.queue || config.workflowQueue)
      state.slot = local
        ? notifier.reserveLocal(physical, { inOrder: false, runs: { workflow: run.workflow } })
        : undefined
      const slot = state.slot
      if (slot !== undefined) handOvers.lastAt = yield* Clock.currentTimeMillis
      if (slot === undefined) {
        yield* statements.stepWake({
          workflow: run.workflow,
          runId: run.id,
          stepId: waiting.id,
          timedOut: false,
          physicalQueue: physical,
          claimSignal,
          now
        })
        return
      }
      // woken and claimed for this process's worker, with the signal (in the same statement): it
      // runs the step with no claim of its own
      state.handedStep = { workflow: run.workflow, stepId: waiting.id, queue }
      const [claimRow] = yield* statements.stepWakeClaim({
        workflow: run.workflow,
        runId: run.id,
        stepId: waiting.id,
        physicalQueue: physical,
        claim: { claimedBy: slot.claimedBy, visibilityMs: slot.visibilityMs },
        worker,
        appRevision: revision,
        claimSignal,
        now
      })
      const message = claimRow === undefined ? undefined : store.claimedMessage(queue, claimRow)
      state.handover = message === undefined || claimRow === undefined ? undefined : { message, claim: claimRow }
    })

  /**
   * Once the signal's transaction ended (it is the outermost): a committed hand-over goes to its
   * reader; otherwise the reserved room is given back, and a hand-over whose commit may be hidden
   * by a lost reply is released in the background.
   */
  const settle = (state: HandOver, exit: Exit.Exit<unknown, unknown>): Effect.Effect<void> =>
    Effect.suspend(() => {
      const taken = state.slot
      state.slot = undefined
      if (taken === undefined) return Effect.void
      const handed = state.handedStep
      if (Exit.isSuccess(exit) && state.handover !== undefined && handed !== undefined) {
        const { message, claim } = state.handover
        const key = deliveryKey(message.msgId, message.readCt)
        preclaimed.set(key, { claim, inRead: false })
        // a hand-over refused (the worker is stopping, or has no free executor for it), or caught
        // in the buffer by a drain or a pause, has its step released before the message goes
        // back unread; its next read gives the same key, so the claim noted for this delivery
        // goes first. A release that fails has the message go back as read (LocalDispatch), for
        // its next delivery to apply the stall action to the step.
        const release = Effect.sync(() => preclaimed.delete(key)).pipe(
          Effect.andThen(
            releaseStep({
              workflow: handed.workflow,
              stepId: handed.stepId,
              claimedBy: taken.claimedBy,
              reason:
                "handed to a worker of this process that could not take it (stopping, no free slot, or its queue paused)"
            })
          )
        )
        return taken.deliver(message, Effect.asVoid(release)).pipe(
          Effect.tap((took) => Effect.sync(() => (took ? undefined : preclaimed.delete(key)))),
          Effect.asVoid
        )
      }
      taken.cancel()
      if (handed === undefined || Exit.isSuccess(exit) || !isPassingFailure(Cause.squash(exit.cause))) {
        return Effect.void
      }
      // the wake-and-claim may have committed with its reply lost: once the database answers,
      // its step is released (a new attempt) and its message given back, both by the slot's
      // mark, in the background (the caller has its error, and may send the signal again)
      return Effect.forkDetach(
        retryTransient(
          releaseStep({
            workflow: handed.workflow,
            stepId: handed.stepId,
            claimedBy: taken.claimedBy,
            reason: "the hand-over's reply was lost with its connection"
          })
        ).pipe(
          Effect.andThen(retryTransient(store.releaseClaim(handed.queue, taken.claimedBy))),
          Effect.catchCause((cause) => Effect.logWarning("pgbus: releasing a lost hand-over failed", cause))
        )
      ).pipe(Effect.asVoid)
    })

  return { wake, settle }
}
