import { assert, describe, expect, layer } from "@effect/vitest"
import { Effect, Option, Queue, Schema } from "effect"
import * as Batch from "../src/Batch/Batch.ts"
import * as EventBus from "../src/EventBus/EventBus.ts"
import * as Job from "../src/Job/Job.ts"
import * as RequestContext from "../src/Job/RequestContext.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const unique = (base: string) => `${base}_${n++}`

const Payload = Schema.Struct({ id: Schema.Number })

// what a web request would set: the tenant and the request id, the time encoded as a string
const Request = RequestContext.make(
  "request",
  Schema.Struct({ tenant: Schema.String, requestId: Schema.String, at: Schema.DateFromString })
)
const value = { tenant: "acme", requestId: "req-1", at: new Date("2026-01-02T03:04:05.000Z") }

class Flaky extends Schema.TaggedError<Flaky>()("Flaky", {}) {}

layer(
  TestDatabase.layer({
    pollingInterval: "50 millis",
    retryBackoff: "50 millis",
    retryBackoffMax: "100 millis",
    maxRetries: 3
  }),
  { excludeTestServices: true }
)("request context", (it) => {
  describe("jobs", () => {
    it.effect("is captured at enqueue and provided to the handler on every attempt of a retried job", () =>
      Effect.gen(function* () {
        const queue = unique("ctx_retry")
        const seen = yield* Queue.unbounded<{ attempt: number; request: Option.Option<typeof value> }>()
        const Work = Job.make("CtxRetry", { payload: Payload, queue }, (_, job) =>
          Effect.gen(function* () {
            yield* Queue.offer(seen, { attempt: job.attempt, request: yield* Request.getOption })
            if (job.attempt === 1) return yield* new Flaky()
          })
        )
        yield* Work.enqueue({ id: 1 }).pipe(Request.provide(value))
        yield* startSupervisor([Work], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        const first = yield* Queue.take(seen)
        const second = yield* Queue.take(seen)
        assert.deepStrictEqual([first.attempt, second.attempt], [1, 2])
        for (const s of [first, second]) assert.deepStrictEqual(Option.getOrUndefined(s.request), value)
      }).pipe(Effect.scoped)
    )

    it.effect("survives a trip through the dead-letter queue and `dlq retry`", () =>
      Effect.gen(function* () {
        const queue = unique("ctx_dlq")
        const seen = yield* Queue.unbounded<string>()
        let fail = true
        const Work = Job.make("CtxDlq", { payload: Payload, queue, retry: { maxRetries: 1 } }, () =>
          Effect.gen(function* () {
            const request = yield* Request.get
            yield* Queue.offer(seen, request.requestId)
            if (fail) return yield* new Flaky()
          })
        )
        yield* Work.enqueue({ id: 1 }).pipe(Request.provide(value))
        yield* startSupervisor([Work], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        assert.strictEqual(yield* Queue.take(seen), "req-1")
        const store = yield* QueueStore
        yield* eventually(
          "dead-lettered",
          Effect.map(store.browse(`${queue}_dlq`), (rows) => rows.length === 1)
        )
        fail = false
        yield* store.retryDeadLetters(`${queue}_dlq`, "all")
        assert.strictEqual(yield* Queue.take(seen), "req-1")
        yield* eventually(
          "archived",
          Effect.map(store.metrics(queue), (m) => m.archiveSize === 1)
        )
      }).pipe(Effect.scoped)
    )

    it.effect("a job enqueued without it reads none; one enqueued by a handler inherits its job's", () =>
      Effect.gen(function* () {
        const queue = unique("ctx_none")
        const seen = yield* Queue.unbounded<{ id: number; request: Option.Option<typeof value>; missing?: string }>()
        const Child: Job.Job<"CtxChild", { id: number }> = Job.make("CtxChild", { payload: Payload, queue }, ({ id }) =>
          Effect.gen(function* () {
            const missing = yield* Request.get.pipe(
              Effect.flip,
              Effect.map((e) => e._tag),
              Effect.orElseSucceed(() => undefined)
            )
            yield* Queue.offer(seen, { id, request: yield* Request.getOption, ...(missing ? { missing } : {}) })
          }).pipe(Effect.orDie)
        )
        const Parent = Job.make("CtxParent", { payload: Payload, queue }, ({ id }) => Child.enqueue({ id: id + 1 }))
        yield* startSupervisor([Parent, Child], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        yield* Child.enqueue({ id: 0 })
        const plain = yield* Queue.take(seen)
        assert.strictEqual(plain.id, 0)
        assert.isTrue(Option.isNone(plain.request))
        assert.strictEqual(plain.missing, "RequestContextMissing")
        yield* Parent.enqueue({ id: 10 }).pipe(Request.provide(value))
        const inherited = yield* Queue.take(seen)
        assert.strictEqual(inherited.id, 11)
        assert.deepStrictEqual(Option.getOrUndefined(inherited.request), value)
      }).pipe(Effect.scoped)
    )

    it.effect("a value its Schema does not encode fails with InvalidRequestContext and enqueues nothing", () =>
      Effect.gen(function* () {
        const queue = unique("ctx_bad")
        const Work = Job.make("CtxBad", { payload: Payload, queue }, () => Effect.void)
        const error = yield* Work.enqueue({ id: 1 }).pipe(
          Request.provide({ ...value, at: new Date(Number.NaN) }),
          Effect.flip
        )
        assert.strictEqual(error._tag, "InvalidRequestContext")
      })
    )

    it.effect("is the same context events carry: EventBus.withAttributes sets it, and the job sees it", () =>
      Effect.gen(function* () {
        const queue = unique("ctx_events")
        const seen = yield* Queue.unbounded<Readonly<Record<string, unknown>>>()
        const Work = Job.make("CtxEvents", { payload: Payload, queue }, (_, job) =>
          Effect.flatMap(RequestContext.CurrentAttributes, (attributes) =>
            Queue.offer(seen, { ...attributes, header: job.headers[RequestContext.CONTEXT_HEADER] })
          )
        )
        yield* Work.enqueue({ id: 1 }).pipe(EventBus.withAttributes({ tenant: "globex" }))
        yield* startSupervisor([Work], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        expect(yield* Queue.take(seen)).toEqual({ tenant: "globex", header: { tenant: "globex" } })
      }).pipe(Effect.scoped)
    )
  })

  describe("batches", () => {
    it.effect("a batch's callbacks get the context the batch was made in", () =>
      Effect.gen(function* () {
        const queue = unique("ctx_batch")
        const seen = yield* Queue.unbounded<{ callback: string; request: Option.Option<typeof value> }>()
        const Work = Job.make("CtxMember", { payload: Payload, queue }, () => Effect.void)
        const Done = Job.make("CtxDone", { payload: Batch.Finished, queue }, (finished) =>
          Effect.flatMap(Request.getOption, (request) => Queue.offer(seen, { callback: finished.callback, request }))
        )
        const batch = yield* Batch.make({ onFinish: Done }).pipe(Request.provide(value))
        // members enqueued outside the request: the callback still has the batch's context
        yield* batch.enqueue(Work.enqueueMany([{ id: 1 }, { id: 2 }]))
        yield* startSupervisor([Work, Done], { capsules: [{ name: "c", queues: [queue], concurrency: 2 }] })
        const got = yield* Queue.take(seen)
        assert.strictEqual(got.callback, "onFinish")
        assert.deepStrictEqual(Option.getOrUndefined(got.request), value)
      }).pipe(Effect.scoped)
    )
  })
})
