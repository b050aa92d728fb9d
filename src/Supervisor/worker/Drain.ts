/**
 * A worker's drain, when its scope closes: stop claiming, give buffered messages back at once,
 * let running jobs (and successes still settling) finish up to the drain timeout, give back what is
 * left, archive the successes.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Fiber, FiberSet, Queue, Schedule } from "effect"
import { jobOf } from "../../Job/Executor.ts"
import type { WorkerContext } from "./Context.ts"
import { giveBackBuffered } from "./GiveBack.ts"

/** Drains the worker: its executors are interrupted after the wait, then the flusher, then a last flush. */
export const drain = (
  ctx: WorkerContext,
  executors: FiberSet.FiberSet,
  settlers: FiberSet.FiberSet,
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
      yield* giveBackBuffered(ctx, buffered)
      yield* Effect.logInfo(`pgbus: gave ${buffered.length} buffered message(s) back`)
    }
    if (running.size > 0) {
      const shown = [...running].slice(0, 5).map((m) => `${jobOf(registry, m).name} #${m.msgId} on ${m.queue}`)
      const more = running.size > shown.length ? ` and ${running.size - shown.length} more` : ""
      yield* Effect.logInfo(
        `pgbus: draining: waiting for ${running.size} running job(s) to finish (${shown.join(", ")}${more}), at most ${Duration.format(config.drainTimeout)}`
      )
    }
    // a success still settling (its write in flight) is waited for as a running job is
    const waited = yield* Effect.repeat(
      Effect.sync(() => stats.running + ctx.settling),
      { until: (left) => left === 0, schedule: Schedule.spaced("10 millis") }
    ).pipe(Effect.timeoutOption(config.drainTimeout))
    if (waited._tag === "None") {
      yield* Effect.logWarning(
        `pgbus: drain timeout: abandoning ${stats.running} running job(s)${ctx.settling > 0 ? ` and ${ctx.settling} success(es) still settling` : ""}`
      )
    }
    // interrupting executors gives back what still runs (a settling success once its write,
    // uninterruptible, has ended); then archive what succeeded
    yield* FiberSet.clear(executors)
    yield* FiberSet.clear(settlers)
    yield* Fiber.interrupt(flusherFiber)
    yield* flush
  }).pipe(Effect.annotateLogs({ capsule: ctx.capsule.name }))
