import { assert, describe, layer } from "@effect/vitest"
import { Effect, Exit, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../src/Config.ts"
import * as Job from "../src/Job/Job.ts"
import { JobClient } from "../src/Job/JobClient.ts"
import { makeUniqueKeys } from "../src/Job/Uniqueness.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Processes } from "../src/Supervisor/Processes.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const fresh = (base: string) => `${base}_${n++}`

const Order = Schema.Struct({ orderId: Schema.String, note: Schema.optional(Schema.String) })

const depthOf = (queue: string) =>
  Effect.flatMap(QueueStore, (store) => store.metrics(queue)).pipe(
    Effect.map((m) => m.depth),
    Effect.catchTag("QueueNotFound", () => Effect.succeed(0))
  )

const keysOf = (job: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{
        readonly key: string
        readonly msg_id: string
        readonly strategy: string
      }>`SELECT key, msg_id::text, strategy FROM pgbus.job_unique_keys WHERE job = ${job} ORDER BY key`
  )

layer(
  TestDatabase.layer({
    visibilityTimeout: "30 seconds",
    retryBackoff: "100 millis",
    retryBackoffMax: "200 millis",
    maxRetries: 20,
    pollingInterval: "50 millis"
  }),
  { excludeTestServices: true }
)("job uniqueness", (it) => {
  describe("untilExecuted", () => {
    it.effect("20 concurrent enqueuers of one key, some rolling back: exactly one job", () =>
      Effect.gen(function* () {
        const queue = fresh("race")
        const job = Job.make(
          "ImportOrder",
          { payload: Order, queue, unique: { key: (p) => `order-${p.orderId}`, onConflict: "discard" } },
          () => Effect.void
        )
        const client = yield* JobClient
        const sql = yield* SqlClient.SqlClient
        yield* client.ensureQueue(queue)
        const exits = yield* Effect.forEach(
          Array.from({ length: 20 }, (_, i) => i),
          (i) =>
            sql
              .withTransaction(
                job
                  .enqueue({ orderId: "1", note: String(i) })
                  .pipe(
                    Effect.andThen((ref) => (i % 3 === 0 ? Effect.fail("rolled back" as const) : Effect.succeed(ref)))
                  )
              )
              .pipe(Effect.exit),
          { concurrency: "unbounded" }
        )
        const committed = exits.filter(Exit.isSuccess).map((e) => e.value.id)
        assert.strictEqual(committed.length, 13)
        assert.strictEqual(yield* depthOf(queue), 1)
        // every committed enqueuer got the one job's id
        assert.strictEqual(new Set(committed).size, 1)
        const keys = yield* keysOf("ImportOrder")
        assert.strictEqual(keys.length, 1)
        assert.strictEqual(`${queue}:${keys[0]!.msg_id}`, committed[0])
      })
    )

    it.effect("a key freed by a rollback is taken at once; a second holder waits on an open one", () =>
      Effect.gen(function* () {
        const queue = fresh("rollback")
        const job = Job.make(
          "FreedByRollback",
          { payload: Order, queue, unique: { key: (p) => p.orderId } },
          () => Effect.void
        )
        const sql = yield* SqlClient.SqlClient
        yield* Effect.flatMap(JobClient, (c) => c.ensureQueue(queue))
        const exit = yield* sql
          .withTransaction(Effect.andThen(job.enqueue({ orderId: "a" }), Effect.fail("abort" as const)))
          .pipe(Effect.exit)
        assert.isTrue(Exit.isFailure(exit))
        const ref = yield* job.enqueue({ orderId: "a" })
        assert.strictEqual(yield* depthOf(queue), 1)
        // a duplicate is rejected, naming the holder
        const error = yield* job.enqueue({ orderId: "a" }).pipe(Effect.flip)
        assert.strictEqual(error._tag, "DuplicateJob")
        assert.strictEqual(error._tag === "DuplicateJob" ? error.holder : "", ref.id)
      })
    )

    it.effect("discard and log return the holder's id; an enqueue's uniqueKey wins over the key function", () =>
      Effect.gen(function* () {
        const queue = fresh("policies")
        const discard = Job.make(
          "DiscardDup",
          { payload: Order, queue, unique: { key: (p) => p.orderId, onConflict: "discard" } },
          () => Effect.void
        )
        const logged = Job.make(
          "LogDup",
          { payload: Order, queue, unique: { key: (p) => p.orderId, onConflict: "log" } },
          () => Effect.void
        )
        const first = yield* discard.enqueue({ orderId: "x" })
        assert.deepStrictEqual(yield* discard.enqueue({ orderId: "x", note: "again" }), first)
        const logFirst = yield* logged.enqueue({ orderId: "x" })
        assert.notStrictEqual(logFirst.id, first.id, "keys are per job")
        assert.deepStrictEqual(yield* logged.enqueue({ orderId: "x" }), logFirst)
        const given = yield* discard.enqueue({ orderId: "y" }, { uniqueKey: "x" })
        assert.deepStrictEqual(given, first)
        assert.strictEqual(yield* depthOf(queue), 2)
      })
    )

    it.effect("enqueueMany with duplicates inside one call: one job per key, repeats get the first's id", () =>
      Effect.gen(function* () {
        const queue = fresh("many")
        const job = Job.make(
          "ManyDup",
          { payload: Order, queue, unique: { key: (p) => p.orderId, onConflict: "discard" } },
          () => Effect.void
        )
        const held = yield* job.enqueue({ orderId: "d" })
        const refs = yield* job.enqueueMany([
          { orderId: "a" },
          { orderId: "b" },
          { orderId: "a" },
          { orderId: "c" },
          { orderId: "d" }
        ])
        assert.strictEqual(refs.length, 5)
        assert.deepStrictEqual(refs[2], refs[0])
        assert.deepStrictEqual(refs[4], held)
        assert.strictEqual(new Set(refs.map((r) => r.id)).size, 4)
        assert.strictEqual(yield* depthOf(queue), 4)

        // reject: one duplicate fails the whole call and writes nothing
        const strict = Job.make(
          "ManyStrict",
          { payload: Order, queue, unique: { key: (p) => p.orderId } },
          () => Effect.void
        )
        const error = yield* strict
          .enqueueMany([{ orderId: "p" }, { orderId: "q" }, { orderId: "p" }])
          .pipe(Effect.flip)
        assert.strictEqual(error._tag, "DuplicateJob")
        assert.strictEqual(yield* depthOf(queue), 4)
        assert.strictEqual((yield* keysOf("ManyStrict")).length, 0)
      })
    )

    it.effect("the key is released when the job is archived or dead-lettered, and not before", () =>
      Effect.gen(function* () {
        const queue = fresh("release")
        const runs: Array<string> = []
        const ok = Job.make(
          "ReleasedOnSuccess",
          { payload: Order, queue, unique: { key: (p) => p.orderId } },
          ({ orderId }) => Effect.sync(() => runs.push(orderId))
        )
        const failing = Job.make(
          "ReleasedOnDeadLetter",
          { payload: Order, queue, retry: { maxRetries: 1 }, unique: { key: (p) => p.orderId } },
          () => Effect.fail("boom" as const)
        )
        const failed = yield* failing.enqueue({ orderId: "f" })
        const okRef = yield* ok.enqueue({ orderId: "s" })
        assert.strictEqual((yield* keysOf("ReleasedOnSuccess")).length, 1)
        yield* startSupervisor([ok, failing], { capsules: [{ name: "c", queues: [queue], concurrency: 2 }] })
        yield* eventually(
          "both keys released",
          Effect.map(
            Effect.all([keysOf("ReleasedOnSuccess"), keysOf("ReleasedOnDeadLetter")]),
            ([a, b]) => a.length === 0 && b.length === 0
          )
        )
        assert.deepStrictEqual(runs, ["s"])
        const store = yield* QueueStore
        assert.isTrue(yield* store.isArchived(queue, okRef.msgId))
        const dead = yield* store.browse(`${queue}_dlq`)
        assert.strictEqual(dead.length, 1)
        assert.strictEqual(
          dead[0]!.message && (dead[0]!.message as { pgbus_unique_key?: string }).pgbus_unique_key,
          "f"
        )
        assert.isFalse(yield* store.isArchived(queue, failed.msgId))
        // both keys can be taken again at once
        yield* ok.enqueue({ orderId: "s" })
        yield* eventually(
          "the second job ran",
          Effect.sync(() => runs.length === 2)
        )
      })
    )

    it.effect("with a uniqueness period, a new job takes the key once it has passed", () =>
      Effect.gen(function* () {
        const queue = fresh("period")
        const job = Job.make(
          "Periodic",
          { payload: Order, queue, unique: { key: (p) => p.orderId, for: "300 millis" } },
          () => Effect.void
        )
        const first = yield* job.enqueue({ orderId: "p" })
        assert.strictEqual((yield* job.enqueue({ orderId: "p" }).pipe(Effect.flip))._tag, "DuplicateJob")
        yield* Effect.sleep("400 millis")
        const second = yield* job.enqueue({ orderId: "p" })
        assert.notStrictEqual(second.id, first.id)
        assert.strictEqual(yield* depthOf(queue), 2)
        // the first one's end does not release the key the second holds
        const store = yield* QueueStore
        yield* store.archive(queue, [first.msgId])
        const sql = yield* SqlClient.SqlClient
        const uniqueKeys = makeUniqueKeys(sql, (yield* PgBusConfig).schema, store)
        const [message] = yield* store.browse(queue)
        assert.strictEqual(message!.msgId, second.msgId)
        yield* uniqueKeys.release([{ ...message!, msgId: first.msgId }])
        const keys = yield* keysOf("Periodic")
        assert.deepStrictEqual(
          keys.map((k) => k.msg_id),
          [String(second.msgId)]
        )
      })
    )

    it.effect("the reaper releases keys whose message is gone, and only those", () =>
      Effect.gen(function* () {
        const queue = fresh("reap")
        const other = fresh("reap_kept")
        const job = Job.make("Reaped", { payload: Order, queue, unique: { key: (p) => p.orderId } }, () => Effect.void)
        yield* job.enqueueMany([{ orderId: "1" }, { orderId: "2" }])
        yield* job.enqueue({ orderId: "3" }, { queue: other })
        const store = yield* QueueStore
        // a purge (or a crash between an archive and its release) leaves keys behind
        yield* store.purge(queue)
        const uniqueKeys = makeUniqueKeys(yield* SqlClient.SqlClient, (yield* PgBusConfig).schema, store)
        const report = yield* uniqueKeys.reap
        assert.isAtLeast(report.released, 2)
        assert.deepStrictEqual(
          (yield* keysOf("Reaped")).map((k) => k.key),
          ["3"]
        )
        yield* job.enqueue({ orderId: "1" })
      })
    )
  })

  describe("whileExecuting", () => {
    it.effect("two jobs of one key never run at once; both run", () =>
      Effect.gen(function* () {
        const queue = fresh("while")
        let running = 0
        let most = 0
        const done: Array<string> = []
        const job = Job.make(
          "OneAtATime",
          { payload: Order, queue, unique: { key: (p) => p.orderId, strategy: "whileExecuting" } },
          ({ note }) =>
            Effect.gen(function* () {
              running++
              most = Math.max(most, running)
              yield* Effect.sleep("300 millis")
              running--
              done.push(note ?? "")
            })
        )
        // enqueued freely: the key is taken by each run
        yield* job.enqueueMany([
          { orderId: "k", note: "1" },
          { orderId: "k", note: "2" },
          { orderId: "k", note: "3" }
        ])
        assert.strictEqual(yield* depthOf(queue), 3)
        yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 3 }] })
        yield* eventually(
          "all three ran",
          Effect.sync(() => done.length === 3),
          "20 seconds"
        )
        assert.strictEqual(most, 1)
        assert.deepStrictEqual([...done].sort(), ["1", "2", "3"])
        yield* eventually(
          "the key is released",
          Effect.map(keysOf("OneAtATime"), (k) => k.length === 0)
        )
      })
    )

    it.effect("a dead process's key is released by fast recovery; its own message takes it again", () =>
      Effect.gen(function* () {
        const queue = fresh("while_dead")
        const job = Job.make(
          "HeldByTheDead",
          { payload: Order, queue, unique: { key: (p) => p.orderId, strategy: "whileExecuting" } },
          () => Effect.void
        )
        const store = yield* QueueStore
        const processes = yield* Processes
        const sql = yield* SqlClient.SqlClient
        const uniqueKeys = makeUniqueKeys(sql, (yield* PgBusConfig).schema, store)
        yield* job.enqueueMany([{ orderId: "z" }, { orderId: "z" }])
        yield* processes.register({
          id: "dead-runner",
          pid: 1,
          host: "gone",
          roles: ["workers"],
          capsules: [],
          capacity: 1,
          appRevision: undefined,
          version: "test"
        })
        const [m1, m2] = yield* store.read(queue, { limit: 2, visibilityTimeout: "1 hour", claimedBy: "dead-runner#1" })
        assert.isTrue(yield* uniqueKeys.acquireRun("HeldByTheDead", "z", m1!, "dead-runner"))
        // the other message is refused; the holder's own message takes it again
        assert.isFalse(yield* uniqueKeys.acquireRun("HeldByTheDead", "z", m2!, "live"))
        assert.isTrue(yield* uniqueKeys.acquireRun("HeldByTheDead", "z", m1!, "dead-runner"))
        yield* sql`UPDATE pgbus.processes SET last_beat_at = now() - interval '1 hour' WHERE id = 'dead-runner'`
        const report = yield* processes.reapStale
        assert.deepStrictEqual(report.deadProcesses, ["dead-runner"])
        assert.strictEqual(report.uniqueKeysReleased, 1)
        assert.isTrue(yield* uniqueKeys.acquireRun("HeldByTheDead", "z", m2!, "live"))
      })
    )
  })

  describe("bad input", () => {
    it.effect("a key function that throws, or a bad key: InvalidUniqueKey, nothing written", () =>
      Effect.gen(function* () {
        const queue = fresh("badkey")
        const throws = Job.make(
          "KeyThrows",
          {
            payload: Order,
            queue,
            unique: {
              key: () => {
                throw new Error("no tenant")
              }
            }
          },
          () => Effect.void
        )
        const e1 = yield* throws.enqueue({ orderId: "1" }).pipe(Effect.flip)
        assert.strictEqual(e1._tag, "InvalidUniqueKey")
        assert.include(e1.message, "no tenant")
        const e2 = yield* throws.enqueueMany([{ orderId: "1" }]).pipe(Effect.flip)
        assert.strictEqual(e2._tag, "InvalidUniqueKey")
        const empty = Job.make("KeyEmpty", { payload: Order, queue, unique: { key: () => "" } }, () => Effect.void)
        assert.strictEqual((yield* empty.enqueue({ orderId: "1" }).pipe(Effect.flip))._tag, "InvalidUniqueKey")
        const none = Job.make("KeyNone", { payload: Order, queue, unique: {} }, () => Effect.void)
        assert.strictEqual((yield* none.enqueue({ orderId: "1" }).pipe(Effect.flip))._tag, "InvalidUniqueKey")
        assert.strictEqual(yield* depthOf(queue), 0)
        assert.strictEqual((yield* keysOf("KeyThrows")).length, 0)
      })
    )

    it("a bad unique option throws InvalidJobDefinition where the job is defined", () => {
      const define = (unique: unknown) => () =>
        Job.make(
          "BadUnique",
          { payload: Order, unique: unique as Job.JobOptions<typeof Order.Type>["unique"] },
          () => Effect.void
        )
      assert.throws(define({ strategy: "always" }), /strategy/)
      assert.throws(define({ onConflict: "ignore" }), /onConflict/)
      assert.throws(define({ for: "-1 second" }), /for/)
      assert.throws(define({ key: "order" }), /key/)
      assert.throws(define({ strategy: "whileExecuting", for: "1 hour" }), /untilExecuted/)
      assert.throws(define({ lockTtl: "1 hour" }), /unknown unique option/)
    })
  })
})
