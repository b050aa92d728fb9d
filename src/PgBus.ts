/**
 * The one Layer an app provides: config, database, the notifier and the queue store (jobs,
 * workflows and the event bus join it as they land), plus `migrate`.
 *
 * @since 0.1.0
 */
import type { PgClient } from "@effect/sql-pg"
import { Effect, Layer } from "effect"
import type { SqlClient } from "effect/sql"
import * as Batch from "./Batch/Batch.ts"
import { type ConfigurationError, PgBusConfig, type PgBusConfigInput } from "./Config.ts"
import * as Database from "./Database.ts"
import * as EventBusLayer from "./EventBus/EventBusLayer.ts"
import { JobClient } from "./Job/JobClient.ts"
import * as Migrations from "./Migrations.ts"
import { Notifier } from "./Queue/Notifier.ts"
import { QueueStates } from "./Queue/QueueStates.ts"
import { QueueStore } from "./Queue/QueueStore.ts"
import { WorkerQueueStore } from "./Queue/WorkerQueueStore.ts"
import { RecurringScheduler } from "./Recurring/Scheduler.ts"
import { Processes } from "./Supervisor/Processes.ts"
import type { WorkflowClient } from "./Workflow/Client.ts"
import * as WorkflowEngine from "./Workflow/Engine.ts"

/** Everything `PgBus.layer` provides. */
export type PgBus =
  | PgBusConfig
  | PgClient.PgClient
  | SqlClient.SqlClient
  | Database.WorkerSession
  | Notifier
  | QueueStore
  | WorkerQueueStore
  | QueueStates
  | JobClient
  | Processes
  | RecurringScheduler
  | WorkflowClient
  | WorkflowEngine.WorkflowRunner
  | WorkflowEngine.WorkflowSweep
  | Batch.Batches
  | Batch.BatchSweep
  | EventBusLayer.EventBusServices

/**
 * effect-pgbus from the environment (`DATABASE_URL`, `PGBUS_*`) with code overrides;
 * `{ migrate: true }` applies pending migrations when the layer is built.
 *
 * @category layers
 */
export const layer = (
  options: PgBusConfigInput = {}
): Layer.Layer<PgBus, ConfigurationError | Database.DatabaseError | Migrations.MigrationError> =>
  layerFrom(PgBusConfig.layer(options))

/**
 * effect-pgbus over a config layer of your own (e.g. `PgBusConfig.layerWithoutEnvironment`).
 *
 * @category layers
 */
export const layerFrom = <E>(
  config: Layer.Layer<PgBusConfig, E>
): Layer.Layer<PgBus, E | Database.DatabaseError | Migrations.MigrationError> => {
  // read bottom to top: config, database, notifier, queue store, then what stands on it
  // with `migrate: true`, pending migrations are applied before anything reads a table
  const database = Layer.effectDiscard(
    Effect.flatMap(PgBusConfig, (c) => (c.migrate ? Effect.asVoid(Migrations.migrate) : Effect.void))
  ).pipe(Layer.provideMerge(Layer.merge(Database.layer, Database.WorkerSession.layer)))
  const notifier = Notifier.layer.pipe(Layer.provideMerge(database))
  const queues = Layer.mergeAll(QueueStore.layer, WorkerQueueStore.layer, QueueStates.layer).pipe(
    Layer.provideMerge(notifier)
  )
  const onQueues = Layer.mergeAll(JobClient.layer, Processes.layer)
  const batches = Batch.layer.pipe(Layer.provideMerge(onQueues))
  const workflows = WorkflowEngine.layer.pipe(Layer.provideMerge(batches))
  // above the workflows: a workflow's schedule starts its runs
  const recurring = RecurringScheduler.layer.pipe(Layer.provideMerge(workflows))
  const events = EventBusLayer.layer.pipe(Layer.provideMerge(recurring))
  return events.pipe(Layer.provideMerge(queues), Layer.provideMerge(config))
}

/**
 * Applies pending migrations into the configured schema; `[]` when up to date. Fails with
 * `MigrationError` (`newer_database`) against a database migrated by newer code.
 */
export const migrate = Migrations.migrate
