/**
 * A worker's side of local dispatch (Notifier.reserveLocal): a sender of this process may insert
 * a message claimed for this worker and hand it over after its commit, with no NOTIFY and no read.
 *
 * @since 0.1.0
 */
import { Effect, Queue, type Scope } from "effect"
import { type Message, receiptOf } from "../../Queue/Message.ts"
import type { LocalSlot } from "../../Queue/Notifier.ts"
import * as QueueName from "../../Queue/QueueName.ts"
import { freeSlots, gated, type HandOver, type WorkerContext } from "./Context.ts"

/**
 * Gives back a message handed over that no job saw: unread (its next delivery is not one after
 * a dead worker's, nor a retry spent), after `beforeGiveBack` (a woken step's release); as read
 * when that failed, for its next delivery to repair what the message still holds (a step claimed
 * under the hand-over's mark is found stalled there).
 */
export const giveBackHandOver = (ctx: WorkerContext, m: Message, hand: HandOver): Effect.Effect<void> => {
  const receipt = receiptOf(m)
  return (hand.beforeGiveBack ?? Effect.void).pipe(
    Effect.matchCauseEffect({
      onSuccess: () => Effect.asVoid(ctx.store.unclaim(m.queue, receipt, hand.claimedBy)),
      onFailure: (cause) =>
        Effect.logWarning("pgbus: releasing a refused hand-over's claim failed", cause).pipe(
          Effect.andThen(ctx.store.release(m.queue, [receipt]))
        )
    }),
    Effect.catch((e) => Effect.logWarning("pgbus: giving back a refused hand-over failed", e))
  )
}

/**
 * Offers the worker's plain queues for local hand-over (when `localDispatch` is on): while a
 * slot is free, and, for a worker of several queues (priority order) or a job (FIFO), only
 * while they are drained. With more to read, the read loop still claims whenever nothing is
 * buffered, so the queue is not starved. The reserved slot counts as buffered until the message
 * arrives or the send gives it back.
 */
export const offerLocalDispatch = (ctx: WorkerContext): Effect.Effect<void, never, Scope.Scope> => {
  const { config, reads, stats, capsule } = ctx
  const { notifier, registry, paused, processId, reportClaims } = ctx.deps
  const localQueues = reads.flatMap((r) =>
    r.cursor === undefined ? [QueueName.physicalOf(config.queuePrefix, r.queue)] : []
  )
  if (!config.localDispatch || localQueues.length === 0) return Effect.void
  return notifier.offerLocal(localQueues, {
    reserve: (physicalQueue, request): LocalSlot | undefined => {
      // with more to read, only a worker of one queue (no priority order to keep), and only
      // for a message that may overtake the others (a woken step, not a job)
      if (ctx.stopping || freeSlots(ctx) <= 0 || (ctx.queuesMayHaveMore && (reads.length > 1 || request.inOrder)))
        return undefined
      if (paused?.isPaused(physicalQueue) === true || gated(ctx, ctx.logicalOf.get(physicalQueue))) return undefined
      // a message this process cannot run goes the usual way, to a process that can
      const known =
        "job" in request.runs ? registry.jobs.has(request.runs.job) : registry.workflows.has(request.runs.workflow)
      if (!known) return undefined
      // a step, like any message handed over, goes only to a free executor, never behind
      // read-ahead: a woken step starts at once or goes the usual way (one that finds the
      // executors taken by the time it arrives is refused, and released by its sender; one a
      // drain or a pause catches in the buffer goes back as a refused one does). Holding
      // read-ahead back while a sender is out
      // avoided those refusals but cost the steps woken through the queue their read-ahead:
      // bench:signals' p99 rose from 23-35 to 30-79 ms (4 alternated pairs, 2026-12-05).
      const step = "workflow" in request.runs
      stats.buffered++
      ctx.taken++
      let open = true
      const close = () => {
        if (!open) return false
        open = false
        return true
      }
      // a mark of its own, as a claim's: a send that loses its reply releases by it
      const claimedBy = `${processId}#${++ctx.claims}`
      return {
        claimedBy,
        visibilityMs: ctx.visibilityMs,
        deliver: (m, beforeGiveBack) =>
          Effect.suspend(() => {
            if (!close()) return Effect.succeed(false)
            // this slot counts in `buffered`: with it, no more than the executors
            if (!ctx.stopping && (!step || stats.running + stats.buffered <= capsule.concurrency)) {
              ctx.inFlight.add(m)
              if (step) ctx.handedOver.set(m, { claimedBy, beforeGiveBack })
              reportClaims?.(ctx.inFlight)
              return Queue.offer(ctx.work, m).pipe(Effect.as(true))
            }
            // drained meanwhile (or no executor free for a step): given back at once
            stats.buffered = Math.max(0, stats.buffered - 1)
            ctx.taken--
            return Effect.as(giveBackHandOver(ctx, m, { claimedBy, beforeGiveBack }), false)
          }),
        cancel: () => {
          if (close()) {
            stats.buffered = Math.max(0, stats.buffered - 1)
            ctx.taken--
          }
        }
      }
    }
  })
}
