/** Shared bench helpers: a fresh database per run, timing, medians, the machine line. */

import os from "node:os"
import { PgClient } from "@effect/sql-pg"
import { Cause, Effect, Exit, type Fiber, Layer, Redacted } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { SqlClient } from "effect/sql"
import type { PgBusConfigInput } from "../../../src/Config.ts"
import { resolve } from "../../../src/Config.ts"
import { clientOptions } from "../../../src/Database.ts"
import { PgBusConfig } from "../../../src/index.ts"

export const serverUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"

export const urlFor = (database: string): string => {
  const url = new URL(serverUrl)
  url.pathname = `/${database}`
  return url.toString()
}

const admin = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
  Effect.gen(function* () {
    const config = yield* resolve({ databaseUrl: serverUrl, poolSize: 1 })
    const client = yield* PgClient.make(yield* clientOptions(config, "effect-pgbus-bench"))
    return yield* Effect.provideService(effect, SqlClient.SqlClient, client)
  }).pipe(Effect.scoped, Effect.provide(Reactivity.layer))

/** A new database for one bench run, dropped when the scope closes. */
export const benchDatabase = (name: string) =>
  Effect.acquireRelease(
    admin(
      Effect.flatMap(SqlClient.SqlClient, (sql) =>
        Effect.andThen(sql`DROP DATABASE IF EXISTS ${sql(name)} WITH (FORCE)`, sql`CREATE DATABASE ${sql(name)}`)
      )
    ).pipe(Effect.as(name)),
    () =>
      admin(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DROP DATABASE IF EXISTS ${sql(name)} WITH (FORCE)`)).pipe(
        Effect.ignore
      )
  ).pipe(Effect.orDie)

/**
 * Ends the bench process when its workers' fiber ends by anything but the bench's own stop: a
 * supervisor that failed at boot (a pool too small for the capsules, say) would otherwise leave
 * a run that finishes nothing and reports 0.
 */
export const exitOnWorkersFailure = <A, E>(fiber: Fiber.Fiber<A, E>): void => {
  fiber.addObserver((exit) => {
    if (Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause)) return
    console.error(`bench: the workers stopped: ${Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "ended"}`)
    process.exit(4)
  })
}

/** Config for a bench database. */
export const benchConfig = (database: string, options: PgBusConfigInput = {}) =>
  PgBusConfig.layerWithoutEnvironment({ databaseUrl: urlFor(database), poolSize: 20, ...options })

/** A plain PgClient on a database, for hand-written SQL. */
export const rawClient = (database: string, poolSize = 20) =>
  PgClient.layer({ url: Redacted.make(urlFor(database)), maxConnections: poolSize, applicationName: "bench-raw" })

export const median = (xs: ReadonlyArray<number>): number => {
  const s = [...xs].sort((a, b) => a - b)
  const m = Math.floor(s.length / 2)
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}

export const percentile = (xs: ReadonlyArray<number>, p: number): number => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!
}

export const round = (n: number, digits = 0): number => Number(n.toFixed(digits))

/** One line naming the machine, for the report. */
export const machine = (): string =>
  `${os.cpus().length} × ${os.cpus()[0]?.model ?? "cpu"}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}, ${new Date().toISOString()}`

export { Layer }
