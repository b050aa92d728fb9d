/**
 * Databases of one's own on whichever server a config points at (the embedded one or the
 * one the environment names): the example app's `pgbus_example`, and the throwaway database of
 * a user's test.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import type { SqlClient } from "effect/sql"
import type { PgBusConfigShape } from "../Config.ts"
import { clientOptions } from "../Database.ts"
import { EmbeddedError } from "./EmbeddedError.ts"
import { databaseDrop, databaseEnsure, describeSqlError } from "./EmbeddedSql.ts"

/** The config's URL with another database in it. */
export const urlWithDatabase = (config: PgBusConfigShape, database: string): string => {
  const url = new URL(Redacted.value(config.databaseUrl))
  url.pathname = `/${encodeURIComponent(database)}`
  url.searchParams.delete("dbname")
  return url.toString()
}

/** Runs `f` on a one-connection client of the config's database (TLS and all), as maintenance. */
const onServer = (
  config: PgBusConfigShape,
  what: string,
  f: (sql: SqlClient.SqlClient) => Effect.Effect<void, unknown>
): Effect.Effect<void, EmbeddedError> =>
  Effect.gen(function* () {
    const options = yield* clientOptions({ ...config, poolSize: 1 })
    const client = yield* PgClient.make({ ...options, applicationName: "effect-pgbus-databases" })
    yield* f(client)
  }).pipe(
    Effect.scoped,
    Effect.provide(Reactivity.layer),
    Effect.mapError(
      (error) =>
        new EmbeddedError({
          reason: "database",
          detail: `cannot ${what}: ${describeSqlError(error)}`
        })
    )
  )

/** Creates `database` on the config's server unless it exists. */
export const ensureDatabase = (config: PgBusConfigShape, database: string) =>
  onServer(config, `create database ${database}`, (sql) => databaseEnsure(sql, database))

/** Drops `database` on the config's server (its sessions ended). */
export const dropDatabase = (config: PgBusConfigShape, database: string) =>
  onServer(config, `drop database ${database}`, (sql) => databaseDrop(sql, database))
