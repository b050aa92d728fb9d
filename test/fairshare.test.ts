/** Fair share across tenants: the tag at enqueue and publish, the fair read, the worker, the index. */
import { assert, describe, layer, it as plain } from "@effect/vitest"
import { Deferred, Effect, Fiber, Schema } from "effect"
import { SqlClient } from "effect/sql"
import fc from "fast-check"
import type { FairShareKey, JobFairShareInput } from "../src/Config.ts"
import * as EventBus from "../src/EventBus/EventBus.ts"
import { Outbox } from "../src/EventBus/Outbox.ts"
import * as Job from "../src/Job/Job.ts"
import { FAIR_KEY_FIELD, FAIR_WEIGHT_FIELD, type FairCandidate, FairCursor, fairOrder } from "../src/Queue/FairShare.ts"
import type { Message } from "../src/Queue/Message.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import * as Supervisor from "../src/Supervisor/Supervisor.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const unique = (base: string) => `${base}_${n++}`

const Payload = Schema.Struct({
  tenant: Schema.String,
  i: Schema.Number,
  weight: Schema.optionalKey(Schema.Number),
  boom: Schema.optionalKey(Schema.Boolean)
})
type Payload = typeof Payload.Type

/** The jobs' resolver of these tests: the payload's tenant, with its weight when it names one. */
const byTenant = (job: JobFairShareInput): FairShareKey => {
  const p = job.payload as Payload
  if (p.boom === true) throw new Error("no tenant in scope")
  if (p.tenant === "-") return undefined
  return p.weight === undefined ? p.tenant : [p.tenant, p.weight]
}

/** The events' resolver: the payload's tenant. */
const eventTenant = (event: EventBus.FairShareInput): FairShareKey => {
  const tenant = (event.payload as { readonly tenant?: unknown }).tenant
  return typeof tenant === "string" ? tenant : undefined
}

const common = {
  visibilityTimeout: "30 seconds",
  retryBackoff: "200 millis",
  retryBackoffMax: "1 second",
  maxRetries: 3,
  pollingInterval: "50 millis"
} as const

const keyOf = (m: Message): string =>
  ((m.message as Record<string, unknown>)[FAIR_KEY_FIELD] as string | undefined) ?? ""

/** A job recording the tenant of each run, in order. */
const recordingJob = (queue: string) => {
  const order: Array<string> = []
  const job = Job.make(unique("Tenanted"), { payload: Payload, queue }, ({ tenant }) =>
    Effect.sync(() => order.push(tenant))
  )
  return { job, order }
}

const tenantJobs = (tenant: string, count: number, weight?: number): Array<Payload> =>
  Array.from({ length: count }, (_, i) => (weight === undefined ? { tenant, i } : { tenant, i, weight }))

/** The fair index of a queue, as the catalog has it. */
const fairIndex = (queue: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ readonly indexdef: string; readonly valid: boolean }>`
      SELECT pg_get_indexdef(c.oid) AS indexdef, i.indisvalid AS valid
      FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
      WHERE c.relname = ${`q_pgbus_${queue}_fair_idx`}`
    return rows[0]
  })

