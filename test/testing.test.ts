/**
 * effect-pgbus/testing, used as an app's tests would use it: jobs inline and drained, enqueue
 * assertions, the event-bus modes and their assertions, a throwaway database.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import { Event, EventBus, Job, QueueStore, Registry } from "effect-pgbus"
import * as Testing from "effect-pgbus/testing"
import { withServer } from "./support/server.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const unique = (base: string) => `${base}_${n++}`

const Signup = Schema.Struct({ userId: Schema.String, at: Schema.DateFromString })

const failureOf = (e: Testing.AssertionFailed | unknown) =>
  e instanceof Testing.AssertionFailed ? e.message : `not an AssertionFailed: ${String(e)}`

layer(TestDatabase.layer({ retryBackoff: "1 second", maxRetries: 2 }), { excludeTestServices: true })(
  "testing: jobs",
  (it) => {
    it.effect(
      "performJob runs the handler through the payload Schema and returns the outcome the worker would apply",
      () =>
        Effect.gen(function* () {
          const seen: Array<Date> = []
          const Welcome = Job.make("Welcome", { payload: Signup, retry: { maxRetries: 2 } }, ({ at, userId }, ctx) =>
            userId === "bad" ? Effect.fail(`no user (attempt ${ctx.attempt})`) : Effect.sync(() => seen.push(at))
          )
          const ok = yield* Testing.performJob(Welcome, { userId: "u1", at: new Date(5) })
          assert.strictEqual(ok._tag, "Succeeded")
          assert.instanceOf(seen[0], Date, "the handler gets the decoded Date back, as the worker would")
          assert.strictEqual(seen[0]!.getTime(), 5)
          const first = yield* Testing.performJob(Welcome, { userId: "bad", at: new Date(0) })
          assert.strictEqual(first._tag, "Retry")
          const last = yield* Testing.performJob(Welcome, { userId: "bad", at: new Date(0) }, { attempt: 2 })
          assert.strictEqual(last._tag, "DeadLetter")
          assert.include(last._tag === "DeadLetter" ? (last.failure?.message ?? "") : "", "attempt 2")
          // nothing was written
          const queued = yield* Testing.enqueued(Welcome)
          assert.lengthOf(queued, 0)
        })
    )

    it.effect("performJob stamps the message with the Clock's time, so a TestClock reaches the handler's context", () =>
      Effect.gen(function* () {
        const stamps: Array<Date> = []
        const Stamp = Job.make("Stamp", { payload: Signup }, (_, ctx) => Effect.sync(() => stamps.push(ctx.enqueuedAt)))
        yield* TestClock.setTime(86_400_000)
        const outcome = yield* Testing.performJob(Stamp, { userId: "u1", at: new Date(0) })
        assert.strictEqual(outcome._tag, "Succeeded")
        assert.strictEqual(stamps[0]?.getTime(), 86_400_000)
      }).pipe(Effect.provide(TestClock.layer()))
    )

    it.effect("assertEnqueued and refuteEnqueued read the queue, payloads matched by the keys given", () =>
      Effect.gen(function* () {
        const queue = unique("mailers")
        const Mail = Job.make("Mail", { payload: Signup, queue }, () => Effect.void)
        yield* Mail.enqueue({ userId: "ada", at: new Date(1) })
        yield* Mail.enqueue({ userId: "grace", at: new Date(2) })
        const found = yield* Testing.assertEnqueued(Mail, { userId: "ada" })
        assert.lengthOf(found, 1)
        assert.strictEqual(found[0]!.payload.at.getTime(), 1)
        yield* Testing.assertEnqueued(Mail, undefined, { count: 2 })
        yield* Testing.refuteEnqueued(Mail, { userId: "linus" })
        const missing = yield* Testing.assertEnqueued(Mail, { userId: "linus" }).pipe(Effect.flip)
        assert.include(failureOf(missing), "Mail job(s) enqueued with")
        assert.include(failureOf(missing), "0 matching of 2")
        const present = yield* Testing.refuteEnqueued(Mail, { userId: "grace" }).pipe(Effect.flip)
        assert.include(failureOf(present), "no Mail job enqueued")
      })
    )

    it.effect("drainQueue runs what is ready once: successes archived, a failure retried later, follow-ups run", () =>
      Effect.gen(function* () {
        const queue = unique("work")
        const ran: Array<string> = []
        const Follow = Job.make("Follow", { payload: Schema.Struct({ id: Schema.String }), queue }, ({ id }) =>
          Effect.sync(() => ran.push(`follow ${id}`))
        )
        const Work = Job.make("Work", { payload: Schema.Struct({ id: Schema.String }), queue }, ({ id }) =>
          Effect.gen(function* () {
            if (id === "x") return yield* Effect.fail("boom")
            ran.push(id)
            yield* Follow.enqueue({ id })
          })
        )
        yield* Work.enqueue({ id: "a" })
        yield* Work.enqueue({ id: "x" })
        const report = yield* Testing.drainQueue(queue).pipe(Effect.provide(Registry.layer([Work, Follow])))
        assert.deepStrictEqual(report, { succeeded: 2, retried: 1, deadLettered: 0 })
        assert.deepStrictEqual(ran, ["a", "follow a"])
        // the failed one waits for its backoff, in the queue
        yield* Testing.assertEnqueued(Work, { id: "x" }, { count: 1 })
        yield* Testing.refuteEnqueued(Work, { id: "a" })
      })
    )
  }
)

const OrderCreated = Event.make("orders.created", Schema.Struct({ orderId: Schema.String }))

describe("testing: events", () => {
  const handled: Array<string> = []
  const subscriberQueue = unique("ev_orders")
  const Inventory = EventBus.subscribe(
    OrderCreated,
    (event) => Effect.sync(() => handled.push(event.payload.orderId)),
    { name: "inventory", queue: subscriberQueue }
  )
  const Base = Layer.provideMerge(Registry.layer([Inventory]), TestDatabase.layer())
  const TestLayer = Testing.layerEvents("fake").pipe(Layer.provideMerge(Base))
  const depth = QueueStore.use((store) => store.metrics(subscriberQueue)).pipe(Effect.map((m) => m.depth))

  layer(TestLayer, { excludeTestServices: true })("modes", (it) => {
    it.effect("fake captures and writes nothing; assertions pass and fail on what the block published", () =>
      Effect.gen(function* () {
        yield* Testing.clearPublished
        yield* OrderCreated.publish({ orderId: "o1" }).pipe(
          Testing.assertPublished({ routingKey: OrderCreated, payload: { orderId: "o1" }, count: 1 })
        )
        assert.strictEqual(yield* depth, 0, "nothing reached the subscriber queue")
        assert.deepStrictEqual(handled, [])
        yield* Effect.void.pipe(Testing.assertNotPublished({ routingKey: "orders.created" }))
        const none = yield* Effect.void.pipe(Testing.assertPublished({ routingKey: "orders.created" }), Effect.flip)
        assert.include(failureOf(none), "orders.created published")
        const unwanted = yield* OrderCreated.publish({ orderId: "o2" }).pipe(
          Testing.assertNotPublished({ routingKey: OrderCreated }),
          Effect.flip
        )
        assert.include(failureOf(unwanted), '"orderId":"o2"')
        assert.lengthOf(yield* Testing.published, 2)
      })
    )

    it.effect("inline publishes for real and runs the subscriber before the publish returns", () =>
      Effect.gen(function* () {
        const published = yield* OrderCreated.publish({ orderId: "o3" }).pipe(Testing.withEventMode("inline"))
        assert.deepStrictEqual(published.queues, [subscriberQueue])
        assert.deepStrictEqual(handled, ["o3"])
        assert.strictEqual(yield* depth, 0, "its delivery was run and archived")
        assert.strictEqual(yield* Effect.flatMap(Testing.PublishedEvents, (e) => e.mode), "fake", "mode restored")
      })
    )

    it.effect("disabled passes through to the real bus and captures nothing", () =>
      Effect.gen(function* () {
        yield* Testing.clearPublished
        yield* OrderCreated.publish({ orderId: "o4" }).pipe(Testing.withEventMode("disabled"))
        assert.strictEqual(yield* depth, 1, "the event waits in the subscriber queue")
        assert.lengthOf(yield* Testing.published, 0)
      })
    )
  })
})

describe("testing: a throwaway database", () => {
  it.effect(
    "layerDatabase creates a migrated database of its own and drops it when released",
    () =>
      Effect.gen(function* () {
        const Ping = Job.make("Ping", { payload: Schema.Struct({}) }, () => Effect.void)
        const name = yield* Effect.gen(function* () {
          yield* Ping.enqueue({})
          yield* Testing.assertEnqueued(Ping)
          const sql = yield* SqlClient.SqlClient
          const [row] = yield* sql<{ readonly name: string }>`SELECT current_database() AS name`
          return row!.name
        }).pipe(Effect.provide(Testing.layerDatabase()))
        assert.match(name, /^pgbus_test_/)
        const left = yield* withServer(
          Effect.flatMap(
            SqlClient.SqlClient,
            (sql) => sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_database WHERE datname = ${name}`
          )
        )
        assert.strictEqual(left[0]!.n, 0, "dropped")
      }),
    60_000
  )
})
