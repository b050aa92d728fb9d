/**
 * The supervisor: one Effect program with one Scope that runs the worker capsules, the
 * dispatcher (fast recovery of dead processes' claims, archive retention) and the process
 * heartbeat, logs the boot banner, serves the health endpoints, and drains on interruption
 * (SIGTERM/SIGINT under `Supervisor.runMain`).
 *
 * @since 0.1.0
 */

import os from "node:os"
import { Cause, Clock, Deferred, Duration, Effect, Exit, Layer, Option, Ref, Runtime, Schedule } from "effect"
import { SqlClient } from "effect/sql"
import { Batches, BatchSweep } from "../Batch/Batch.ts"
import {
  ConfigurationError,
  describeTarget,
  effectivePoolSize,
  PgBusConfig,
  type PgBusConfigShape,
  POOL_OVERHEAD,
  poolNeed
} from "../Config.ts"
import { breakerOf, retryTransient } from "../Database.ts"
import { consumerCapsules } from "../EventBus/Consumer.ts"
import { Outbox } from "../EventBus/Outbox.ts"
import { ProcessedEvents } from "../EventBus/ProcessedEvents.ts"
import { makeDebouncer } from "../Job/Debounce.ts"
import { ZombieDetection } from "../Job/Executor.ts"
import { JobClient, servedQueues } from "../Job/JobClient.ts"
import * as JobStats from "../Job/JobStats.ts"
import { makeJobStatsSql } from "../Job/JobStatsSql.ts"
import { makeUniqueKeys } from "../Job/Uniqueness.ts"
import { checkSchemaVersion, requireMigrated } from "../Migrations.ts"
import type { Message, Receipt } from "../Queue/Message.ts"
import { Notifier } from "../Queue/Notifier.ts"
import { makeQueueBreaker, QueueBreaker } from "../Queue/QueueBreaker.ts"
import { QueueStates } from "../Queue/QueueStates.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import type { RecurringTask } from "../Recurring/Recurring.ts"
import { RecurringScheduler } from "../Recurring/Scheduler.ts"
import { Registry } from "../Registry.ts"
import { VERSION } from "../version.ts"
import { WorkflowSweep } from "../Workflow/Engine.ts"
import { type Capsule, parseWorkers, validateCapsules } from "./Capsule.ts"
import {
  awaitRecycle,
  type ChildDeps,
  type ChildEntry,
  childRole,
  disconnectFromParent,
  ownEntry,
  reportClaims,
  superviseChildren,
  tellClaimsWhileAlive,
  tellParent
} from "./ChildCapsule.ts"
import { databaseState, gateReads, watchConnection } from "./ConnectionWatch.ts"
import { MetricsSampler, type Readiness, serveHealth } from "./Health.ts"
import { campaign, consumerRole, describeLeaders, type LeaderRole, type Rank } from "./Leader.ts"
import { DEGRADED_FOR_MS, type LoopBlock, watchEventLoop } from "./LoopWatch.ts"
import { Processes } from "./Processes.ts"
import { serveUnserved, unservedQueues } from "./Unserved.ts"
import { makeStats, readsFairly, readsInOrder, runWorker, type WorkerStats } from "./Worker.ts"

/** The roles a supervisor can run. */
export type Role = "workers" | "dispatcher" | "scheduler"

/** How a supervisor runs: which roles, which capsules. Defaults come from the config. */
export interface SupervisorOptions {
  /** Capsules to run (default: parsed from the config's `workers`). */
  readonly capsules?: ReadonlyArray<Capsule> | undefined
  /** Only the capsule of this name. */
  readonly capsule?: string | undefined
  /** Roles to run (default: all). */
  readonly roles?: ReadonlyArray<Role> | undefined
  /**
   * What child processes of `processes` capsules run (default: this process's own main module,
   * arguments and Node flags); it must run this supervisor with the same registry and capsules.
   */
  readonly childEntry?: ChildEntry | undefined
}

/** Archive retention runs at most this often. */
const ARCHIVE_CLEANUP_EVERY = Duration.hours(1)

/** The uniqueness reaper (keys whose message is gone) runs this often. */
const UNIQUE_KEY_REAP_EVERY = Duration.minutes(1)

