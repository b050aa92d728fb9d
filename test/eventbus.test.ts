/** The event bus against the real database: publish, routing, consumers, idempotent handlers. */
import { assert, describe, expect, layer } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Layer, Logger, Metric, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { consumerCapsules, eventsUnrouted } from "../src/EventBus/Consumer.ts"
import * as Event from "../src/EventBus/Event.ts"
import * as EventBus from "../src/EventBus/EventBus.ts"
import * as EventBusLayer from "../src/EventBus/EventBusLayer.ts"
import { eventsSkipped, ProcessedEvents } from "../src/EventBus/ProcessedEvents.ts"
import type { AnySubscriber } from "../src/EventBus/Subscription.ts"
import type { AnyJob } from "../src/Job/Job.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import type { Capsule } from "../src/Supervisor/Capsule.ts"
import * as Supervisor from "../src/Supervisor/Supervisor.ts"
import { terminateWhileWaiting } from "./support/connections.ts"
import { eventually } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
/** A fresh routing-key prefix / name per test: the file's tests share one database. */
const unique = (base: string) => `${base}${n++}`

const TestLayer = EventBusLayer.layer.pipe(
  Layer.provideMerge(
    TestDatabase.layer({
      visibilityTimeout: "30 seconds",
      retryBackoff: "200 millis",
      retryBackoffMax: "1 second",
      maxRetries: 3,
      pollingInterval: "50 millis",
      processHeartbeatInterval: "200 millis",
      staleProcessThreshold: "1 second",
      dispatchInterval: "200 millis"
    })
  ),
  Layer.orDie
)

/** Registers the definitions (subscriptions stored), then runs a supervisor on their consumer capsules. */
const startConsumers = <const D extends ReadonlyArray<AnyJob | AnySubscriber>>(
  definitions: D,
  extraCapsules: ReadonlyArray<Capsule> = []
) =>
  Effect.gen(function* () {
    const context = yield* Layer.build(Registry.layer(definitions))
    const registry = Context.get(context, Registry)
    yield* Supervisor.runWith({ capsules: [...consumerCapsules(registry), ...extraCapsules] }).pipe(
      Effect.provide(context),
      Effect.forkScoped
    )
    return registry
  })

const counter = () => {
  const runs: Array<string> = []
  return { runs, record: (id: string) => Effect.sync(() => runs.push(id)) }
}

const archived = (queue: string) =>
  Effect.flatMap(QueueStore, (store) => Effect.map(store.metrics(queue), (m) => m.archiveSize))

/** Log lines (their message text) written while `effect` runs, forked fibers included. */
const captureLogs = Effect.gen(function* () {
  const lines: Array<string> = []
  const capture = Logger.make(({ message }) => {
    lines.push((Array.isArray(message) ? message : [message]).map(String).join(" "))
  })
  const current = yield* Logger.CurrentLoggers
  return {
    lines,
    provide: <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      Effect.provideService(effect, Logger.CurrentLoggers, new Set([...current, capture]))
  }
})

