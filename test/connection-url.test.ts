/**
 * The database URL's query parameters that effect-pgbus does not read: a URL shared with another
 * tool (Prisma's `pgbouncer`, `connection_limit`, `schema`) or written for libpq
 * (`application_name`) is not refused, but the pool says which parameters it leaves unread and
 * where their settings go instead.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Logger } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../src/Config.ts"
import { unreadParameters } from "../src/Connection.ts"
import * as Database from "../src/Database.ts"
import { urlFor } from "./support/server.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

/** The warnings logged while the pool is built on `url` (and `direct`) and answers one statement. */
const warningsFor = (url: string, direct?: string) =>
  Effect.gen(function* () {
    const lines: Array<string> = []
    const capture = Logger.make(({ logLevel, message }) => {
      if (logLevel === "Warn") lines.push((Array.isArray(message) ? message : [message]).map(String).join(" "))
    })
    const one = yield* Effect.flatMap(
      SqlClient.SqlClient,
      (sql) => sql<{ readonly one: number }>`SELECT 1 AS one`
    ).pipe(
      Effect.provide(
        Database.layer.pipe(
          Layer.provide(
            PgBusConfig.layerWithoutEnvironment({
              databaseUrl: url,
              ...(direct === undefined ? {} : { directDatabaseUrl: direct })
            })
          )
        )
      ),
      Effect.provide(Logger.layer([capture]))
    )
    assert.strictEqual(one[0]?.one, 1, "the pool connects whatever the parameters")
    return lines
  })

describe("the database URL's unread query parameters", () => {
  it("are named, each with its effect-pgbus counterpart when there is one; libpq's own are read", () => {
    assert.deepStrictEqual(
      unreadParameters(
        "postgres://u:pw@db/x?sslmode=require&connect_timeout=5&pgbouncer=true&connection_limit=5&application_name=app"
      ),
      [
        "pgbouncer (use the transactionPooler key (PGBUS_TRANSACTION_POOLER))",
        "connection_limit (use the poolSize key (PGBUS_POOL_SIZE))",
        "application_name"
      ]
    )
    assert.deepStrictEqual(unreadParameters("postgres://u@db/x?host=/var/run/postgresql&port=5433&dbname=y"), [])
  })

  it.live("are said in one warning when the pool is built; a URL without any says nothing", () =>
    Effect.gen(function* () {
      const name = yield* TestDatabase.emptyDatabase
      const warned = yield* warningsFor(`${urlFor(name)}?schema=public&application_name=app&sslmode=disable`)
      const unread = warned.filter((line) => line.includes("not read"))
      assert.strictEqual(unread.length, 1, warned.join("\n"))
      assert.include(unread[0], "schema (use the schema key (PGBUS_SCHEMA)")
      assert.include(unread[0], "application_name")
      // the parameters it names, before the list of those it reads
      assert.notInclude(unread[0]!.split(" are not read")[0], "sslmode")
      // the direct URL (session connections) is read the same way, and named apart
      const direct = yield* warningsFor(urlFor(name), `${urlFor(name)}?options=-c%20search_path%3Dapp`)
      assert.deepStrictEqual(
        direct.filter((line) => line.includes("not read")).map((line) => line.split(" are not read")[0]),
        ["pgbus: the direct database URL's query parameters options"]
      )
      const quiet = yield* warningsFor(`${urlFor(name)}?sslmode=disable&connect_timeout=10`)
      assert.deepStrictEqual(
        quiet.filter((line) => line.includes("not read")),
        []
      )
    }).pipe(Effect.scoped)
  )
})