/** Longest the dispatcher's first round waits at boot for the workers' first claims. */
const FIRST_CLAIMS_WAIT = Duration.seconds(1)

/** Runs a maintenance task repeatedly; a failure is logged and the next tick tries again. */
const repeatMaintenance = <A, E>(
  name: string,
  task: Effect.Effect<A, E>,
  every: Duration.Duration,
  quiet: () => boolean = () => false
) =>
  task.pipe(
    // while the connection breaker is open the outage was logged once: no line per tick
    Effect.catchCause((cause) =>
      quiet() ? Effect.void : Effect.logWarning(`pgbus: ${name} failed`, Cause.pretty(cause))
    ),
    Effect.repeat(Schedule.spaced(every)),
    Effect.forever
  )

/**
 * The scheduler leader's work: sync the tasks, then fire due slots every tick and apply the
 * ledger's retention hourly; a failed start is tried again after a tick.
 */
const runScheduler = (
  scheduler: RecurringScheduler["Service"],
  tasks: ReadonlyArray<RecurringTask>,
  every: Duration.Duration
): Effect.Effect<void> =>
  Effect.flatMap(scheduler.session(tasks), (session) =>
    Effect.all(
      [
        repeatMaintenance("recurring scheduler", session.runOnce, every),
        repeatMaintenance(
          "recurring ledger retention",
          Effect.flatMap(scheduler.purge, (n) =>
            n === 0 ? Effect.void : Effect.logInfo(`pgbus: recurring ledger retention deleted ${n} fire(s)`)
          ),
          ARCHIVE_CLEANUP_EVERY
        )
      ],
      { concurrency: "unbounded", discard: true }
    )
  ).pipe(
    Effect.catchCause((cause) =>
      Effect.logWarning("pgbus: the recurring scheduler could not start", Cause.pretty(cause)).pipe(
        Effect.andThen(Effect.sleep(every))
      )
    ),
    Effect.forever
  )

/**
 * Fails the boot when a pool that was set is smaller than the capsules need (every job may hold
 * a connection, beside the process's own: see `poolNeed`); a derived pool that falls short (event
 * consumers and served queues are known only now) is logged.
 */
const checkPool = (config: PgBusConfigShape, capacity: number, runsWorkers: boolean) =>
  Effect.gen(function* () {
    const pool = effectivePoolSize(config)
    const need = poolNeed(capacity)
    if (!runsWorkers || pool >= need) return
    const why = `the capsules run ${capacity} job(s) at once and the process needs ${POOL_OVERHEAD} connection(s) of its own: ${need} in all, the pool has ${pool}`
    if (config.poolSize !== undefined) {
      return yield* new ConfigurationError({
        key: "poolSize",
        rule: `${why}; set poolSize to ${need} or more, or lower the capsules' concurrency`,
        value: String(pool)
      })
    }
    yield* Effect.logWarning(
      `[pgbus] ${why} (derived from workers, without the event consumers and served queues); set poolSize to ${need}`
    )
  })

/** The recycling limits of a capsule, for the banner. */
const recycleLimits = (c: Capsule): string =>
  [
    c.maxJobsPerProcess === undefined ? "" : ` max_jobs=${c.maxJobsPerProcess}`,
    c.maxMemoryMb === undefined ? "" : ` max_memory_mb=${c.maxMemoryMb}`,
    c.maxLifetime === undefined ? "" : ` max_lifetime=${Duration.format(Duration.fromInputUnsafe(c.maxLifetime))}`
  ].join("")

/**
 * What the parent needs to run its children (ChildCapsule.ts): how to stop them, how to release
 * a dead one's claims, and how to keep a silent one's.
 */
