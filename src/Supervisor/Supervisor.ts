/**
 * The supervisor: one Effect program with one Scope that runs the worker capsules, the
 * dispatcher (fast recovery of dead processes' claims, archive retention) and the process
 * heartbeat, logs the boot banner, serves the health endpoints, and drains on interruption
 * (SIGTERM/SIGINT under `Supervisor.runMain`).
 *
 * @since 0.1.0
 */

import { Cause, Clock, Deferred, Duration, Effect, Exit, Layer, Option, Ref, Runtime } from "effect"
import { SqlClient } from "effect/sql"
import { Batches, BatchSweep } from "../Batch/Batch.ts"
import { PgBusConfig, type PgBusConfigShape } from "../Config.ts"
import { breakerOf, openAhead, WorkerSession } from "../Database.ts"
import { Outbox } from "../EventBus/Outbox.ts"
import { ProcessedEvents } from "../EventBus/ProcessedEvents.ts"
import { makeDebouncer } from "../Job/Debounce.ts"
import { JobClient } from "../Job/JobClient.ts"
import { makeJobStatsSql } from "../Job/JobStatsSql.ts"
import { makeUniqueKeys } from "../Job/Uniqueness.ts"
import { checkMigrated } from "../Migrations.ts"
import { Notifier } from "../Queue/Notifier.ts"
import { QueueStates } from "../Queue/QueueStates.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import { WorkerQueueStore } from "../Queue/WorkerQueueStore.ts"
import { RecurringScheduler } from "../Recurring/Scheduler.ts"
import { Registry } from "../Registry.ts"
import { WorkflowSweep } from "../Workflow/Engine.ts"
import { bootBanner, checkPool, ensureQueues, selectCapsules } from "./Boot.ts"
import type { Capsule } from "./Capsule.ts"
import { type ChildEntry, type ChildLiveness, childRole, disconnectFromParent, makeChildSlots } from "./ChildCapsule.ts"
import { databaseState, watchConnection } from "./ConnectionWatch.ts"
import { forkDispatcherLoops, repeatMaintenance, runScheduler } from "./Dispatcher.ts"
import { MetricsSampler, type Readiness, serveHealth } from "./Health.ts"
import { campaign, consumerRole, describeLeaders, type LeaderRole, type Rank } from "./Leader.ts"
import { runLocalWorkers } from "./LocalWorkers.ts"
import { DEGRADED_FOR_MS, type LoopBlock, watchEventLoop } from "./LoopWatch.ts"
import { Processes } from "./Processes.ts"
import { keepProcessRow } from "./ProcessRow.ts"
import { makeStats, type WorkerStats } from "./Worker.ts"

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

/** Longest the dispatcher's first round waits at boot for the workers' first claims. */
const FIRST_CLAIMS_WAIT = Duration.seconds(1)

/** How long after the workers' first claims the dispatcher's first round waits (their ramp). */
const WORKERS_RAMP = Duration.seconds(1)

/** Longest the boot waits for the leader campaign's first round (won, lost or failed). */
const FIRST_ROUND_WAIT = Duration.seconds(5)

/**
 * The campaigns for the leader roles (dispatcher, scheduler) and for the queues of single active
 * consumers and ranked consumers; `mayReadOf` is a capsule's consumer gate.
 */
const campaignRoles = (
  config: PgBusConfigShape,
  registry: Registry["Service"],
  processId: string,
  roles: ReadonlyArray<Role>,
  local: ReadonlyArray<Capsule>,
  runsWorkers: boolean
) =>
  Effect.gen(function* () {
    // The campaigns for the maintenance roles start now, so that their connection is open by the
    // time the dispatcher's loops start. Every dispatcher loop runs through afterWorkersRamp, so
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
    return { leadership, leaderRoles, consumerRoles, ranks: ranks.length, mayReadOf, recurring, runsScheduler }
  })

/**
 * Serves the health endpoints: readiness, DEGRADED while a worker is down, the database is
 * unreachable, or the event loop was blocked lately.
 */
