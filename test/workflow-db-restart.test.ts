/**
 * Workflow runs through a database restart: a step's own SQL that loses its connection is not
 * the step's failure (the default policy reattempts it with backoff); a real restart of a server
 * of the test's own while runs perform steps pauses none of them.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../src/Config.ts"
import * as Database from "../src/Database.ts"
import { DatabaseError } from "../src/Database.ts"
import { migrate } from "../src/Migrations.ts"
import * as PgBus from "../src/PgBus.ts"
import { resolve, TRANSIENT_MAX_REATTEMPTS, transientResolution } from "../src/Workflow/Policies.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { terminateWhileWaiting } from "./support/connections.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { ownServer } from "./support/ownServer.ts"
import { eventTypes, info, stepRows } from "./support/runs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ id: Schema.String })

layer(TestDatabase.layer({ pollingInterval: "50 millis" }), { excludeTestServices: true })(
  "workflows and database restarts",
  (it) => {
    describe("a step's own SQL during a database restart", () => {
      it.effect("fails with a lost connection: the step is reattempted with backoff, the run is not paused", () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          yield* sql`CREATE TABLE step_data (n int)`
          yield* sql`INSERT INTO step_data VALUES (42)`
          const Reads = Workflow.make("ReadsThroughRestart", { payload: Payload }, function* () {
            return yield* Workflow.step(
              "read",
              Effect.gen(function* () {
                const sql = yield* SqlClient.SqlClient
                const [row] = yield* sql<{ readonly n: number }>`SELECT n FROM step_data`
                return row!.n
              })
            )
          })
          // workers only: no sweep that could be the statement waiting on the lock instead of the step's
          yield* startSupervisor([Reads], {
            roles: ["workers"],
            capsules: [{ name: "c", queues: ["default"], concurrency: 2 }]
          })
          // started once the table is locked (outside the locking transaction), so that the step's
          // SELECT waits on the lock when every other connection is terminated
          const locked = yield* Deferred.make<void>()
          const starting = yield* Effect.forkChild(Effect.andThen(Deferred.await(locked), Reads.start({ id: "reads" })))
          const blocked = yield* terminateWhileWaiting(
            "public.step_data",
            Deferred.succeed(locked, undefined).pipe(Effect.asVoid),
            "%step_data%"
          )
          assert.isAbove(blocked, 0, "the step's statement was terminated")
          const id = (yield* Fiber.join(starting)).id
          yield* eventually(
            "finished",
            Effect.orElseSucceed(
              Effect.map(info(id), (i) => i.status === "finished"),
              () => false
            ),
            "20 seconds"
          )
          assert.strictEqual((yield* info(id)).output, 42)
          assert.deepStrictEqual(yield* stepRows(id), ["read#1:failed", "read#2:completed"])
          assert.notInclude(yield* eventTypes(id), "paused")
        }).pipe(Effect.scoped, Effect.provide(TestDatabase.layer({ pollingInterval: "50 millis" }), { local: true }))
      )

      it.effect(
        "the default policy: a passing database failure is reattempted, 1 s doubling to 30 s, then pauses",
        () =>
          Effect.gen(function* () {
            const lost = Object.assign(new Error("terminating connection"), {
              _tag: "DatabaseError",
              retryable: true
            })
            assert.deepStrictEqual(transientResolution(0), {
              action: "reattempt",
              waitMs: 1_000,
              report: false,
              policy: undefined,
              terminal: false
            })
            assert.strictEqual(transientResolution(3).waitMs, 8_000)
            assert.strictEqual(transientResolution(9).waitMs, 30_000)
            assert.strictEqual(transientResolution(TRANSIENT_MAX_REATTEMPTS).action, "pause")
            // only a DatabaseError (or the driver's SqlError) that may pass: not a look-alike
            assert.strictEqual((yield* resolve(lost, [], [], 0)).action, "pause")
            const passing = new DatabaseError({
              operation: "x",
              reason: "ConnectionError",
              detail: "",
              retryable: true
            })
            const refused = new DatabaseError({
              operation: "x",
              reason: "SqlSyntaxError",
              detail: "",
              retryable: false
            })
            assert.strictEqual((yield* resolve(passing, [], [], 0)).action, "reattempt")
            assert.strictEqual((yield* resolve(refused, [], [], 0)).action, "pause")
            // a policy that names it, or a step policy, still decides; a workflow blanket one comes after
            assert.strictEqual(
              (yield* resolve(passing, [], [{ match: "DatabaseError", action: "cancel" }], 0)).action,
              "cancel"
            )
            assert.strictEqual((yield* resolve(passing, [{ action: "skip" }], [], 0)).action, "skip")
            assert.strictEqual((yield* resolve(passing, [], [{ action: "cancel" }], 0)).action, "reattempt")
          })
      )
    })
  }
)

/** A step that records its attempt in restart_log (its own SQL), then takes a little time. */
const logged = (name: string) =>
  Effect.gen(function* () {
    const ctx = yield* Workflow.context
    const sql = yield* SqlClient.SqlClient
    yield* sql`INSERT INTO restart_log (run, step, attempt) VALUES (${ctx.workflowId}::uuid, ${name}, ${ctx.attempt})`
    yield* Effect.sleep("50 millis")
    return name
  })

