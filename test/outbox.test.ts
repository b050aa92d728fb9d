/** The transactional outbox against the real database: writes, the poller, a separate bus database. */
import { assert, describe, expect, it, layer } from "@effect/vitest"
import { Cause, Context, Deferred, Effect, Exit, Layer, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../src/Config.ts"
import type { DatabaseError } from "../src/Database.ts"
import { consumerCapsules } from "../src/EventBus/Consumer.ts"
import * as Event from "../src/EventBus/Event.ts"
import * as EventBus from "../src/EventBus/EventBus.ts"
import * as EventBusLayer from "../src/EventBus/EventBusLayer.ts"
import * as Outbox from "../src/EventBus/Outbox.ts"
import * as Job from "../src/Job/Job.ts"
import * as PgBus from "../src/PgBus.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import * as Supervisor from "../src/Supervisor/Supervisor.ts"
import { terminateWhileWaiting } from "./support/connections.ts"
import { eventually } from "./support/jobs.ts"
import { urlFor } from "./support/server.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const unique = (base: string) => `${base}${n++}`

const settings = {
  pollingInterval: "50 millis",
  outboxEnabled: true,
  outboxPollInterval: "50 millis",
  outboxBatchSize: 50
} as const

const TestLayer = EventBusLayer.layer.pipe(Layer.provideMerge(TestDatabase.layer(settings)), Layer.orDie)

const pending = Effect.flatMap(Outbox.Outbox, (o) => o.pending)

/** Runs cycles until one finds nothing to claim; returns how many entries this poller published. */
const drain = (outbox: Outbox.Outbox["Service"]) =>
  Effect.gen(function* () {
    let published = 0
    while (true) {
      const report = yield* outbox.runOnce
      published += report.published
      if (report.claimed === 0) return published
    }
  })

const eventIdsIn = (queue: string) =>
  Effect.flatMap(QueueStore, (store) =>
    Effect.map(store.browse(queue, { limit: 5_000 }), (rows) =>
      rows.map((r) => (r.message as { payload: { event_id: string } }).payload.event_id)
    )
  )

layer(TestLayer, { excludeTestServices: true, timeout: "60 seconds" })("outbox", (it) => {
  it.effect("an outbox entry commits with the caller's row, or rolls back with it", () =>
    Effect.gen(function* () {
      const t = unique("commit")
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE ${sql(`orders_${t}`)} (id int PRIMARY KEY)`
      const subscriber = EventBus.subscribe(`${t}.orders.created`, () => Effect.void)
      yield* EventBus.register([subscriber])
      const before = yield* pending

      const entry = yield* sql.withTransaction(
        Effect.gen(function* () {
          yield* sql`INSERT INTO ${sql(`orders_${t}`)} (id) VALUES (1)`
          return yield* Outbox.publishEvent(`${t}.orders.created`, { orderId: 1 })
        })
      )
      assert.strictEqual(yield* pending, before + 1)

      const rolledBack = yield* sql
        .withTransaction(
          Effect.gen(function* () {
            yield* sql`INSERT INTO ${sql(`orders_${t}`)} (id) VALUES (2)`
            yield* Outbox.publishEvent(`${t}.orders.created`, { orderId: 2 })
            return yield* Effect.fail("payment declined" as const)
          })
        )
        .pipe(Effect.exit)
      assert.isTrue(Exit.isFailure(rolledBack))
      assert.strictEqual(yield* pending, before + 1, "the rolled-back entry is gone with its order")
      const orders = yield* sql<{ readonly id: number }>`SELECT id FROM ${sql(`orders_${t}`)}`
      assert.deepStrictEqual(
        orders.map((o) => o.id),
        [1]
      )

      const report = yield* Outbox.runOnce
      assert.strictEqual(report.failed.length, 0)
      assert.strictEqual(yield* pending, 0)
      assert.deepStrictEqual(yield* eventIdsIn(subscriber.queue), [entry.eventId!])
    })
  )

  it.effect("two pollers never publish one entry twice (1,000 entries, each delivered exactly once)", () =>
    Effect.gen(function* () {
      const t = unique("race")
      const sql = yield* SqlClient.SqlClient
      const subscriber = EventBus.subscribe(`${t}.n`, () => Effect.void)
      const queueSub = `${t}_plain`
      yield* EventBus.register([subscriber])
      const written: Array<string> = []
      for (let chunk = 0; chunk < 10; chunk++) {
        yield* sql.withTransaction(
          Effect.forEach(
            Array.from({ length: 100 }, (_, i) => chunk * 100 + i),
            (i) =>
              i % 2 === 0
                ? Effect.map(Outbox.publishEvent(`${t}.n`, { i }), (e) => written.push(e.eventId!))
                : Effect.asVoid(Outbox.publish(queueSub, { i })),
            { discard: true }
          )
        )
      }
      assert.strictEqual(yield* pending, 1_000)
      // two pollers, as two processes would have: their own services, their own connections
      const a = Context.get(yield* Layer.build(Layer.fresh(Outbox.Outbox.layer)), Outbox.Outbox)
      const b = Context.get(yield* Layer.build(Layer.fresh(Outbox.Outbox.layer)), Outbox.Outbox)
      const [byA, byB] = yield* Effect.all([drain(a), drain(b)], { concurrency: 2 })
      assert.strictEqual(byA + byB, 1_000)
      assert.isAbove(byA, 0, "both pollers took part")
      assert.isAbove(byB, 0, "both pollers took part")
      assert.strictEqual(yield* pending, 0)

      const delivered = yield* eventIdsIn(subscriber.queue)
      assert.strictEqual(delivered.length, 500)
      assert.strictEqual(new Set(delivered).size, 500, "no event delivered twice")
      assert.sameMembers(delivered, written)
      const store = yield* QueueStore
      const plain = yield* store.browse(queueSub, { limit: 5_000 })
      const values = plain.map((m) => (m.message as { i: number }).i).sort((x, y) => x - y)
      assert.deepStrictEqual(
        values,
        Array.from({ length: 500 }, (_, i) => i * 2 + 1)
      )
    }).pipe(Effect.scoped)
  )

  it.effect("a failed entry stays for the next cycle; the rest of its batch is published", () =>
    Effect.gen(function* () {
      const t = unique("fail")
      const sql = yield* SqlClient.SqlClient
      const queue = `${t}_ok`
      // written by another system, straight into the table: a queue name the bus refuses
      const [bad] = yield* sql<{ readonly id: bigint }>`INSERT INTO pgbus.outbox_entries (kind, queue, payload)
        VALUES ('queue', 'Not-A-Queue', '{"x": 1}'::jsonb) RETURNING id`
      yield* Outbox.publish(queue, { x: 2 })
      const first = yield* Outbox.runOnce
      assert.strictEqual(first.published, 1)
      assert.deepStrictEqual(
        first.failed.map((f) => f.id),
        [bad!.id]
      )
      assert.include(first.failed[0]!.error, "InvalidQueueName")
      const [row] = yield* sql<{
        readonly attempts: number
        readonly last_error: string
        readonly published: boolean
      }>`SELECT attempts, last_error, published_at IS NOT NULL AS published FROM pgbus.outbox_entries WHERE id = ${bad!.id}`
      expect(row).toMatchObject({ attempts: 1, published: false })
      assert.include(row!.last_error, "InvalidQueueName")

      yield* sql`UPDATE pgbus.outbox_entries SET queue = ${queue} WHERE id = ${bad!.id}`
      const second = yield* Outbox.runOnce
      assert.strictEqual(second.published, 1)
      assert.strictEqual(yield* pending, 0)
      const store = yield* QueueStore
      assert.sameMembers(
        (yield* store.browse(queue)).map((m) => (m.message as { x: number }).x),
        [1, 2]
      )
    })
  )

  it.effect("bad input fails with a typed error and writes nothing", () =>
    Effect.gen(function* () {
      const t = unique("bad")
      const before = yield* pending
      const Created = Event.make(`${t}.created`, Schema.Struct({ id: Schema.Int }))
      const typed = yield* Outbox.publishEvent(Created, { id: 0.5 }).pipe(Effect.flip)
      assert.strictEqual(typed._tag, "InvalidEventPayload")
      const key = yield* Outbox.publishEvent(`${t}.#`, {}).pipe(Effect.flip)
      assert.strictEqual(key._tag, "InvalidRoutingKey")
      const queue = yield* Outbox.publish("Bad Queue", {}).pipe(Effect.flip)
      assert.strictEqual(queue._tag, "InvalidQueueName")
      const notJson = yield* Outbox.publish(`${t}_q`, { n: 1n }).pipe(Effect.flip)
      assert.strictEqual(notJson._tag, "InvalidMessage")
      const Typed = Job.make(
        "OutboxTyped",
        { payload: Schema.Struct({ id: Schema.Int }), queue: `${t}_q` },
        () => Effect.void
      )
      const job = yield* Outbox.enqueue(Typed, { id: 0.5 }).pipe(Effect.flip)
      assert.strictEqual(job._tag, "InvalidPayload")
      assert.strictEqual(yield* pending, before)
    })
  )

  it.effect("published entries are purged after outboxRetention, unpublished ones are kept", () =>
    Effect.gen(function* () {
      const t = unique("purge")
      const sql = yield* SqlClient.SqlClient
      const old = yield* Outbox.publish(`${t}_q`, { age: "old" })
      const recent = yield* Outbox.publish(`${t}_q`, { age: "recent" })
      yield* Outbox.runOnce
      const waiting = yield* Outbox.publish(`${t}_q`, { age: "waiting" })
      yield* sql`UPDATE pgbus.outbox_entries SET published_at = now() - interval '2 days' WHERE id = ${old.id}`
      const deleted = yield* Outbox.purge
      assert.isAtLeast(deleted, 1)
      const left = yield* sql<{ readonly id: bigint }>`SELECT id FROM pgbus.outbox_entries
        WHERE id IN (${old.id}, ${recent.id}, ${waiting.id}) ORDER BY id`
      assert.deepStrictEqual(
        left.map((r) => r.id),
        [recent.id, waiting.id]
      )
      yield* Outbox.runOnce
    })
  )

  it.effect("the poller role relays jobs and events written in transactions while workers run them", () =>
    Effect.gen(function* () {
      const t = unique("poller")
      const ran: Array<string> = []
      const Mail = Job.make(
        "OutboxMail",
        { payload: Schema.Struct({ to: Schema.String }), queue: `${t}_mail` },
        ({ to }) => Effect.sync(() => ran.push(`job:${to}`))
      )
      const subscriber = EventBus.subscribe(`${t}.signed_up`, (e) =>
        Effect.sync(() => ran.push(`event:${(e.payload as { to: string }).to}`))
      )
      const context = yield* Layer.build(Registry.layer([Mail, subscriber]))
      yield* Supervisor.runWith({
        capsules: [
          ...consumerCapsules(Context.get(context, Registry)),
          { name: "mail", queues: [`${t}_mail`], concurrency: 1 }
        ]
      }).pipe(Effect.provide(context), Effect.forkScoped)
      yield* Outbox.pollerRole.pipe(Effect.forkScoped)
      const sql = yield* SqlClient.SqlClient
      yield* sql.withTransaction(
        Effect.all([Outbox.enqueue(Mail, { to: "ada" }), Outbox.publishEvent(`${t}.signed_up`, { to: "ada" })])
      )
      yield* eventually(
        "the job and the handler ran",
        Effect.sync(() => ran.length === 2)
      )
      assert.sameMembers(ran, ["job:ada", "event:ada"])
    }).pipe(Effect.scoped)
  )
})

describe("outbox under connection loss", () => {
  it.live("every connection terminated while the poller relays: each entry is relayed once, none is left", () =>
    Effect.gen(function* () {
      const t = unique("connkill")
      const subscriber = EventBus.subscribe(`${t}.created`, () => Effect.void)
      yield* EventBus.register([subscriber])
      const store = yield* QueueStore
      const raw = `${t}_raw`
      yield* store.create(raw)
      const sql = yield* SqlClient.SqlClient
      const entries = yield* sql.withTransaction(
        Effect.forEach(
          Array.from({ length: 60 }, (_, i) => i),
          (i) => Effect.zip(Outbox.publishEvent(`${t}.created`, { i }), Outbox.publish(raw, { i }))
        )
      )
      // the subscriber queue is locked so that the poller's relay waits on it, in flight, inside
      // its transaction; then every other connection is terminated. The poller is forked outside
      // the locking transaction (so that it does not use its connection) and starts once locked.
      const locked = yield* Deferred.make<void>()
      yield* Deferred.await(locked).pipe(Effect.andThen(Outbox.pollerRole), Effect.forkScoped)
      const blocked = yield* terminateWhileWaiting(
        `pgbus.q_pgbus_${subscriber.queue}`,
        Deferred.succeed(locked, undefined)
      )
      assert.isAbove(blocked, 0, "a statement in flight was terminated")
      yield* eventually(
        "every entry relayed",
        pending.pipe(
          Effect.map((n) => n === 0),
          Effect.orElseSucceed(() => false)
        ),
        "20 seconds"
      )
      const events = yield* eventIdsIn(subscriber.queue)
      assert.deepStrictEqual(events.toSorted(), entries.map(([e]) => e.eventId!).toSorted(), "each event once")
      const messages = yield* store.browse(raw, { limit: 1_000 })
      assert.deepStrictEqual(
        messages.map((m) => (m.message as { i: number }).i).toSorted((a, b) => a - b),
        entries.map((_, i) => i),
        "each message once"
      )
    }).pipe(
      Effect.scoped,
      Effect.provide(EventBusLayer.layer.pipe(Layer.provideMerge(TestDatabase.layer(settings)), Layer.orDie))
    )
  )

  it.live("a cycle whose connection is terminated fails with a retryable DatabaseError; the next relays", () =>
    Effect.gen(function* () {
      const t = unique("cyclekill")
      const subscriber = EventBus.subscribe(`${t}.created`, () => Effect.void)
      yield* EventBus.register([subscriber])
      yield* Outbox.publishEvent(`${t}.created`, { i: 1 })
      const outbox = yield* Outbox.Outbox
      const cycle = yield* Deferred.make<Exit.Exit<Outbox.OutboxReport, DatabaseError>>()
      const locked = yield* Deferred.make<void>()
      yield* Deferred.await(locked).pipe(
        Effect.andThen(Effect.exit(outbox.runOnce)),
        Effect.flatMap((e) => Deferred.succeed(cycle, e)),
        Effect.forkScoped
      )
      const blocked = yield* terminateWhileWaiting(
        `pgbus.q_pgbus_${subscriber.queue}`,
        Deferred.succeed(locked, undefined)
      )
      assert.isAbove(blocked, 0, "a statement in flight was terminated")
      const exit = yield* Deferred.await(cycle)
      const error = Exit.isFailure(exit) ? Cause.findErrorOption(exit.cause) : Option.none()
      assert.isTrue(
        Option.isSome(error) && error.value.retryable,
        `a typed, retryable DatabaseError, not ${Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "success"}`
      )
      assert.strictEqual(yield* pending, 1, "nothing marked")
      assert.strictEqual((yield* outbox.runOnce).published, 1)
      assert.strictEqual((yield* eventIdsIn(subscriber.queue)).length, 1)
    }).pipe(
      Effect.scoped,
      Effect.provide(EventBusLayer.layer.pipe(Layer.provideMerge(TestDatabase.layer(settings)), Layer.orDie))
    )
  )
})

describe("outbox with a separate bus database", () => {
  it.live("the poller relays committed entries to the bus's database, not the app's", () =>
    Effect.gen(function* () {
      const appUrl = urlFor(yield* TestDatabase.freshDatabase)
      const busUrl = urlFor(yield* TestDatabase.freshDatabase)
      const bus = yield* Layer.build(
        EventBusLayer.layer.pipe(
          Layer.provideMerge(PgBus.layerFrom(PgBusConfig.layerWithoutEnvironment({ databaseUrl: busUrl }))),
          Layer.orDie
        )
      )
      const app = yield* Layer.build(
        EventBusLayer.layer.pipe(
          Layer.provideMerge(
            PgBus.layerFrom(PgBusConfig.layerWithoutEnvironment({ databaseUrl: appUrl, busDatabaseUrl: busUrl }))
          ),
          Layer.orDie
        )
      )
      // the handlers' process registered its subscription on the bus
      const subscriber = EventBus.subscribe("split.orders.created", () => Effect.void)
      yield* EventBus.register([subscriber]).pipe(Effect.provide(bus))

      const written = yield* Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        return yield* sql.withTransaction(
          Effect.all([
            Outbox.publishEvent("split.orders.created", { orderId: 1 }),
            Outbox.publish("split_plain", { x: 1 })
          ])
        )
      }).pipe(Effect.provide(app))
      const report = yield* Outbox.runOnce.pipe(Effect.provide(app))
      assert.strictEqual(report.published, 2)

      const onBus = yield* Effect.gen(function* () {
        const store = yield* QueueStore
        return {
          events: yield* eventIdsIn(subscriber.queue),
          plain: (yield* store.browse("split_plain")).map((m) => m.message)
        }
      }).pipe(Effect.provide(bus))
      assert.deepStrictEqual(onBus, { events: [written[0].eventId!], plain: [{ x: 1 }] })

      const onApp = yield* Effect.flatMap(QueueStore, (store) => Effect.flip(store.metrics("split_plain"))).pipe(
        Effect.provide(app)
      )
      assert.strictEqual(onApp._tag, "QueueNotFound", "nothing was sent to the app's database")
    }).pipe(Effect.scoped)
  )
})
