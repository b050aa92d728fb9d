/**
 * The metrics read from the database, sampled when `/metrics` is scraped (and every export
 * interval when OTLP pushes): queue depth, claimable work and its latency, dead letters, paused
 * queues, runs by workflow class and status, stuck runs by reason, the outbox, batches,
 * processes, effect-pgbus's connections, and the table health that tells when to tune. The
 * counters and histograms (jobs, workflow steps, events, outbox) are recorded where things happen.
 *
 * `layer` provides the sampler to the supervisor's `/metrics` (health port) and registers every
 * series at boot, so they appear before their first change; `layerHttp` mounts `/metrics` in an
 * app's router; `layerOtlp` exports everything by OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
 *
 * @since 0.1.0
 */
import { Config, Duration, Effect, Layer, Metric, Option, Schedule } from "effect"
import { FetchHttpClient, HttpRouter } from "effect/http"
import { Otlp, OtlpSerialization } from "effect/observability"
import { effectivePoolSize, PgBusConfig } from "../Config.ts"
import { census } from "../internal/PoolCensus.ts"
import { registerJob } from "../Job/JobMetrics.ts"
import { Registry } from "../Registry.ts"
import { MetricsSampler, metricsResponse } from "../Supervisor/Health.ts"
import { VERSION } from "../version.ts"
import { StuckReasons } from "../Workflow/QuerySql.ts"
import { RunStatuses } from "../Workflow/States.ts"
import { Operations } from "./Operations.ts"

const gauge = (name: string, description: string) => Metric.gauge(name, { description })

/** The gauges, by name. */
export const gauges = {
  up: gauge("pgbus_database_up", "1 when the last sample reached the database, else 0"),
  queueDepth: gauge("pgbus_queue_depth", "messages in the queue, claimable or not"),
  queueReady: gauge("pgbus_queue_ready", "messages a worker could claim now"),
  queueLatency: gauge(
    "pgbus_queue_latency",
    "seconds the oldest claimable message has been claimable (0 when none is: scheduled and backed-off jobs do not count)"
  ),
  queueOldestAge: gauge("pgbus_queue_oldest_message_age_seconds", "seconds since the oldest message was enqueued"),
  queueDeadLetters: gauge("pgbus_dlq_depth", "messages in the queue's dead-letter queue"),
  queueArchived: gauge("pgbus_queue_archive_size", "rows in the queue's archive"),
  queuePaused: gauge("pgbus_queue_paused", "1 while the queue is paused"),
  workflows: gauge("pgbus_workflows", "workflow runs by class and status"),
  workflowsStuck: gauge("pgbus_workflows_stuck", "ongoing runs that need a person, by class and stuck reason"),
  outboxPending: gauge("pgbus_outbox_pending", "outbox entries not yet published (none failed)"),
  outboxFailing: gauge("pgbus_outbox_failing", "outbox entries whose last relay failed"),
  batches: gauge("pgbus_batches", "batches by status (pending, stalled, finished)"),
  processes: gauge("pgbus_processes", "registered processes by status (healthy, late, stale)"),
  poolUtilization: gauge("pgbus_worker_pool_utilization", "busy / capacity over the healthy processes' workers"),
  poolSize: gauge("pgbus_pool_size", "connections this process's pool may open"),
  poolConnections: gauge(
    "pgbus_pool_connections",
    "connections this process holds open to the database (pool, LISTEN and leader connections)"
  ),
  poolInUse: gauge(
    "pgbus_pool_in_use",
    "connections of this process running a statement or holding a transaction now (plain connections; TLS ones are not read)"
  ),
  poolAvailable: gauge(
    "pgbus_pool_available",
    "idle connections of effect-pgbus clients on the database (every process)"
  ),
  poolOpen: gauge("pgbus_pool_open", "open connections of effect-pgbus clients on the database (every process)"),
  deadTuples: gauge("pgbus_table_dead_tuples", "dead tuples of each effect-pgbus table"),
  bloatRatio: gauge("pgbus_table_bloat_ratio", "dead / (dead + live) tuples of each effect-pgbus table"),
  lastVacuumAge: gauge(
    "pgbus_table_last_vacuum_age_seconds",
    "seconds since each table was last vacuumed (-1: never since the statistics were reset)"
  ),
  concurrencyBlocked: gauge(
    "pgbus_concurrency_blocked_executions",
    "jobs parked behind a concurrency key at its limit, waiting for a slot"
  ),
  concurrencyOldest: gauge(
    "pgbus_concurrency_blocked_oldest_age_seconds",
    "how long the longest-waiting parked job has waited"
  ),
  concurrencySlots: gauge(
    "pgbus_concurrency_slots_held",
    "concurrency slots held (limited jobs running) across all keys"
  ),
  rateTokens: gauge(
    "pgbus_rate_tokens_left",
    "tokens the rate buckets of each queue held after their last claim (summed over the queue's keys)"
  ),
  oldestTransaction: gauge(
    "pgbus_oldest_transaction_age_seconds",
    "seconds the oldest open transaction on the database has run (it pins the MVCC horizon)"
  )
} as const

