/** The PostgreSQL server the tests use (`DATABASE_URL`), and helpers to create and drop databases. */
import { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { SqlClient } from "effect/sql"
import { resolve } from "../../src/Config.ts"
import { clientOptions } from "../../src/Database.ts"

/** The server URL tests start from. */
export const serverUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"

/** The same server, another database. */
export const urlFor = (database: string): string => {
  const url = new URL(serverUrl)
  url.pathname = `/${database}`
  return url.toString()
}

/** Runs an effect with a one-connection client on the given database of the test server. */
export const withServer = <A, E>(
  effect: Effect.Effect<A, E, SqlClient.SqlClient>,
  database?: string
): Effect.Effect<A, unknown> =>
  Effect.gen(function* () {
    const config = yield* resolve({ databaseUrl: database ? urlFor(database) : serverUrl, poolSize: 1 })
    const client = yield* PgClient.make(yield* clientOptions(config, "effect-pgbus-tests"))
    return yield* Effect.provideService(effect, SqlClient.SqlClient, client)
  }).pipe(Effect.scoped, Effect.provide(Reactivity.layer))
