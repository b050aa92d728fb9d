/**
 * Handler-less refs (seed 004's WorkflowRef): this process (PgBus, no registry, no supervisor)
 * starts, signals and queries runs through the refs of test/fixtures/workflow-refs-shared.ts; a
 * supervisor in a child process runs them with the definitions built from the same refs
 * (test/fixtures/workflow-refs-worker.ts). A ref's singleton applies to starts through it; bad
 * refs, bad overrides and bad signals are typed errors that write nothing.
 */

import { hostname } from "node:os"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import {
  InvalidSignal,
  InvalidWorkflowDefinition,
  InvalidWorkflowPayload,
  SingletonRunInProgress
} from "../src/Workflow/WorkflowError.ts"
import { NightlyRef, OrderRef } from "./fixtures/workflow-refs-shared.ts"
import { Nightly, Order } from "./fixtures/workflow-refs-worker.ts"
import { bundledFixture, spawnSupervisor } from "./support/child.ts"
import { eventually } from "./support/jobs.ts"
import { onFreshDatabase } from "./support/TestDatabase.ts"

const thrown = (f: () => unknown) => {
  try {
    f()
    return undefined
  } catch (e) {
    return e
  }
}

describe("workflow refs", () => {
  it("a definition built from a ref carries the ref's name, Schemas and run options", () => {
    assert.strictEqual(Order.name, OrderRef.name)
    assert.strictEqual(Order.payload, OrderRef.payload)
    assert.strictEqual(Order.signals, OrderRef.signals)
    assert.isTrue(Nightly.singleton)
    assert.strictEqual(Nightly.priority, 0)
    assert.isTrue(Workflow.isRef(OrderRef))
    assert.isFalse(Workflow.isRef(Order))
  })

  it("bad refs, and implementations that would change what the ref fixes, throw InvalidWorkflowDefinition", () => {
    const payload = Schema.Struct({})
    const body = function* () {
      return yield* Workflow.step("one", Effect.succeed(1))
    }
    const cases: ReadonlyArray<readonly [string, () => unknown]> = [
      ["name", () => Workflow.ref("1bad", { payload })],
      ["no payload", () => Workflow.ref("A", {} as never)],
      ["unknown option", () => Workflow.ref("A", { payload, handler: 1 } as never)],
      ["priority", () => Workflow.ref("A", { payload, priority: -5 })],
      ["queue", () => Workflow.ref("A", { payload, queue: "Bad Queue" })],
      ["override queue", () => Workflow.implement(OrderRef, { queue: "other" } as never, body)],
      ["override payload", () => Workflow.implement(OrderRef, { payload } as never, body)],
      ["override singleton", () => Workflow.implement(NightlyRef, { singleton: false } as never, body)],
      ["bad schedule", () => Workflow.implement(NightlyRef, { schedule: "7h" }, body)]
    ]
    for (const [what, define] of cases) assert.instanceOf(thrown(define), InvalidWorkflowDefinition, what)
  })

  it.live(
    "a process without the handler starts, signals and queries runs that another supervisor runs",
    () =>
      onFreshDatabase({ pollingInterval: "50 millis" }, (url) =>
        Effect.gen(function* () {
          // the worker: a supervisor in a child process, with the definitions registered
          const bundle = yield* bundledFixture("test/fixtures/workflow-refs-worker.ts")
          const worker = yield* spawnSupervisor(
            { DATABASE_URL: url, REFS_WORKER: "1", PGBUS_POLLING_INTERVAL: "0.05" },
            bundle
          )

          // this process: PgBus, no registry, no supervisor; only the refs
          const runId = yield* Effect.gen(function* () {
            const run = yield* OrderRef.start({ id: "o-1", total: 30 }, { subject: "order:o-1" })
            assert.strictEqual(run.info.workflow, "Order")
            const found = yield* OrderRef.findBySubject("order:o-1")
            assert.strictEqual(found.id, run.id)
            yield* eventually(
              "waiting for payment (the child supervisor booted and ran it)",
              Effect.map(OrderRef.get(run.id), (h) => h.info.status === "waiting"),
              "60 seconds"
            )
            // the ref's signal Schema checks the payload here: nothing stored
            const bad = yield* Effect.flip(OrderRef.signal(run.id, "paid", { amount: "ten" as never }))
            assert.instanceOf(bad, InvalidSignal)
            const badPayload = yield* Effect.flip(OrderRef.start({ id: "o-2", total: "x" as never }))
            assert.instanceOf(badPayload, InvalidWorkflowPayload)
            const receipt = yield* OrderRef.signal(run.id, "paid", { amount: 10 })
            assert.isFalse(receipt.duplicate)
            yield* eventually(
              "finished",
              Effect.map(OrderRef.get(run.id), (h) => h.info.status === "finished")
            )
            assert.deepStrictEqual((yield* OrderRef.get(run.id)).info.output, { id: "o-1", paid: 10, due: 20 })
            const page = yield* OrderRef.list()
            assert.deepStrictEqual(
              page.runs.map((r) => r.id),
              [run.id],
              "only the run that started; the bad start wrote nothing"
            )
            const stored = yield* (yield* WorkflowClient).signals(run.id)
            assert.strictEqual(stored.length, 1, "the refused signal was not stored")

            // the ref's singleton applies to starts through it (the web side never saw the definition)
            const first = yield* NightlyRef.start({})
            assert.strictEqual(first.info.priority, 0)
            const refused = yield* Effect.flip(NightlyRef.start({}))
            assert.instanceOf(refused, SingletonRunInProgress)
            assert.strictEqual((refused as SingletonRunInProgress).holder.id, first.id)
            yield* NightlyRef.signal(first.id, "go", {})
            yield* eventually(
              "the singleton finished",
              Effect.map(NightlyRef.get(first.id), (h) => h.info.status === "finished")
            )
            return run.id
          })

          // the child's worker ran the step
          const sql = yield* SqlClient.SqlClient
          const [row] = yield* sql<{ readonly worker: string | null }>`SELECT worker FROM pgbus.workflow_steps
          WHERE run_id = ${runId}::uuid AND name = 'receipt'`
          assert.strictEqual(row?.worker, `${hostname()}:${worker.process.pid}`, worker.output())
        }).pipe(Effect.scoped)
      ),
    120_000
  )
})
