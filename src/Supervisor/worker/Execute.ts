/**
 * A worker's executors: each takes a claimed message, runs its job, counts and times the
 * delivery, and applies its outcome (a success waits for its archive, anything else goes to the
 * completer at once); a freed slot wakes the claim loop when a claim is worth it.
 *
 * @since 0.1.0
 */
import { Cause, Effect, Exit, FiberSet, Queue } from "effect"
import { type Completer, type Outcome, runDebounced, runExclusive } from "../../Job/Completer.ts"
import { debounceKeyOfMessage } from "../../Job/Debounce.ts"
import { execute, jobOf } from "../../Job/Executor.ts"
import { recordJobUnsafe } from "../../Job/JobMetrics.ts"
import { jobNameOf } from "../../Job/RegisteredJob.ts"
import { resolvePolicy } from "../../Job/Retry.ts"
import { settleOutcome } from "../../Job/Settling.ts"
import { keyOfMessage } from "../../Job/Uniqueness.ts"
import type { Message } from "../../Queue/Message.ts"
import { checkBudget, forget, isPaused, roomFreedUnsafe, type WorkerContext } from "./Context.ts"
import { givePausedBack } from "./GiveBack.ts"

/** An executor yields after this many jobs in a row that ran without suspending (see makeExecutor). */
export const YIELD_EVERY = 8

/**
 * Successes that may settle aside per slot (`Job/Settling.ts`); past that the executor awaits its
 * own. A write waits for the outcome batches out before it (10-15 ms with both cores busy) while
 * the slots run the next steps: one per slot held the executors two deliveries in five at 800
 * signals/s.
 */
export const SETTLING_PER_SLOT = 4

/** The metrics' status of each outcome that ends a delivery. */
const STATUS_OF = {
  Succeeded: "completed",
  Retry: "retried",
  DeadLetter: "dead_lettered",
  Discarded: "discarded",
  Superseded: "superseded"
} as const

/**
 * A success waits for the next archive (a flush, or the next claim's statement); any other
 * outcome is applied by the completer at once.
 */
const applyOutcome = (ctx: WorkerContext, completer: Completer, m: Message, outcome: Outcome): Effect.Effect<void> => {
  const { stats } = ctx
  switch (outcome._tag) {
    case "Succeeded":
      stats.succeeded++
      // a result is archived at once, with it, by the completer (its awaiters wake)
      if (outcome.result !== undefined) break
      ctx.completed.push(m)
      ctx.flushSignal.openUnsafe()
      return Effect.void
    case "Retry":
      stats.retried++
      break
    case "DeadLetter":
      stats.deadLettered++
      break
    case "Abandoned":
      stats.abandoned++
      break
    case "Discarded":
    case "Superseded":
    case "Snoozed":
      break
  }
  const end = Effect.ensuring(
    completer.complete(m, outcome),
    Effect.sync(() => {
      forget(ctx, m)
      // a head that left its queue (archived, dead-lettered, discarded) hands its key on
      if (ctx.orderedQueues.has(m.queue)) ctx.wakeups.wake()
    })
  )
  // A retry, a snooze and a give-back set the row's visibility: under the heartbeat's lock,
  // so that a heartbeat that still counts the message in flight cannot extend it to a whole
  // visibility timeout right after (a 1 s backoff became 30 s on a loaded machine).
  return outcome._tag === "Retry" || outcome._tag === "Snoozed" || outcome._tag === "Abandoned"
    ? ctx.flushLock.withPermit(end)
    : end
}

/** Counts and times a delivery that ended (an abandoned one did not). */
const recordOutcome = (ctx: WorkerContext, m: Message, outcome: Outcome, startedAt: number): void => {
  // an abandoned or snoozed delivery did not end; a discarded or superseded one is in the
  // metrics only (job_stats has no column for it; a superseded one did not run)
  if (outcome._tag === "Abandoned" || outcome._tag === "Snoozed") return
  const status = STATUS_OF[outcome._tag]
  const now = ctx.clock.currentTimeMillisUnsafe()
  const ms = now - startedAt
  if (status !== "superseded") ctx.readAhead.ran(ms)
  const name = jobNameOf(m)
  recordJobUnsafe(ctx.metricsContext, m.queue, name, status, ms)
  // pickup latency of a first delivery: enqueued -> started (a scheduled job's delay included)
  if (status !== "discarded" && status !== "superseded") {
    ctx.deps.recordStats?.(
      m.queue,
      name,
      status,
      ms,
      m.readCt === 1 ? startedAt - m.enqueuedAt.getTime() : undefined,
      now
    )
  }
}

/**
 * An executor of the worker (it runs `concurrency` of them). It never dies: a defect in the
 * machinery around a job is logged, and the message is left to its visibility timeout (it is
 * still held by the heartbeat until then).
 */
