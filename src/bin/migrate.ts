/** `npm run migrate`: applies pending migrations to DATABASE_URL (schema from PGBUS_SCHEMA). */
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import { PgBusConfig } from "../Config.ts"
import * as Database from "../Database.ts"
import { migrate } from "../Migrations.ts"

const program = Effect.gen(function* () {
  const { schema } = yield* PgBusConfig
  const applied = yield* migrate
  if (applied.length === 0) yield* Effect.log(`pgbus: schema ${schema} is up to date`)
  for (const [id, name] of applied) yield* Effect.log(`pgbus: applied migration ${id}_${name} to schema ${schema}`)
})

program.pipe(Effect.provide(Database.layer), Effect.provide(PgBusConfig.layer()), NodeRuntime.runMain)
