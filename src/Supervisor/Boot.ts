/**
 * The supervisor's boot: which capsules it runs (here or in child processes), whether the pool
 * fits them, the boot banner, and the queues that must exist before anyone reads or sends.
 *
 * @since 0.1.0
 */
import os from "node:os"
import { Duration, Effect } from "effect"
import {
  ConfigurationError,
  describeTarget,
  effectivePoolSize,
  type PgBusConfigShape,
  POOL_OVERHEAD,
  poolNeed
} from "../Config.ts"
import { consumerCapsules } from "../EventBus/Consumer.ts"
import { type JobClient, servedQueues } from "../Job/JobClient.ts"
import type { Registry } from "../Registry.ts"
import { VERSION } from "../version.ts"
import { type Capsule, parseWorkers, validateCapsules } from "./Capsule.ts"
import type { ChildRole } from "./ChildCapsule.ts"
import { serveUnserved, unservedQueues } from "./Unserved.ts"
import { readsFairly, readsInOrder } from "./Worker.ts"

/**
 * Fails the boot when a pool that was set is smaller than the capsules need (every job may hold
 * a connection, beside the process's own: see `poolNeed`); a derived pool that falls short (event
 * consumers and served queues are known only now) is logged.
 */
export const checkPool = (config: PgBusConfigShape, capacity: number, runsWorkers: boolean) =>
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
      `[pgbus] ${why} (derived from workers, with room for one capsule the supervisor adds); set poolSize to ${need}`
    )
  })

/** The recycling limits of a capsule, for the banner. */
const recycleLimits = (c: Capsule): string =>
  [
    c.maxJobsPerProcess === undefined ? "" : ` max_jobs=${c.maxJobsPerProcess}`,
    c.maxMemoryMb === undefined ? "" : ` max_memory_mb=${c.maxMemoryMb}`,
    c.maxLifetime === undefined ? "" : ` max_lifetime=${Duration.format(Duration.fromInputUnsafe(c.maxLifetime))}`,
    c.maxBlocked === undefined ? "" : ` max_blocked=${Duration.format(Duration.fromInputUnsafe(c.maxBlocked))}`
  ].join("")

/** The capsules a supervisor runs: all of them, those run here, those run in child processes. */
export interface SelectedCapsules {
  readonly capsules: ReadonlyArray<Capsule>
  readonly local: ReadonlyArray<Capsule>
  readonly childCapsules: ReadonlyArray<Capsule>
}

/**
 * The capsules of the options (or of the config's `workers`), the event consumers' and the
 * unserved queues' capsules; a capsule asked for by name that does not exist is a defect.
 */
export const selectCapsules = (
  options: { readonly capsules?: ReadonlyArray<Capsule> | undefined; readonly capsule?: string | undefined },
  config: PgBusConfigShape,
  registry: Registry["Service"],
  child: ChildRole | undefined,
  runsWorkers: boolean
): Effect.Effect<SelectedCapsules, ConfigurationError> =>
  Effect.gen(function* () {
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
    // registered jobs' and workflows' queues that no capsule reads: served, or a boot failure
    const extra =
      options.capsule === undefined && runsWorkers
        ? yield* serveUnserved(config, unservedQueues(registry.queueUsers, [...selected, ...consumers]), selected)
        : []
    const capsules: ReadonlyArray<Capsule> = [...selected, ...extra, ...consumers]
    // capsules of `processes` run in child processes (ChildCapsule.ts); the others, and a
    // child's own capsule, here
    return {
      capsules,
      childCapsules: child === undefined ? capsules.filter((c) => c.processes !== undefined) : [],
      local: child === undefined ? capsules.filter((c) => c.processes === undefined) : capsules
    }
  })

/** The boot banner's lines: what actually booted, never the password. */
export const bootBanner = (
  config: PgBusConfigShape,
  registry: Registry["Service"],
  roles: ReadonlyArray<string>,
  runsWorkers: boolean,
  selection: SelectedCapsules,
  child: ChildRole | undefined
): ReadonlyArray<string> => [
  `boot: effect-pgbus ${VERSION} pid=${process.pid} host=${os.hostname()}`,
  `boot: connection=${describeTarget(config)} schema=${config.schema} pool=${effectivePoolSize(config)}${config.poolSize === undefined ? " (derived)" : ""} statement_timeout=${config.transactionPooler ? "the server's (transactionPooler)" : config.statementTimeout === undefined ? "off" : Duration.format(config.statementTimeout)}`,
  `boot: database ${config.databaseSource}`,
  `boot: listen_notify=${config.listenNotify} visibility_timeout=${Duration.format(config.visibilityTimeout)} max_retries=${config.maxRetries}`,
  `boot: roles=${roles.join(",")} jobs=${[...registry.jobs.keys()].join(",") || "(none)"}`,
  ...(runsWorkers
    ? selection.capsules.map(
        (c) =>
          `boot: capsule=${c.name} queues=${c.queues.join(",")} concurrency=${c.concurrency} read_ahead=${c.readAhead ?? config.readAhead ?? "adaptive"}${c.singleActiveConsumer === true ? " single_active_consumer=true" : ""}${c.consumerPriority === undefined ? "" : ` consumer_priority=${c.consumerPriority}`}${selection.childCapsules.includes(c) ? ` processes=${c.processes}${recycleLimits(c)}` : ""}`
      )
    : []),
  ...(child === undefined ? [] : [`boot: child process ${child.slot} of capsule ${child.capsule}`])
]

/** Creates the queues of the capsules and of the registered jobs (before anyone reads or sends). */
export const ensureQueues = (
  config: PgBusConfigShape,
  registry: Registry["Service"],
  client: JobClient["Service"],
  capsules: ReadonlyArray<Capsule>
) =>
  Effect.gen(function* () {
    const queues = new Set([...registry.queues, ...capsules.flatMap((c) => c.queues)])
    for (const q of queues) {
      const options = { fairIndex: readsFairly(config, registry, q), orderIndex: readsInOrder(config, registry, q) }
      for (const physical of servedQueues(config, q)) yield* client.ensureQueue(physical, options)
    }
  })