layer(TestDatabase.layer({ ...common, fairShare: byTenant, eventFairShare: eventTenant }), {
  excludeTestServices: true,
  timeout: "60 seconds"
})("fair share on", (it) => {
  describe("jobs", () => {
    it.effect("a tenant's 10 jobs behind another's 1,000 all run within the first 40 (concurrency 1)", () =>
      Effect.gen(function* () {
        const queue = unique("burst")
        const { job, order } = recordingJob(queue)
        yield* job.enqueueMany(tenantJobs("big", 1_000))
        yield* job.enqueueMany(tenantJobs("small", 10))
        yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        yield* eventually(
          "the small tenant's jobs ran",
          Effect.sync(() => order.filter((t) => t === "small").length === 10)
        )
        const last = order.lastIndexOf("small")
        assert.isBelow(last, 40, `the 10th small job ran as job ${last + 1}`)
        // one at a time, they alternate
        assert.deepStrictEqual(order.slice(0, 6), ["big", "small", "big", "small", "big", "small"])
      }).pipe(Effect.scoped)
    )

    it.effect("a weight-3 key gets three times the share of a weight-1 key while both have work", () =>
      Effect.gen(function* () {
        const queue = unique("weights")
        const { job, order } = recordingJob(queue)
        yield* job.enqueueMany(tenantJobs("light", 100))
        yield* job.enqueueMany(tenantJobs("heavy", 100, 3))
        yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        yield* eventually(
          "40 jobs ran",
          Effect.sync(() => order.length >= 40)
        )
        const window = order.slice(0, 40)
        const heavy = window.filter((t) => t === "heavy").length
        assert.approximately(heavy, 30, 1, `heavy ran ${heavy} of 40`)

        // one read of 20 on its own: 15 and 5
        const store = yield* QueueStore
        const other = unique("weights_read")
        const { job: direct } = recordingJob(other)
        yield* direct.enqueueMany(tenantJobs("light", 50))
        yield* direct.enqueueMany(tenantJobs("heavy", 50, 3))
        const read = yield* store.read(other, { limit: 20, fair: true })
        assert.strictEqual(read.filter((m) => keyOf(m) === "heavy").length, 15)
        assert.strictEqual(read.filter((m) => keyOf(m) === "light").length, 5)
      }).pipe(Effect.scoped)
    )

    it.effect("a lone key fills the whole read (work-conserving), and unkeyed messages share the key ''", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const queue = unique("lone")
        const { job } = recordingJob(queue)
        yield* job.enqueueMany(tenantJobs("only", 30))
        const alone = yield* store.read(queue, { limit: 25, fair: true })
        assert.strictEqual(alone.length, 25)

        const mixed = unique("unkeyed")
        const { job: mixedJob } = recordingJob(mixed)
        // the resolver leaves "-" unkeyed; a message sent to the store directly has no key either
        yield* mixedJob.enqueueMany(tenantJobs("-", 10))
        yield* store.sendBatch(
          mixed,
          Array.from({ length: 10 }, (_, i) => ({ message: { job: "Other", payload: { i } } }))
        )
        yield* mixedJob.enqueueMany(tenantJobs("acme", 20))
        const browsed = yield* store.browse(mixed, { limit: 1 })
        assert.notProperty(browsed[0]!.message as object, FAIR_KEY_FIELD)
        const read = yield* store.read(mixed, { limit: 20, fair: true })
        assert.strictEqual(read.filter((m) => keyOf(m) === "").length, 10)
        assert.strictEqual(read.filter((m) => keyOf(m) === "acme").length, 10)
        // claim order interleaves the two keys, oldest first on a tie
        assert.deepStrictEqual(read.slice(0, 4).map(keyOf), ["", "acme", "", "acme"])
      })
    )

    it.effect("the tag rides in the message: it survives a retry and a trip through the dead-letter queue", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const queue = unique("tag")
        const { job } = recordingJob(queue)
        const ref = yield* job.enqueue({ tenant: "acme", i: 1, weight: 2 })
        yield* job.enqueue({ tenant: "solo", i: 2 })
        const [tagged, plainWeight] = yield* store.browse(queue)
        assert.deepInclude(tagged!.message as object, { [FAIR_KEY_FIELD]: "acme", [FAIR_WEIGHT_FIELD]: 2 })
        assert.deepInclude(plainWeight!.message as object, { [FAIR_KEY_FIELD]: "solo" })
        assert.notProperty(plainWeight!.message as object, FAIR_WEIGHT_FIELD, "weight 1 is the default, not written")

        yield* store.moveToDeadLetter(queue, ref.msgId, { source: "operator", reason: "manual" })
        const [back] = yield* store.retryDeadLetters(`${queue}_dlq`, "all")
        const retried = yield* store.get(queue, back!)
        assert.deepInclude(retried._tag === "Some" ? (retried.value.message as object) : {}, {
          [FAIR_KEY_FIELD]: "acme",
          [FAIR_WEIGHT_FIELD]: 2
        })
      })
    )

    it.effect("a bad key or weight from the resolver fails with InvalidFairShare and writes nothing", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const queue = unique("bad")
        const { job } = recordingJob(queue)
        const bad: ReadonlyArray<readonly [Payload, string]> = [
          [{ tenant: "", i: 0 }, "empty"],
          [{ tenant: "x".repeat(256), i: 0 }, "at most 255"],
          [{ tenant: "acme", i: 0, weight: 0 }, "weight"],
          [{ tenant: "acme", i: 0, weight: 1.5 }, "weight"],
          [{ tenant: "acme", i: 0, weight: -2 }, "weight"],
          [{ tenant: "acme", i: 0, boom: true }, "threw: no tenant in scope"]
        ]
        for (const [payload, issue] of bad) {
          const error = yield* job.enqueue(payload).pipe(Effect.flip)
          assert.strictEqual(error._tag, "InvalidFairShare")
          if (error._tag === "InvalidFairShare") {
            assert.include(error.issue, issue)
            assert.include(error.message, job.name)
          }
        }
        // one bad answer in a batch: nothing of the batch is written
        const many = yield* job
          .enqueueMany([
            { tenant: "acme", i: 1 },
            { tenant: "", i: 2 }
          ])
          .pipe(Effect.flip)
        assert.strictEqual(many._tag, "InvalidFairShare")
        const depth = yield* store.metrics(queue).pipe(
          Effect.map((m) => m.depth),
          Effect.catchTag("QueueNotFound", () => Effect.succeed(0))
        )
        assert.strictEqual(depth, 0)
        // the outbox resolves it at write, with the same rule
        const outbox = yield* Outbox
        const viaOutbox = yield* outbox.enqueue(job, { tenant: "acme", i: 3, weight: 0 }).pipe(Effect.flip)
        assert.strictEqual(viaOutbox._tag, "InvalidFairShare")
      })
    )
  })

  describe("the fair index", () => {
    it.effect("a new queue gets it; a served queue without it gets it CONCURRENTLY at worker boot", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const fresh = unique("fresh")
        const { job } = recordingJob(fresh)
        yield* job.enqueue({ tenant: "acme", i: 1 })
        const created = yield* fairIndex(fresh)
        assert.isTrue(created?.valid)
        assert.include(created?.indexdef, "COALESCE((message ->> 'pgbus_fair_key'::text), ''::text), vt, msg_id")

        // a queue that existed before fair share was configured, with a backlog
        const old = unique("old")
        yield* store.create(old)
        yield* store.sendBatch(
          old,
          Array.from({ length: 100 }, (_, i) => ({ message: { job: "Old", payload: { i } } }))
        )
        assert.isUndefined(yield* fairIndex(old))
        const { job: oldJob } = recordingJob(old)
        yield* startSupervisor([oldJob], { capsules: [{ name: "c", queues: [old], concurrency: 1 }] })
        yield* eventually(
          "the worker built the fair index",
          Effect.map(fairIndex(old), (row) => row?.valid === true)
        )
        assert.deepStrictEqual(yield* store.ensureFairIndex(old), { _tag: "ready" })
      }).pipe(Effect.scoped)
    )

    it.effect("an INVALID index (an interrupted build) is reported with the DROP INDEX to run, then rebuilt", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const sql = yield* SqlClient.SqlClient
        const queue = unique("invalid")
        yield* store.create(queue)
        yield* store.sendBatch(queue, [{ message: { job: "A", payload: {} } }, { message: { job: "B", payload: {} } }])
        // a failed concurrent build leaves an INVALID index of that name behind
        yield* sql
          .unsafe(
            `CREATE UNIQUE INDEX CONCURRENTLY q_pgbus_${queue}_fair_idx ON pgbus.q_pgbus_${queue} ((COALESCE(message ->> 'pgbus_fair_key', '')))`
          )
          .pipe(Effect.ignore)
        assert.isFalse((yield* fairIndex(queue))?.valid)
        const status = yield* store.ensureFairIndex(queue)
        assert.strictEqual(status._tag, "invalid")
        const drop = status._tag === "invalid" ? status.drop : ""
        assert.strictEqual(drop, `DROP INDEX CONCURRENTLY IF EXISTS "pgbus"."q_pgbus_${queue}_fair_idx";`)
        // the fair read still works meanwhile (without the index)
        assert.strictEqual((yield* store.read(queue, { limit: 5, fair: true })).length, 2)
        yield* sql.unsafe(drop.replace(/;$/, ""))
        assert.deepStrictEqual(yield* store.ensureFairIndex(queue), { _tag: "built" })
        assert.isTrue((yield* fairIndex(queue))?.valid)
      })
    )
  })

  describe("events", () => {
    it.effect("a consumer reads its subscriber queue fairly: a tenant's 10 events pass another's 300", () =>
      Effect.gen(function* () {
        const t = unique("ev")
        const order: Array<string> = []
        const subscriber = EventBus.subscribe(
          `${t}.orders.created`,
          (event) => Effect.sync(() => order.push((event.payload as { tenant: string }).tenant)),
          { concurrency: 1 }
        )
        yield* EventBus.register([subscriber])
        yield* EventBus.publishMany(
          Array.from({ length: 300 }, (_, i) => ({ routingKey: `${t}.orders.created`, payload: { tenant: "big", i } }))
        )
        yield* EventBus.publishMany(
          Array.from({ length: 10 }, (_, i) => ({ routingKey: `${t}.orders.created`, payload: { tenant: "small", i } }))
        )
        const store = yield* QueueStore
        const [first] = yield* store.browse(subscriber.queue, { limit: 1 })
        // the key sits beside the envelope (for the read) and in it; the payload is untouched
        assert.deepInclude(first!.message as object, { [FAIR_KEY_FIELD]: "big" })
        assert.deepInclude((first!.message as { payload: object }).payload, {
          fair_key: "big",
          payload: { tenant: "big", i: 0 }
        })
        assert.isDefined(yield* fairIndex(subscriber.queue))
        yield* Supervisor.runWith().pipe(Effect.provide(Registry.layer([subscriber])), Effect.forkScoped)
        yield* eventually(
          "the small tenant's events were handled",
          Effect.sync(() => order.filter((x) => x === "small").length === 10)
        )
        assert.isBelow(order.lastIndexOf("small"), 40)
      }).pipe(Effect.scoped)
    )

    it.effect("EventBus.FairShare overrides the config's resolver; a bad answer fails the publish, nothing sent", () =>
      Effect.gen(function* () {
        const t = unique("evbad")
        const subscriber = EventBus.subscribe(`${t}.x`, () => Effect.void)
        yield* EventBus.register([subscriber])
        yield* EventBus.publish(`${t}.x`, { tenant: "acme" }).pipe(
          Effect.provideService(EventBus.FairShare, () => ["override", 4])
        )
        const error = yield* EventBus.publish(`${t}.x`, { tenant: "acme" }).pipe(
          Effect.provideService(EventBus.FairShare, () => ["acme", 0]),
          Effect.flip
        )
        assert.strictEqual(error._tag, "InvalidFairShare")
        const outbox = yield* Outbox
        const viaOutbox = yield* outbox.publishEvent(`${t}.x`, { tenant: "" }).pipe(
          Effect.provideService(EventBus.FairShare, () => ""),
          Effect.flip
        )
        assert.strictEqual(viaOutbox._tag, "InvalidFairShare")
        const store = yield* QueueStore
        const rows = yield* store.browse(subscriber.queue)
        assert.strictEqual(rows.length, 1)
        assert.deepInclude(rows[0]!.message as object, { [FAIR_KEY_FIELD]: "override", [FAIR_WEIGHT_FIELD]: 4 })
      })
    )
  })

  describe("the read agrees with its model", () => {
    // Random backlogs over `keys`, read in random batch sizes (1 to `maxLimit`) with one cursor:
    // each read claims exactly what fairOrder says.
    const agreesWithModel = (keys: ReadonlyArray<string>, maxLimit: number, seed: number) =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const cases = fc.sample(
          fc.record({
            messages: fc.array(fc.record({ key: fc.constantFrom(...keys), weight: fc.integer({ min: 1, max: 4 }) }), {
              minLength: 1,
              maxLength: 60
            }),
            limits: fc.array(fc.integer({ min: 1, max: maxLimit }), { minLength: 1, maxLength: 12 })
          }),
          { numRuns: 15, seed }
        )
        for (const { messages, limits } of cases) {
          const queue = unique("model")
          yield* store.create(queue, { fairIndex: true })
          const ids = yield* store.sendBatch(
            queue,
            messages.map((m) => ({
              message:
                m.key === ""
                  ? { job: "M", payload: {} }
                  : { job: "M", payload: {}, [FAIR_KEY_FIELD]: m.key, [FAIR_WEIGHT_FIELD]: m.weight }
            }))
          )
          let remaining: Array<FairCandidate> = messages.map((m, i) => ({
            msgId: ids[i]!,
            key: m.key,
            weight: m.key === "" ? 1 : m.weight
          }))
          const sqlCursor = new FairCursor()
          const modelCursor = new FairCursor()
          for (const limit of limits) {
            const got = yield* store.read(queue, { limit, fair: sqlCursor })
            const want = fairOrder(remaining, limit, (key) => modelCursor.creditOf(key))
            modelCursor.advance(want, want.length < limit)
            assert.deepStrictEqual(
              got.map((m) => m.msgId),
              want.map((c) => c.msgId)
            )
            const taken = new Set(want.map((c) => c.msgId))
            remaining = remaining.filter((c) => !taken.has(c.msgId))
          }
        }
      })

    it.effect("random backlogs, read in random batch sizes with one cursor, claim what fairOrder says", () =>
      agreesWithModel(["", "a", "b", "c", "d"], 7, 42)
    )

    // with at least twice the read's size in keys, each key ranks only the messages that can win
    it.effect("the same with 24 keys, where a read ranks only the messages whose start can win", () =>
      agreesWithModel(
        Array.from({ length: 24 }, (_, i) => (i === 0 ? "" : `k${i}`)),
        8,
        7
      )
    )

    // Two processes' claims of one backlog at once: the first one's rows are locked and its
    // update not yet committed, so the second reads the same heads and must skip them. The bound
    // keeps twice the read's size in heads for that: with at least 2 × limit keys visible, the
    // second claim still fills, with the next `limit` of the model's order.
    it.effect("a read beside another process's uncommitted claim still fills, with the next in the model's order", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const sql = yield* SqlClient.SqlClient
        const keys = Array.from({ length: 30 }, (_, i) => `t${i}`)
        const cases = fc.sample(
          fc.record({
            extra: fc.array(fc.record({ key: fc.constantFrom(...keys), weight: fc.integer({ min: 1, max: 4 }) }), {
              maxLength: 90
            }),
            weights: fc.array(fc.integer({ min: 1, max: 4 }), { minLength: keys.length, maxLength: keys.length }),
            warmUps: fc.array(fc.integer({ min: 1, max: 12 }), { minLength: 1, maxLength: 4 }),
            limit: fc.integer({ min: 1, max: 8 })
          }),
          { numRuns: 12, seed: 11 }
        )
        let checked = 0
        for (const { extra, weights, warmUps, limit: wanted } of cases) {
          const queue = unique("beside")
          yield* store.create(queue, { fairIndex: true })
          // every key has work, so the warm-up reads spread the credits
          const messages = [...keys.map((key, i) => ({ key, weight: weights[i]! })), ...extra]
          const ids = yield* store.sendBatch(
            queue,
            messages.map((m) => ({
              message: { job: "M", payload: {}, [FAIR_KEY_FIELD]: m.key, [FAIR_WEIGHT_FIELD]: m.weight }
            }))
          )
          let remaining: Array<FairCandidate> = messages.map((m, i) => ({
            msgId: ids[i]!,
            key: m.key,
            weight: m.weight
          }))
          const sqlCursor = new FairCursor()
          const modelCursor = new FairCursor()
          for (const limit of warmUps) {
            yield* store.read(queue, { limit, fair: sqlCursor })
            const taken = fairOrder(remaining, limit, (key) => modelCursor.creditOf(key))
            modelCursor.advance(taken, taken.length < limit)
            const gone = new Set(taken.map((c) => c.msgId))
            remaining = remaining.filter((c) => !gone.has(c.msgId))
          }
          const limit = Math.min(wanted, Math.floor(new Set(remaining.map((c) => c.key)).size / 2))
          if (limit < 1) continue
          const order = fairOrder(remaining, 2 * limit, (key) => modelCursor.creditOf(key))
          const first = order.slice(0, limit).map((c) => c.msgId)
          // the other process's claim: its rows locked by a transaction left open meanwhile
          const locked = yield* Deferred.make<void>()
          const release = yield* Deferred.make<void>()
          const other = yield* Effect.forkChild(
            sql.withTransaction(
              Effect.gen(function* () {
                const rows = yield* sql<{ readonly msg_id: string }>`
                  SELECT msg_id FROM ${sql(`pgbus.q_pgbus_${queue}`)}
                  WHERE msg_id IN ${sql.in(first.map(String))} FOR UPDATE`
                assert.strictEqual(rows.length, first.length)
                yield* Deferred.succeed(locked, undefined)
                yield* Deferred.await(release)
              })
            )
          )
          yield* Deferred.await(locked)
          const got = yield* store.read(queue, { limit, fair: sqlCursor })
          yield* Deferred.succeed(release, undefined)
          yield* Fiber.join(other)
          assert.deepStrictEqual(
            got.map((m) => m.msgId),
            order.slice(limit).map((c) => c.msgId),
            `limit ${limit}, ${new Set(remaining.map((c) => c.key)).size} keys visible`
          )
          checked++
        }
        assert.isAtLeast(checked, 8)
      })
    )
  })
})

