/** Fan-out steps (seed 000 "Fan-out steps", its sweep and test-helper parts; issue 7 parts 3 and 4). */
import { assert, describe, expect, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import { Batches } from "../src/Batch/Batch.ts"
import { layerEffectClock } from "../src/Database.ts"
import * as Job from "../src/Job/Job.ts"
import { Registry } from "../src/Registry.ts"
import { completeFanOut, speedrun } from "../src/Testing/Workflows.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import { fanOutOutcomeOf, WorkflowRunner, WorkflowSweep } from "../src/Workflow/Engine.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ id: Schema.String, n: Schema.Number })
const Item = Schema.Struct({ i: Schema.Number })

let n = 0
const unique = (base: string) => `${base}_${n++}`

const status = (id: string) => Effect.flatMap(WorkflowClient, (c) => Effect.map(c.get(id), (h) => h.info.status))
const stepRows = (id: string) =>
  Effect.flatMap(WorkflowClient, (c) =>
    Effect.map(c.steps(id), (ss) => ss.map((s) => `${s.name}#${s.attempt}:${s.status}`))
  )
const eventsOf = (id: string, type: string) =>
  Effect.flatMap(WorkflowClient, (c) => Effect.map(c.events(id), (es) => es.filter((e) => e.type === type)))
const waitingBatch = (id: string) =>
  Effect.flatMap(WorkflowClient, (c) =>
    Effect.map(c.steps(id), (ss) => ss.find((s) => s.status === "waiting")?.batchId as string)
  )

const withRegistry =
  <const W extends ReadonlyArray<Workflow.AnyWorkflow | Job.AnyJob>>(definitions: W) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    effect.pipe(Effect.provide(Registry.layer(definitions)))

/** Runs a test on TestClock, statements bound to it, starting at the real time. */
const onTestClock = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    yield* TestClock.setTime(Date.now())
    return yield* effect
  }).pipe(Effect.provide([layerEffectClock, TestClock.layer()]))

/** A workflow fanning out `n` items of `job`, then a step that records what it saw. */
const fanOutWorkflow = (
  name: string,
  job: Job.Job<string, { readonly i: number }, unknown, unknown, unknown>,
  onBatchFailure?: "pause" | "cancel" | "skip"
) =>
  Workflow.make(name, { payload: Payload }, function* ({ payload }) {
    const result = yield* Workflow.fanOut(
      "items",
      (b) =>
        Effect.forEach(
          Array.from({ length: payload.n }, (_, i) => i),
          (i) => b.add(job, { i }, { key: `item-${i}` }),
          {
            discard: true
          }
        ),
      onBatchFailure === undefined ? {} : { onBatchFailure }
    )
    yield* Workflow.step("after", Effect.void)
    return result
  })