const childDeps = (
  config: PgBusConfigShape,
  processes: Processes["Service"],
  store: QueueStore["Service"],
  entry: ChildEntry
): ChildDeps => ({
  entry,
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

/**
 * Runs the supervisor until interrupted, then drains. Provide `Registry.layer([...jobs])` and
 * `PgBus.layer()`; run it with `Supervisor.runMain` so a drained shutdown exits 0.
 */
export const runWith = (given: SupervisorOptions = {}) =>
  Effect.gen(function* () {
    // a child process of a `processes` capsule runs that capsule alone, in-process, workers only
    const child = Option.getOrUndefined(yield* childRole)
    const options: SupervisorOptions =
      child === undefined ? given : { ...given, capsule: child.capsule, roles: ["workers"] }
    // added first, so it runs last: a drained child's event loop empties and it exits
    if (child !== undefined) yield* Effect.addFinalizer(() => disconnectFromParent)
    const config = yield* PgBusConfig
    const breaker = breakerOf(config)
    const maintain = <A, E>(name: string, task: Effect.Effect<A, E>, every: Duration.Duration) =>
      repeatMaintenance(name, task, every, breaker.isOpen)
    const store = yield* QueueStore
    const notifier = yield* Notifier
    const registry = yield* Registry
    const client = yield* JobClient
    const processes = yield* Processes
    const sweep = yield* WorkflowSweep
    const batches = yield* Batches
    const batchSweep = yield* BatchSweep
    const processedEvents = yield* ProcessedEvents
    const outbox = yield* Outbox
    const queueStates = yield* QueueStates
    const scheduler = yield* RecurringScheduler
    const jobStatsSql = makeJobStatsSql(yield* SqlClient.SqlClient, config.schema)
    const uniqueKeys = makeUniqueKeys(yield* SqlClient.SqlClient, config.schema, store)
    const debouncer = makeDebouncer(yield* SqlClient.SqlClient, config.schema, store)
    const readiness = yield* Ref.make<Readiness>("BOOTING")
    const roles: ReadonlyArray<Role> = options.roles ?? ["workers", "dispatcher", "scheduler"]
    const allCapsules = options.capsules
      ? yield* validateCapsules(options.capsules)
      : yield* parseWorkers(config.workers)
    const selected = options.capsule === undefined ? allCapsules : allCapsules.filter((c) => c.name === options.capsule)
    if (options.capsule !== undefined && selected.length === 0) {
      return yield* Effect.die(
        new Error(`no capsule named ${options.capsule} (have: ${allCapsules.map((c) => c.name).join(", ")})`)
      )
    }
    // event consumers: one capsule per subscriber queue that no configured capsule reads
    const served = new Set(selected.flatMap((c) => c.queues))
    const consumers =
      options.capsule === undefined
        ? consumerCapsules(registry).filter((c) => !c.queues.some((q) => served.has(q)))
        : []
    const runsWorkers = roles.includes("workers")
    // registered jobs' and workflows' queues that no capsule reads: served, or a boot failure
    const extra =
      options.capsule === undefined && runsWorkers
        ? yield* serveUnserved(config, unservedQueues(registry.queueUsers, [...selected, ...consumers]), selected)
        : []
    const capsules: ReadonlyArray<Capsule> = [...selected, ...extra, ...consumers]
    // capsules of `processes` run in child processes (ChildCapsule.ts); the others, and a
    // child's own capsule, here
    const childCapsules = child === undefined ? capsules.filter((c) => c.processes !== undefined) : []
    const local = child === undefined ? capsules.filter((c) => c.processes === undefined) : capsules
    const processId = child?.processId ?? crypto.randomUUID()
    const capacity = runsWorkers ? local.reduce((n, c) => n + c.concurrency, 0) : 0
    yield* checkPool(config, capacity, runsWorkers)
    const stats: Array<WorkerStats> = runsWorkers ? local.map(makeStats) : []
    // At boot the workers claim first and the dispatcher's rounds start after their first
    // claims (1 s at most): a process (or a fleet) restarting with a backlog puts its work
    // ahead of sweeps and retention, which otherwise compete with the first claims for the
    // database (about 30 ms of every 20,000-job run of bench:jobs).
    const firstClaims = yield* Deferred.make<void>()
    const claimedOnce = new Set<number>()
    const firstClaimOf = (i: number) =>
      Effect.suspend(() => {
        claimedOnce.add(i)
        return claimedOnce.size >= local.length ? Deferred.succeed(firstClaims, undefined) : Effect.void
      })
    if (!runsWorkers || local.length === 0) yield* Deferred.succeed(firstClaims, undefined)
    // (the dispatcher's loops: they run while this process leads the role, see Leader.ts)
    const afterFirstClaims = <A, E>(loop: Effect.Effect<A, E>) =>
      Effect.suspend(() =>
        leadership.whileLeading(
          "dispatcher",
          Effect.andThen(Effect.timeoutOption(Deferred.await(firstClaims), FIRST_CLAIMS_WAIT), loop)
        )
      )

    yield* checkSchemaVersion()
    yield* requireMigrated
    // one line when the connection breaker opens, one when it closes; probes while it is open
    yield* Effect.forkScoped(watchConnection)
    // the event-loop watchdog: a blocked loop is logged with the jobs that ran meanwhile
    let lastBlock: LoopBlock | undefined
    if (config.eventLoopBlockThreshold !== undefined) {
      yield* Effect.forkScoped(
        watchEventLoop(config.eventLoopBlockThreshold, (block) => {
          lastBlock = block
        })
      )
    }

    // The campaigns for the maintenance roles start now, so that their connection is open by the
    // time the dispatcher's loops start. Every dispatcher loop runs through afterFirstClaims, so
    // only while this process leads the role; the scheduler only on a process with tasks (the
    // leader's code is the list that fires, its sync removes the others).
    const recurring = registry.recurring ?? []
    const runsScheduler = roles.includes("scheduler") && config.recurringEnabled && recurring.length > 0
    const leaderRoles: ReadonlyArray<LeaderRole> = [
      ...(roles.includes("dispatcher") ? (["dispatcher"] as const) : []),
      ...(runsScheduler ? (["scheduler"] as const) : [])
    ]
    // single active consumers campaign for their queues' locks, ranked consumers hold their
    // ranks, on the same connection, checked every poll tick (a standby takes over within one)
    const consumerRoles = runsWorkers
      ? [...new Set(local.flatMap((c) => (c.singleActiveConsumer === true ? c.queues : [])))].map(consumerRole)
      : []
    const ranks: ReadonlyArray<Rank> = runsWorkers
      ? local.flatMap((c) =>
          c.consumerPriority === undefined ? [] : c.queues.map((queue) => ({ queue, priority: c.consumerPriority! }))
        )
      : []
    const consumes = consumerRoles.length > 0 || ranks.length > 0
    const leadership = yield* campaign(processId, [...leaderRoles, ...consumerRoles], {
      ranks,
      every: consumes ? Duration.min(config.leaderCheckInterval, config.pollingInterval) : undefined
    })
    /** Whether a capsule may claim from one of its queues now (its lock held, not outranked). */
    const mayReadOf = (capsule: Capsule): ((queue: string) => boolean) | undefined =>
      capsule.singleActiveConsumer === true
        ? (queue) => leadership.leadsNow(consumerRole(queue))
        : capsule.consumerPriority === undefined
          ? undefined
          : (queue) => !leadership.outranked({ queue, priority: capsule.consumerPriority! })
    if (runsScheduler) {
      yield* Effect.forkScoped(
        leadership.whileLeading("scheduler", runScheduler(scheduler, recurring, config.recurringScheduleInterval))
      )
    }

    // Boot banner: what actually booted, never the password.
    const banner = [
      `boot: effect-pgbus ${VERSION} pid=${process.pid} host=${os.hostname()}`,
      `boot: connection=${describeTarget(config)} schema=${config.schema} pool=${effectivePoolSize(config)}${config.poolSize === undefined ? " (derived)" : ""} statement_timeout=${config.transactionPooler ? "the server's (transactionPooler)" : config.statementTimeout === undefined ? "off" : Duration.format(config.statementTimeout)}`,
      `boot: database ${config.databaseSource}`,
      `boot: listen_notify=${config.listenNotify} visibility_timeout=${Duration.format(config.visibilityTimeout)} max_retries=${config.maxRetries}`,
      `boot: roles=${roles.join(",")} jobs=${[...registry.jobs.keys()].join(",") || "(none)"}`,
      ...(runsWorkers
        ? capsules.map(
            (c) =>
              `boot: capsule=${c.name} queues=${c.queues.join(",")} concurrency=${c.concurrency} read_ahead=${c.readAhead ?? config.readAhead ?? "adaptive"}${c.singleActiveConsumer === true ? " single_active_consumer=true" : ""}${c.consumerPriority === undefined ? "" : ` consumer_priority=${c.consumerPriority}`}${childCapsules.includes(c) ? ` processes=${c.processes}${recycleLimits(c)}` : ""}`
          )
        : []),
      ...(child === undefined ? [] : [`boot: child process ${child.slot} of capsule ${child.capsule}`])
    ]
    for (const line of banner) yield* Effect.logInfo(`[pgbus] ${line}`)

    // Queues of the capsules and of the registered jobs exist before anyone reads or sends.
    const queues = new Set([...registry.queues, ...capsules.flatMap((c) => c.queues)])
    for (const q of queues) {
      const options = { fairIndex: readsFairly(config, registry, q), orderIndex: readsInOrder(config, registry, q) }
      for (const physical of servedQueues(config, q)) yield* client.ensureQueue(physical, options)
    }

    const registration = {
      id: processId,
      pid: process.pid,
      host: os.hostname(),
      roles,
      capsules: local.map((c) => ({
        name: c.name,
        queues: c.queues,
        concurrency: c.concurrency,
        ...(c.consumerPriority === undefined ? {} : { consumerPriority: c.consumerPriority }),
        ...(c.singleActiveConsumer === true ? { singleActiveConsumer: true } : {})
      })),
      capacity,
      appRevision: config.appRevision,
      version: VERSION
    }
    // a database restarting while the supervisor boots is waited for (a minute at most)
    yield* retryTransient(processes.register(registration))
    yield* Effect.addFinalizer(() =>
      processes.unregister(processId).pipe(
        Effect.catch((e) => Effect.logWarning("pgbus: could not unregister the process", e)),
        Effect.andThen(Effect.logInfo("[pgbus] stopped"))
      )
    )

    // After this process failed to reach the database (a beat or a reap failed), the others may
    // have failed too and missed their beats: it reaps again only once it has reached the database
    // for a whole stale threshold, by when a live process has beaten. Otherwise, after an outage
    // longer than the threshold, every process would take the others for dead and run their jobs.
    let troubleAt: number | undefined
    const noteTrouble = Effect.map(Clock.currentTimeMillis, (now) => {
      troubleAt = now
    })
    const reapStale = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      if (troubleAt !== undefined && now - troubleAt < Duration.toMillis(config.staleProcessThreshold)) return
      yield* processes.reapStale.pipe(Effect.tapError(() => noteTrouble))
    })

    // jobs/s over the interval since the previous beat
    let lastBeat = { at: yield* Clock.currentTimeMillis, finished: 0 }
    const beatFigures = Effect.map(Clock.currentTimeMillis, (at) => {
      const succeeded = stats.reduce((n, s) => n + s.succeeded, 0)
      const failed = stats.reduce((n, s) => n + s.retried + s.deadLettered, 0)
      const finished = succeeded + failed
      const seconds = (at - lastBeat.at) / 1000
      const jobsPerSecond = seconds > 0 ? (finished - lastBeat.finished) / seconds : 0
      lastBeat = { at, finished }
      const busy = stats.reduce((n, s) => n + s.running, 0)
      return { busy, capacity, succeeded, failed, jobsPerSecond }
    })

    // the first beat one interval after the registration, which wrote the same figures
    yield* Effect.forkScoped(
      Effect.andThen(
        Effect.sleep(config.processHeartbeatInterval),
        maintain(
          "process heartbeat",
          Effect.gen(function* () {
            const alive = yield* Effect.flatMap(beatFigures, (figures) => processes.beat(processId, figures)).pipe(
              Effect.tapError(() => noteTrouble)
            )
            if (!alive) {
              yield* Effect.logError(
                "pgbus: this process was taken for dead (no beat within the stale threshold); its claims were released; registering again"
              )
              // without its row, its later claims would not be recovered if it died
              yield* processes.register(registration)
            }
          }),
          config.processHeartbeatInterval
        )
      )
    )

    if (roles.includes("dispatcher")) {
      yield* Effect.forkScoped(
        afterFirstClaims(
          maintain(
            "workflow sweep",
            Effect.flatMap(sweep.runOnce, (r) =>
              r.stalled + r.resent + r.timedOut + r.deleted === 0
                ? Effect.void
                : Effect.logInfo(
                    `pgbus: workflow sweep: ${r.stalled} stalled, ${r.resent} re-sent, ${r.timedOut} timed out, ${r.deleted} deleted`
                  )
            ),
            config.workflowSweepInterval
          )
        )
      )
      yield* Effect.forkScoped(
        afterFirstClaims(
          maintain(
            "batch sweep",
            Effect.flatMap(batchSweep.runOnce, (r) =>
              r.recovered + r.uncounted + r.unstuck + r.callbacksSent + r.deleted === 0
                ? Effect.void
                : Effect.logInfo(
                    `pgbus: batch sweep: ${r.recovered} member end(s) recovered, ${r.uncounted} member(s) with no message un-counted, ${r.unstuck} stalled, ${r.finished} finished, ${r.callbacksSent} callback set(s) sent, ${r.deleted} deleted`
                  )
            ),
            config.batchSweepInterval
          )
        )
      )
      yield* Effect.forkScoped(
        afterFirstClaims(maintain("reaping stale processes", reapStale, config.dispatchInterval))
      )
      yield* Effect.forkScoped(
        afterFirstClaims(
          maintain(
            "uniqueness key reaper",
            Effect.flatMap(uniqueKeys.reap, (r) =>
              r.released === 0
                ? Effect.void
                : Effect.logInfo(`pgbus: released ${r.released} uniqueness key(s) whose job is gone`)
            ),
            UNIQUE_KEY_REAP_EVERY
          )
        )
      )
      yield* Effect.forkScoped(
        afterFirstClaims(
          maintain(
            "processed-events retention",
            Effect.flatMap(processedEvents.purge, (n) =>
              n === 0
                ? Effect.void
                : Effect.logInfo(`pgbus: idempotency retention deleted ${n} processed-event record(s)`)
            ),
            ARCHIVE_CLEANUP_EVERY
          )
        )
      )
      // the outbox poller (returns at once unless outboxEnabled); pollers on several processes
      // never relay one entry twice (SKIP LOCKED)
      yield* Effect.forkScoped(afterFirstClaims(outbox.pollerRole))
      yield* Effect.forkScoped(
        afterFirstClaims(
          maintain(
            "job statistics retention",
            jobStatsSql.jobStatsDeleteOld(Duration.toMillis(JobStats.STATS_RETENTION), null),
            ARCHIVE_CLEANUP_EVERY
          )
        )
      )
      yield* Effect.forkScoped(
        afterFirstClaims(
          maintain(
            "archive retention",
            Effect.flatMap(store.cleanupArchive(), (report) =>
              report.length === 0
                ? Effect.void
                : Effect.logInfo(
                    `pgbus: archive retention deleted ${report.map((r) => `${r.deleted} from ${r.queue}`).join(", ")}`
                  )
            ),
            ARCHIVE_CLEANUP_EVERY
          )
        )
      )
    }

    yield* Effect.timeoutOption(leadership.firstRound, Duration.seconds(5))
    if (leaderRoles.length > 0) {
      yield* Effect.logInfo(
        `[pgbus] boot: leaders ${yield* describeLeaders(processes.leaders, processId, leaderRoles)}`
      )
    }
    if (consumerRoles.length > 0) {
      yield* Effect.logInfo(
        `[pgbus] boot: single active consumers ${yield* describeLeaders(processes.leaders, processId, consumerRoles)}`
      )
    }

    // a child's health is its parent's business (and the port is the parent's)
    if (config.healthPort !== undefined && child === undefined) {
      const report = Effect.map(
        Effect.all([
          Ref.get(readiness),
          databaseState.pipe(Effect.provideService(PgBusConfig, config)),
          Clock.currentTimeMillis
        ]),
        ([status, db, now]) => {
          const live = stats.filter((s) => s.healthy).length
          // a recent block of the event loop (a CPU-bound handler) degrades for a while
          const block = lastBlock !== undefined && now - lastBlock.at < DEGRADED_FOR_MS ? lastBlock : undefined
          // the connection breaker open: the database is unreachable, reads fail fast
          const degraded = status === "OK" && (live < stats.length || db.database !== "ok" || block !== undefined)
          return {
            status: degraded ? ("DEGRADED" as const) : status,
            expected: stats.length,
            live,
            ...db,
            ...(block !== undefined
              ? { eventLoopBlocked: { at: new Date(block.at).toISOString(), ms: block.blockedMs, jobs: block.jobs } }
              : {})
          }
        }
      )
      yield* Layer.build(serveHealth(config.healthPort, config.healthBind, report, yield* MetricsSampler))
      yield* Effect.logInfo(`[pgbus] health endpoints on http://${config.healthBind}:${config.healthPort}`)
    }

    let recycle: Effect.Effect<void> = Effect.never
    if (runsWorkers) {
      const paused = yield* queueStates.watch
      // the per-queue circuit breaker of this process's workers (failures in a row, by queue)
      const queueBreaker = makeQueueBreaker(config, queueStates)
      const workerStore = gateReads(store, config)
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
                  notifier,
                  registry,
                  processId,
                  recordBatchOutcomes: batches.recordOutcomes,
                  onFirstClaim: firstClaimOf(i),
                  paused,
                  recordStats: jobStats.record,
                  uniqueKeys,
                  debouncer,
                  mayRead: mayReadOf(capsule),
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
      const entry = options.childEntry ?? ownEntry()
      for (const capsule of childCapsules) {
        yield* Effect.forkScoped(
          superviseChildren(capsule, childDeps(config, processes, store, entry)).pipe(
            Effect.annotateLogs({ capsule: capsule.name })
          )
        )
      }
    }
    // Added after the workers were forked, so on shutdown it runs first: readiness says
    // DRAINING while the workers drain; the health server closes after them.
    yield* Effect.addFinalizer(() =>
      Ref.set(readiness, "DRAINING").pipe(Effect.andThen(Effect.logInfo("[pgbus] draining")))
    )
    yield* Ref.set(readiness, "OK")
    yield* Effect.logInfo("[pgbus] ready")
    // a child returns when it recycles (or its parent is gone): its scope closes, it drains
    return yield* recycle
  }).pipe(Effect.scoped)