export const makeExecutor = (
  ctx: WorkerContext,
  completer: Completer,
  /** Where successes still settling are awaited (the drain waits for them). */
  settlers: FiberSet.FiberSet
): Effect.Effect<never> => {
  const { stats, running } = ctx
  const { config, registry, processId, uniqueKeys, debouncer } = ctx.deps
  const defaultPolicy = resolvePolicy(config, undefined)
  const settlingLimit = SETTLING_PER_SLOT * stats.capacity
  const settled = (m: Message, outcome: Outcome) =>
    settleOutcome(outcome, m.readCt, jobOf(registry, m).registered?.policy ?? defaultPolicy)
  // A success still settling (a workflow run's last outcome in flight): its slot is freed now
  // and its write awaited aside, the message held (the heartbeat keeps its claim) until it
  // commits; then applied like every other outcome, an interrupted or broken wait giving the
  // message back. With `SETTLING_PER_SLOT` per slot settling already, the executor awaits it.
  const settleAside = (m: Message, outcome: Outcome): Effect.Effect<void> =>
    Effect.suspend(() => {
      if (ctx.settling >= settlingLimit)
        return Effect.flatMap(settled(m, outcome), (o) => applyOutcome(ctx, completer, m, o))
      ctx.settling++
      const aside = Effect.onExit(settled(m, outcome), (exit) =>
        Effect.ensuring(
          applyOutcome(ctx, completer, m, Exit.isSuccess(exit) ? exit.value : { _tag: "Abandoned" }),
          Effect.sync(() => {
            ctx.settling--
          })
        )
      )
      return Effect.asVoid(FiberSet.run(settlers, aside))
    })
  // a debounced job's first delivery runs only if it is its key's last; a whileExecuting job's
  // run holds its key (plain messages pay two field lookups)
  const executeOne = (m: Message) => {
    const run = execute(registry, defaultPolicy, m)
    const unique = uniqueKeys !== undefined && keyOfMessage(m) !== undefined
    const debounced = debouncer !== undefined && debounceKeyOfMessage(m) !== undefined
    if (!unique && !debounced) return run
    const policy = jobOf(registry, m).registered?.policy ?? defaultPolicy
    const guarded = unique ? runExclusive(uniqueKeys!, registry, m, processId, policy, run) : run
    return debounced ? runDebounced(debouncer!, registry, m, policy, guarded) : guarded
  }
  // a delivery's slot is free: counted, and the claim loop or a waiting wake-up told
  const freeSlotUnsafe = (m: Message) => {
    stats.running--
    running.delete(m)
    checkBudget(ctx)
    roomFreedUnsafe(ctx)
  }
  const freeSlot = (m: Message) => Effect.sync(() => freeSlotUnsafe(m))
  // One exit step per delivery, run uninterruptibly (an `onExit` finalizer): it records and
  // applies the outcome, or gives an interrupted run's message back, and frees the slot. A plain
  // success only joins the archive list, so its slot is freed in the same step.
  const runOne = (m: Message) => {
    stats.buffered = Math.max(0, stats.buffered - 1)
    stats.running++
    running.add(m)
    const startedAt = ctx.clock.currentTimeMillisUnsafe()
    return Effect.onExit(executeOne(m), (exit) => {
      if (Exit.isSuccess(exit)) {
        let end: Effect.Effect<void> | undefined
        try {
          recordOutcome(ctx, m, exit.value, startedAt)
          end =
            exit.value._tag === "Succeeded" && exit.value.settle !== undefined
              ? settleAside(m, exit.value)
              : applyOutcome(ctx, completer, m, exit.value)
        } finally {
          // freed here unless the outcome's own step frees it after it (also when this code threw)
          if (end === undefined || end === Effect.void) freeSlotUnsafe(m)
        }
        return end === Effect.void ? end : Effect.ensuring(end, freeSlot(m))
      }
      return Exit.hasInterrupts(exit)
        ? Effect.ensuring(applyOutcome(ctx, completer, m, { _tag: "Abandoned" }), freeSlot(m))
        : freeSlot(m)
    })
  }
  // The loop's step is built once per executor fiber (it remembers the message it runs, for the
  // log of a defect): a delivery allocates no handler of its own for it.
  return Effect.suspend(() => {
    let current: Message | undefined
    let sinceYield = 0
    // After a job, the executor yields to the rest of the process (socket reads, timers, the
    // claim loop and the flusher) every YIELD_EVERY jobs, and at once when a claim became due,
    // so that the claim overlaps the jobs still buffered; not after every job (a yield is a
    // scheduler task and an async context per job: W1 spent about 2 us a job on them). A job
    // that suspends (any I/O) yields by itself.
    const afterJob = (): Effect.Effect<void> => {
      if (++sinceYield < YIELD_EVERY && !ctx.claimDue) return Effect.void
      sinceYield = 0
      ctx.claimDue = false
      return Effect.yieldNow
    }
    const paused = ctx.deps.paused
    const step = Effect.flatMap(Queue.take(ctx.work), (m) => {
      current = m
      // read ahead before its queue was paused: back to the queue, not run
      if (paused?.any() === true && isPaused(ctx, m.queue)) return givePausedBack(ctx, m)
      return runOne(m)
    }).pipe(
      Effect.catchCause((cause) =>
        Cause.hasInterruptsOnly(cause)
          ? Effect.failCause(cause)
          : Effect.logError("pgbus: executing a message failed unexpectedly", Cause.pretty(cause)).pipe(
              Effect.andThen(
                Effect.sync(() => {
                  if (current !== undefined) forget(ctx, current)
                })
              )
            )
      )
    )
    return Effect.forever(Effect.flatMap(step, afterJob), { disableYield: true })
  })
}