layer(TestDatabase.layer(), { excludeTestServices: true })("fan-out steps", (it) => {
  describe("with workers", () => {
    it.effect("all members succeed: the step completes with the counts and the next step runs", () =>
      Effect.gen(function* () {
        const queue = unique("fan_ok")
        const keys: Array<string> = []
        const Work = Job.make("FanWork", { payload: Item, queue }, ({ i }, context) =>
          Effect.sync(() => keys.push(`${i}:${String(context.headers.pgbus_idempotency_key)}`))
        )
        const Fan = fanOutWorkflow("FanAllGood", Work)
        const run = yield* Fan.start({ id: "a", n: 5 })
        yield* startSupervisor([Fan, Work], {
          capsules: [{ name: "c", queues: [queue, "default"], concurrency: 4 }]
        })
        yield* eventually(
          "the run finished",
          Effect.map(status(run.id), (s) => s === "finished")
        )
        const output = (yield* run.refresh).info.output as Workflow.FanOutResult
        expect(output).toMatchObject({ totalJobs: 5, completedJobs: 5, failedJobs: 0 })
        assert.deepStrictEqual(yield* stepRows(run.id), ["items#1:completed", "after#1:completed"])
        assert.deepStrictEqual(
          keys.sort(),
          [0, 1, 2, 3, 4].map((i) => `${i}:pgbus-wf:${run.id}:items:item-${i}`)
        )
        const [opened] = yield* eventsOf(run.id, "fan_out_opened")
        expect(opened!.details).toMatchObject({ batch_id: output.batchId, size: 5 })
        const [finished] = yield* eventsOf(run.id, "fan_out_finished")
        expect(finished!.details).toMatchObject({ failed_jobs: 0, total_jobs: 5 })
        const batch = yield* (yield* Batches).find(output.batchId!)
        assert.strictEqual(batch.description, `FanAllGood#items ${run.id}`)
        expect(batch.properties).toMatchObject({ workflow_id: run.id })
      })
    )

    it.effect("one dead-lettered member pauses the run with FanOutFailed (1 of 3 jobs dead-lettered)", () =>
      Effect.gen(function* () {
        const queue = unique("fan_bad")
        const Work = Job.make("FanMaybe", { payload: Item, queue, retry: { maxRetries: 1 } }, ({ i }) =>
          i === 1 ? Effect.fail(new Error("item 1 is broken")) : Effect.void
        )
        const Fan = fanOutWorkflow("FanOneBad", Work)
        const run = yield* Fan.start({ id: "b", n: 3 })
        yield* startSupervisor([Fan, Work], {
          capsules: [{ name: "c", queues: [queue, "default"], concurrency: 2 }]
        })
        yield* eventually(
          "the run paused",
          Effect.map(status(run.id), (s) => s === "paused")
        )
        const info = (yield* run.refresh).info
        expect(info.error).toMatchObject({ tag: "FanOutFailed", message: "step items: 1 of 3 jobs dead-lettered" })
        assert.deepStrictEqual(yield* stepRows(run.id), ["items#1:failed"])
        const [finished] = yield* eventsOf(run.id, "fan_out_finished")
        expect(finished!.details).toMatchObject({ failed_jobs: 1, total_jobs: 3 })
      })
    )
  })

  describe("inline", () => {
    const Noop = Job.make("FanNoop", { payload: Item, queue: "fan_inline" }, () => Effect.void)

    it.effect("nothing added: the step completes at once and no batch opens", () =>
      Effect.gen(function* () {
        const Fan = fanOutWorkflow("FanEmpty", Noop)
        const run = yield* Fan.start({ id: "e", n: 0 })
        assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([Fan, Noop])), "finished")
        expect((yield* run.refresh).info.output).toMatchObject({ batchId: null, totalJobs: 0 })
        assert.lengthOf(yield* eventsOf(run.id, "fan_out_opened"), 0)
      })
    )

    it.effect("completeFanOut completes every member without running them and resumes the run", () =>
      Effect.gen(function* () {
        const Fan = fanOutWorkflow("FanHelper", Noop)
        const inline = withRegistry([Fan, Noop])
        const run = yield* Fan.start({ id: "h", n: 4 })
        assert.strictEqual((yield* Effect.flip(speedrun(run.id).pipe(inline)))._tag, "StepWaiting")
        assert.strictEqual(yield* status(run.id), "waiting")
        yield* completeFanOut(run.id).pipe(inline)
        assert.strictEqual(yield* speedrun(run.id).pipe(inline), "finished")
        expect((yield* run.refresh).info.output).toMatchObject({ totalJobs: 4, completedJobs: 4, failedJobs: 0 })
      })
    )

    it.effect("resume after a failed batch opens a fresh batch; onBatchFailure cancel and skip", () =>
      Effect.gen(function* () {
        const Fan = fanOutWorkflow("FanResume", Noop)
        const inline = withRegistry([Fan, Noop])
        const run = yield* Fan.start({ id: "r", n: 2 })
        yield* Effect.flip(speedrun(run.id).pipe(inline))
        const first = yield* waitingBatch(run.id)
        yield* completeFanOut(run.id, "failed").pipe(inline)
        assert.strictEqual(yield* status(run.id), "paused")
        yield* run.resume()
        yield* Effect.flip(speedrun(run.id).pipe(inline))
        const second = yield* waitingBatch(run.id)
        assert.notStrictEqual(second, first, "a fresh batch")
        yield* completeFanOut(run.id).pipe(inline)
        assert.strictEqual(yield* speedrun(run.id).pipe(inline), "finished")
        assert.deepStrictEqual(yield* stepRows(run.id), ["items#1:failed", "items#2:completed", "after#1:completed"])

        const Cancels = fanOutWorkflow("FanCancels", Noop, "cancel")
        const cancelled = yield* Cancels.start({ id: "c", n: 1 })
        yield* Effect.flip(speedrun(cancelled.id).pipe(withRegistry([Cancels, Noop])))
        yield* completeFanOut(cancelled.id, "failed").pipe(withRegistry([Cancels, Noop]))
        assert.strictEqual(yield* status(cancelled.id), "cancelled")

        const Skips = fanOutWorkflow("FanSkips", Noop, "skip")
        const skipped = yield* Skips.start({ id: "s", n: 1 })
        yield* Effect.flip(speedrun(skipped.id).pipe(withRegistry([Skips, Noop])))
        yield* completeFanOut(skipped.id, "failed").pipe(withRegistry([Skips, Noop]))
        assert.strictEqual(yield* speedrun(skipped.id).pipe(withRegistry([Skips, Noop])), "finished")
        assert.deepStrictEqual(yield* stepRows(skipped.id), ["items#1:skipped", "after#1:completed"])
      })
    )

    it.effect("an error in the body ends the step before any batch exists", () =>
      Effect.gen(function* () {
        const Broken = Workflow.make("FanBroken", { payload: Payload }, function* () {
          yield* Workflow.fanOut("items", (b) =>
            Effect.andThen(b.add(Noop, { i: 1 }), Effect.fail(new Error("cannot list the items")))
          )
        })
        const run = yield* Broken.start({ id: "x", n: 1 })
        assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([Broken, Noop])), "paused")
        const sql = yield* SqlClient.SqlClient
        const batches = yield* sql<{ readonly n: bigint }>`SELECT count(*) AS n FROM pgbus.batches
          WHERE properties ->> 'workflow_id' = ${run.id}`
        assert.strictEqual(Number(batches[0]!.n), 0)
      })
    )

    it.effect("a callback for an earlier attempt's batch changes nothing", () =>
      Effect.gen(function* () {
        const Fan = fanOutWorkflow("FanStale", Noop)
        const inline = withRegistry([Fan, Noop])
        const run = yield* Fan.start({ id: "st", n: 1 })
        yield* Effect.flip(speedrun(run.id).pipe(inline))
        const old = yield* waitingBatch(run.id)
        yield* completeFanOut(run.id, "failed").pipe(inline)
        yield* run.resume()
        yield* Effect.flip(speedrun(run.id).pipe(inline))
        const runner = yield* WorkflowRunner
        const resumed = yield* runner.fanOutFinished(fanOutOutcomeOf(yield* (yield* Batches).find(old)))
        assert.isFalse(resumed)
        assert.strictEqual(yield* status(run.id), "waiting")
      })
    )
  })

  describe("the sweep", () => {
    const Noop = Job.make("FanSweepNoop", { payload: Item, queue: "fan_sweep" }, () => Effect.void)

    it.effect("a lost callback is made up once its batch has been finished for the stall threshold", () =>
      Effect.gen(function* () {
        const Fan = fanOutWorkflow("FanLost", Noop)
        const inline = withRegistry([Fan, Noop])
        const run = yield* Fan.start({ id: "l", n: 2 })
        yield* Effect.flip(speedrun(run.id).pipe(inline))
        const batchId = yield* waitingBatch(run.id)
        yield* (yield* Batches).endMembers(batchId, "completed")
        // the callback message is lost
        const sql = yield* SqlClient.SqlClient
        yield* sql`DELETE FROM pgbus.q_pgbus_default WHERE message ->> 'job' = 'pgbus.workflow.fan_out_finished'`
        const sweep = yield* WorkflowSweep
        yield* TestClock.adjust("30 minutes")
        assert.strictEqual((yield* sweep.runOnce).fanOutsResolved, 0, "not yet past the threshold")
        yield* TestClock.adjust("31 minutes")
        const [a, b] = yield* Effect.all([sweep.runOnce, sweep.runOnce], { concurrency: 2 })
        assert.strictEqual(a.fanOutsResolved + b.fanOutsResolved, 1)
        assert.strictEqual(yield* status(run.id), "ready")
        assert.strictEqual(yield* speedrun(run.id).pipe(inline), "finished")
        expect((yield* run.refresh).info.output).toMatchObject({ batchId, completedJobs: 2 })
      }).pipe(onTestClock)
    )

    it.effect("a batch row that is gone makes the step fail with FanOutFailed and the run pause", () =>
      Effect.gen(function* () {
        const Fan = fanOutWorkflow("FanGone", Noop, "skip")
        const inline = withRegistry([Fan, Noop])
        const run = yield* Fan.start({ id: "g", n: 1 })
        yield* Effect.flip(speedrun(run.id).pipe(inline))
        const batchId = yield* waitingBatch(run.id)
        const sql = yield* SqlClient.SqlClient
        yield* sql`DELETE FROM pgbus.batches WHERE id = ${batchId}::uuid`
        yield* TestClock.adjust("61 minutes")
        assert.strictEqual((yield* (yield* WorkflowSweep).runOnce).fanOutsResolved, 1)
        assert.strictEqual(yield* speedrun(run.id).pipe(inline), "paused", "paused even though onBatchFailure is skip")
        expect((yield* run.refresh).info.error).toMatchObject({ tag: "FanOutFailed" })
        expect((yield* run.refresh).info.error).toMatchObject({ message: expect.stringContaining("is gone") })
      }).pipe(onTestClock)
    )
  })
})
