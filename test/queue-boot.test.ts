/**
 * A supervisor booting next to a busy one (a rolling deploy): its boot creates the queues it
 * serves, which exist already, and must take no lock that the busy worker's statements meet
 * in the other order (no deadlock, 40P01, on either side).
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Exit, Fiber, Layer, Ref, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../src/Config.ts"
import * as Job from "../src/Job/Job.ts"
import * as PgBus from "../src/PgBus.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import * as Supervisor from "../src/Supervisor/Supervisor.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ n: Schema.Number })

const deadlocks = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.andThen(
    sql`SELECT pg_stat_clear_snapshot()`,
    Effect.map(
      sql<{ readonly n: number }>`SELECT deadlocks::int AS n FROM pg_stat_database WHERE datname = current_database()`,
      ([row]) => row!.n
    )
  )
)

const processCount = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pgbus.processes`, ([row]) => row!.n)
)

describe("a supervisor booting next to a busy one", () => {
  it.live("creating an existing queue waits on no lock a worker holds on its tables", () =>
    TestDatabase.onFreshDatabase({}, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const store = yield* QueueStore
        yield* store.create("held")
        const locked = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        // what a worker's statements hold while they run: ROW EXCLUSIVE on both tables
        const holder = yield* sql
          .withTransaction(
            Effect.gen(function* () {
              yield* sql`LOCK TABLE pgbus.a_pgbus_held, pgbus.q_pgbus_held IN ROW EXCLUSIVE MODE`
              yield* Deferred.succeed(locked, undefined)
              yield* Deferred.await(release)
            })
          )
          .pipe(Effect.forkChild)
        yield* Deferred.await(locked)
        const created = yield* store.create("held").pipe(Effect.timeoutOption("3 seconds"))
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(holder)
        assert.isTrue(created._tag === "Some", "create waited on the worker's lock")
        // a queue half made (its DLQ's archive index gone) is completed
        yield* sql`DROP INDEX pgbus.a_pgbus_held_dlq_archived_at_idx`
        yield* store.create("held")
        const [index] = yield* sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_indexes
          WHERE schemaname = 'pgbus' AND indexname = 'a_pgbus_held_dlq_archived_at_idx'`
        assert.strictEqual(index!.n, 1)
      })
    )
  )

  it.live(
    "boots 40 times while the other runs jobs flat out: no deadlock on either side, every job done",
    () =>
      TestDatabase.onFreshDatabase(
        { pollingInterval: "50 millis", visibilityTimeout: "3 seconds", workers: "busy: 20" },
        (url) =>
          Effect.gen(function* () {
            const done = yield* Ref.make(0)
            const Busy = Job.make("Busy", { payload: Payload, queue: "busy" }, () => Ref.update(done, (n) => n + 1))
            yield* startSupervisor([Busy])
            const before = yield* deadlocks
            let sent = 0
            const produce = Effect.gen(function* () {
              for (;;) {
                yield* Busy.enqueueMany(Array.from({ length: 40 }, (_, i) => ({ n: sent + i })))
                sent += 40
                yield* Effect.sleep("10 millis")
              }
            })
            const producer = yield* Effect.forkChild(produce)
            yield* eventually(
              "the busy supervisor runs jobs",
              Effect.map(Ref.get(done), (n) => n > 200)
            )

            // each boot is a fresh process's view: its own pool and its own memo of known queues
            const second = PgBus.layerFrom(
              PgBusConfig.layerWithoutEnvironment({
                databaseUrl: url,
                pollingInterval: "50 millis",
                visibilityTimeout: "3 seconds",
                workers: "busy: 4"
              })
            ).pipe(Layer.orDie)
            const bootsFrom = yield* Clock.currentTimeMillis
            const doneBefore = yield* Ref.get(done)
            for (let boot = 0; boot < 40; boot++) {
              yield* Effect.scoped(
                Effect.gen(function* () {
                  const fiber = yield* Supervisor.runWith().pipe(
                    Effect.provide(Registry.layer([Busy])),
                    Effect.provide(second),
                    Effect.forkScoped
                  )
                  yield* eventually(
                    `boot ${boot} registers its process (or fails)`,
                    Effect.map(processCount, (n) => n >= 2 || fiber.pollUnsafe() !== undefined),
                    "20 seconds"
                  )
                  const exit = fiber.pollUnsafe()
                  if (exit !== undefined) assert.fail(`boot ${boot} failed: ${Exit.isFailure(exit) ? exit.cause : ""}`)
                  yield* Fiber.interrupt(fiber)
                })
              )
              // its drain (seconds on a loaded machine) ends with its unregistration
              yield* eventually(
                "the booted process unregisters",
                Effect.map(processCount, (n) => n === 1),
                "30 seconds"
              )
            }
            const rate = ((yield* Ref.get(done)) - doneBefore) / (((yield* Clock.currentTimeMillis) - bootsFrom) / 1000)
            yield* Effect.logInfo(`jobs run while the second supervisor booted 40 times: ${Math.round(rate)}/s`)
            yield* Fiber.interrupt(producer)
            yield* eventually(
              "every job sent is done",
              Effect.map(Ref.get(done), (n) => n >= sent),
              "60 seconds"
            )
            // the statistics are flushed within a second of a backend's transaction
            yield* Effect.sleep("1500 millis")
            assert.strictEqual((yield* deadlocks) - before, 0, "deadlocks detected in the test's database")
          })
      ),
    240_000
  )
})
