/**
 * The embedded server's databases: two processes that share one data folder and start at once
 * both find no database of their name and both create it. One creation wins; the other, refused
 * with `duplicate_database` (42P04) or by the catalog's unique index (23505), must not fail its
 * process's start (CI, 2026-12-05: "cannot create database pgbus" in the embedded test of two
 * users of one folder).
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Latch, Redacted } from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import { SqlClient } from "effect/sql"
import { databaseCreate, databaseEnsure, describeSqlError } from "../src/Embedded/EmbeddedSql.ts"
import { withServer } from "./support/server.ts"

const exists = (name: string) =>
  withServer(
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      Effect.map(
        sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_database WHERE datname = ${name}`,
        (rows) => rows[0]?.n === 1
      )
    )
  )

const drop = (name: string) =>
  withServer(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DROP DATABASE IF EXISTS ${sql(name)} WITH (FORCE)`)).pipe(
    Effect.ignore
  )

describe("embedded databases", () => {
  it.live(
    "creators of one database at once, each on its own connection: all succeed, one database",
    () =>
      Effect.gen(function* () {
        for (let round = 0; round < 3; round++) {
          const name = `pgbus_t_ensure_${process.pid}_${round}`
          yield* drop(name)
          // every creator connected first, then all released at once: their checks see no database
          const go = yield* Latch.make()
          const creators = yield* Effect.forkChild(
            Effect.all(
              Array.from({ length: 6 }, () =>
                Effect.exit(
                  withServer(
                    Effect.flatMap(SqlClient.SqlClient, (sql) =>
                      Effect.andThen(Effect.andThen(sql`SELECT 1`, go.await), databaseEnsure(sql, name))
                    )
                  )
                )
              ),
              { concurrency: "unbounded" }
            )
          )
          yield* Effect.sleep("300 millis")
          yield* go.open
          const results = yield* Fiber.join(creators)
          const failed = results.filter((exit) => exit._tag === "Failure")
          assert.isTrue(yield* exists(name), `round ${round}: the database exists`)
          yield* drop(name)
          assert.deepStrictEqual(failed, [], `round ${round}: no creator failed`)
        }
      }),
    60_000
  )

  it.live("a creator that looked before another's creation committed: duplicate_database is no error", () =>
    Effect.gen(function* () {
      const name = `pgbus_t_create_${process.pid}`
      yield* drop(name)
      yield* withServer(Effect.flatMap(SqlClient.SqlClient, (sql) => databaseCreate(sql, name)))
      // the second creation is refused by the server (42P04), as for a creator that had looked first
      const again = yield* Effect.exit(
        withServer(Effect.flatMap(SqlClient.SqlClient, (sql) => databaseCreate(sql, name)))
      )
      assert.isTrue(yield* exists(name))
      yield* drop(name)
      assert.strictEqual(again._tag, "Success", String(again))
    })
  )

  it.live("a failure is told with the server's message and SQLSTATE, not the driver's", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(withServer(Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT 1 / 0`)))
      assert.strictEqual(describeSqlError(error), "division by zero (SQLSTATE 22012)")
      assert.strictEqual(describeSqlError(new Error("plain")), "plain")
      // a refused connection is told as the socket tells it, with no SQLSTATE
      const refused = yield* Effect.flip(
        Effect.scoped(
          Effect.flatMap(
            PgClient.make({
              url: Redacted.make("postgres://postgres@127.0.0.1:1/postgres"),
              connectTimeout: "2 seconds"
            }),
            (sql) => sql`SELECT 1`
          )
        ).pipe(Effect.provide(Reactivity.layer))
      )
      assert.notInclude(describeSqlError(refused), "SQLSTATE")
      assert.include(describeSqlError(refused), "ECONNREFUSED")
    })
  )
})
