import { assert, describe, layer } from "@effect/vitest"
import { Clock, Effect, Option, Schema, Tracer } from "effect"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import { WorkflowSweep } from "../src/Workflow/Engine.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Counter = Workflow.make("Counter", { payload: Schema.Struct({ start: Schema.Number }) }, function* ({ payload }) {
  const a = yield* Workflow.step("one", Effect.succeed(payload.start + 1))
  const b = yield* Workflow.step("two", Effect.succeed(a + 1))
  const c = yield* Workflow.step("three", Effect.succeed(b + 1))
  return c
})

/** The name of the span the step's effect runs in (null: none). */
const spanName = Effect.map(Effect.option(Effect.currentSpan), (span) => (Option.isSome(span) ? span.value.name : null))
const payloadN = { payload: Schema.Struct({ n: Schema.Number }) }
const Traced = Workflow.make("Traced", payloadN, function* () {
  const a = yield* Workflow.step("first", spanName)
  const b = yield* Workflow.step("second", spanName)
  return [a, b]
})
const Untraced = Workflow.make("Untraced", payloadN, function* () {
  const a = yield* Workflow.step("first", spanName)
  const b = yield* Workflow.step("second", spanName)
  return [a, b]
})

let deadlineCalls = 0
const SoftDeadline = Workflow.make("SoftDeadline", { payload: Schema.Struct({ id: Schema.String }) }, function* () {
  return yield* Workflow.step(
    "approve",
    Effect.map(Workflow.context, (c) => c.signal?.payload ?? null),
    {
      waitFor: "approved",
      onTimeout: "notify",
      // at the park: due in 300 ms; at the late notice: due in 30 days
      waitTimeout: () =>
        Effect.map(Clock.currentTimeMillis, (now) => new Date(now + (deadlineCalls++ === 0 ? 300 : 30 * 86_400_000)))
    }
  )
})

layer(TestDatabase.layer({ pollingInterval: "50 millis" }), { excludeTestServices: true })("workflows basic", (it) => {
  describe("a per-run notify deadline, end to end", () => {
    it.effect("the sweep hands the late notice to a running worker, which evaluates the deadline again", () =>
      Effect.gen(function* () {
        yield* startSupervisor([SoftDeadline], { capsules: [{ name: "c", queues: ["default"], concurrency: 2 }] })
        const run = yield* SoftDeadline.start({ id: "e2e" })
        const client = yield* WorkflowClient
        yield* eventually(
          "waiting",
          Effect.map(client.get(run.id), (h) => h.info.status === "waiting")
        )
        yield* Effect.sleep("400 millis")
        const sweep = yield* WorkflowSweep
        // the supervisor's own sweep may be the one that hands it over
        yield* sweep.runOnce
        yield* eventually(
          "the worker wrote the notice",
          Effect.map(run.events, (es) => es.some((e) => e.type === "wait_timed_out"))
        )
        const notice = (yield* run.events).find((e) => e.type === "wait_timed_out")!
        const next = new Date((notice.details as { readonly next_timeout_at: string }).next_timeout_at).getTime()
        assert.isAbove(next - Date.now(), 29 * 86_400_000, "the next deadline is the function's new answer")
        assert.strictEqual(deadlineCalls, 2)
        yield* run.signal("approved", { ok: true })
        yield* eventually(
          "finished",
          Effect.map(client.get(run.id), (h) => h.info.status === "finished")
        )
        assert.deepStrictEqual((yield* run.refresh).info.output, { ok: true })
      }).pipe(Effect.scoped)
    )
  })

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

  describe("spans", () => {
    it.effect(
      "under a tracing backend: the start's, the run's and one per step attempt, the step's inside the run's",
      () =>
        Effect.gen(function* () {
          const spans: Array<Tracer.Span> = []
          const tracer = Tracer.make({
            span: (options) => {
              const span = new Tracer.NativeSpan(options)
              spans.push(span)
              return span
            }
          })
          yield* startSupervisor([Traced], { capsules: [{ name: "c", queues: ["default"], concurrency: 2 }] }).pipe(
            Effect.withTracer(tracer)
          )
          const run = yield* Traced.start({ n: 1 }).pipe(Effect.withTracer(tracer))
          const client = yield* WorkflowClient
          yield* eventually(
            "finished",
            Effect.map(client.get(run.id), (h) => h.info.status === "finished")
          )
          assert.deepStrictEqual((yield* run.refresh).info.output, ["pgbus.step.run", "pgbus.step.run"])
          const start = spans.find(
            (s) => s.name === "pgbus.workflow.start" && s.attributes.get("workflow") === "Traced"
          )
          assert.isDefined(start)
          const runSpans = spans.filter(
            (s) => s.name === "pgbus.workflow.run" && s.attributes.get("workflow.run_id") === run.id
          )
          assert.strictEqual(runSpans.length, 1)
          assert.strictEqual(runSpans[0]!.attributes.get("workflow.id"), "Traced")
          const steps = spans.filter(
            (s) => s.name === "pgbus.step.run" && s.attributes.get("workflow.run_id") === run.id
          )
          assert.deepStrictEqual(
            steps.map((s) => [
              s.attributes.get("step.id"),
              s.attributes.get("step.attempt"),
              s.attributes.get("step.type")
            ]),
            [
              ["first", 1, "run"],
              ["second", 1, "run"]
            ]
          )
          for (const step of steps) {
            assert.strictEqual(step.parent._tag === "Some" ? step.parent.value.spanId : null, runSpans[0]!.spanId)
          }
        }).pipe(Effect.scoped)
    )

    it.effect(
      "with Effect's native tracer (no backend): none, so a step's effect runs in no span of the library's",
      () =>
        Effect.gen(function* () {
          yield* startSupervisor([Untraced], { capsules: [{ name: "c", queues: ["default"], concurrency: 2 }] })
          const run = yield* Untraced.start({ n: 1 })
          const client = yield* WorkflowClient
          yield* eventually(
            "finished",
            Effect.map(client.get(run.id), (h) => h.info.status === "finished")
          )
          const output = (yield* run.refresh).info.output as ReadonlyArray<string | null>
          for (const name of output) {
            assert.notInclude(["pgbus.step.run", "pgbus.workflow.run", "pgbus.job.execute"], name)
          }
        }).pipe(Effect.scoped)
    )
  })
})
