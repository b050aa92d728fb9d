/**
 * The PostgreSQL server the tests use (`DATABASE_URL`, or libpq's `PGHOST`...; the global setup
 * sets DATABASE_URL to the embedded server when neither is set), and helpers to create and drop
 * databases.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { SqlClient } from "effect/sql"
import { resolve } from "../../src/Config.ts"
import { completeUrl } from "../../src/Connection.ts"
import { clientOptions } from "../../src/Database.ts"

/** The server URL tests start from (read when called: the global setup may set it). */
export const serverUrl = (): string => completeUrl(process.env.DATABASE_URL || undefined, process.env)

/** The same server, another database. */
export const urlFor = (database: string): string => {
  const url = new URL(serverUrl())
  url.pathname = `/${database}`
  return url.toString()
}

/** Runs an effect with a one-connection client on the given database of the test server. */
export const withServer = <A, E>(
  effect: Effect.Effect<A, E, SqlClient.SqlClient>,
  database?: string
): Effect.Effect<A, unknown> =>
  Effect.gen(function* () {
    const config = yield* resolve({ databaseUrl: database ? urlFor(database) : serverUrl(), poolSize: 1 })
    const client = yield* PgClient.make(yield* clientOptions(config, "effect-pgbus-tests"))
    return yield* Effect.provideService(effect, SqlClient.SqlClient, client)
  }).pipe(Effect.scoped, Effect.provide(Reactivity.layer))