const serveHealthReport = (
  config: PgBusConfigShape,
  port: number,
  readiness: Ref.Ref<Readiness>,
  stats: ReadonlyArray<WorkerStats>,
  children: ChildLiveness,
  lastBlock: () => LoopBlock | undefined
) =>
  Effect.gen(function* () {
    const report = Effect.map(
      Effect.all([
        Ref.get(readiness),
        databaseState.pipe(Effect.provideService(PgBusConfig, config)),
        Clock.currentTimeMillis
      ]),
      ([status, db, now]) => {
        // every child process of a `processes` capsule counts, as the seed's forks do
        const expected = stats.length + children.expected()
        const live = stats.filter((s) => s.healthy).length + children.live()
        // a recent block of the event loop (a CPU-bound handler) degrades for a while
        const last = lastBlock()
        const block = last !== undefined && now - last.at < DEGRADED_FOR_MS ? last : undefined
        // the connection breaker open: the database is unreachable, reads fail fast
        const degraded = status === "OK" && (live < expected || db.database !== "ok" || block !== undefined)
        return {
          status: degraded ? ("DEGRADED" as const) : status,
          expected,
          live,
          ...db,
          ...(block !== undefined
            ? { eventLoopBlocked: { at: new Date(block.at).toISOString(), ms: block.blockedMs, jobs: block.jobs } }
            : {})
        }
      }
    )
    yield* Layer.build(serveHealth(port, config.healthBind, report, yield* MetricsSampler))
    yield* Effect.logInfo(`[pgbus] health endpoints on http://${config.healthBind}:${port}`)
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
    const runsWorkers = roles.includes("workers")
    const selection = yield* selectCapsules(options, config, registry, child, runsWorkers)
    const { local } = selection
    const processId = child?.processId ?? crypto.randomUUID()
    const capacity = runsWorkers ? local.reduce((n, c) => n + c.concurrency, 0) : 0
    yield* checkPool(config, capacity, runsWorkers)
    // the workers' session connects now, beside the boot's statements, not at the first claim
    // (bench:jobs W1: the first job 70 ms after the start call instead of 90)
    if (runsWorkers && local.length > 0) yield* Effect.forkScoped(openAhead(yield* WorkerSession))
    const stats: Array<WorkerStats> = runsWorkers ? local.map(makeStats) : []
    const childSlots = makeChildSlots()
    // At boot the workers claim first and the dispatcher's rounds start a second after their
    // first claims (which wait 1 s at most): a process (or a fleet) restarting with a backlog
    // puts its work ahead of sweeps and retention, whose first round (a dozen statements on
    // new backends) otherwise competes with the workers' ramp for the database (bench:jobs W1,
    // 20,000 jobs: the round's statements took 10-45 ms each beside the claims; see
    // packages/bench/README.md, "The dispatcher's first round after the workers' ramp").
    const firstClaims = yield* Deferred.make<void>()
    const claimedOnce = new Set<number>()
    const firstClaimOf = (i: number) =>
      Effect.suspend(() => {
        claimedOnce.add(i)
        return claimedOnce.size >= local.length ? Deferred.succeed(firstClaims, undefined) : Effect.void
      })
    const workersFirst = runsWorkers && local.length > 0
    if (!workersFirst) yield* Deferred.succeed(firstClaims, undefined)
    const maintenanceMayStart = yield* Deferred.make<void>()
    yield* Effect.forkScoped(
      Effect.timeoutOption(Deferred.await(firstClaims), FIRST_CLAIMS_WAIT).pipe(
        Effect.andThen(workersFirst ? Effect.sleep(WORKERS_RAMP) : Effect.void),
        Effect.andThen(Deferred.succeed(maintenanceMayStart, undefined))
      )
    )

    // newer database, skipped or pending migrations: one read of each side
    yield* checkMigrated
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

    const campaigned = yield* campaignRoles(config, registry, processId, roles, local, runsWorkers)
    const { leadership, leaderRoles, consumerRoles, mayReadOf, recurring, runsScheduler } = campaigned
    if (runsScheduler) {
      yield* Effect.forkScoped(
        leadership.whileLeading("scheduler", runScheduler(scheduler, recurring, config.recurringScheduleInterval))
      )
    }
    // (the dispatcher's loops: they run while this process leads the role, see Leader.ts)
    const afterWorkersRamp = <A, E>(loop: Effect.Effect<A, E>) =>
      leadership.whileLeading("dispatcher", Effect.andThen(Deferred.await(maintenanceMayStart), loop))

    for (const line of bootBanner(config, registry, roles, runsWorkers, selection, child)) {
      yield* Effect.logInfo(`[pgbus] ${line}`)
    }
    // Queues of the capsules and of the registered jobs exist before anyone reads or sends.
    yield* ensureQueues(config, registry, client, selection.capsules)

    const reapStale = yield* keepProcessRow({ config, processes, processId, roles, local, capacity, stats, maintain })
    if (roles.includes("dispatcher")) {
      yield* forkDispatcherLoops({
        config,
        store,
        sweep,
        batchSweep,
        processedEvents,
        outbox,
        uniqueKeys,
        jobStatsSql,
        reapStale,
        afterWorkersRamp,
        maintain
      })
    }

    // a child's health is its parent's business (and the port is the parent's); served before
    // the workers are forked, so it closes after they drained
    if (config.healthPort !== undefined && child === undefined) {
      yield* serveHealthReport(config, config.healthPort, readiness, stats, childSlots, () => lastBlock)
    }

    // Workers gated by the campaign (single active consumers, ranked consumers) wait for its
    // first answer, else they would claim nothing until their next poll; the others claim now,
    // while the campaign's first round (a connection of its own, 20-50 ms) goes on beside them.
    const firstRound = Effect.timeoutOption(leadership.firstRound, FIRST_ROUND_WAIT)
    const gated = runsWorkers && (consumerRoles.length > 0 || campaigned.ranks > 0)
    if (gated) yield* firstRound
    const recycle: Effect.Effect<void> = runsWorkers
      ? yield* runLocalWorkers({
          config,
          store,
          workerStore: yield* WorkerQueueStore,
          notifier,
          registry,
          processes,
          queueStates,
          batches,
          uniqueKeys,
          debouncer,
          processId,
          child,
          local,
          stats,
          childCapsules: selection.childCapsules,
          childEntry: options.childEntry,
          childSlots,
          firstClaimOf,
          mayReadOf
        })
      : Effect.never
    // Added after the workers were forked, so on shutdown it runs first: readiness says
    // DRAINING while the workers drain; the health server closes after them.
    yield* Effect.addFinalizer(() =>
      Ref.set(readiness, "DRAINING").pipe(Effect.andThen(Effect.logInfo("[pgbus] draining")))
    )

    // the boot lines name the leaders, and readiness says OK, once the first round ended (or
    // took too long)
    if (!gated) yield* firstRound
    const leading = yield* leadership.leading
    if (leaderRoles.length > 0) {
      yield* Effect.logInfo(
        `[pgbus] boot: leaders ${yield* describeLeaders(processes.leaders, processId, leaderRoles, leading)}`
      )
    }
    if (consumerRoles.length > 0) {
      yield* Effect.logInfo(
        `[pgbus] boot: single active consumers ${yield* describeLeaders(processes.leaders, processId, consumerRoles, leading)}`
      )
    }
    yield* Ref.set(readiness, "OK")
    yield* Effect.logInfo("[pgbus] ready")
    // a child returns when it recycles (or its parent is gone): its scope closes, it drains
    return yield* recycle
  }).pipe(Effect.scoped, Effect.tapCause(logFailure))

/**
 * A supervisor that fails says so in the log, at boot (a pool too small, the schema behind) or
 * later: one forked and never joined would otherwise stop unseen, its jobs left waiting.
 */
const logFailure = (cause: Cause.Cause<unknown>) =>
  Cause.hasInterruptsOnly(cause)
    ? Effect.void
    : Effect.logError("[pgbus] the supervisor stopped on a failure", Cause.pretty(cause))

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
