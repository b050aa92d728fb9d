/**
 * A worker runs one capsule: a read loop that claims up to its free slots (plus `readAhead`)
 * from its queues in priority order, `concurrency` executor fibers, successes archived in
 * batches (by the next claim while the queues have more, else by a flusher), a poller that
 * wakes the read loop as a NOTIFY would, and a heartbeat that keeps the visibility of every
 * message in flight from lapsing. Closing its scope drains it: stop claiming, give buffered
 * messages back at once, let running jobs finish up to the drain timeout, give back what is left.
 *
 * @since 0.1.0
 */
import { Effect, FiberSet } from "effect"
import { makeCompleter } from "../Job/Completer.ts"
import type { Capsule } from "./Capsule.ts"
import { makeFlush, makeFlusher } from "./worker/Archive.ts"
import { makePoller, makeReadLoop } from "./worker/Claim.ts"
import { makeWorkerContext, type WorkerDeps, type WorkerStats } from "./worker/Context.ts"
import { drain } from "./worker/Drain.ts"
import { makeExecutor } from "./worker/Execute.ts"
import { ensureFairIndexes, ensureOrderIndexes } from "./worker/Indexes.ts"
import { makeHeartbeat } from "./worker/LeaseKeeping.ts"
import { offerLocalDispatch } from "./worker/LocalDispatch.ts"

export {
  makeStats,
  readsFairly,
  readsInOrder,
  type WorkerDeps,
  type WorkerStats
} from "./worker/Context.ts"

/**
 * Runs a capsule until interrupted, then drains it. Needs a Scope: the drain runs when it closes.
 */
export const runWorker = (capsule: Capsule, deps: WorkerDeps, stats: WorkerStats) =>
  Effect.gen(function* () {
    const ctx = yield* makeWorkerContext(capsule, deps, stats)
    const { store, registry, recordBatchOutcomes, uniqueKeys } = deps
    // what becomes of each delivery (retries, dead letters, batch members' ends) is the completer's
    const completer = makeCompleter({ store, registry, recordBatchOutcomes, uniqueKeys })
    const flush = makeFlush(ctx, completer)
    const settlers = yield* FiberSet.make()
    const executor = makeExecutor(ctx, completer, settlers)
    const readLoop = makeReadLoop(ctx)

    yield* offerLocalDispatch(ctx)

    const fairQueues = ctx.reads.flatMap((r) => (r.cursor === undefined ? [] : [r.queue]))
    if (fairQueues.length > 0) yield* Effect.forkScoped(ensureFairIndexes(store, fairQueues))
    if (ctx.orderedQueues.size > 0) yield* Effect.forkScoped(ensureOrderIndexes(store, [...ctx.orderedQueues]))

    const executors = yield* FiberSet.make()
    for (let i = 0; i < capsule.concurrency; i++) yield* FiberSet.run(executors, executor)
    const flusherFiber = yield* Effect.forkScoped(makeFlusher(ctx, flush))
    yield* Effect.forkScoped(makePoller(ctx))
    if (deps.config.visibilityHeartbeat) yield* Effect.forkScoped(makeHeartbeat(ctx))

    // Added after the fibers above, so it runs before they are interrupted.
    yield* Effect.addFinalizer(() => drain(ctx, executors, settlers, flusherFiber, flush))

    return yield* readLoop
  })
