/**
 * Singleton workflows (seed 004): at most one ready, performing or waiting run of the workflow.
 * A second start fails with `SingletonRunInProgress` naming the holder and writes nothing; the
 * unique index decides (concurrent starts: one wins); a paused run releases the slot and its
 * resume is refused while another run holds it; the slot is free again once the run ends.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import { SingletonHeldStatuses } from "../src/Workflow/States.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { InvalidWorkflowPayload, SingletonRunInProgress } from "../src/Workflow/WorkflowError.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Nightly = Workflow.make(
  "Nightly",
  { payload: Schema.Struct({ day: Schema.String }), singleton: true },
  function* (run) {
    yield* run.waitForSignal("go")
    return run.payload.day
  }
)

// not a singleton by definition: a start may ask for it
const Report = Workflow.make("Report", { payload: Schema.Struct({}) }, function* (run) {
  yield* run.waitForSignal("go")
  return "done"
})

const runCount = (workflow: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ readonly n: bigint }>`SELECT count(*) AS n FROM pgbus.workflow_runs WHERE workflow = ${workflow}`,
      ([r]) => Number(r!.n)
    )
  ).pipe(Effect.orDie)

layer(TestDatabase.layer({ pollingInterval: "50 millis" }), { excludeTestServices: true, timeout: "60 seconds" })(
  "singleton workflows",
  (it) => {
    it.effect("a second start is refused naming the holder; allowed again once the first finished", () =>
      Effect.gen(function* () {
        yield* startSupervisor([Nightly, Report], { capsules: [{ name: "c", queues: ["default"], concurrency: 2 }] })
        const client = yield* WorkflowClient
        const first = yield* Nightly.start({ day: "mon" })
        assert.isTrue(first.info.singleton)
        const refused = yield* Effect.flip(Nightly.start({ day: "tue" }))
        assert.instanceOf(refused, SingletonRunInProgress)
        assert.strictEqual((refused as SingletonRunInProgress).holder.id, first.id)
        assert.include(refused.message, first.id)
        assert.strictEqual(yield* runCount("Nightly"), 1, "nothing written")

        // waiting still holds the slot
        yield* eventually(
          "waiting",
          Effect.map(client.get(first.id), (h) => h.info.status === "waiting")
        )
        const whileWaiting = yield* Effect.flip(Nightly.start({ day: "tue" }))
        assert.strictEqual((whileWaiting as SingletonRunInProgress).holder.id, first.id)

        yield* first.signal("go", {})
        yield* eventually(
          "finished",
          Effect.map(client.get(first.id), (h) => h.info.status === "finished")
        )
        const second = yield* Nightly.start({ day: "tue" })
        assert.notStrictEqual(second.id, first.id)
        // a rerun is a new run: it too needs the slot
        const rerun = yield* Effect.flip(first.rerun())
        assert.strictEqual((rerun as SingletonRunInProgress).holder.id, second.id)
        yield* second.cancel()

        // an idempotent repeat of a start is the holder itself, not a refusal
        const keyed = yield* Nightly.start({ day: "wed" }, { idempotencyKey: "wed" })
        const again = yield* Nightly.start({ day: "wed" }, { idempotencyKey: "wed" })
        assert.isTrue(again.duplicateStart)
        assert.strictEqual(again.id, keyed.id)
        yield* keyed.cancel()
      }).pipe(Effect.scoped)
    )

    it.effect("the index holds the slot in the states the code says (SingletonHeldStatuses), not while paused", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const [row] = yield* sql<{ readonly predicate: string }>`SELECT pg_get_expr(i.indpred, i.indrelid) AS predicate
          FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'pgbus' AND c.relname = 'workflow_runs_singleton_idx'`
        const held = [...row!.predicate.matchAll(/'([a-z_]+)'/g)].map((m) => m[1]).sort()
        assert.deepStrictEqual(held, [...SingletonHeldStatuses].sort())
        assert.notInclude(held, "paused")
      }).pipe(Effect.orDie)
    )

    it.effect("concurrent starts: the unique index lets exactly one in, the others name it", () =>
      Effect.gen(function* () {
        const outcomes = yield* Effect.forEach(
          Array.from({ length: 8 }, (_, i) => i),
          (i) => Effect.result(Nightly.start({ day: `d${i}` })),
          { concurrency: "unbounded" }
        )
        const started = outcomes.filter((o) => o._tag === "Success")
        assert.strictEqual(started.length, 1)
        const holder = started[0]!.success.id
        for (const o of outcomes) {
          if (o._tag === "Failure") {
            assert.instanceOf(o.failure, SingletonRunInProgress)
            assert.strictEqual((o.failure as SingletonRunInProgress).holder.id, holder)
          }
        }
        const client = yield* WorkflowClient
        yield* client.cancel(holder)
      })
    )

    it.effect("a paused run releases the slot; its resume is refused while another holds it", () =>
      Effect.gen(function* () {
        const client = yield* WorkflowClient
        const first = yield* Nightly.start({ day: "p1" })
        yield* first.pause({ reason: "maintenance" })
        const second = yield* Nightly.start({ day: "p2" })
        const refused = yield* Effect.flip(first.resume())
        assert.instanceOf(refused, SingletonRunInProgress)
        assert.strictEqual((refused as SingletonRunInProgress).holder.id, second.id)
        assert.strictEqual((yield* client.get(first.id)).info.status, "paused", "the refused resume changed nothing")
        yield* second.cancel()
        const resumed = yield* first.resume()
        assert.notStrictEqual(resumed.status, "paused")
        yield* first.cancel()
      })
    )

    it.effect(
      "a start may ask for the slot (as a ref's start does); bad singleton or priority options are refused",
      () =>
        Effect.gen(function* () {
          const one = yield* Report.start({}, { singleton: true })
          const free = yield* Report.start({})
          assert.isFalse(free.info.singleton, "a start that does not ask is not counted")
          const refused = yield* Effect.flip(Report.start({}, { singleton: true }))
          assert.strictEqual((refused as SingletonRunInProgress).holder.id, one.id)
          const before = yield* runCount("Report")
          for (const options of [
            { singleton: "yes" as never },
            { priority: -1 },
            { priority: 1.5 },
            { scheduledFor: new Date(Number.NaN) }
          ]) {
            const bad = yield* Effect.flip(Report.start({}, options))
            assert.instanceOf(bad, InvalidWorkflowPayload, JSON.stringify(options))
          }
          assert.strictEqual(yield* runCount("Report"), before, "nothing written")
          yield* one.cancel()
          yield* free.cancel()
        })
    )
  }
)
