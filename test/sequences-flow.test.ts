import { assert, describe, expect, it, layer } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import type { FairShareKey, JobFairShareInput } from "../src/Config.ts"
import * as Job from "../src/Job/Job.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const unique = (base: string) => `${base}_${n++}`

const Step = Schema.Struct({ key: Schema.String, seq: Schema.Number })
type Step = typeof Step.Type

describe("ordering keys with flow controls (definitions)", () => {
  it.effect("orderKey with limit, rate or debounce is an invalid definition, with unique it is not", () =>
    Effect.sync(() => {
      const orderKey = (s: Step) => s.key
      expect(() => Job.make("OrdLimit", { payload: Step, orderKey, limit: { to: 1 } }, () => Effect.void)).toThrow(
        /orderKey and limit cannot be combined/
      )
      expect(() =>
        Job.make("OrdRate", { payload: Step, orderKey, rate: { limit: 5, period: "1 second" } }, () => Effect.void)
      ).toThrow(/orderKey and rate cannot be combined/)
      expect(() =>
        Job.make(
          "OrdDebounce",
          { payload: Step, orderKey, debounce: { key: (s) => s.key, period: "1 second" } },
          () => Effect.void
        )
      ).toThrow(/orderKey and debounce cannot be combined/)
      const both = Job.make(
        "OrdUnique",
        { payload: Step, orderKey, unique: { key: (s) => `${s.key}/${s.seq}` } },
        () => Effect.void
      )
      assert.strictEqual(both.name, "OrdUnique")
    })
  )
})

/** Per tenant: the step's key, so fair share would interleave the keys if it read this queue. */
const byKey = (job: JobFairShareInput): FairShareKey => (job.payload as Step).key

layer(
  TestDatabase.layer({
    pollingInterval: "50 millis",
    retryBackoff: "100 millis",
    retryBackoffMax: "200 millis",
    maxRetries: 3,
    visibilityTimeout: "30 seconds",
    fairShare: byKey
  }),
  { excludeTestServices: true }
)("per-key FIFO with flow controls", (it) => {
  it.effect("an ordered job and a limited or rate-limited job on one queue cannot be registered together", () =>
    Effect.gen(function* () {
      const ordered = Job.make(
        "MixOrdered",
        { payload: Step, queue: "mixed", orderKey: (s) => s.key },
        () => Effect.void
      )
      const limited = Job.make("MixLimited", { payload: Step, queue: "mixed", limit: { to: 2 } }, () => Effect.void)
      const rated = Job.make(
        "MixRated",
        { payload: Step, queue: "mixed", rate: { limit: 2, period: "1 second" } },
        () => Effect.void
      )
      for (const layer of [Registry.layer([ordered, limited]), Registry.layer([rated, ordered])]) {
        const error = yield* Layer.build(layer).pipe(Effect.scoped, Effect.flip)
        assert.strictEqual(error._tag, "InvalidJobDefinition")
        assert.include(error.message, "cannot be both ordered and limited")
      }
      // on another queue they may
      const elsewhere = Job.make("MixElsewhere", { payload: Step, queue: "other", limit: { to: 2 } }, () => Effect.void)
      const fine = yield* Layer.build(Registry.layer([ordered, elsewhere])).pipe(Effect.scoped, Effect.exit)
      assert.strictEqual(fine._tag, "Success")
    })
  )

  it.effect("with fairShare set, an ordered queue is still read in order (order wins over fairness)", () =>
    Effect.gen(function* () {
      const queue = unique("seqfair")
      const order = new Map<string, Array<number>>()
      const running = new Map<string, number>()
      let overlap = 0
      const Work = Job.make("SeqFair", { payload: Step, queue, orderKey: (s) => s.key }, (step) =>
        Effect.gen(function* () {
          const now = (running.get(step.key) ?? 0) + 1
          running.set(step.key, now)
          overlap = Math.max(overlap, now)
          order.set(step.key, [...(order.get(step.key) ?? []), step.seq])
          yield* Effect.sleep(step.seq % 3)
          running.set(step.key, (running.get(step.key) ?? 1) - 1)
        })
      )
      // 3 keys × 30 steps, interleaved
      const work = Array.from({ length: 90 }, (_, i) => ({ key: `k${i % 3}`, seq: Math.floor(i / 3) }))
      yield* Work.enqueueMany(work)
      const store = yield* QueueStore
      yield* startSupervisor([Work], { capsules: [{ name: "a", queues: [queue], concurrency: 6 }] })
      yield* eventually(
        "all archived",
        Effect.map(store.metrics(queue), (m) => m.archiveSize === work.length),
        "60 seconds"
      )
      for (let k = 0; k < 3; k++) {
        assert.deepStrictEqual(
          order.get(`k${k}`),
          Array.from({ length: 30 }, (_, i) => i),
          `key k${k} in order`
        )
      }
      assert.strictEqual(overlap, 1, "never two of one key at once")
    }).pipe(Effect.scoped)
  )

  it.effect("a unique ordered job: a duplicate is refused, and its key is free again once the job has run", () =>
    Effect.gen(function* () {
      const queue = unique("sequnique")
      const ran: Array<number> = []
      const Work = Job.make(
        "SeqUnique",
        { payload: Step, queue, orderKey: (s) => s.key, unique: { key: (s) => `${s.key}/${s.seq}` } },
        (step) => Effect.sync(() => void ran.push(step.seq))
      )
      yield* Work.enqueue({ key: "a", seq: 0 })
      yield* Work.enqueue({ key: "a", seq: 1 })
      const duplicate = yield* Effect.flip(Work.enqueue({ key: "a", seq: 0 }))
      assert.strictEqual(duplicate._tag, "DuplicateJob")
      const store = yield* QueueStore
      yield* startSupervisor([Work], { capsules: [{ name: "a", queues: [queue], concurrency: 4 }] })
      yield* eventually(
        "both archived",
        Effect.map(store.metrics(queue), (m) => m.archiveSize === 2),
        "30 seconds"
      )
      assert.deepStrictEqual(ran, [0, 1], "in order")
      // released after the archive: the same key may be enqueued again
      yield* eventually(
        "the key is free",
        Work.enqueue({ key: "a", seq: 0 }).pipe(
          Effect.as(true),
          Effect.catchTag("DuplicateJob", () => Effect.succeed(false))
        ),
        "10 seconds"
      )
      yield* eventually(
        "run again",
        Effect.sync(() => ran.length === 3),
        "30 seconds"
      )
    }).pipe(Effect.scoped)
  )
})
