/**
 * The operations service: the one place every operator surface (the JSON API, the CLI, the MCP
 * server, the dashboard) reads effect-pgbus from and acts through. Reads take a `View` (a
 * tenant's resource id, payloads shown or redacted); writes take who acts and why and go
 * through the same guarded functions as everything else (the engine's outside verbs, the queue
 * store, queue states).
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../Config.ts"
import { QueueStates } from "../Queue/QueueStates.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import { RecurringScheduler } from "../Recurring/Scheduler.ts"
import { Registry } from "../Registry.ts"
import { Processes } from "../Supervisor/Processes.ts"
import { WorkflowClient } from "../Workflow/Client.ts"
import { makeBus } from "./Bus.ts"
import { makeCluster } from "./Cluster.ts"
import { makeDeadLetters } from "./DeadLetters.ts"
import { type Deps, statementsOf } from "./Deps.ts"
import { makeLocks } from "./Locks.ts"
import type { Overview } from "./Model.ts"
import type { OperationsError } from "./OperationsError.ts"
import { makeQueues } from "./Queues.ts"
import { makeRates } from "./Rates.ts"
import { makeRecurring } from "./Recurring.ts"
import { makeStats } from "./Stats.ts"
import { makeWorkflows } from "./Workflows.ts"

export type { DeadLetterFilter } from "./DeadLetters.ts"
export type { Change, View } from "./Deps.ts"
export type { ActVerb, RunFilter, SignalInput, VerbInput } from "./Workflows.ts"

const build = (deps: Deps) => {
  const queues = makeQueues(deps)
  const deadLetters = makeDeadLetters(deps, queues.registered)
  const cluster = makeCluster(deps, queues)
  const workflows = makeWorkflows(deps)
  const bus = makeBus(deps, queues, cluster)
  const stats = makeStats(deps)
  const rates = makeRates(deps)
  const locks = makeLocks(deps)
  const recurring = makeRecurring(deps)

  /** The home page: the verdict, and one number per area. */
  const overview: Effect.Effect<Overview, OperationsError> = Effect.gen(function* () {
    const verdict = yield* cluster.verdict
    const summaries = yield* queues.queues
    const processes = yield* cluster.processes
    const counts = yield* workflows.counts({ ongoingOnly: true })
    const outbox = yield* bus.outbox({ limit: 1 })
    const batches = yield* bus.batches({ limit: 1 })
    const tasks = yield* recurring.recurringTasks
    const next = tasks
      .filter((t) => t.nextRunAt !== null)
      .reduce<(typeof tasks)[number] | undefined>(
        (soonest, t) => (soonest === undefined || t.nextRunAt! < soonest.nextRunAt! ? t : soonest),
        undefined
      )
    const sum = (f: (q: (typeof summaries)[number]) => number) => summaries.reduce((n, q) => n + f(q), 0)
    const by = counts.byStatus
    return {
      verdict,
      queues: {
        total: summaries.length,
        paused: summaries.filter((q) => q.paused).length,
        depth: sum((q) => q.depth),
        ready: sum((q) => q.ready),
        retrying: sum((q) => q.retrying),
        deadLetters: sum((q) => q.deadLetters)
      },
      processes,
      workflows: {
        ongoing: (by.ready ?? 0) + (by.performing ?? 0) + (by.waiting ?? 0) + (by.paused ?? 0),
        paused: by.paused ?? 0,
        stuck: Object.values(counts.stuck).reduce((n, c) => n + c, 0)
      },
      outboxPending: outbox.counts.pending + outbox.counts.failing,
      batchesPending: batches.counts.pending,
      recurring: {
        total: tasks.length,
        nextTask: next?.key ?? null,
        nextRunAt: next?.nextRunAt?.toISOString() ?? null
      }
    }
  })

  return {
    overview,
    health: cluster.verdict,
    processes: cluster.processes,
    database: cluster.database,
    queues: queues.queues,
    queue: queues.queue,
    pauseQueue: queues.pauseQueue,
    resumeQueue: queues.resumeQueue,
    purgeQueue: queues.purgeQueue,
    jobs: queues.jobs,
    job: queues.job,
    deadLetters: deadLetters.deadLetters,
    deadLetter: deadLetters.deadLetter,
    retryDeadLetter: deadLetters.retryDeadLetter,
    discardDeadLetter: deadLetters.discardDeadLetter,
    retryDeadLetters: deadLetters.retryDeadLetters,
    discardDeadLetters: deadLetters.discardDeadLetters,
    workflows: workflows.list,
    workflow: workflows.show,
    workflowSummary: workflows.summary,
    workflowCounts: workflows.counts,
    needsAttention: workflows.attention,
    workflowDefinitions: workflows.definitions,
    workflowStats: workflows.stats,
    act: workflows.act,
    signal: workflows.signal,
    actMany: workflows.bulk,
    events: bus.events,
    outbox: bus.outbox,
    batches: bus.batches,
    batch: bus.batch,
    jobStats: stats.jobStats,
    retryJob: queues.retryJob,
    discardJob: queues.discardJob,
    jobRates: rates.jobRates,
    setJobRate: rates.setJobRate,
    locks: locks.locks,
    releaseUniqueKey: locks.releaseUniqueKey,
    blockedKeys: queues.blockedKeys,
    releaseKey: queues.releaseKey,
    recurringTasks: recurring.recurringTasks,
    runRecurringNow: recurring.runRecurringNow,
    recurringExecutions: recurring.recurringExecutions
  }
}

/** The operations every surface calls (see the module's functions for each one's contract). */
export type OperationsShape = ReturnType<typeof build>

/**
 * The operations service.
 *
 * @category services
 */
export class Operations extends Context.Service<Operations, OperationsShape>()("effect-pgbus/Operations") {
  /**
   * The service on `PgBus.layer`'s services. A `Registry` present when it is built is used to
   * tell loaded workflow classes, to check signal payloads against their declared Schemas, and
   * to start a workflow's schedule run now.
   */
  static readonly layer: Layer.Layer<
    Operations,
    never,
    PgBusConfig | SqlClient.SqlClient | QueueStore | QueueStates | Processes | WorkflowClient | RecurringScheduler
  > = Layer.effect(
    Operations,
    Effect.gen(function* () {
      const config = yield* PgBusConfig
      const sql = yield* SqlClient.SqlClient
      return build({
        config,
        sql,
        store: yield* QueueStore,
        states: yield* QueueStates,
        processes: yield* Processes,
        workflows: yield* WorkflowClient,
        recurring: yield* RecurringScheduler,
        registry: yield* Effect.serviceOption(Registry),
        ...statementsOf(sql, config.schema)
      })
    })
  )
}