layer(TestLayer, { excludeTestServices: true, timeout: "60 seconds" })("event bus", (it) => {
  describe("publish and fan-out", () => {
    it.effect("one publish matching N subscribers gives N deliveries and each handler runs once", () =>
      Effect.gen(function* () {
        const t = unique("fan")
        const all = counter()
        const star = counter()
        const exact = counter()
        const other = counter()
        const subscribers = [
          EventBus.subscribe(`${t}.orders.#`, (e) => all.record(e.id)),
          EventBus.subscribe(`${t}.orders.*`, (e) => star.record(e.id)),
          EventBus.subscribe(`${t}.orders.created`, (e) => exact.record(e.id)),
          EventBus.subscribe(`${t}.payments.*`, (e) => other.record(e.id))
        ] as const
        yield* startConsumers(subscribers)
        const published = yield* EventBus.publish(`${t}.orders.created`, { orderId: 1 })
        assert.strictEqual(published.queues.length, 3)
        assert.sameMembers(
          [...published.queues],
          subscribers.slice(0, 3).map((s) => s.queue)
        )
        yield* eventually(
          "the three matching handlers ran",
          Effect.sync(() => all.runs.length + star.runs.length + exact.runs.length === 3)
        )
        for (const s of subscribers.slice(0, 3)) {
          yield* eventually(
            `${s.queue} archived its delivery`,
            Effect.map(archived(s.queue), (a) => a === 1)
          )
        }
        yield* Effect.sleep("300 millis")
        assert.deepStrictEqual(all.runs, [published.eventId])
        assert.deepStrictEqual(star.runs, [published.eventId])
        assert.deepStrictEqual(exact.runs, [published.eventId])
        assert.deepStrictEqual(other.runs, [])
        assert.strictEqual(yield* archived(subscribers[3].queue), 0)

        // a deeper key reaches only the # subscriber
        const deep = yield* EventBus.publish(`${t}.orders.line.added`, { line: 2 })
        assert.deepStrictEqual(deep.queues, [subscribers[0].queue])
        yield* eventually(
          "the # handler ran again",
          Effect.sync(() => all.runs.length === 2)
        )
        assert.strictEqual(star.runs.length, 1)
      }).pipe(Effect.scoped)
    )

    it.effect("two subscribers naming one queue share it: one delivery, both handlers run on it", () =>
      Effect.gen(function* () {
        const t = unique("shared")
        const queue = unique("shared_q")
        const a = counter()
        const b = counter()
        const subscribers = [
          EventBus.subscribe(`${t}.orders.#`, (e) => a.record(e.id), { name: `${t}-audit`, queue }),
          EventBus.subscribe(`${t}.orders.created`, (e) => b.record(e.id), { name: `${t}-analytics`, queue })
        ] as const
        const registry = yield* startConsumers(subscribers)
        assert.deepStrictEqual(
          consumerCapsules(registry).map((c) => c.queues),
          [[queue]]
        )
        const published = yield* EventBus.publish(`${t}.orders.created`, { orderId: 7 })
        assert.deepStrictEqual(published.queues, [queue], "one queue, one message")
        yield* eventually(
          "both handlers ran",
          Effect.sync(() => a.runs.length === 1 && b.runs.length === 1)
        )
        yield* eventually(
          "the one delivery is archived",
          Effect.map(archived(queue), (x) => x === 1)
        )
        // a key only the # pattern matches runs only that handler
        yield* EventBus.publish(`${t}.orders.shipped`, { orderId: 7 })
        yield* eventually(
          "the audit handler ran again",
          Effect.sync(() => a.runs.length === 2)
        )
        yield* Effect.sleep("300 millis")
        assert.strictEqual(b.runs.length, 1)
      }).pipe(Effect.scoped)
    )

    it.effect("a publish in a rolled-back transaction delivers nothing", () =>
      Effect.gen(function* () {
        const t = unique("rollback")
        const seen = counter()
        const subscriber = EventBus.subscribe(`${t}.#`, (e) => seen.record(String(e.payload)))
        yield* startConsumers([subscriber])
        const sql = yield* SqlClient.SqlClient
        const exit = yield* sql
          .withTransaction(Effect.andThen(EventBus.publish(`${t}.x`, "rolled back"), Effect.fail("abort" as const)))
          .pipe(Effect.exit)
        assert.isTrue(Exit.isFailure(exit))
        yield* sql.withTransaction(EventBus.publish(`${t}.x`, "committed"))
        yield* eventually(
          "the committed event ran",
          Effect.sync(() => seen.runs.includes("committed"))
        )
        yield* Effect.sleep("300 millis")
        assert.deepStrictEqual(seen.runs, ["committed"])
        const store = yield* QueueStore
        assert.strictEqual((yield* store.metrics(subscriber.queue)).depth, 0)
        assert.strictEqual(yield* archived(subscriber.queue), 1)
      }).pipe(Effect.scoped)
    )

    it.effect("publishMany writes every event to every matching queue in one statement", () =>
      Effect.gen(function* () {
        const t = unique("many")
        const bus = yield* EventBus.EventBus
        const a = EventBus.subscribe(`${t}.a.*`, () => Effect.void)
        const all = EventBus.subscribe(`${t}.#`, () => Effect.void)
        yield* bus.register([a, all])
        const published = yield* EventBus.publishMany([
          { routingKey: `${t}.a.one`, payload: 1 },
          { routingKey: `${t}.b.two`, payload: 2 },
          { routingKey: `${t}.a.three`, payload: 3 }
        ])
        assert.deepStrictEqual(
          published.map((p) => p.queues.length),
          [2, 1, 2]
        )
        const store = yield* QueueStore
        const payloads = (queue: string) =>
          Effect.map(store.browse(queue), (rows) =>
            rows.map((r) => (r.message as { payload: { payload: number } }).payload.payload)
          )
        assert.deepStrictEqual(yield* payloads(a.queue), [1, 3])
        assert.deepStrictEqual(yield* payloads(all.queue), [1, 2, 3])
      })
    )

    it.effect("the message is a pgbus.event job whose envelope carries id, key, time, headers and the payload", () =>
      Effect.gen(function* () {
        const t = unique("envelope")
        const subscriber = EventBus.subscribe(`${t}.created`, () => Effect.void)
        yield* EventBus.register([subscriber])
        const published = yield* EventBus.publish(
          `${t}.created`,
          { orderId: 1 },
          { headers: { source: "checkout" } }
        ).pipe(EventBus.withAttributes({ tenant: "acme" }))
        const store = yield* QueueStore
        const [row] = yield* store.browse(subscriber.queue)
        expect(row?.message).toMatchObject({
          job: "pgbus.event",
          payload: {
            event_id: published.eventId,
            routing_key: `${t}.created`,
            headers: { source: "checkout" },
            payload: { orderId: 1 },
            context: { tenant: "acme" }
          }
        })
        const envelope = (row!.message as { payload: { published_at: string } }).payload
        assert.strictEqual(envelope.published_at, published.publishedAt.toISOString())
      })
    )

    it.effect("a delayed publish is invisible until its time", () =>
      Effect.gen(function* () {
        const t = unique("delay")
        const subscriber = EventBus.subscribe(`${t}.due`, () => Effect.void)
        yield* EventBus.register([subscriber])
        const published = yield* EventBus.publish(`${t}.due`, { invoice: 1 }, { delay: "30 days" })
        const store = yield* QueueStore
        const [row] = yield* store.browse(subscriber.queue)
        const days = (row!.vt.getTime() - published.publishedAt.getTime()) / 86_400_000
        expect(days).toBeCloseTo(30, 3)
        assert.strictEqual((yield* store.metrics(subscriber.queue)).visible, 0)
      })
    )

    it.effect("a fair-share resolver tags the envelope, not the payload", () =>
      Effect.gen(function* () {
        const t = unique("fair")
        const subscriber = EventBus.subscribe(`${t}.created`, () => Effect.void)
        yield* EventBus.register([subscriber])
        yield* EventBus.publish(`${t}.created`, { tenantId: "t-9" }).pipe(
          Effect.provideService(EventBus.FairShare, (event) => [
            String((event.payload as { tenantId: string }).tenantId),
            2
          ])
        )
        const store = yield* QueueStore
        const [row] = yield* store.browse(subscriber.queue)
        expect(row?.message).toMatchObject({
          payload: { fair_key: "t-9", fair_weight: 2, payload: { tenantId: "t-9" } }
        })
      })
    )

    it.effect("a publisher that does not load the handlers routes by the stored subscriptions", () =>
      Effect.gen(function* () {
        const t = unique("remote")
        const subscriber = EventBus.subscribe(`${t}.orders.#`, () => Effect.void)
        yield* EventBus.register([subscriber])
        // another process: its own bus instance, nothing registered, an empty cache
        const other = yield* Layer.build(Layer.fresh(EventBus.EventBus.layer))
        const published = yield* Context.get(other, EventBus.EventBus).publish(`${t}.orders.created`, {})
        assert.deepStrictEqual(published.queues, [subscriber.queue])
        assert.deepStrictEqual(yield* Context.get(other, EventBus.EventBus).routes(`${t}.payments.x`), [])
        // a key nobody subscribed to is published to no queue, and that is not an error
        const nowhere = yield* EventBus.publish(`${t}.nobody.listens`, {})
        assert.deepStrictEqual(nowhere.queues, [])
      }).pipe(Effect.scoped)
    )
  })

  describe("bad input", () => {
    it.effect("a bad payload fails with InvalidEventPayload and writes nothing", () =>
      Effect.gen(function* () {
        const t = unique("bad")
        const OrderCreated = Event.make(`${t}.created`, Schema.Struct({ orderId: Schema.Int }))
        const subscriber = EventBus.subscribe(OrderCreated, () => Effect.void)
        yield* EventBus.register([subscriber])
        const typed = yield* OrderCreated.publish({ orderId: 1.5 }).pipe(Effect.flip)
        assert.strictEqual(typed._tag, "InvalidEventPayload")
        const notJson = yield* EventBus.publish(`${t}.created`, { big: 1n }).pipe(Effect.flip)
        assert.strictEqual(notJson._tag, "InvalidEventPayload")
        const undefinedPayload = yield* EventBus.publish(`${t}.created`, undefined).pipe(Effect.flip)
        assert.strictEqual(undefinedPayload._tag, "InvalidEventPayload")
        const tooLarge = yield* EventBus.publish(`${t}.created`, { blob: "x".repeat(200_000) }).pipe(Effect.flip)
        assert.strictEqual(tooLarge._tag, "InvalidEventPayload")
        const badHeaders = yield* EventBus.publish(`${t}.created`, {}, { headers: [] as never }).pipe(Effect.flip)
        assert.strictEqual(badHeaders._tag, "InvalidEventPayload")
        const badKey = yield* EventBus.publish(`${t}.*`, {}).pipe(Effect.flip)
        assert.strictEqual(badKey._tag, "InvalidRoutingKey")
        // one bad event in a batch: nothing of the batch is written
        const batch = yield* EventBus.publishMany([
          { routingKey: `${t}.created`, payload: { orderId: 1 } },
          { routingKey: `${t}..created`, payload: { orderId: 2 } }
        ]).pipe(Effect.flip)
        assert.strictEqual(batch._tag, "InvalidRoutingKey")
        const store = yield* QueueStore
        assert.strictEqual((yield* store.metrics(subscriber.queue)).depth, 0)
      })
    )

    it.effect("bad definitions are refused where they are written, duplicates where they are registered", () =>
      Effect.gen(function* () {
        assert.throws(() => Event.make("orders.*", Schema.String), /invalid routing key/)
        assert.throws(() => EventBus.subscribe("orders..x", () => Effect.void), /invalid subscriber/)
        assert.throws(() => EventBus.subscribe("orders.#", () => Effect.void, { queue: "Bad-Queue" }), /queue/)
        assert.throws(() => EventBus.subscribe("orders.#", () => Effect.void, { queue: "x_dlq" }), /dead-letter/)
        assert.throws(() => EventBus.subscribe("orders.#", () => Effect.void, { concurrency: 0 }), /concurrency/)
        assert.throws(
          () => EventBus.subscribe("orders.#", () => Effect.void, { retries: 3 } as never),
          /unknown option retries/
        )
        const t = unique("dup")
        const twice = yield* Layer.build(
          Registry.layer([
            EventBus.subscribe(`${t}.a`, () => Effect.void),
            EventBus.subscribe(`${t}.a`, () => Effect.void)
          ])
        ).pipe(Effect.flip)
        assert.strictEqual(twice._tag, "InvalidSubscriberDefinition")
      }).pipe(Effect.scoped)
    )
  })

  describe("consumers", () => {
    it.effect("a declared event is encoded at publish and decoded for its subscriber", () =>
      Effect.gen(function* () {
        const t = unique("typed")
        const Shipped = Event.make(`${t}.shipped`, Schema.Struct({ weight: Schema.FiniteFromString }))
        const seen: Array<number> = []
        const subscriber = EventBus.subscribe(Shipped, (event) => Effect.sync(() => seen.push(event.payload.weight)))
        yield* EventBus.register([subscriber])
        yield* Shipped.publish({ weight: 2.5 })
        const store = yield* QueueStore
        const [stored] = yield* store.browse(subscriber.queue)
        expect(stored?.message).toMatchObject({ payload: { payload: { weight: "2.5" } } })
        yield* startConsumers([subscriber])
        yield* eventually(
          "the handler got the decoded payload",
          Effect.sync(() => seen.length === 1)
        )
        assert.deepStrictEqual(seen, [2.5])
      }).pipe(Effect.scoped)
    )

    it.effect("current attributes captured at publish are provided around the handler", () =>
      Effect.gen(function* () {
        const t = unique("attrs")
        const seen: Array<unknown> = []
        const subscriber = EventBus.subscribe(`${t}.created`, (event) =>
          Effect.gen(function* () {
            const current = yield* EventBus.CurrentAttributes
            seen.push({ context: event.context, current })
          })
        )
        yield* startConsumers([subscriber])
        yield* EventBus.publish(`${t}.created`, {}).pipe(EventBus.withAttributes({ tenant: "acme", user: "ada" }))
        yield* eventually(
          "the handler ran",
          Effect.sync(() => seen.length === 1)
        )
        assert.deepStrictEqual(seen, [
          { context: { tenant: "acme", user: "ada" }, current: { tenant: "acme", user: "ada" } }
        ])
      }).pipe(Effect.scoped)
    )

    it.effect("a message in a queue no registered subscriber owns is archived, logged once per queue and counted", () =>
      Effect.gen(function* () {
        const t = unique("stale")
        // a subscription left behind by a handler that was removed from the code
        const removed = EventBus.subscribe(`${t}.orders.#`, () => Effect.void, { name: `${t}-removed` })
        yield* EventBus.register([removed])
        const logs = yield* captureLogs
        const live = EventBus.subscribe(`${t}.live`, () => Effect.void)
        const unrouted = eventsUnrouted.pipe(Metric.withAttributes({ queue: removed.queue }))
        const before = (yield* Metric.value(unrouted)).count
        // this process still reads the old queue (a capsule names it) but has no subscriber for it
        yield* logs.provide(startConsumers([live], [{ name: "stale", queues: [removed.queue], concurrency: 1 }]))
        yield* EventBus.publish(`${t}.orders.created`, { n: 1 })
        yield* EventBus.publish(`${t}.orders.created`, { n: 2 })
        yield* eventually(
          "both archived",
          Effect.map(archived(removed.queue), (x) => x === 2)
        )
        assert.strictEqual((yield* Metric.value(unrouted)).count - before, 2)
        assert.strictEqual(logs.lines.filter((l) => l.includes(`queue ${removed.queue} have no subscriber`)).length, 1)
        const store = yield* QueueStore
        assert.strictEqual((yield* store.browse(`${removed.queue}_dlq`)).length, 0)
      }).pipe(Effect.scoped)
    )

    it.effect("a failing subscriber is retried, then dead-lettered with source consumer", () =>
      Effect.gen(function* () {
        const t = unique("dlq")
        const attempts: Array<number> = []
        const subscriber = EventBus.subscribe(`${t}.fails`, (event) =>
          Effect.sync(() => attempts.push(event.attempt)).pipe(Effect.andThen(Effect.fail(new Error("handler broke"))))
        )
        yield* startConsumers([subscriber])
        const published = yield* EventBus.publish(`${t}.fails`, { n: 1 })
        const store = yield* QueueStore
        yield* eventually(
          "dead-lettered",
          Effect.map(store.browse(`${subscriber.queue}_dlq`), (rows) => rows.length === 1)
        )
        assert.deepStrictEqual(attempts, [1, 2, 3])
        const [dead] = yield* store.browse(`${subscriber.queue}_dlq`)
        expect(dead?.message).toMatchObject({ job: "pgbus.event", payload: { event_id: published.eventId } })
        expect(store.deadLetterOf(dead!).deadLetter).toMatchObject({
          reason: "max_retries_exceeded",
          source: "consumer",
          attempts: 3,
          error_class: "Error",
          error_message: "handler broke"
        })
      }).pipe(Effect.scoped)
    )
  })

  describe("idempotent handlers", () => {
    it.effect("a second delivery of a completed event is skipped", () =>
      Effect.gen(function* () {
        const t = unique("idem")
        const seen = counter()
        const subscriber = EventBus.subscribe(`${t}.created`, (e) => seen.record(e.id), { idempotent: true })
        const plain = counter()
        const notIdempotent = EventBus.subscribe(`${t}.created`, (e) => plain.record(e.id), { name: `${t}-plain` })
        yield* startConsumers([subscriber, notIdempotent])
        const eventId = crypto.randomUUID()
        const skipped = eventsSkipped.pipe(Metric.withAttributes({ subscriber: subscriber.name, reason: "completed" }))
        const before = (yield* Metric.value(skipped)).count
        // the same event twice (an outbox relay retried after a crash does exactly this)
        yield* EventBus.publish(`${t}.created`, { n: 1 }, { eventId })
        yield* eventually(
          "the first delivery ran",
          Effect.sync(() => seen.runs.length === 1)
        )
        yield* EventBus.publish(`${t}.created`, { n: 1 }, { eventId })
        yield* eventually(
          "both deliveries archived",
          Effect.map(archived(subscriber.queue), (x) => x === 2)
        )
        assert.deepStrictEqual(seen.runs, [eventId])
        assert.deepStrictEqual(plain.runs, [eventId, eventId], "a handler that is not idempotent runs each delivery")
        assert.strictEqual((yield* Metric.value(skipped)).count - before, 1)
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{
          readonly completed: boolean
        }>`SELECT completed_at IS NOT NULL AS completed FROM pgbus.processed_events
           WHERE event_id = ${eventId}::uuid AND handler = ${subscriber.name}`
        assert.deepStrictEqual(rows, [{ completed: true }])

        // a new process has no cache: the skip comes from the table
        const fresh = yield* Layer.build(Layer.fresh(ProcessedEvents.layer))
        const again = yield* Context.get(fresh, ProcessedEvents).run(eventId, subscriber.name, Effect.succeed("ran"))
        assert.deepStrictEqual(again, { _tag: "Skipped", reason: "completed" })
      }).pipe(Effect.scoped)
    )

    it.effect("a live holder's duplicate is skipped (reason owned) and later archived as done", () =>
      Effect.gen(function* () {
        const t = unique("owned")
        const gate = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const runs = counter()
        const subscriber = EventBus.subscribe(
          `${t}.created`,
          (e) =>
            runs
              .record(e.id)
              .pipe(Effect.andThen(Deferred.succeed(started, undefined)), Effect.andThen(Deferred.await(gate))),
          { idempotent: true, concurrency: 2 }
        )
        const logs = yield* captureLogs
        const owned = eventsSkipped.pipe(Metric.withAttributes({ subscriber: subscriber.name, reason: "owned" }))
        const before = (yield* Metric.value(owned)).count
        yield* logs.provide(startConsumers([subscriber]))
        const eventId = crypto.randomUUID()
        yield* EventBus.publish(`${t}.created`, {}, { eventId })
        yield* Deferred.await(started)
        // the duplicate arrives while the first is still running (and beating)
        yield* EventBus.publish(`${t}.created`, {}, { eventId })
        yield* eventually(
          "the duplicate met the live claim",
          Effect.map(Metric.value(owned), (m) => m.count - before >= 1)
        )
        assert.deepStrictEqual(runs.runs, [eventId], "the handler did not run alongside the holder")
        assert.isTrue(logs.lines.some((l) => l.includes("event_skipped")))
        yield* Deferred.succeed(gate, undefined)
        yield* eventually(
          "both deliveries archived",
          Effect.map(archived(subscriber.queue), (x) => x === 2)
        )
        assert.deepStrictEqual(runs.runs, [eventId], "exactly one run")
      }).pipe(Effect.scoped)
    )

    it.effect("a pending claim gone quiet (its holder died mid-handler) is run again", () =>
      Effect.gen(function* () {
        const t = unique("quiet")
        const runs = counter()
        const subscriber = EventBus.subscribe(`${t}.created`, (e) => runs.record(e.id), { idempotent: true })
        const processed = yield* ProcessedEvents
        const eventId = crypto.randomUUID()
        // what a process killed mid-handler leaves: a pending claim that stops beating
        const dead = yield* Layer.build(Layer.fresh(ProcessedEvents.layer))
        const claim = yield* Context.get(dead, ProcessedEvents).claim(eventId, subscriber.name)
        assert.deepStrictEqual(claim, { _tag: "Claimed", takenOver: false })
        // while it is fresh, another holder is refused
        assert.strictEqual((yield* processed.claim(eventId, subscriber.name))._tag, "Owned")
        yield* startConsumers([subscriber])
        yield* EventBus.publish(`${t}.created`, {}, { eventId })
        yield* eventually(
          "the handler ran once the claim went quiet",
          Effect.sync(() => runs.runs.length === 1),
          "15 seconds"
        )
        yield* eventually(
          "archived",
          Effect.map(archived(subscriber.queue), (x) => x === 1)
        )
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ readonly claimed_by: string; readonly completed: boolean }>`
          SELECT claimed_by, completed_at IS NOT NULL AS completed FROM pgbus.processed_events
          WHERE event_id = ${eventId}::uuid AND handler = ${subscriber.name}`
        assert.deepStrictEqual(rows, [{ claimed_by: processed.holder, completed: true }])
        assert.deepStrictEqual(runs.runs, [eventId])
      }).pipe(Effect.scoped)
    )

    it.effect("a failed handler gives its claim up, so the retry runs at once", () =>
      Effect.gen(function* () {
        const t = unique("release")
        let calls = 0
        const subscriber = EventBus.subscribe(
          `${t}.created`,
          () =>
            Effect.suspend(() => {
              calls++
              return calls === 1 ? Effect.fail(new Error("first time fails")) : Effect.void
            }),
          { idempotent: true }
        )
        yield* startConsumers([subscriber])
        yield* EventBus.publish(`${t}.created`, {})
        yield* eventually(
          "archived after the retry",
          Effect.map(archived(subscriber.queue), (x) => x === 1)
        )
        assert.strictEqual(calls, 2)
      }).pipe(Effect.scoped)
    )

    it.effect("a completion sent again (its first reply lost) is ours; a claim taken over is not", () =>
      Effect.gen(function* () {
        const processed = yield* ProcessedEvents
        const eventId = crypto.randomUUID()
        assert.deepStrictEqual(yield* processed.claim(eventId, "complete-twice"), { _tag: "Claimed", takenOver: false })
        assert.isTrue(yield* processed.complete(eventId, "complete-twice"))
        assert.isTrue(yield* processed.complete(eventId, "complete-twice"), "the retry of a completion that committed")
        const other = yield* Layer.build(Layer.fresh(ProcessedEvents.layer))
        assert.isFalse(yield* Context.get(other, ProcessedEvents).complete(eventId, "complete-twice"))
      }).pipe(Effect.scoped)
    )

    it.effect("every connection terminated while handlers complete their claims: each handler ran once", () =>
      Effect.gen(function* () {
        const t = unique("connkill")
        const gate = yield* Deferred.make<void>()
        const runs = new Map<string, number>()
        const subscriber = EventBus.subscribe(
          `${t}.created`,
          (e) =>
            Effect.sync(() => runs.set(e.id, (runs.get(e.id) ?? 0) + 1)).pipe(Effect.andThen(Deferred.await(gate))),
          { idempotent: true, concurrency: 5 }
        )
        yield* startConsumers([subscriber])
        const ids = Array.from({ length: 5 }, () => crypto.randomUUID())
        yield* Effect.forEach(ids, (eventId) => EventBus.publish(`${t}.created`, {}, { eventId }))
        yield* eventually(
          "every handler claimed its event and runs",
          Effect.sync(() => runs.size === ids.length)
        )
        // the handlers return while processed_events is locked: their completions wait on it, in
        // flight, when every other connection is terminated
        const blocked = yield* terminateWhileWaiting("pgbus.processed_events", Deferred.succeed(gate, undefined))
        assert.isAbove(blocked, 0, "a statement in flight was terminated")
        yield* eventually(
          "every delivery archived",
          archived(subscriber.queue).pipe(
            Effect.map((x) => x === ids.length),
            Effect.orElseSucceed(() => false)
          ),
          "20 seconds"
        )
        const sql = yield* SqlClient.SqlClient
        const done = yield* sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pgbus.processed_events
          WHERE handler = ${subscriber.name} AND completed_at IS NOT NULL`
        assert.strictEqual(done[0]!.n, ids.length, "every claim completed")
        assert.deepStrictEqual(
          ids.map((id) => runs.get(id)),
          ids.map(() => 1),
          "each handler ran once"
        )
      }).pipe(
        Effect.scoped,
        // a delivery whose archive was lost with its connection comes back after the visibility timeout
        Effect.provide(
          EventBusLayer.layer.pipe(
            Layer.provideMerge(
              TestDatabase.layer({
                visibilityTimeout: "2 seconds",
                retryBackoff: "200 millis",
                retryBackoffMax: "1 second",
                maxRetries: 10,
                pollingInterval: "50 millis",
                processHeartbeatInterval: "200 millis",
                staleProcessThreshold: "1 second",
                dispatchInterval: "200 millis"
              })
            ),
            Layer.orDie
          ),
          { local: true }
        )
      )
    )

    it.effect("the purge deletes records older than idempotencyTtl", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const old = crypto.randomUUID()
        const recent = crypto.randomUUID()
        const stale = crypto.randomUUID()
        yield* sql`INSERT INTO pgbus.processed_events (event_id, handler, claimed_by, claimed_at, heartbeat_at, completed_at)
          VALUES (${old}::uuid, 'purge-test', 'x', now() - interval '9 days', now() - interval '9 days', now() - interval '8 days'),
                 (${recent}::uuid, 'purge-test', 'x', now(), now(), now()),
                 (${stale}::uuid, 'purge-test', 'x', now() - interval '9 days', now() - interval '8 days', NULL)`
        const deleted = yield* Effect.flatMap(ProcessedEvents, (p) => p.purge)
        assert.isAtLeast(deleted, 2)
        const left = yield* sql<{
          readonly event_id: string
        }>`SELECT event_id::text FROM pgbus.processed_events WHERE handler = 'purge-test'`
        assert.deepStrictEqual(
          left.map((r) => r.event_id),
          [recent]
        )
      })
    )
  })
})
