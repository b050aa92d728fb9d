import { assert, describe, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Counter = Workflow.make("Counter", { payload: Schema.Struct({ start: Schema.Number }) }, function* ({ payload }) {
  const a = yield* Workflow.step("one", Effect.succeed(payload.start + 1))
  const b = yield* Workflow.step("two", Effect.succeed(a + 1))
  const c = yield* Workflow.step("three", Effect.succeed(b + 1))
  return c
})

layer(TestDatabase.layer({ pollingInterval: "50 millis" }), { excludeTestServices: true })("workflows basic", (it) => {
  describe("a three-step workflow", () => {
    it.effect("runs to the end, each step its own row, with the audit trail", () =>
      Effect.gen(function* () {
        yield* startSupervisor([Counter], { capsules: [{ name: "c", queues: ["default"], concurrency: 4 }] })
        const run = yield* Counter.start({ start: 1 })
        assert.strictEqual(run.info.status, "ready")
        const client = yield* WorkflowClient
        yield* eventually(
          "finished",
          Effect.map(client.get(run.id), (h) => h.info.status === "finished")
        )
        const done = yield* run.refresh
        assert.strictEqual(done.info.output, 4)
        const steps = yield* run.steps
        assert.deepStrictEqual(
          steps.map((s) => [s.name, s.status, s.output]),
          [
            ["one", "completed", 2],
            ["two", "completed", 3],
            ["three", "completed", 4]
          ]
        )
        const events = yield* run.events
        console.log(events.map((e) => `${e.type}:${e.step ?? ""}`).join(" "))
      }).pipe(Effect.scoped)
    )
  })
})