/**
 * Sets labelled series; series set at an earlier sample but absent now go to 0 (a workflow class
 * with no runs left, a queue dropped), so no stale value lingers.
 */
const labelled = (metric: Metric.Metric<number, unknown>) => {
  let previous = new Map<string, Readonly<Record<string, string>>>()
  return (values: ReadonlyArray<readonly [Readonly<Record<string, string>>, number]>) =>
    Effect.gen(function* () {
      const next = new Map<string, Readonly<Record<string, string>>>()
      for (const [attributes, value] of values) {
        const key = JSON.stringify(attributes)
        next.set(key, attributes)
        yield* Metric.update(metric.pipe(Metric.withAttributes(attributes)), value)
      }
      for (const [key, attributes] of previous) {
        if (!next.has(key)) yield* Metric.update(metric.pipe(Metric.withAttributes(attributes)), 0)
      }
      previous = next
    })
}

/** The sampler: one pass over the database, every gauge set. A failure sets `pgbus_database_up` to 0. */
export const makeSampler = Effect.gen(function* () {
  const ops = yield* Operations
  const config = yield* PgBusConfig
  const set = {
    depth: labelled(gauges.queueDepth),
    ready: labelled(gauges.queueReady),
    latency: labelled(gauges.queueLatency),
    oldest: labelled(gauges.queueOldestAge),
    dead: labelled(gauges.queueDeadLetters),
    archived: labelled(gauges.queueArchived),
    paused: labelled(gauges.queuePaused),
    workflows: labelled(gauges.workflows),
    stuck: labelled(gauges.workflowsStuck),
    batches: labelled(gauges.batches),
    processes: labelled(gauges.processes),
    deadTuples: labelled(gauges.deadTuples),
    bloat: labelled(gauges.bloatRatio),
    vacuum: labelled(gauges.lastVacuumAge),
    tokens: labelled(gauges.rateTokens)
  }
  const sample = Effect.gen(function* () {
    // this process's own connections first: read while the database is down too
    const own = census()
    yield* Metric.update(gauges.poolConnections, own.open)
    yield* Metric.update(gauges.poolInUse, own.inUse)
    const queues = yield* ops.queues
    const q = (f: (s: (typeof queues)[number]) => number) => queues.map((s) => [{ queue: s.name }, f(s)] as const)
    yield* set.depth(q((s) => s.depth))
    yield* set.ready(q((s) => s.ready))
    yield* set.latency(q((s) => s.claimableLatencyMs / 1000))
    yield* set.oldest(q((s) => (s.oldestAgeMs ?? 0) / 1000))
    yield* set.dead(q((s) => s.deadLetters))
    yield* set.archived(q((s) => s.archived))
    yield* set.paused(q((s) => (s.paused ? 1 : 0)))

    const counts = yield* ops.workflowCounts()
    yield* set.workflows(
      counts.byWorkflow.flatMap((w) =>
        RunStatuses.map((status) => [{ workflow_class: w.workflow, status }, w.byStatus[status] ?? 0] as const)
      )
    )
    yield* set.stuck(
      counts.byWorkflow.flatMap((w) =>
        StuckReasons.map((reason) => [{ workflow_class: w.workflow, reason }, w.stuck[reason] ?? 0] as const)
      )
    )

    const outbox = yield* ops.outbox({ limit: 1 })
    yield* Metric.update(gauges.outboxPending, outbox.counts.pending)
    yield* Metric.update(gauges.outboxFailing, outbox.counts.failing)
    const batches = yield* ops.batches({ limit: 1 })
    yield* set.batches(
      (["pending", "stalled", "finished"] as const).map((status) => [{ status }, batches.counts[status]] as const)
    )

    const processes = yield* ops.processes
    yield* set.processes(
      (["healthy", "late", "stale"] as const).map(
        (status) => [{ status }, processes.filter((p) => p.status === status).length] as const
      )
    )
    const healthy = processes.filter((p) => p.status === "healthy")
    const capacity = healthy.reduce((n, p) => n + p.capacity, 0)
    yield* Metric.update(
      gauges.poolUtilization,
      capacity === 0 ? 0 : healthy.reduce((n, p) => n + p.busy, 0) / capacity
    )

    // no per-key labels: keys are per record (an unbounded series); the keys are on `locks`
    const locks = yield* ops.locks
    yield* Metric.update(gauges.concurrencyBlocked, locks.concurrency.parked)
    yield* Metric.update(gauges.concurrencyOldest, (locks.concurrency.oldestParkedMs ?? 0) / 1000)
    yield* Metric.update(gauges.concurrencySlots, locks.concurrency.slotsHeld)
    const tokens = new Map<string, number>()
    for (const b of locks.rates) tokens.set(b.queue, (tokens.get(b.queue) ?? 0) + b.tokens)
    yield* set.tokens([...tokens].map(([queue, n]) => [{ queue }, n] as const))

    const database = yield* ops.database
    yield* Metric.update(gauges.poolAvailable, database.connections.idle)
    yield* Metric.update(gauges.poolOpen, database.connections.open)
    yield* set.deadTuples(database.tables.map((t) => [{ table: t.table }, t.deadTuples] as const))
    yield* set.bloat(database.tables.map((t) => [{ table: t.table }, t.bloatRatio] as const))
    yield* set.vacuum(database.tables.map((t) => [{ table: t.table }, t.lastVacuumAgeSeconds ?? -1] as const))
    yield* Metric.update(gauges.oldestTransaction, (database.oldestTransactionAgeMs ?? 0) / 1000)
    yield* Metric.update(gauges.up, 1)
  }).pipe(
    Effect.catch((error) =>
      Metric.update(gauges.up, 0).pipe(Effect.andThen(Effect.logWarning("pgbus: sampling metrics failed", error)))
    )
  )
  yield* Metric.update(gauges.poolSize, effectivePoolSize(config))
  return sample
})

