/**
 * The workers of this process: one per local capsule (restarted after a defect), a child
 * process's recycling, and the children of `processes` capsules (ChildCapsule.ts).
 *
 * @since 0.1.0
 */
import { Cause, Deferred, Duration, Effect } from "effect"
import type { Batches } from "../Batch/Batch.ts"
import type { PgBusConfigShape } from "../Config.ts"
import type { Debouncer } from "../Job/Debounce.ts"
import { ZombieDetection } from "../Job/Executor.ts"
import * as JobStats from "../Job/JobStats.ts"
import type { UniqueKeys } from "../Job/Uniqueness.ts"
import type { Message, Receipt } from "../Queue/Message.ts"
import type { Notifier } from "../Queue/Notifier.ts"
import { makeQueueBreaker, QueueBreaker } from "../Queue/QueueBreaker.ts"
import type { QueueStates } from "../Queue/QueueStates.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import type { Registry } from "../Registry.ts"
import type { Capsule } from "./Capsule.ts"
import {
  awaitRecycle,
  type ChildDeps,
  type ChildEntry,
  type ChildRole,
  type ChildSlots,
  ownEntry,
  reportClaims,
  superviseChildren,
  tellClaimsWhileAlive,
  tellParent
} from "./ChildCapsule.ts"
import { gateReads } from "./ConnectionWatch.ts"
import type { Processes } from "./Processes.ts"
import { runWorker, type WorkerStats } from "./Worker.ts"

/**
 * What the parent needs to run its children (ChildCapsule.ts): how to stop them, how to release
 * a dead one's claims, and how to keep a silent one's.
 */
const childDeps = (
  config: PgBusConfigShape,
  processes: Processes["Service"],
  store: QueueStore["Service"],
  entry: ChildEntry,
  slots: ChildSlots
): ChildDeps => ({
  entry,
  slots,
  drainTimeout: config.drainTimeout,
  // as often as the child would beat its row or extend its claims, whichever is sooner
  keepEvery: Duration.min(
    config.processHeartbeatInterval,
    config.visibilityHeartbeatInterval ?? Duration.millis(Math.max(1, Duration.toMillis(config.visibilityTimeout) / 3))
  ),
  keepClaims: (id, claims) =>
    Effect.gen(function* () {
      yield* processes.touch(id)
      const byQueue = new Map<string, Array<Receipt>>()
      for (const c of claims) byQueue.set(c.queue, [...(byQueue.get(c.queue) ?? []), c.receipt])
      for (const [queue, receipts] of byQueue) {
        yield* store.setVisibility(queue, receipts, config.visibilityTimeout)
      }
    }).pipe(Effect.catch((e) => Effect.logWarning("pgbus: keeping a silent child's claims failed", e))),
  releaseDead: (id) =>
    processes.releaseDead([id]).pipe(
      Effect.map((r) => r.released.reduce((n, q) => n + q.released, 0)),
      Effect.catch((e) => Effect.as(Effect.logWarning("pgbus: releasing a dead child's claims failed", e), 0))
    )
})

/** What this process's workers need. */
export interface LocalWorkersDeps {
  readonly config: PgBusConfigShape
  readonly store: QueueStore["Service"]
  /** The store the workers claim and archive through: `WorkerQueueStore`, on the workers' session. */
  readonly workerStore: QueueStore["Service"]
  readonly notifier: Notifier["Service"]
  readonly registry: Registry["Service"]
  readonly processes: Processes["Service"]
  readonly queueStates: QueueStates["Service"]
  readonly batches: Batches["Service"]
  readonly uniqueKeys: UniqueKeys
  readonly debouncer: Debouncer
  readonly processId: string
  /** This process's role when it is a child of a `processes` capsule. */
  readonly child: ChildRole | undefined
  /** The capsules run here, and their figures (by index). */
  readonly local: ReadonlyArray<Capsule>
  readonly stats: ReadonlyArray<WorkerStats>
  /** The capsules run in child processes of this one. */
  readonly childCapsules: ReadonlyArray<Capsule>
  readonly childEntry: ChildEntry | undefined
  /** Where readiness finds the children. */
  readonly childSlots: ChildSlots
  /** Runs once a capsule's first claim has ended (by index). */
  readonly firstClaimOf: (i: number) => Effect.Effect<void>
  /** The consumer gate of a capsule (single active consumer, consumer priority). */
  readonly mayReadOf: (capsule: Capsule) => ((queue: string) => boolean) | undefined
}

