/**
 * The test server and one migrated template database per test run; each test file clones it.
 * With neither DATABASE_URL nor PGHOST set, the tests run on the embedded PostgreSQL (data in
 * `.pgbus/test`, kept between runs), started here and stopped after the run; its URL is put in
 * DATABASE_URL, which the test workers and the processes tests spawn inherit.
 */
import { Effect, Exit, Redacted, Scope } from "effect"
import { SqlClient } from "effect/sql"
import type { TestProject } from "vitest/node"
import { PgBusConfig } from "../../src/Config.ts"
import { describeUrl } from "../../src/Connection.ts"
import * as Database from "../../src/Database.ts"
import { acquire } from "../../src/Embedded/Server.ts"
import { migrate } from "../../src/Migrations.ts"
import { serverUrl, urlFor, withServer } from "./server.ts"

declare module "vitest" {
  export interface ProvidedContext {
    templateDatabase: string
  }
}

const template = `pgbus_tpl_${process.pid}_${Date.now().toString(36)}_${Math.floor(Math.random() * 1e6).toString(36)}`

// Fast recovery judges no process dead before the server has been up for the stale threshold
// (10 s by default): a server started just now (by .ci/run, or the embedded one) is given that
// long first.
const SERVER_UPTIME_MS = 11_000

/** Starts the embedded server unless the environment names one; returns how to let it go. */
const server = async (): Promise<() => Promise<void>> => {
  if ((process.env.DATABASE_URL ?? "") !== "" || (process.env.PGHOST ?? "") !== "") {
    console.log(
      `tests: PostgreSQL at ${describeUrl(serverUrl())} (from ${process.env.DATABASE_URL ? "DATABASE_URL" : "PGHOST"})`
    )
    return async () => {}
  }
  const scope = Effect.runSync(Scope.make())
  const embedded = await Effect.runPromise(
    Scope.provide(acquire({ dataDir: ".pgbus/test", database: "postgres" }), scope)
  )
  process.env.DATABASE_URL = Redacted.value(embedded.url)
  console.log(`tests: ${embedded.description}`)
  return () => Effect.runPromise(Scope.close(scope, Exit.void))
}

/** The server and the template, made once for every project of the run. */
const prepare = async () => {
  const release = await server()
  await Effect.runPromise(
    withServer(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE DATABASE ${sql(template)}`))
  )
  await Effect.runPromise(
    migrate.pipe(
      Effect.provide(Database.layer),
      Effect.provide(PgBusConfig.layerWithoutEnvironment({ databaseUrl: urlFor(template), poolSize: 1 }))
    )
  )
  const [uptime] = await Effect.runPromise(
    withServer(
      Effect.flatMap(
        SqlClient.SqlClient,
        (sql) =>
          sql<{
            readonly ms: number
          }>`SELECT (extract(epoch FROM now() - pg_postmaster_start_time()) * 1000)::float8 AS ms`
      )
    )
  )
  const wait = SERVER_UPTIME_MS - (uptime?.ms ?? SERVER_UPTIME_MS)
  if (wait > 0) await Effect.runPromise(Effect.sleep(wait))
  return async () => {
    await Effect.runPromise(
      withServer(
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DROP DATABASE IF EXISTS ${sql(template)} WITH (FORCE)`)
      )
    )
    await release()
  }
}

let prepared: ReturnType<typeof prepare> | undefined
let projects = 0

export default async function setup(project: TestProject) {
  projects++
  prepared ??= prepare()
  const teardown = await prepared
  project.provide("templateDatabase", template)
  return async () => {
    if (--projects === 0) await teardown()
  }
}