const Restarted = Workflow.make("Restarted", { payload: Payload }, function* () {
  yield* Workflow.step("a", logged("a"))
  yield* Workflow.step("b", logged("b"))
  yield* Workflow.step("c", logged("c"), { wait: "200 millis" })
  yield* Workflow.step("d", logged("d"))
})

describe("a restart of PostgreSQL while runs perform steps", () => {
  it.live(
    "twice, in fast mode: every run finishes, none pauses, each step completed once",
    () =>
      Effect.gen(function* () {
        const server = yield* ownServer
        yield* migrate.pipe(
          Effect.provide(Database.layer),
          Effect.provide(PgBusConfig.layerWithoutEnvironment({ databaseUrl: server.url, poolSize: 1 })),
          Effect.orDie
        )
        // a fast shutdown terminates every connection (57P01), then the server starts again
        const restart = Effect.andThen(server.stop, server.start)
        const services = PgBus.layerFrom(
          PgBusConfig.layerWithoutEnvironment({ databaseUrl: server.url, pollingInterval: "50 millis" })
        )
        yield* Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          yield* sql`CREATE TABLE restart_log (run uuid NOT NULL, step text NOT NULL, attempt int NOT NULL)`
          yield* startSupervisor([Restarted], { capsules: [{ name: "c", queues: ["default"], concurrency: 8 }] })
          const runs = yield* Effect.forEach(
            Array.from({ length: 24 }, (_, i) => `r${i}`),
            (id) => Restarted.start({ id })
          )
          const logRows = Effect.map(
            sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM restart_log`,
            ([row]) => row!.n
          )
          yield* eventually(
            "steps under way",
            Effect.map(logRows, (n) => n >= 8)
          )
          yield* restart
          yield* eventually(
            "steps under way again",
            Effect.orElseSucceed(
              Effect.map(logRows, (n) => n >= 40),
              () => false
            ),
            "30 seconds"
          )
          yield* restart
          const finished = Effect.map(
            sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pgbus.workflow_runs WHERE status = 'finished'`,
            ([row]) => row!.n
          )
          yield* eventually(
            "every run finished",
            Effect.orElseSucceed(
              Effect.map(finished, (n) => n === runs.length),
              () => false
            ),
            "60 seconds"
          )
          const [events] = yield* sql<{ readonly paused: number; readonly stalls: number }>`SELECT
            count(*) FILTER (WHERE type = 'paused')::int AS paused,
            count(*) FILTER (WHERE type = 'stall_detected')::int AS stalls FROM pgbus.workflow_events`
          assert.strictEqual(events!.paused, 0, "no run paused")
          assert.strictEqual(events!.stalls, 0, "no step taken for a dead worker's")
          const completed = yield* sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pgbus.workflow_steps
            WHERE status = 'completed' GROUP BY run_id, name`
          assert.strictEqual(completed.length, runs.length * 4)
          assert.isTrue(
            completed.every((r) => r.n === 1),
            "each step completed once"
          )
        }).pipe(Effect.provide(Layer.orDie(services)), Effect.scoped)
      }).pipe(Effect.scoped),
    120_000
  )
})
