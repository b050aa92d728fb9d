import { assert, describe, layer } from "@effect/vitest"
import { Clock, Effect, Metric, Schema } from "effect"
import * as Job from "../src/Job/Job.ts"
import { jobCount } from "../src/Job/JobMetrics.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const fresh = (base: string) => `${base}_${n++}`

const Edit = Schema.Struct({ doc: Schema.String, rev: Schema.Number })

const depthOf = (queue: string) =>
  Effect.flatMap(QueueStore, (store) => store.metrics(queue)).pipe(
    Effect.map((m) => m.depth),
    Effect.catchTag("QueueNotFound", () => Effect.succeed(0))
  )

layer(TestDatabase.layer({ visibilityTimeout: "30 seconds", pollingInterval: "100 millis" }), {
  excludeTestServices: true
})("debounce", (it) => {
  it.effect("100 enqueues of one key within the period run once, with the last payload, once the key is quiet", () =>
    Effect.gen(function* () {
      const queue = fresh("debounce")
      const ran: Array<{ doc: string; rev: number; at: number }> = []
      const job = Job.make(
        "Reindex",
        { payload: Edit, queue, debounce: { key: (p) => p.doc, period: "700 millis" } },
        ({ doc, rev }) => Effect.flatMap(Clock.currentTimeMillis, (at) => Effect.sync(() => ran.push({ doc, rev, at })))
      )
      yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 4 }] })
      let lastAt = 0
      for (let rev = 1; rev <= 100; rev++) {
        yield* job.enqueue({ doc: "a", rev })
        lastAt = yield* Clock.currentTimeMillis
      }
      yield* job.enqueue({ doc: "b", rev: 1 })
      yield* eventually(
        "a and b ran",
        Effect.sync(() => ran.length >= 2),
        "10 seconds"
      )
      yield* eventually(
        "the superseded messages are gone",
        Effect.map(depthOf(queue), (d) => d === 0)
      )
      yield* Effect.sleep("300 millis")
      const a = ran.filter((r) => r.doc === "a")
      assert.strictEqual(a.length, 1, "once")
      assert.strictEqual(a[0]!.rev, 100, "with the last payload")
      assert.isAtLeast(a[0]!.at - lastAt, 600, "after the key was quiet for the period")
      assert.deepStrictEqual(
        ran.filter((r) => r.doc === "b").map((r) => r.rev),
        [1]
      )
    })
  )

  it.effect(
    "a superseded enqueue did not run: its awaiter gets JobDiscarded (Superseded), the metrics count it superseded, not completed",
    () =>
      Effect.gen(function* () {
        const queue = fresh("debounce")
        const Render = Job.make(
          "DebouncedRender",
          {
            payload: Edit,
            success: Schema.Struct({ rendered: Schema.Number }),
            queue,
            debounce: { key: (p) => p.doc, period: "300 millis" }
          },
          ({ rev }) => Effect.succeed({ rendered: rev })
        )
        yield* startSupervisor([Render], { capsules: [{ name: "c", queues: [queue], concurrency: 2 }] })
        const refs = yield* Effect.forEach([1, 2, 3], (rev) => Render.enqueue({ doc: "a", rev }))
        assert.deepStrictEqual(yield* Render.awaitResult(refs[2]!, { timeout: "10 seconds" }), { rendered: 3 })
        for (const ref of refs.slice(0, 2)) {
          const error = yield* Render.awaitResult(ref, { timeout: "10 seconds" }).pipe(Effect.flip)
          assert.strictEqual(error._tag, "JobDiscarded")
          if (error._tag === "JobDiscarded") assert.strictEqual(error.errorClass, "Superseded")
        }
        const count = (status: string) =>
          Effect.map(
            Metric.value(jobCount.pipe(Metric.withAttributes({ queue, job: "DebouncedRender", status }))),
            (state) => state.count
          )
        yield* eventually(
          "two superseded counted",
          Effect.map(count("superseded"), (n) => n === 2)
        )
        assert.strictEqual(yield* count("completed"), 1, "only the delivery that ran completed")
        assert.strictEqual(yield* count("failed"), 0, "a superseded delivery is not a failure")
      })
  )

  it.effect("an enqueue after the run opens a new window; maxWait bounds a burst that never goes quiet", () =>
    Effect.gen(function* () {
      const queue = fresh("maxwait")
      const ran: Array<number> = []
      const job = Job.make(
        "Autosave",
        { payload: Edit, queue, debounce: { period: "400 millis", maxWait: "1 second" } },
        ({ rev }) => Effect.sync(() => ran.push(rev))
      )
      yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 2 }] })
      // an edit every 100 ms for 2.5 s: never quiet for 400 ms
      for (let rev = 1; rev <= 25; rev++) {
        yield* job.enqueue({ doc: "d", rev })
        yield* Effect.sleep("100 millis")
      }
      yield* eventually(
        "the last edit ran",
        Effect.sync(() => ran.includes(25)),
        "10 seconds"
      )
      // about one run per second of the burst, then the last: not 25, not 1
      assert.isAtLeast(ran.length, 2)
      assert.isAtMost(ran.length, 5)
      assert.deepStrictEqual(
        [...ran].sort((x, y) => x - y),
        ran,
        "in order"
      )
    })
  )

  describe("bad input", () => {
    it("a period of zero, a maxWait below it, unique beside it or an unknown option throws InvalidJobDefinition", () => {
      const define = (options: Record<string, unknown>) => () =>
        Job.make("BadDebounce", { payload: Edit, ...options } as Job.JobOptions<typeof Edit.Type>, () => Effect.void)
      assert.throws(define({ debounce: { period: "0 millis" } }), /debounce.period/)
      assert.throws(define({ debounce: { period: "1 second", maxWait: "10 millis" } }), /maxWait/)
      assert.throws(define({ debounce: { period: "1 second", every: 2 } }), /unknown debounce option/)
      assert.throws(
        define({ debounce: { period: "1 second" }, unique: { key: () => "k" } }),
        /debounce and unique cannot be combined/
      )
    })

    it.effect("a key function that throws, a delay or a time: InvalidDebounceKey, nothing written", () =>
      Effect.gen(function* () {
        const queue = fresh("baddebounce")
        const throws = Job.make(
          "DebounceKeyThrows",
          {
            payload: Edit,
            queue,
            debounce: {
              period: "1 second",
              key: () => {
                throw new Error("no doc")
              }
            }
          },
          () => Effect.void
        )
        const e1 = yield* throws.enqueue({ doc: "x", rev: 1 }).pipe(Effect.flip)
        assert.strictEqual(e1._tag, "InvalidDebounceKey")
        assert.include(e1.message, "no doc")
        const plain = Job.make(
          "DebouncePlain",
          { payload: Edit, queue, debounce: { period: "1 second" } },
          () => Effect.void
        )
        const e2 = yield* plain.enqueue({ doc: "x", rev: 1 }, { delay: "1 minute" }).pipe(Effect.flip)
        assert.strictEqual(e2._tag, "InvalidDebounceKey")
        assert.strictEqual(yield* depthOf(queue), 0)
      })
    )
  })
})
