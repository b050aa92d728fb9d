/**
 * A fresh database per test file, cloned from the migrated template, dropped when the layer
 * is released. `layer(options)` gives the whole of PgBus on it.
 */
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { inject } from "vitest"
import { PgBusConfig, type PgBusConfigInput } from "../../src/Config.ts"
import * as PgBus from "../../src/PgBus.ts"
import { urlFor, withServer } from "./server.ts"

let counter = 0

/** Creates a database (from the migrated template, or empty); drops it (forcibly) when the scope closes. */
const createDatabase = (fromTemplate: boolean) =>
  Effect.acquireRelease(
    Effect.gen(function* () {
      const name = `pgbus_t_${process.pid}_${Date.now().toString(36)}_${counter++}`
      const template = fromTemplate ? inject("templateDatabase") : "template1"
      yield* withServer(
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE DATABASE ${sql(name)} TEMPLATE ${sql(template)}`)
      )
      return name
    }),
    (name) =>
      withServer(
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DROP DATABASE IF EXISTS ${sql(name)} WITH (FORCE)`)
      ).pipe(Effect.ignore)
  ).pipe(Effect.orDie)

/** A database cloned from the migrated template, dropped when the scope closes. */
export const freshDatabase = createDatabase(true)

/** An empty (unmigrated) database, dropped when the scope closes. */
export const emptyDatabase = createDatabase(false)

/** The URL of a fresh database, as a layer-friendly config. */
export const configLayer = (options: PgBusConfigInput = {}) =>
  Layer.unwrap(
    Effect.map(freshDatabase, (name) => PgBusConfig.layerWithoutEnvironment({ databaseUrl: urlFor(name), ...options }))
  )

/** PgBus on a fresh database. */
export const layer = (options: PgBusConfigInput = {}) => PgBus.layerFrom(configLayer(options)).pipe(Layer.orDie)

/** Runs a test body with PgBus on a fresh database and hands it the database's URL (for child processes). */
export const onFreshDatabase = <A, E, R>(options: PgBusConfigInput, body: (url: string) => Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const name = yield* freshDatabase
    const url = urlFor(name)
    const services = PgBus.layerFrom(PgBusConfig.layerWithoutEnvironment({ databaseUrl: url, ...options }))
    return yield* body(url).pipe(Effect.provide(Layer.orDie(services)))
  }).pipe(Effect.scoped)