/** Runs the supervisor with the config's capsules and every role. */
export const run = runWith()

/** The process's live figures (for tests and the CLI): not a database read. */
export type { WorkerStats }

/**
 * Teardown for `runMain`: a program stopped by SIGTERM/SIGINT that drained exits 0, like a
 * program that finished; failures keep Effect's exit codes.
 */
export const teardown: Runtime.Teardown = (exit, onExit) => {
  if (Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause)) return onExit(0)
  return Runtime.defaultTeardown(exit, onExit)
}

/**
 * A signal within this long of the first is the same Ctrl-C delivered twice (the terminal
 * signals the whole process group, and wrappers such as npm and tsx relay it again), not a
 * person asking a second time.
 */
const SAME_SIGNAL_WINDOW_MS = 300

/**
 * `NodeRuntime.runMain` where a second SIGINT/SIGTERM exits at once (130) instead of waiting for
 * the drain the first one started; takes the same options (`teardown`, `disableErrorReporting`).
 */
export const runMainWith = Runtime.makeRunMain(({ fiber, teardown }) => {
  let firstAt: number | undefined
  const onSignal = (signal: NodeJS.Signals) => {
    const now = performance.now()
    if (firstAt === undefined) {
      firstAt = now
      process.stderr.write(`[pgbus] ${signal}: draining; ${signal} again forces the exit\n`)
      fiber.interruptUnsafe(fiber.id)
    } else if (now - firstAt > SAME_SIGNAL_WINDOW_MS) {
      process.stderr.write(`[pgbus] ${signal} again: exiting now, without waiting for the drain\n`)
      process.exit(130)
    }
  }
  fiber.addObserver((exit) => {
    process.removeListener("SIGINT", onSignal)
    process.removeListener("SIGTERM", onSignal)
    teardown(exit, (code) => {
      if (firstAt !== undefined || code !== 0) process.exit(code)
    })
  })
  process.on("SIGINT", onSignal)
  process.on("SIGTERM", onSignal)
})

/**
 * Runs a supervisor program as the process's main: SIGTERM or Ctrl-C drains and exits 0 (a
 * second signal exits at once, with 130); failures keep Effect's exit codes.
 */
export const runMain = <E, A>(effect: Effect.Effect<A, E>): void => runMainWith(effect, { teardown })
