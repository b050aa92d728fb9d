/**
 * Handler-less refs (seed 004's WorkflowRef): a "web" PgBus with no registry and no supervisor
 * starts, signals and queries runs through a ref; a worker supervisor (its own PgBus, its own
 * pool) runs them with the definition built from the same ref. A ref's singleton applies to
 * starts through it; bad refs, bad overrides and bad signals are typed errors that write nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../src/Config.ts"
import * as PgBus from "../src/PgBus.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import {
  InvalidSignal,
  InvalidWorkflowDefinition,
  InvalidWorkflowPayload,
  SingletonRunInProgress
} from "../src/Workflow/WorkflowError.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { onFreshDatabase } from "./support/TestDatabase.ts"

// shared/workflows.ts: what both sides import
const OrderRef = Workflow.ref("Order", {
  payload: Schema.Struct({ id: Schema.String, total: Schema.Number }),
  signals: { paid: Schema.Struct({ amount: Schema.Number }) }
})
const NightlyRef = Workflow.ref("NightlyRef", { payload: Schema.Struct({}), singleton: true, priority: 0 })

// worker.ts: the definitions, built from the refs
const Order = Workflow.implement(OrderRef, {}, function* (run) {
  const paid = yield* run.waitForSignal("paid")
  return yield* Workflow.step(
    "receipt",
    Effect.succeed({ id: run.payload.id, paid: paid.amount, due: run.payload.total - paid.amount })
  )
})
const Nightly = Workflow.implement(NightlyRef, {}, function* (run) {
  yield* run.waitForSignal("go")
  return 1
})

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

  it.live("a process without the handler starts, signals and queries runs that another supervisor runs", () =>
    onFreshDatabase({ pollingInterval: "50 millis" }, (url) =>
      Effect.gen(function* () {
        // the worker: its own PgBus (pool, notifier) with the definitions registered
        yield* startSupervisor([Order, Nightly], { capsules: [{ name: "c", queues: ["default"], concurrency: 2 }] })

        // the web process: a PgBus of its own, no registry, only the refs
        const web = PgBus.layerFrom(PgBusConfig.layerWithoutEnvironment({ databaseUrl: url })).pipe(Layer.orDie)
        const runId = yield* Effect.gen(function* () {
          const run = yield* OrderRef.start({ id: "o-1", total: 30 }, { subject: "order:o-1" })
          assert.strictEqual(run.info.workflow, "Order")
          const found = yield* OrderRef.findBySubject("order:o-1")
          assert.strictEqual(found.id, run.id)
          yield* eventually(
            "waiting for payment",
            Effect.map(OrderRef.get(run.id), (h) => h.info.status === "waiting")
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
        }).pipe(Effect.provide(web))

        // the worker's side saw the same run, executed by its supervisor
        const sql = yield* SqlClient.SqlClient
        const [row] = yield* sql<{ readonly worker: string | null }>`SELECT worker FROM pgbus.workflow_steps
          WHERE run_id = ${runId}::uuid AND name = 'receipt'`
        assert.isNotNull(row?.worker ?? null)
      }).pipe(Effect.scoped)
    )
  )
})