/**
 * Forks the workers of the local capsules and the supervision of the child capsules; returns
 * what a child waits for before it drains (its recycling, or its parent gone), else never.
 */
export const runLocalWorkers = (deps: LocalWorkersDeps) =>
  Effect.gen(function* () {
    const { config, store, processes, queueStates, child, local, stats } = deps
    let recycle: Effect.Effect<void> = Effect.never
    const paused = yield* queueStates.watch
    // the per-queue circuit breaker of this process's workers (failures in a row, by queue)
    const queueBreaker = makeQueueBreaker(config, queueStates)
    const workerStore = gateReads(deps.workerStore, config)
    // created before the workers are forked, so its last flush runs after they drained
    const jobStats = yield* JobStats.make
    // a child recycled after maxJobsPerProcess: its worker takes no more than that, and says
    // when all of them ended
    const budgetSpent = yield* Deferred.make<void>()
    const jobBudget = (capsule: Capsule) =>
      child === undefined || capsule.maxJobsPerProcess === undefined
        ? undefined
        : { limit: capsule.maxJobsPerProcess, onSpent: () => Deferred.doneUnsafe(budgetSpent, Effect.void) }
    // a child tells its parent its claims after each claim and every 250 ms: while it is silent
    // (a job blocks its event loop) the parent keeps them (ChildCapsule.ts); forked before the
    // workers, so that it speaks until they drained
    let inFlight: ReadonlySet<Message> = new Set()
    const tellClaims =
      child === undefined
        ? undefined
        : (claims: ReadonlySet<Message>) => {
            inFlight = claims
            reportClaims(claims)
          }
    if (child !== undefined) yield* Effect.forkScoped(tellClaimsWhileAlive(() => inFlight))
    yield* Effect.forkScoped(
      Effect.forEach(
        local,
        (capsule, i) =>
          Effect.scoped(
            runWorker(
              capsule,
              {
                config,
                // reads fail at once while the connection breaker is open
                store: workerStore,
                notifier: deps.notifier,
                registry: deps.registry,
                processId: deps.processId,
                recordBatchOutcomes: deps.batches.recordOutcomes,
                onFirstClaim: deps.firstClaimOf(i),
                paused,
                recordStats: jobStats.record,
                uniqueKeys: deps.uniqueKeys,
                debouncer: deps.debouncer,
                mayRead: deps.mayReadOf(capsule),
                jobBudget: jobBudget(capsule),
                reportClaims: tellClaims
              },
              stats[i]!
            )
          ).pipe(
            // a worker that stops (a defect in its machinery) is restarted; readiness says
            // DEGRADED meanwhile
            Effect.catchCause((cause) =>
              Cause.hasInterruptsOnly(cause)
                ? Effect.failCause(cause)
                : Effect.sync(() => {
                    stats[i]!.healthy = false
                  }).pipe(
                    Effect.andThen(
                      Effect.logError(`pgbus: capsule ${capsule.name} stopped, restarting`, Cause.pretty(cause))
                    ),
                    Effect.andThen(Effect.sleep("1 second"))
                  )
            ),
            Effect.forever,
            Effect.provideService(ZombieDetection, config.zombieDetection),
            Effect.provideService(QueueBreaker, queueBreaker),
            Effect.annotateLogs({ capsule: capsule.name })
          ),
        { concurrency: "unbounded", discard: true }
      )
    )
    if (child !== undefined) {
      const capsule = local[0]!
      recycle = awaitRecycle(capsule, budgetSpent).pipe(
        Effect.tap((reason) =>
          reason === undefined
            ? Effect.logWarning("[pgbus] the parent process is gone: draining")
            : tellParent(reason).pipe(
                Effect.andThen(Effect.logInfo(`[pgbus] recycling this child process (${reason}): draining`))
              )
        ),
        Effect.asVoid
      )
    }
    // the children of `processes` capsules: each drains with this process (their scope closes
    // with it: SIGTERM, then their drain is waited for)
    const entry = deps.childEntry ?? ownEntry()
    for (const capsule of deps.childCapsules) {
      yield* Effect.forkScoped(
        superviseChildren(capsule, childDeps(config, processes, store, entry, deps.childSlots)).pipe(
          Effect.annotateLogs({ capsule: capsule.name })
        )
      )
    }
    return recycle
  })
