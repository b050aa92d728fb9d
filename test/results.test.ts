import { assert, describe, it, layer } from "@effect/vitest"
import { Effect, Fiber, Option, Schema } from "effect"
import * as Job from "../src/Job/Job.ts"
import { JobClient } from "../src/Job/JobClient.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { bundledFixture, spawnSupervisor } from "./support/child.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const unique = (base: string) => `${base}_${n++}`

const Numbers = Schema.Struct({ n: Schema.Number })
// encoded as a string: what is kept is the Schema's encoded form, what is awaited the decoded one
const Total = Schema.Struct({ total: Schema.NumberFromString })

class CardDeclined extends Schema.TaggedError<CardDeclined>()("CardDeclined", { card: Schema.String }) {}

layer(
  TestDatabase.layer({
    retryBackoff: "50 millis",
    retryBackoffMax: "200 millis",
    maxRetries: 2,
    // a long backstop: an awaiter that returns quickly was woken by NOTIFY, not by polling
    pollingInterval: "20 seconds",
    localDispatch: false
  }),
  { excludeTestServices: true }
)("job results", (it) => {
  describe("awaitResult", () => {
    it.effect("returns the decoded output of a job that keeps results, kept encoded with the archived message", () =>
      Effect.gen(function* () {
        const queue = unique("results")
        const Sum = Job.make("Sum", { payload: Numbers, success: Total, queue }, ({ n }) =>
          Effect.succeed({ total: n * 2 })
        )
        yield* startSupervisor([Sum], { capsules: [{ name: "c", queues: [queue], concurrency: 2 }] })
        const ref = yield* Sum.enqueue({ n: 21 })
        const result = yield* Sum.awaitResult(ref, { timeout: "10 seconds" })
        assert.deepStrictEqual(result, { total: 42 })
        // a second await reads the archive at once
        assert.deepStrictEqual(yield* Sum.awaitResult(ref), { total: 42 })
        const store = yield* QueueStore
        const stored = yield* store.outcomes.find(queue, ref.msgId)
        assert.strictEqual(stored._tag, "Archived")
        if (stored._tag === "Archived") assert.deepStrictEqual(Option.getOrUndefined(stored.result), { total: "42" })
      }).pipe(Effect.scoped)
    )

    it.effect("an awaiter waiting before the job runs is woken by NOTIFY (the poll backstop is 20 s)", () =>
      Effect.gen(function* () {
        const queue = unique("wake")
        const Echo = Job.make("Echo", { payload: Numbers, success: Numbers, queue }, ({ n }) =>
          Effect.as(Effect.sleep("300 millis"), { n })
        )
        const ref = yield* Echo.enqueue({ n: 7 })
        const waiting = yield* Effect.forkChild(Echo.awaitResult(ref))
        yield* Effect.sleep("200 millis")
        const started = Date.now()
        yield* startSupervisor([Echo], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        const result = yield* Fiber.join(waiting)
        assert.deepStrictEqual(result, { n: 7 })
        assert.isBelow(Date.now() - started, 10_000, "woken long before the 20 s backstop")
      }).pipe(Effect.scoped)
    )

    it.effect("fails with JobDeadLettered, naming the last failure, once the job is dead-lettered", () =>
      Effect.gen(function* () {
        const queue = unique("dead")
        let runs = 0
        const Charge = Job.make("Charge", { payload: Numbers, success: Total, queue, retry: { maxRetries: 1 } }, () =>
          Effect.suspend(() => {
            runs++
            return Effect.fail(new CardDeclined({ card: "4242" }))
          })
        )
        const ref = yield* Charge.enqueue({ n: 1 })
        const waiting = yield* Effect.forkChild(Charge.awaitResult(ref, { timeout: "15 seconds" }).pipe(Effect.flip))
        yield* startSupervisor([Charge], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        const error = yield* Fiber.join(waiting)
        assert.strictEqual(error._tag, "JobDeadLettered")
        if (error._tag === "JobDeadLettered") {
          assert.strictEqual(error.errorClass, "CardDeclined")
          assert.strictEqual(error.attempts, 1)
          assert.strictEqual(error.id, ref.id)
        }
        assert.strictEqual(runs, 1)
      }).pipe(Effect.scoped)
    )

    it.effect("fails with JobResultTimeout when the job does not finish in time, and finds it later", () =>
      Effect.gen(function* () {
        const queue = unique("slow")
        const Slow = Job.make("Slow", { payload: Numbers, success: Numbers, queue }, ({ n }) =>
          Effect.as(Effect.sleep("1500 millis"), { n })
        )
        yield* startSupervisor([Slow], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        const ref = yield* Slow.enqueue({ n: 3 })
        const error = yield* Slow.awaitResult(ref, { timeout: "200 millis" }).pipe(Effect.flip)
        assert.strictEqual(error._tag, "JobResultTimeout")
        assert.deepStrictEqual(yield* Slow.awaitResult(ref, { timeout: "10 seconds" }), { n: 3 })
      }).pipe(Effect.scoped)
    )

    it.effect("an output the success Schema does not encode fails the attempt with InvalidResult", () =>
      Effect.gen(function* () {
        const queue = unique("badresult")
        const Bad = Job.make("Bad", { payload: Numbers, success: Numbers, queue, retry: { maxRetries: 1 } }, () =>
          Effect.succeed({ n: "not a number" } as unknown as { n: number })
        )
        const ref = yield* Bad.enqueue({ n: 1 })
        yield* startSupervisor([Bad], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        const error = yield* Bad.awaitResult(ref, { timeout: "15 seconds" }).pipe(Effect.flip)
        assert.strictEqual(error._tag, "JobDeadLettered")
        if (error._tag === "JobDeadLettered") assert.strictEqual(error.errorClass, "InvalidResult")
      }).pipe(Effect.scoped)
    )

    it.effect("a job that keeps no result, and an id that names nothing, fail with JobResultUnavailable", () =>
      Effect.gen(function* () {
        const queue = unique("noresult")
        const Plain = Job.make("Plain", { payload: Numbers, queue }, () => Effect.void)
        yield* startSupervisor([Plain], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        const ref = yield* Plain.enqueue({ n: 1 })
        const store = yield* QueueStore
        yield* eventually(
          "archived",
          Effect.map(store.outcomes.find(queue, ref.msgId), (o) => o._tag === "Archived")
        )
        const error = yield* Plain.awaitResult(ref, { timeout: "5 seconds" }).pipe(Effect.flip)
        assert.strictEqual(error._tag, "JobResultUnavailable")
        if (error._tag === "JobResultUnavailable") assert.strictEqual(error.reason, "not_kept")
        const missing = yield* Plain.awaitResult(Job.jobRef(queue, 999_999n)).pipe(Effect.flip)
        assert.strictEqual(missing._tag, "JobResultUnavailable")
        if (missing._tag === "JobResultUnavailable") assert.strictEqual(missing.reason, "missing")
      }).pipe(Effect.scoped)
    )
  })
})

describe("job results across processes", () => {
  it.live("a result kept by a worker in another process wakes an awaiter here", () =>
    TestDatabase.onFreshDatabase({ pollingInterval: "20 seconds", localDispatch: false }, (url) =>
      Effect.gen(function* () {
        const queue = "squares"
        // the same definition as the child's; this process only enqueues and awaits
        const Square = Job.make(
          "Square",
          {
            payload: Numbers,
            success: Schema.Struct({ square: Schema.NumberFromString, pid: Schema.Number }),
            queue
          },
          () => Effect.die("runs in the child")
        )
        const client = yield* JobClient
        yield* client.ensureQueue(queue)
        const refs = yield* Square.enqueueMany([{ n: 3 }, { n: 4 }])
        const waiting = yield* Effect.forkChild(
          Effect.forEach(refs, (ref) => Square.awaitResult(ref, { timeout: "60 seconds" }), { concurrency: 2 })
        )
        const bundle = yield* bundledFixture("test/fixtures/results-child.ts")
        const child = yield* spawnSupervisor(
          { DATABASE_URL: url, CHILD_QUEUE: queue, PGBUS_POLLING_INTERVAL: "0.1" },
          bundle
        )
        const results = yield* Fiber.join(waiting).pipe(Effect.tapError(() => Effect.logError(child.output())))
        assert.deepStrictEqual(
          results.map((r) => r.square),
          [9, 16]
        )
        assert.isTrue(
          results.every((r) => r.pid === child.process.pid),
          "run by the child"
        )
      })
    )
  )
})
