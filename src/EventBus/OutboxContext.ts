/**
 * The outbox's shared context: the app's database (where entries are written and claimed),
 * its statements, and the bus relayed entries go to (the same database, or the one
 * `busDatabaseUrl` names, with services of its own).
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { effectivePoolSize, PgBusConfig, type PgBusConfigShape } from "../Config.ts"
import * as Database from "../Database.ts"
import { toDatabaseError } from "../Database.ts"
import { JobClient } from "../Job/JobClient.ts"
import { Notifier } from "../Queue/Notifier.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import { EventPublisher, makePublisher, type Publisher, subscriberQueueOptions } from "./EventBus.ts"
import { makeOutboxSql } from "./OutboxSql.ts"

/** Whether a value is a JSON object (not null, not an array). */
export const isObject = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/** Where relayed entries go: a publisher and a queue store on the bus's database. */
export interface Bus {
  readonly sameDatabase: boolean
  readonly publisher: Publisher
  readonly store: QueueStore["Service"]
  readonly ensureQueue: (queue: string) => Effect.Effect<void, QueueError>
}

/**
 * The services on the bus's own database, built apart (`Layer.fresh`) so that nothing is
 * shared with the app's pool. Its notifier opens no LISTEN connection: the relay only sends.
 */
const busLayer = (config: PgBusConfigShape, url: NonNullable<PgBusConfigShape["busDatabaseUrl"]>) =>
  Layer.fresh(
    JobClient.layer.pipe(
      Layer.provideMerge(QueueStore.layer),
      Layer.provideMerge(Notifier.layer),
      Layer.provideMerge(Database.layer),
      Layer.provideMerge(
        Layer.succeed(PgBusConfig, {
          ...config,
          databaseUrl: url,
          busDatabaseUrl: undefined,
          poolSize: Math.min(effectivePoolSize(config), 4)
        })
      )
    )
  )

/** Builds the outbox's shared context, and the bus on its own database when `busDatabaseUrl` is set. */
export const makeOutboxContext = Effect.gen(function* () {
  const config = yield* PgBusConfig
  const sql = yield* SqlClient.SqlClient
  const store = yield* QueueStore
  const jobs = yield* JobClient
  const statements = makeOutboxSql(sql, config.schema)
  const db = (operation: string) => Effect.mapError(toDatabaseError(operation))

  // the same database: the process's one publisher, whose routing cache sees this
  // process's registrations at once
  const shared = yield* EventPublisher
  const bus: Bus = yield* config.busDatabaseUrl === undefined
    ? Effect.succeed({ sameDatabase: true, publisher: shared, store, ensureQueue: jobs.ensureQueue })
    : Effect.gen(function* () {
        const context = yield* Layer.build(busLayer(config, config.busDatabaseUrl!))
        const busConfig = Context.get(context, PgBusConfig)
        const busStore = Context.get(context, QueueStore)
        const busJobs = Context.get(context, JobClient)
        const subscriberQueues = subscriberQueueOptions(busConfig)
        const publisher = yield* makePublisher({
          config: busConfig,
          sql: Context.get(context, SqlClient.SqlClient),
          store: busStore,
          ensureQueue: (queue) => busJobs.ensureQueue(queue, subscriberQueues)
        })
        return { sameDatabase: false, publisher, store: busStore, ensureQueue: busJobs.ensureQueue }
      })
  return { config, sql, store, jobs, statements, db, bus }
})

/** What every part of the outbox runs on. */
export type OutboxContext = Effect.Success<typeof makeOutboxContext>
