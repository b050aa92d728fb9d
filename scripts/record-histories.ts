/**
 * Records the histories of the example workflows into test/histories/ (replayed by
 * test/histories.test.ts). Runs against a temporary database on DATABASE_URL's server.
 */

import { writeFileSync } from "node:fs"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { Onboarding, registry } from "../packages/example/src/app.ts"
import { PgBusConfig } from "../src/Config.ts"
import * as PgBus from "../src/PgBus.ts"
import { exportHistory } from "../src/Testing/Replay.ts"
import { performNextStep, speedrun } from "../src/Testing/Workflows.ts"

const server = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"
const database = `pgbus_histories_${process.pid}`
const url = new URL(server)
url.pathname = `/${database}`

const admin = (statement: (sql: SqlClient.SqlClient) => Effect.Effect<unknown, unknown>) =>
  Effect.flatMap(SqlClient.SqlClient, statement).pipe(
    Effect.provide(PgClient.layer({ url: Redacted.make(server), maxConnections: 1 }))
  )

const record = Effect.gen(function* () {
  yield* PgBus.migrate
  const finished = yield* Onboarding.start({ userId: "ada" })
  yield* speedrun(finished.id)
  const midway = yield* Onboarding.start({ userId: "grace" })
  yield* performNextStep(midway.id)
  for (const [name, id] of [
    ["onboarding-finished", finished.id],
    ["onboarding-midway", midway.id]
  ] as const) {
    const history = yield* exportHistory(id)
    writeFileSync(new URL(`../test/histories/${name}.json`, import.meta.url), `${JSON.stringify(history, null, 2)}\n`)
    yield* Effect.logInfo(`recorded ${name}: ${history.steps.map((s) => `${s.name}:${s.status}`).join(", ")}`)
  }
}).pipe(
  Effect.provide(registry),
  Effect.provide(PgBus.layerFrom(PgBusConfig.layerWithoutEnvironment({ databaseUrl: url.toString(), poolSize: 2 })))
)

const program = Effect.acquireUseRelease(
  admin((sql) => sql`CREATE DATABASE ${sql(database)}`),
  () => record,
  () => admin((sql) => sql`DROP DATABASE IF EXISTS ${sql(database)} WITH (FORCE)`).pipe(Effect.ignore)
)

Effect.runPromise(program.pipe(Effect.scoped, Effect.provide(Layer.empty))).then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
