/**
 * A step's own SQL during a database restart: a lost connection is not the step's failure. The
 * default policy reattempts it with backoff; the run is not paused.
 */
import { assert, describe, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { DatabaseError } from "../src/Database.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import { resolve, TRANSIENT_MAX_REATTEMPTS, transientResolution } from "../src/Workflow/Policies.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { terminateWhileWaiting } from "./support/connections.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ id: Schema.String })

const stepRows = (id: string) =>
  Effect.flatMap(WorkflowClient, (c) =>
    Effect.map(c.steps(id), (ss) => ss.map((s) => `${s.name}#${s.attempt}:${s.status}`))
  )

const eventTypes = (id: string) =>
  Effect.flatMap(WorkflowClient, (c) => Effect.map(c.events(id), (es) => es.map((e) => e.type)))

const info = (id: string) => Effect.flatMap(WorkflowClient, (c) => Effect.map(c.get(id), (h) => h.info))

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
