/**
 * Job statistics at drain: a drain that comes while the flusher is writing lets that write end,
 * flushes the rest once, and logs nothing (an interrupt is not a failure to write).
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../src/Config.ts"
import * as Job from "../src/Job/Job.ts"
import { Operations } from "../src/Operations/Operations.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import * as Supervisor from "../src/Supervisor/Supervisor.ts"
import { eventually } from "./support/jobs.ts"
import { withCapturedLogs } from "./support/logs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Tick = Job.make("StatsTick", { payload: Schema.Struct({ n: Schema.Number }), queue: "stats" }, () => Effect.void)

describe("job statistics at drain", () => {
  it.live(
    "a drain during a statistics write lets it end and flushes the rest: every job run is counted once, nothing is logged",
    () => {
      const lines: Array<string> = []
      return withCapturedLogs(
        lines,
        TestDatabase.onFreshDatabase({ pollingInterval: "50 millis" }, () =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            const table = sql(`${(yield* PgBusConfig).schema}.job_stats`)
            yield* (yield* QueueStore).create("stats")
            const supervisor = yield* Supervisor.runWith({
              capsules: [{ name: "stats", queues: ["stats"], concurrency: 4 }]
            }).pipe(Effect.provide(Registry.layer([Tick])), Effect.forkChild)
            yield* Effect.forEach(
              Array.from({ length: 20 }, (_, n) => n),
              (n) => Tick.enqueue({ n }),
              { discard: true }
            )
            yield* eventually(
              "every tick archived",
              Effect.map((yield* Operations).queue("stats"), (q) => q.depth === 0 && q.archived === 20)
            )
            // the table is locked, so the flusher's next write (5 s at the latest) waits on it
            const locked = yield* Deferred.make<void>()
            const unlock = yield* Deferred.make<void>()
            const holder = yield* sql`LOCK TABLE ${table} IN EXCLUSIVE MODE`.pipe(
              Effect.andThen(Deferred.succeed(locked, undefined)),
              Effect.andThen(Deferred.await(unlock)),
              sql.withTransaction,
              Effect.forkChild
            )
            yield* Deferred.await(locked)
            yield* eventually(
              "the flusher's write waits on the lock",
              Effect.map(
                sql<{ readonly n: number }>`SELECT count(*)::int4 AS n FROM pg_stat_activity
                  WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO%job_stats%'`,
                ([row]) => (row?.n ?? 0) > 0
              ),
              "15 seconds"
            )
            // the drain starts in the middle of that write; the lock goes a little later
            const drained = yield* Effect.forkChild(Fiber.interrupt(supervisor))
            yield* Effect.sleep("300 millis")
            yield* Deferred.succeed(unlock, undefined)
            yield* Fiber.join(holder)
            yield* Fiber.join(drained)
            const [row] = yield* sql<{
              readonly completed: number
              readonly latency_count: number
            }>`SELECT coalesce(sum(completed), 0)::int4 AS completed, coalesce(sum(latency_count), 0)::int4 AS latency_count
              FROM ${table} WHERE queue = 'stats'`
            assert.deepStrictEqual(row, { completed: 20, latency_count: 20 })
            assert.deepStrictEqual(
              lines.filter((line) => line.includes("job statistics")),
              []
            )
          }).pipe(Effect.provide(Operations.layer))
        )
      )
    },
    30_000
  )
})
