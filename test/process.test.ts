/** Supervisors as real processes: SIGKILL mid-flight with fast recovery, SIGTERM drain, health endpoints. */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Job from "../src/Job/Job.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { bundledFixture, spawnSupervisor } from "./support/child.ts"
import { createLog } from "./support/childLog.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { onFreshDatabase } from "./support/TestDatabase.ts"

/** The child supervisor fixture, bundled (it boots in about half a second, tsx took ten under load). */
const supervisorChild = (env: Record<string, string>) =>
  Effect.flatMap(bundledFixture("test/fixtures/supervisor-child.ts"), (bundle) => spawnSupervisor(env, bundle))

const logRows = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql<{ readonly key: string; readonly event: string; readonly pid: number }>`SELECT key, event, pid FROM child_log`
)

const Key = Schema.Struct({ key: Schema.String })

describe("supervisor processes", () => {
  it.live(
    "a supervisor killed with SIGKILL while 100 jobs run: a live one picks them up at once, none lost, none completed twice",
    () =>
      onFreshDatabase(
        { processHeartbeatInterval: "200 millis", staleProcessThreshold: "1 second", pollingInterval: "50 millis" },
        (url) =>
          Effect.gen(function* () {
            const store = yield* QueueStore
            yield* createLog
            const queue = "crash"
            // the survivor runs the same job name, quickly, logging as this process
            const Sleepy = Job.make("Sleepy", { payload: Key, queue }, ({ key }) =>
              Effect.gen(function* () {
                const sql = yield* SqlClient.SqlClient
                yield* sql`INSERT INTO child_log (key, event, pid) VALUES (${key}, 'started', ${process.pid})`
                yield* Effect.sleep("20 millis")
                yield* sql`INSERT INTO child_log (key, event, pid) VALUES (${key}, 'completed', ${process.pid})`
              }).pipe(Effect.orDie)
            )
            yield* store.create(queue)
            const child = yield* supervisorChild({
              DATABASE_URL: url,
              CHILD_QUEUE: queue,
              CHILD_CONCURRENCY: "100",
              CHILD_JOB_MS: "60000",
              PGBUS_PROCESS_HEARTBEAT_INTERVAL: "0.2",
              PGBUS_STALE_PROCESS_THRESHOLD: "1",
              PGBUS_VISIBILITY_TIMEOUT: "30"
            })
            yield* Sleepy.enqueueMany(Array.from({ length: 100 }, (_, i) => ({ key: `k${i}` })))
            yield* eventually(
              "the child runs all 100",
              Effect.map(logRows, (rows) => rows.filter((r) => r.event === "started").length === 100),
              "30 seconds"
            ).pipe(Effect.tapError(() => Effect.logError(child.output())))

            // a second supervisor is already running when the first one dies
            yield* startSupervisor([Sleepy], { capsules: [{ name: "survivor", queues: [queue], concurrency: 20 }] })
            yield* Effect.sleep("300 millis")
            const killedAt = Date.now()
            child.process.kill("SIGKILL")
            const exit = yield* child.exited
            assert.strictEqual(exit.signal, "SIGKILL")

            yield* eventually(
              "all 100 archived",
              Effect.map(store.metrics(queue), (m) => m.archiveSize === 100),
              "20 seconds"
            )
            const recoveredIn = Date.now() - killedAt
            assert.isBelow(
              recoveredIn,
              10_000,
              `recovered in ${recoveredIn} ms, well before the 30 s visibility timeout`
            )
            const rows = yield* logRows
            const completed = rows.filter((r) => r.event === "completed")
            assert.strictEqual(completed.length, 100, "every job completed")
            assert.strictEqual(new Set(completed.map((r) => r.key)).size, 100, "none completed twice")
            assert.isTrue(
              completed.every((r) => r.pid === process.pid),
              "the killed process completed none"
            )
            assert.strictEqual((yield* store.metrics(queue)).depth, 0)
          })
      ),
    60_000
  )

  it.live(
    "SIGTERM drains: jobs in flight finish, buffered messages go back at once, readiness says DRAINING, exit 0",
    () =>
      onFreshDatabase({}, (url) =>
        Effect.gen(function* () {
          const store = yield* QueueStore
          yield* createLog
          const queue = "drain"
          const Sleepy = Job.make("Sleepy", { payload: Key, queue }, () => Effect.void)
          yield* store.create(queue)
          const port = 20_000 + (process.pid % 20_000)
          const child = yield* supervisorChild({
            DATABASE_URL: url,
            CHILD_QUEUE: queue,
            CHILD_CONCURRENCY: "2",
            CHILD_READ_AHEAD: "5",
            CHILD_JOB_MS: "1500",
            PGBUS_HEALTH_PORT: String(port),
            PGBUS_VISIBILITY_TIMEOUT: "60"
          })
          const readyz = Effect.promise(() =>
            fetch(`http://127.0.0.1:${port}/readyz`)
              .then(async (r) => ({ status: r.status, body: (await r.json()) as { status: string } }))
              .catch(() => ({ status: 0, body: { status: "unreachable" } }))
          )
          yield* eventually(
            "ready",
            Effect.map(readyz, (r) => r.status === 200 && r.body.status === "OK"),
            "30 seconds"
          ).pipe(Effect.tapError(() => Effect.logError(child.output())))
          const livez = yield* Effect.promise(() => fetch(`http://127.0.0.1:${port}/livez`).then((r) => r.status))
          assert.strictEqual(livez, 200)

          yield* Sleepy.enqueueMany(Array.from({ length: 10 }, (_, i) => ({ key: `k${i}` })))
          yield* eventually(
            "two jobs running",
            Effect.map(logRows, (rows) => rows.filter((r) => r.event === "started").length === 2)
          )
          yield* Effect.sleep("100 millis")
          child.process.kill("SIGTERM")
          yield* eventually(
            "readiness flips to DRAINING",
            Effect.map(readyz, (r) => r.status === 503 && r.body.status === "DRAINING"),
            "5 seconds"
          )
          // the five read-ahead messages are visible again before the running jobs finish
          yield* eventually(
            "buffered messages given back",
            Effect.map(store.metrics(queue), (m) => m.visible === 8),
            "1 second"
          )
          assert.strictEqual(
            (yield* logRows).filter((r) => r.event === "completed").length,
            0,
            "given back while the running jobs still ran"
          )

          const exit = yield* child.exited
          assert.strictEqual(exit.code, 0, child.output())
          const rows = yield* logRows
          assert.strictEqual(rows.filter((r) => r.event === "completed").length, 2, "both running jobs finished")
          const left = yield* store.metrics(queue)
          assert.strictEqual(left.depth, 8)
          assert.strictEqual(left.archiveSize, 2)
          // the read-ahead went back unread: no job saw it, so its next delivery is its first
          assert.deepStrictEqual(
            (yield* store.browse(queue)).map((m) => m.readCt),
            Array.from({ length: 8 }, () => 0)
          )
          assert.include(child.output(), "draining")
          // the drain said what it waited for
          assert.match(child.output(), /draining: waiting for 2 running job\(s\) to finish \(Sleepy #\d+ on drain/)
        })
      ),
    60_000
  )

  it.live(
    "a second SIGINT during the drain exits at once with 130, leaving the running job to the visibility timeout",
    () =>
      onFreshDatabase({}, (url) =>
        Effect.gen(function* () {
          const store = yield* QueueStore
          yield* createLog
          const queue = "forced"
          const Sleepy = Job.make("Sleepy", { payload: Key, queue }, () => Effect.void)
          yield* store.create(queue)
          const child = yield* supervisorChild({
            DATABASE_URL: url,
            CHILD_QUEUE: queue,
            CHILD_CONCURRENCY: "1",
            CHILD_JOB_MS: "60000",
            PGBUS_DRAIN_TIMEOUT: "60"
          })
          yield* Sleepy.enqueue({ key: "long" })
          yield* eventually(
            "the job runs",
            Effect.map(logRows, (rows) => rows.some((r) => r.event === "started")),
            "30 seconds"
          )
          child.process.kill("SIGINT")
          yield* eventually(
            "the drain waits for the job",
            Effect.sync(() => child.output().includes("draining: waiting for 1 running job(s)")),
            "5 seconds"
          )
          // a signal within 300 ms of the first counts as the same Ctrl-C (relayed by npm or tsx)
          yield* Effect.sleep("500 millis")
          child.process.kill("SIGINT")
          const exit = yield* child.exited.pipe(
            Effect.timeoutOrElse({ duration: "5 seconds", orElse: () => Effect.die(new Error(child.output())) })
          )
          assert.strictEqual(exit.code, 130, child.output())
          assert.include(child.output(), "SIGINT again: exiting now")
          assert.strictEqual((yield* logRows).filter((r) => r.event === "completed").length, 0)
        })
      ),
    60_000
  )
})
