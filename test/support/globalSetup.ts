/** Builds one migrated template database per test run; each test file clones it. */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import type { TestProject } from "vitest/node"
import { PgBusConfig } from "../../src/Config.ts"
import * as Database from "../../src/Database.ts"
import { migrate } from "../../src/Migrations.ts"
import { urlFor, withServer } from "./server.ts"

declare module "vitest" {
  export interface ProvidedContext {
    templateDatabase: string
  }
}

const template = `pgbus_tpl_${process.pid}_${Date.now().toString(36)}`

// Fast recovery judges no process dead before the server has been up for the stale threshold
// (10 s by default): a server started just now (by .ci/run, say) is given that long first.
const SERVER_UPTIME_MS = 11_000

export default async function setup(project: TestProject) {
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
  await Effect.runPromise(
    withServer(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE DATABASE ${sql(template)}`))
  )
  await Effect.runPromise(
    migrate.pipe(
      Effect.provide(Database.layer),
      Effect.provide(PgBusConfig.layerWithoutEnvironment({ databaseUrl: urlFor(template), poolSize: 1 }))
    )
  )
  project.provide("templateDatabase", template)
  return async () => {
    await Effect.runPromise(
      withServer(
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DROP DATABASE IF EXISTS ${sql(template)} WITH (FORCE)`)
      )
    )
  }
}
