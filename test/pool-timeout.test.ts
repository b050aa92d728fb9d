/**
 * poolTimeout (issue 23 item 5's rest): a statement that waits for a pool connection longer
 * than the timeout fails with an error naming the pool's state; the pool's leases are counted
 * back when they end; statements, transactions and a job run through the wrapped client as usual.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { isSqlError } from "effect/sql/SqlError"
import { toDatabaseError } from "../src/Database.ts"
import * as Job from "../src/Job/Job.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { onFreshDatabase } from "./support/TestDatabase.ts"

/** Holds one pool connection in a transaction for `ms`. */
const hold = (ms: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql.withTransaction(Effect.andThen(sql`SELECT 1`, Effect.sleep(ms))))

describe("poolTimeout", () => {
  it.live("a statement that finds every connection held past poolTimeout fails naming the pool's state", () =>
    onFreshDatabase({ poolSize: 2, poolTimeout: "300 millis" }, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const holders = yield* Effect.forkChild(Effect.all([hold(2000), hold(2000)], { concurrency: 2 }))
        yield* Effect.sleep("200 millis")
        const started = performance.now()
        const exit = yield* Effect.exit(sql`SELECT 2 AS n`)
        const waitedMs = performance.now() - started
        assert.isTrue(Exit.isFailure(exit), "the third statement failed")
        const error = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail")?.error : undefined
        assert.isTrue(isSqlError(error), String(error))
        if (!isSqlError(error)) return
        const classified = toDatabaseError("read")(error)
        assert.include(
          classified.detail,
          "pool timeout: no connection free after 300ms (pool size 2: 2 in use, 1 waiting)"
        )
        assert.isTrue(classified.retryable, "a pool timeout is worth retrying")
        assert.isAtLeast(waitedMs, 280)
        assert.isBelow(waitedMs, 1500, `failed after ${Math.round(waitedMs)} ms`)
        yield* Fiber.join(holders)
        // the leases were counted back: the pool serves again, two at once
        const [a, b] = yield* Effect.all([sql<{ n: number }>`SELECT 3 AS n`, sql<{ n: number }>`SELECT 4 AS n`], {
          concurrency: 2
        })
        assert.deepStrictEqual([a![0]!.n, b![0]!.n], [3, 4])
      })
    )
  )

  it.live("a burst of checkouts at once: those beyond the pool's size are bounded too", () =>
    onFreshDatabase({ poolSize: 2, poolTimeout: "300 millis" }, () =>
      Effect.gen(function* () {
        const started = performance.now()
        const exits = yield* Effect.all(
          Array.from({ length: 5 }, () => Effect.exit(hold(1500))),
          { concurrency: "unbounded" }
        )
        const failed = exits.filter(Exit.isFailure)
        assert.strictEqual(exits.length - failed.length, 2, "the pool's two connections served two")
        assert.strictEqual(failed.length, 3, "the three beyond it timed out, none waited unbounded")
        for (const exit of failed) assert.include(String(exit.cause), "pool timeout")
        assert.isBelow(performance.now() - started, 4000)
      })
    )
  )

  it.live("a waiter that gets a connection within poolTimeout runs; a rolled-back transaction stays rolled back", () =>
    onFreshDatabase({ poolSize: 1, poolTimeout: "3 seconds" }, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const holder = yield* Effect.forkChild(hold(300))
        yield* Effect.sleep("100 millis")
        const [row] = yield* sql<{ n: number }>`SELECT 5 AS n`
        assert.strictEqual(row!.n, 5, "it waited for the held connection")
        yield* Fiber.join(holder)
        yield* sql`CREATE TABLE t (n int)`
        const failed = yield* Effect.exit(
          sql.withTransaction(Effect.andThen(sql`INSERT INTO t VALUES (1)`, Effect.fail("no")))
        )
        assert.isTrue(Exit.isFailure(failed))
        yield* sql.withTransaction(sql`INSERT INTO t VALUES (2)`)
        const rows = yield* sql<{ n: number }>`SELECT n FROM t`
        assert.deepStrictEqual(
          rows.map((r) => r.n),
          [2]
        )
      })
    )
  )

  it.live("jobs run through a supervisor on the wrapped pool", () =>
    onFreshDatabase({ poolTimeout: "5 seconds", pollingInterval: "100 millis" }, () =>
      Effect.gen(function* () {
        const done: Array<string> = []
        const Echo = Job.make("Echo", { payload: Schema.Struct({ key: Schema.String }) }, ({ key }) =>
          Effect.sync(() => {
            done.push(key)
          })
        )
        yield* startSupervisor([Echo])
        yield* Echo.enqueueMany(Array.from({ length: 50 }, (_, i) => ({ key: String(i) })))
        yield* eventually(
          "50 jobs ran",
          Effect.sync(() => done.length >= 50),
          "30 seconds"
        )
        assert.strictEqual(new Set(done).size, 50)
      })
    )
  )
})