layer(TestDatabase.layer(common), { excludeTestServices: true, timeout: "60 seconds" })("fair share off", (it) => {
  it.effect("the same backlog runs first in, first out; no tag is written and no fair index built", () =>
    Effect.gen(function* () {
      const queue = unique("fifo")
      const { job, order } = recordingJob(queue)
      yield* job.enqueueMany(tenantJobs("big", 1_000))
      yield* job.enqueueMany(tenantJobs("small", 10))
      const store = yield* QueueStore
      const [first] = yield* store.browse(queue, { limit: 1 })
      assert.deepStrictEqual(first!.message, { job: job.name, payload: { tenant: "big", i: 0 } })
      yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
      yield* eventually(
        "every job ran",
        Effect.sync(() => order.length === 1_010),
        "30 seconds"
      )
      assert.deepStrictEqual(order, [...Array(1_000).fill("big"), ...Array(10).fill("small")])
      assert.isUndefined(yield* fairIndex(queue))
    }).pipe(Effect.scoped)
  )
})

layer(TestDatabase.layer({ ...common, fairShare: byTenant, priorityLevels: 2, defaultPriority: 1 }), {
  excludeTestServices: true,
  timeout: "60 seconds"
})("fair share with priority levels", (it) => {
  it.effect("levels stay strict (p0 drains first), each level is read fairly", () =>
    Effect.gen(function* () {
      const queue = unique("levels")
      const { job, order } = recordingJob(queue)
      yield* job.enqueueMany(tenantJobs("big", 200))
      yield* job.enqueueMany(tenantJobs("small", 10))
      yield* job.enqueueMany(tenantJobs("urgent", 20), { priority: 0 })
      yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
      yield* eventually(
        "the small tenant's jobs ran",
        Effect.sync(() => order.filter((t) => t === "small").length === 10)
      )
      assert.deepStrictEqual(order.slice(0, 20), Array(20).fill("urgent"))
      assert.isBelow(order.lastIndexOf("small"), 20 + 40)
    }).pipe(Effect.scoped)
  )
})

