/**
 * A worker's drain, when its scope closes: stop claiming, give buffered messages back at once,
 * let running jobs finish up to the drain timeout, give back what is left, archive the successes.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Fiber, FiberSet, Queue, Schedule } from "effect"
import { jobOf } from "../../Job/Executor.ts"
import { readClaimOf } from "./Claim.ts"
import { forget, groupByQueue, type WorkerContext } from "./Context.ts"

/** Drains the worker: its executors are interrupted after the wait, then the flusher, then a last flush. */
export const drain = (
  ctx: WorkerContext,
  executors: FiberSet.FiberSet,
  flusherFiber: Fiber.Fiber<never>,
  flush: Effect.Effect<boolean>
): Effect.Effect<void> =>
  Effect.gen(function* () {
    const { config, registry } = ctx.deps
    const { stats, running } = ctx
    ctx.stopping = true
    const buffered = yield* Queue.clear(ctx.work)
    stats.buffered = 0
    if (buffered.length > 0) {
      // a woken step claimed in the read is released first: its next delivery finds no dead worker's claim
      for (const read of ctx.reads) {
        const claim = readClaimOf(ctx, read)
        const mine = claim === undefined ? [] : buffered.filter((m) => m.queue === read.queue)
        if (claim !== undefined && mine.length > 0) yield* claim.release(mine, true)
      }
      // unread: no job saw them, so their next delivery is no zombie's and costs no retry
      for (const [queue, receipts] of groupByQueue(buffered)) {
        yield* ctx.store
          .giveBackUnread(queue, receipts, ctx.deps.processId)
          .pipe(Effect.catch((e) => Effect.as(Effect.logWarning("pgbus: release failed", e), 0)))
      }
      for (const m of buffered) forget(ctx, m)
      yield* Effect.logInfo(`pgbus: gave ${buffered.length} buffered message(s) back`)
    }
    if (running.size > 0) {
      const shown = [...running].slice(0, 5).map((m) => `${jobOf(registry, m).name} #${m.msgId} on ${m.queue}`)
      const more = running.size > shown.length ? ` and ${running.size - shown.length} more` : ""
      yield* Effect.logInfo(
        `pgbus: draining: waiting for ${running.size} running job(s) to finish (${shown.join(", ")}${more}), at most ${Duration.format(config.drainTimeout)}`
      )
    }
    const waited = yield* Effect.repeat(
      Effect.sync(() => stats.running),
      { until: (running) => running === 0, schedule: Schedule.spaced("10 millis") }
    ).pipe(Effect.timeoutOption(config.drainTimeout))
    if (waited._tag === "None") {
      yield* Effect.logWarning(`pgbus: drain timeout: abandoning ${stats.running} running job(s)`)
    }
    // interrupting executors gives back what still runs; then archive what succeeded
    yield* FiberSet.clear(executors)
    yield* Fiber.interrupt(flusherFiber)
    yield* flush
  }).pipe(Effect.annotateLogs({ capsule: ctx.capsule.name }))