/** Registers the series that exist before anything happens: the gauges, and each registered job's counters. */
const registerAtBoot = (sample: Effect.Effect<void>) =>
  Effect.gen(function* () {
    yield* sample
    const registry = yield* Effect.serviceOption(Registry)
    const config = yield* PgBusConfig
    if (Option.isSome(registry)) {
      for (const [name, job] of registry.value.jobs) {
        yield* registerJob(job.job.queue ?? config.defaultQueue, name)
      }
    }
  })

/**
 * Provides the sampler to the supervisor's `/metrics` and registers every series at boot.
 *
 * @category layers
 */
export const layer = Layer.effect(
  MetricsSampler,
  Effect.gen(function* () {
    const sample = yield* makeSampler
    yield* registerAtBoot(sample)
    return sample
  })
).pipe(Layer.provide(Operations.layer))

/**
 * `GET <path>` (default `/metrics`) in the app's router: samples, then answers every metric in
 * Prometheus's text format.
 *
 * @category layers
 */
export const layerHttp = (options: { readonly path?: `/${string}` | undefined } = {}) =>
  HttpRouter.use((router) =>
    Effect.gen(function* () {
      const sample = yield* makeSampler
      yield* registerAtBoot(sample)
      yield* router.add("GET", options.path ?? "/metrics", metricsResponse(sample))
    })
  ).pipe(Layer.provide(Operations.layer))

/** How often gauges are sampled for OTLP (its metrics export interval is its own). */
const OTLP_SAMPLE_EVERY = Duration.seconds(10)

const optional = <A>(config: Config.Config<A>) => Config.option(config).pipe(Effect.orElseSucceed(() => Option.none()))

/**
 * OTLP export of metrics, traces and logs (JSON over HTTP, no OpenTelemetry SDK) to
 * `OTEL_EXPORTER_OTLP_ENDPOINT` when it is set (and `OTEL_SDK_DISABLED` is not), with the gauges
 * sampled every 10 s; nothing otherwise. `OTEL_SERVICE_NAME` names the service (default
 * `effect-pgbus`), `OTEL_METRIC_EXPORT_INTERVAL` (ms) sets the metrics' export interval.
 *
 * @category layers
 */
export const layerOtlp = Layer.unwrap(
  Effect.gen(function* () {
    const endpoint = yield* optional(Config.String("OTEL_EXPORTER_OTLP_ENDPOINT"))
    const disabled = yield* optional(Config.Boolean("OTEL_SDK_DISABLED"))
    if (Option.isNone(endpoint) || endpoint.value.trim() === "" || Option.getOrElse(disabled, () => false)) {
      return Layer.empty
    }
    const serviceName = yield* optional(Config.String("OTEL_SERVICE_NAME"))
    const interval = yield* optional(Config.Int("OTEL_METRIC_EXPORT_INTERVAL"))
    const sampling = Layer.effectDiscard(
      Effect.gen(function* () {
        const sample = yield* makeSampler
        yield* registerAtBoot(sample)
        yield* Effect.forkScoped(sample.pipe(Effect.repeat(Schedule.spaced(OTLP_SAMPLE_EVERY))))
      })
    ).pipe(Layer.provide(Operations.layer))
    const exporter = Otlp.layer({
      baseUrl: endpoint.value.trim().replace(/\/$/, ""),
      resource: { serviceName: Option.getOrElse(serviceName, () => "effect-pgbus"), serviceVersion: VERSION },
      ...(Option.isSome(interval) ? { metricsExportInterval: Duration.millis(interval.value) } : {})
    }).pipe(Layer.provide(FetchHttpClient.layer), Layer.provide(OtlpSerialization.layerJson))
    return Layer.mergeAll(Layer.effectDiscard(Layer.build(exporter)), sampling)
  })
)