describe("fairOrder (the model)", () => {
  const candidates = fc
    .array(fc.record({ key: fc.constantFrom("a", "b", "c", "d", "e"), weight: fc.integer({ min: 1, max: 5 }) }), {
      maxLength: 80
    })
    .map((list) => {
      // a key's weight is its oldest message's: give every message of a key that weight
      const weights = new Map<string, number>()
      return list.map((m, i): FairCandidate => {
        if (!weights.has(m.key)) weights.set(m.key, m.weight)
        return { msgId: BigInt(i + 1), key: m.key, weight: weights.get(m.key)! }
      })
    })

  plain("is work-conserving and keeps each key's own order", () =>
    fc.assert(
      fc.property(candidates, fc.integer({ min: 1, max: 100 }), (list, limit) => {
        const chosen = fairOrder(list, limit)
        assert.strictEqual(chosen.length, Math.min(limit, list.length))
        for (const key of new Set(list.map((c) => c.key))) {
          const mine = list.filter((c) => c.key === key).map((c) => c.msgId)
          const taken = chosen.filter((c) => c.key === key).map((c) => c.msgId)
          assert.deepStrictEqual(
            [...taken].sort((x, y) => (x < y ? -1 : 1)),
            mine.slice(0, taken.length)
          )
        }
      })
    )
  )

  plain("splits one read in proportion to the weights of the keys with enough work", () =>
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.constantFrom("a", "b", "c", "d"), { minLength: 2, maxLength: 4 }),
        fc.array(fc.integer({ min: 1, max: 5 }), { minLength: 4, maxLength: 4 }),
        fc.integer({ min: 1, max: 40 }),
        (keys, weights, limit) => {
          const list: Array<FairCandidate> = []
          let id = 1n
          for (let round = 0; round < limit; round++) {
            keys.forEach((key, k) => {
              list.push({ msgId: id++, key, weight: weights[k]! })
            })
          }
          const chosen = fairOrder(list, limit)
          const count = (key: string) => chosen.filter((c) => c.key === key).length
          keys.forEach((a, i) => {
            keys.forEach((b, j) => {
              const gap = Math.abs(count(a) / weights[i]! - count(b) / weights[j]!)
              assert.isAtMost(gap, 1 / weights[i]! + 1 / weights[j]! + 1e-9)
            })
          })
        }
      )
    )
  )

  plain("with a cursor, reads of one message keep every backlogged key within its share", () =>
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.constantFrom("a", "b", "c", "d"), { minLength: 2, maxLength: 4 }),
        fc.array(fc.integer({ min: 1, max: 5 }), { minLength: 4, maxLength: 4 }),
        fc.integer({ min: 1, max: 3 }),
        (keys, weights, batch) => {
          let id = 1n
          let backlog: Array<FairCandidate> = []
          // every key keeps a backlog throughout (arrivals keep the queue full)
          const refill = () => {
            for (const [k, key] of keys.entries()) {
              while (backlog.filter((c) => c.key === key).length < 10) {
                backlog.push({ msgId: id++, key, weight: weights[k]! })
              }
            }
            backlog.sort((x, y) => (x.msgId < y.msgId ? -1 : 1))
          }
          const cursor = new FairCursor()
          const served = new Map<string, number>()
          for (let read = 0; read < 60; read++) {
            refill()
            const chosen = fairOrder(backlog, batch, (key) => cursor.creditOf(key))
            cursor.advance(chosen, chosen.length < batch)
            for (const c of chosen) served.set(c.key, (served.get(c.key) ?? 0) + 1)
            const taken = new Set(chosen.map((c) => c.msgId))
            backlog = backlog.filter((c) => !taken.has(c.msgId))
            keys.forEach((a, i) => {
              keys.forEach((b, j) => {
                const gap = Math.abs((served.get(a) ?? 0) / weights[i]! - (served.get(b) ?? 0) / weights[j]!)
                assert.isAtMost(gap, 1 / weights[i]! + 1 / weights[j]! + 1e-9)
              })
            })
          }
        }
      )
    )
  )
})
