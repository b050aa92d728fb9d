/**
 * The workers' session (`WorkerSession` in src/Database.ts): a process's workers claim and
 * archive on a pipelined connection of their own, not the pool. What a user sees: jobs run while
 * callers' transactions hold every pooled connection, the process holds one such connection,
 * opened at boot, and that connection lost mid-run loses no job.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Ref, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Job from "../src/Job/Job.ts"
import { QueueStates } from "../src/Queue/QueueStates.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { onFreshDatabase } from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ n: Schema.Number })

/** The backends of this database whose application_name is the workers' session's. */
const sessionBackends = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ readonly pid: number }>`SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND application_name = 'effect-pgbus workers'`.pipe(
    Effect.map((rows) => rows.map((r) => r.pid))
  )
)

describe("the workers' session", () => {
  it.live("with every pooled connection held by callers' transactions, due jobs are still claimed and run", () =>
    onFreshDatabase({ poolSize: 10, pollingInterval: "100 millis" }, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const ran = yield* Ref.make(0)
        const Work = Job.make("SessionWork", { payload: Payload, queue: "session_work" }, () =>
          Ref.update(ran, (n) => n + 1)
        )
        yield* startSupervisor([Work], { capsules: [{ name: "c", queues: ["session_work"], concurrency: 4 }] })
        // one job first: the supervisor has booted (its boot statements are the pool's)
        yield* Work.enqueue({ n: -1 })
        yield* eventually(
          "the first job ran",
          Effect.map(Ref.get(ran), (n) => n === 1)
        )
        // due once the pool is held, so they are claimed while it is
        yield* Work.enqueueMany(
          Array.from({ length: 20 }, (_, n) => ({ n })),
          { delay: "1500 millis" }
        )
        const release = yield* Deferred.make<void>()
        const holding = yield* Ref.make(0)
        // more holders than connections: those that get one hold it until the release
        const holders = yield* Effect.forkChild(
          Effect.all(
            Array.from({ length: 10 }, () =>
              sql.withTransaction(
                Effect.andThen(
                  sql`SELECT 1`,
                  Effect.andThen(
                    Ref.update(holding, (n) => n + 1),
                    Deferred.await(release)
                  )
                )
              )
            ),
            { concurrency: "unbounded" }
          )
        )
        const heldThrough = yield* Effect.gen(function* () {
          // every connection the pool has is held: the supervisor's own (its LISTEN) and the holders'
          yield* eventually(
            "the holders hold connections",
            Effect.map(Ref.get(holding), (n) => n >= 8)
          )
          yield* Effect.sleep("300 millis")
          const probe = yield* sql`SELECT 1`.pipe(Effect.timeoutOption("300 millis"))
          assert.isTrue(probe._tag === "None", "no pooled connection is free")
          yield* eventually(
            "every job ran while the pool was held",
            Effect.map(Ref.get(ran), (n) => n === 21),
            "15 seconds"
          )
          const free = yield* sql`SELECT 1`.pipe(Effect.timeoutOption("100 millis"))
          return holders.pollUnsafe() === undefined && free._tag === "None"
        }).pipe(Effect.ensuring(Deferred.succeed(release, undefined)))
        assert.isTrue(heldThrough, "the pool's connections were held throughout")
        yield* Fiber.join(holders)
        const store = yield* QueueStore
        yield* eventually(
          "every job archived",
          Effect.map(store.metrics("session_work"), (m) => m.archiveSize === 21 && m.depth === 0)
        )
      })
    )
  )

  it.live("a process's workers hold one connection of their own, however many capsules and jobs", () =>
    onFreshDatabase({}, () =>
      Effect.gen(function* () {
        const ran = yield* Ref.make(0)
        const A = Job.make("SessionA", { payload: Payload, queue: "session_a" }, () => Ref.update(ran, (n) => n + 1))
        const B = Job.make("SessionB", { payload: Payload, queue: "session_b" }, () => Ref.update(ran, (n) => n + 1))
        yield* startSupervisor([A, B], {
          capsules: [
            { name: "a", queues: ["session_a"], concurrency: 10 },
            { name: "b", queues: ["session_b"], concurrency: 10 }
          ]
        })
        const jobs = Array.from({ length: 500 }, (_, n) => ({ n }))
        yield* Effect.all([A.enqueueMany(jobs), B.enqueueMany(jobs)], { concurrency: 2 })
        yield* eventually(
          "every job ran",
          Effect.map(Ref.get(ran), (n) => n >= 1000),
          "20 seconds"
        )
        assert.strictEqual((yield* sessionBackends).length, 1)
      })
    )
  )

  it.live("a supervisor opens it at boot, before its workers' first claim", () =>
    onFreshDatabase({}, () =>
      Effect.gen(function* () {
        const ran = yield* Ref.make(0)
        const Work = Job.make("SessionBoot", { payload: Payload, queue: "session_boot" }, () =>
          Ref.update(ran, (n) => n + 1)
        )
        // paused: the worker claims nothing, so only the boot can have opened the session
        yield* QueueStore.use((store) => store.create("session_boot"))
        yield* QueueStates.use((states) => states.pause("session_boot", { actor: "test", reason: "hold the claims" }))
        assert.lengthOf(yield* sessionBackends, 0)
        yield* startSupervisor([Work], { capsules: [{ name: "c", queues: ["session_boot"], concurrency: 2 }] })
        yield* eventually(
          "the workers' session is open",
          Effect.map(sessionBackends, (pids) => pids.length === 1)
        )
        yield* Work.enqueue({ n: 1 })
        yield* Effect.sleep("300 millis")
        assert.strictEqual(yield* Ref.get(ran), 0, "the paused queue was not claimed")
        yield* QueueStates.use((states) => states.resume("session_boot", { actor: "test" }))
        yield* eventually(
          "the job ran once the queue resumed",
          Effect.map(Ref.get(ran), (n) => n === 1)
        )
        assert.strictEqual((yield* sessionBackends).length, 1)
      })
    )
  )

  it.live("its connection terminated again and again mid-run: every job runs and is archived once", () =>
    onFreshDatabase({ visibilityTimeout: "3 seconds" }, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const seen = new Set<number>()
        const Work = Job.make("SessionKill", { payload: Payload, queue: "session_kill" }, ({ n }) =>
          Effect.andThen(
            Effect.sync(() => seen.add(n)),
            Effect.sleep("5 millis")
          )
        )
        yield* startSupervisor([Work], { capsules: [{ name: "c", queues: ["session_kill"], concurrency: 10 }] })
        yield* Work.enqueueMany(Array.from({ length: 3000 }, (_, n) => ({ n })))
        let terminated = 0
        while (seen.size < 3000 && terminated < 5) {
          yield* Effect.sleep("150 millis")
          const rows = yield* sql<{ readonly done: boolean }>`SELECT pg_terminate_backend(pid) AS done
            FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'effect-pgbus workers'`
          terminated += rows.filter((r) => r.done).length
        }
        assert.isAtLeast(terminated, 2, "the session's connection was terminated mid-run")
        const store = yield* QueueStore
        yield* eventually(
          "every job archived",
          Effect.map(store.metrics("session_kill"), (m) => m.archiveSize === 3000 && m.depth === 0),
          "30 seconds"
        )
        assert.strictEqual(seen.size, 3000)
        // archived once each: the archive holds one row per job
        const [row] = yield* sql<{ readonly n: number; readonly distinct_n: number }>`SELECT count(*)::int AS n,
          count(DISTINCT (message->'payload'->>'n'))::int AS distinct_n FROM pgbus.a_pgbus_session_kill`
        assert.deepStrictEqual(row, { n: 3000, distinct_n: 3000 })
      })
    )
  )
})
