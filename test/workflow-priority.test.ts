/**
 * Workflow priority (seed 004, in the project's terms: priority sub-queues, 0 highest, with
 * `priorityLevels` on): the start's priority, else the definition's, resolved once at start and
 * kept on the run; every message of the run (its first, each step's, a resume's) goes to its
 * sub-queue, so workers claim higher-priority runs first.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const order: Array<string> = []

// low priority by default; a start may ask for another
const Billing = Workflow.make(
  "Billing",
  { payload: Schema.Struct({ id: Schema.String }), priority: 2 },
  function* (run) {
    yield* Workflow.step(
      "first",
      Effect.sync(() => order.push(run.payload.id))
    )
    return yield* Workflow.step("second", Effect.succeed(run.payload.id))
  }
)

const Approval = Workflow.make(
  "Approval",
  { payload: Schema.Struct({}), signals: { ok: Schema.Struct({}) } },
  function* (run) {
    yield* Workflow.step("before", Effect.succeed(1))
    yield* run.waitForSignal("ok")
    return yield* Workflow.step("after", Effect.succeed(2))
  }
)

layer(TestDatabase.layer({ pollingInterval: "50 millis", priorityLevels: 3 }), {
  excludeTestServices: true,
  timeout: "60 seconds"
})("workflow priority", (it) => {
  it.effect("claims take higher-priority runs first; each run's steps stay on its sub-queue", () =>
    Effect.gen(function* () {
      const client = yield* WorkflowClient
      // low ones first: in FIFO order they would run first
      const low = yield* Effect.forEach(["low1", "low2", "low3"], (id) => Billing.start({ id }))
      const high = yield* Effect.forEach(["high1", "high2", "high3"], (id) => Billing.start({ id }, { priority: 0 }))
      assert.deepStrictEqual(
        low.map((h) => h.info.priority),
        [2, 2, 2],
        "the definition's"
      )
      assert.deepStrictEqual(
        high.map((h) => h.info.priority),
        [0, 0, 0],
        "the start's"
      )
      yield* startSupervisor([Billing, Approval], {
        capsules: [{ name: "c", queues: ["default"], concurrency: 1 }]
      })
      yield* eventually(
        "all finished",
        Effect.map(client.counts({ workflow: "Billing" }), (c) => c.finished === 6)
      )
      assert.deepStrictEqual(order.slice(0, 3).sort(), ["high1", "high2", "high3"])
      assert.deepStrictEqual(order.slice(3).sort(), ["low1", "low2", "low3"])
      for (const [handles, queue] of [
        [high, "default_p0"],
        [low, "default_p2"]
      ] as const) {
        for (const h of handles) {
          const steps = yield* h.steps
          assert.deepStrictEqual(
            steps.map((s) => [s.name, s.queue]),
            [
              ["first", queue],
              ["second", queue]
            ]
          )
        }
      }

      // kept across a wait, a pause and a resume
      const run = yield* Approval.start({}, { priority: 1 })
      yield* eventually(
        "waiting",
        Effect.map(client.get(run.id), (h) => h.info.status === "waiting")
      )
      yield* run.pause()
      yield* run.resume()
      yield* run.signal("ok", {})
      yield* eventually(
        "finished",
        Effect.map(client.get(run.id), (h) => h.info.status === "finished")
      )
      const steps = yield* run.steps
      assert.isAbove(steps.length, 2)
      for (const s of steps) assert.strictEqual(s.queue, "default_p1", `${s.name} #${s.attempt}`)
      assert.strictEqual((yield* run.refresh).info.priority, 1)
      const again = yield* run.rerun()
      assert.strictEqual(again.info.priority, 1, "a rerun keeps it")
    }).pipe(Effect.scoped)
  )
})
