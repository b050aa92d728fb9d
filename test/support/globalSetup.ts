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

export default async function setup(project: TestProject) {
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
