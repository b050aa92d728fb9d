/**
 * Giving read-ahead back: buffered messages that no job saw go back to their queues as if unread,
 * all of them at a drain, and those of a queue once it is paused (pgbus gives them back on drain,
 * recycle, pause or shutdown).
 *
 * @since 0.1.0
 */
import { Effect, Queue } from "effect"
import type { Message } from "../../Queue/Message.ts"
import { readClaimOf } from "./Claim.ts"
import { forget, groupByQueue, isPaused, roomFreedUnsafe, type WorkerContext } from "./Context.ts"
import { giveBackHandOver } from "./LocalDispatch.ts"

/**
 * Gives buffered messages back unread (by this process's claim marks): the woken steps their
 * reads claimed are released first, so that their next delivery finds no claim held as by a dead
 * worker. No job saw them, so their next delivery is their first: no zombie warning, no retry spent.
 */
export const giveBackBuffered = (ctx: WorkerContext, buffered: ReadonlyArray<Message>): Effect.Effect<void> =>
  Effect.gen(function* () {
    for (const read of ctx.reads) {
      const claim = readClaimOf(ctx, read)
      const mine = claim === undefined ? [] : buffered.filter((m) => m.queue === read.queue)
      if (claim !== undefined && mine.length > 0) yield* claim.release(mine, true)
    }
    // a woken step handed over and caught in the buffer goes back as a refused hand-over does:
    // its step released first (its claim's mark is the hand-over's, which no later delivery
    // of the message owns)
    const unread: Array<Message> = []
    for (const m of buffered) {
      const hand = ctx.handedOver.get(m)
      if (hand === undefined) unread.push(m)
      else yield* giveBackHandOver(ctx, m, hand)
    }
    for (const [queue, receipts] of groupByQueue(unread)) {
      yield* ctx.store
        .giveBackUnread(queue, receipts, ctx.deps.processId)
        .pipe(Effect.catch((e) => Effect.logWarning("pgbus: giving buffered messages back failed", e)))
    }
    for (const m of buffered) forget(ctx, m)
  }).pipe(
    // under the heartbeat's lock: a heartbeat of a snapshot that still holds them cannot hide
    // them again for a visibility timeout (one given back as read keeps its receipt)
    (giveBack) => (buffered.length === 0 ? Effect.void : ctx.flushLock.withPermit(giveBack))
  )

/**
 * Takes the buffered messages of paused queues out of the buffer, at once (the others keep their
 * order); they are no longer counted as buffered.
 */
export const takePausedBuffered = (ctx: WorkerContext): Array<Message> => {
  const kept: Array<Message> = []
  const paused: Array<Message> = []
  for (let taken = Queue.takeUnsafe(ctx.work); taken !== undefined; taken = Queue.takeUnsafe(ctx.work)) {
    if (taken._tag !== "Success") break
    ;(isPaused(ctx, taken.value.queue) ? paused : kept).push(taken.value)
  }
  Queue.offerAllUnsafe(ctx.work, kept)
  ctx.stats.buffered = Math.max(0, ctx.stats.buffered - paused.length)
  return paused
}

/**
 * An executor took `m` from the buffer while its queue is paused: it and every other buffered
 * message of a paused queue go back, unread, instead of running.
 */
export const givePausedBack = (ctx: WorkerContext, m: Message): Effect.Effect<void> =>
  Effect.suspend(() => {
    ctx.stats.buffered = Math.max(0, ctx.stats.buffered - 1)
    const back = [m, ...takePausedBuffered(ctx)]
    // not run: they do not count against a recycling worker's job budget
    ctx.taken = Math.max(0, ctx.taken - back.length)
    return giveBackBuffered(ctx, back).pipe(
      // the claim loop may wait for capacity: it reads the other queues, or waits for the resume
      Effect.andThen(Effect.sync(() => roomFreedUnsafe(ctx))),
      Effect.andThen(
        Effect.logInfo(`pgbus: gave ${back.length} buffered message(s) of paused queue(s) back`).pipe(
          Effect.annotateLogs({ capsule: ctx.capsule.name })
        )
      )
    )
  })
