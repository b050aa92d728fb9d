import { assert, describe, expect, layer } from "@effect/vitest"
import { Clock, Duration, Effect, Exit, Fiber, Option } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import { PgBusConfig } from "../src/Config.ts"
import { layerEffectClock } from "../src/Database.ts"
import { DEAD_LETTER_HEADER, DLQ_RETRIES_HEADER } from "../src/Queue/Message.ts"
import { Notifier } from "../src/Queue/Notifier.ts"
import { makeQueueSql } from "../src/Queue/QueueSql.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { plansInBothModes } from "./support/plans.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const fresh = (base: string) => `${base}_${n++}`

/** Creates a fresh queue and returns its name. */
const newQueue = (base: string) =>
  Effect.gen(function* () {
    const store = yield* QueueStore
    const name = fresh(base)
    yield* store.create(name)
    return name
  })

/** Runs a test on TestClock, with statements bound to it (one clock). */
const onTestClock = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  effect.pipe(Effect.provide([layerEffectClock, TestClock.layer()]))

/** Starts the test clock at the real time, so rows written under it look current. */
const startClockNow = Effect.flatMap(
  Effect.sync(() => Date.now()),
  (now) => TestClock.setTime(now)
)

layer(TestDatabase.layer({ visibilityTimeout: "30 seconds" }), { excludeTestServices: true })("queue store", (it) => {
  describe("claims", () => {
    it.effect("a claimed message is invisible to a second reader until its visibility lapses", () =>
      Effect.gen(function* () {
        yield* startClockNow
        const store = yield* QueueStore
        const q = yield* newQueue("claims")
        const id = yield* store.send(q, { hello: "world" })
        const [first] = yield* store.read(q, { visibilityTimeout: "30 seconds" })
        assert.strictEqual(first?.msgId, id)
        assert.strictEqual(first?.readCt, 1)
        assert.deepStrictEqual(first?.message, { hello: "world" })

        assert.strictEqual((yield* store.read(q)).length, 0, "hidden from a second reader")
        yield* TestClock.adjust("29 seconds")
        assert.strictEqual((yield* store.read(q)).length, 0, "still hidden before vt")
        yield* TestClock.adjust("2 seconds")
        const [again] = yield* store.read(q)
        assert.strictEqual(again?.msgId, id)
        assert.strictEqual(again?.readCt, 2, "read_ct counts deliveries")
      }).pipe(onTestClock)
    )

    it.effect("10 concurrent readers over 10,000 messages claim each exactly once", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const q = yield* newQueue("race")
        const ids = new Set<bigint>()
        for (let batch = 0; batch < 100; batch++) {
          const sent = yield* store.sendBatch(
            q,
            Array.from({ length: 100 }, (_, i) => ({ message: { i: batch * 100 + i } }))
          )
          for (const id of sent) ids.add(id)
        }
        assert.strictEqual(ids.size, 10_000)
        const claimed: Array<bigint> = []
        yield* Effect.forEach(
          Array.from({ length: 10 }),
          () =>
            Effect.gen(function* () {
              while (true) {
                const got = yield* store.read(q, { limit: 37, visibilityTimeout: "5 minutes" })
                if (got.length === 0) return
                for (const m of got) claimed.push(m.msgId)
                yield* store.archive(q, got)
              }
            }),
          { concurrency: 10, discard: true }
        )
        assert.strictEqual(claimed.length, 10_000, "no message claimed twice, none missed")
        assert.strictEqual(new Set(claimed).size, 10_000)
        for (const id of claimed) assert.ok(ids.has(id))
        const metrics = yield* store.metrics(q)
        assert.strictEqual(metrics.depth, 0)
        assert.strictEqual(metrics.archiveSize, 10_000)
      })
    )

    it.effect("an acknowledgement with a stale receipt changes nothing", () =>
      Effect.gen(function* () {
        yield* startClockNow
        const store = yield* QueueStore
        const q = yield* newQueue("stale")
        yield* store.send(q, { n: 1 })
        const [first] = yield* store.read(q, { visibilityTimeout: "1 second" })
        yield* TestClock.adjust("2 seconds")
        const [second] = yield* store.read(q, { visibilityTimeout: "1 minute" })
        assert.strictEqual(second?.readCt, 2)
        assert.strictEqual(yield* store.archive(q, [first!]), 0, "the first holder lost its claim")
        assert.strictEqual(yield* store.setVisibility(q, [first!], "1 hour"), 0)
        assert.strictEqual(yield* store.archive(q, [second!]), 1)
      }).pipe(onTestClock)
    )
    it.effect(
      "archive-and-claim and the receipt statements reach rows by index, never by a scan of the queue (200 receipts, custom and generic plans)",
      () =>
        Effect.gen(function* () {
          const store = yield* QueueStore
          const sql = yield* SqlClient.SqlClient
          const config = yield* PgBusConfig
          const q = yield* newQueue("plans")
          const { physical } = yield* store.validateName(q)
          yield* store.sendBatch(
            q,
            Array.from({ length: 20_000 }, (_, i) => ({ message: { i } }))
          )
          const claimed = yield* store.read(q, { limit: 200 })
          yield* sql.unsafe(`ANALYZE "${config.schema}"."q_${physical}"`)
          const statements = makeQueueSql(sql, config.schema, "")
          const r = { ids: claimed.map((m) => m.msgId), readCounts: claimed.map((m) => m.readCt) }
          const checked = [
            statements.messageArchiveAndRead(physical, r, 100, 30_000, null, null),
            statements.messageRead(physical, 100, 30_000, null, null),
            statements.messageArchiveReceipts(physical, r, null),
            statements.messageDeleteReceipts(physical, r),
            statements.messageSetVisibilityReceipts(physical, r, 30_000, null),
            statements.messageReleaseReceipts(physical, r, null)
          ]
          for (const { mode, text, lines } of yield* plansInBothModes(sql, checked))
            assert.notInclude(lines, `Seq Scan on q_${physical}`, `${mode}: ${text}\n${lines}`)
        })
    )
  })

  describe("scheduling", () => {
    it.effect("a delayed message is invisible until its delay has passed", () =>
      Effect.gen(function* () {
        yield* startClockNow
        const store = yield* QueueStore
        const q = yield* newQueue("delay")
        yield* store.send(q, "later", { delay: "10 minutes" })
        assert.strictEqual((yield* store.read(q)).length, 0)
        const m = yield* store.metrics(q)
        assert.strictEqual(m.depth, 1)
        assert.strictEqual(m.visible, 0)
        yield* TestClock.adjust("9 minutes")
        assert.strictEqual((yield* store.read(q)).length, 0)
        yield* TestClock.adjust("1 minute")
        assert.strictEqual((yield* store.read(q)).length, 1)
      }).pipe(onTestClock)
    )

    it.effect("a message sent with `at` is invisible until that time", () =>
      Effect.gen(function* () {
        yield* startClockNow
        const store = yield* QueueStore
        const q = yield* newQueue("at")
        const now = yield* Clock.currentTimeMillis
        yield* store.sendBatch(q, [
          { message: 1, at: new Date(now + 60_000) },
          { message: 2 },
          { message: 3, delay: "2 minutes" }
        ])
        // each read archives what it got, so only newly due messages show up next time
        const readAndArchive = Effect.gen(function* () {
          const got = yield* store.read(q, { limit: 10 })
          yield* store.archive(q, got)
          return got.map((m) => m.message)
        })
        assert.deepStrictEqual(yield* readAndArchive, [2])
        yield* TestClock.adjust("59 seconds")
        assert.deepStrictEqual(yield* readAndArchive, [])
        yield* TestClock.adjust("2 seconds")
        assert.deepStrictEqual(yield* readAndArchive, [1])
        yield* TestClock.adjust("1 minute")
        assert.deepStrictEqual(yield* readAndArchive, [3])
      }).pipe(onTestClock)
    )
  })

  describe("acknowledgement and retention", () => {
    it.effect("archive moves a message to the archive; delete removes it", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const q = yield* newQueue("ack")
        const [a, b] = yield* store.sendBatch(q, [{ message: "a" }, { message: "b" }])
        const got = yield* store.read(q, { limit: 2 })
        assert.strictEqual(got.length, 2)
        assert.strictEqual(yield* store.archive(q, [got.find((m) => m.msgId === a)!]), 1)
        assert.strictEqual(yield* store.delete(q, [got.find((m) => m.msgId === b)!]), 1)
        assert.isTrue(yield* store.isArchived(q, a!))
        assert.isFalse(yield* store.isArchived(q, b!))
        assert.isTrue(Option.isNone(yield* store.get(q, a!)))
        assert.isTrue(Option.isNone(yield* store.get(q, b!)))
        const m = yield* store.metrics(q)
        assert.strictEqual(m.depth, 0)
        assert.strictEqual(m.archiveSize, 1)
      })
    )

    it.effect("a batch sharing headers and a delay keeps them on every message, in order", () =>
      Effect.gen(function* () {
        yield* startClockNow
        const store = yield* QueueStore
        const q = yield* newQueue("uniform")
        const headers = { trace: "t-1" }
        const ids = yield* store.sendBatch(
          q,
          ["a", { b: [1, "two"] }, 3, null].map((message) => ({ message, headers, delay: "10 seconds" }))
        )
        assert.strictEqual(ids.length, 4)
        assert.deepStrictEqual(
          [...ids].sort((x, y) => (x < y ? -1 : 1)),
          [...ids],
          "ids in send order"
        )
        assert.strictEqual((yield* store.read(q, { limit: 10 })).length, 0, "hidden for the delay")
        yield* TestClock.adjust("11 seconds")
        const got = yield* store.read(q, { limit: 10 })
        assert.deepStrictEqual(
          got.map((m) => [m.msgId, m.message, m.headers]),
          ids.map((id, i) => [id, ["a", { b: [1, "two"] }, 3, null][i], headers])
        )
      }).pipe(onTestClock)
    )

    it.effect(
      "an ordered archiveAndRead hands an archived head's key on in the same statement; a stale receipt keeps it",
      () =>
        Effect.gen(function* () {
          const store = yield* QueueStore
          const q = fresh("ackorder")
          yield* store.create(q, { orderIndex: true })
          const m = (key: string, n: number) => ({ message: { pgbus_order_key: key, n } })
          const [a0, b0, a1, b1, a2] = yield* store.sendBatch(q, [
            m("a", 0),
            m("b", 0),
            m("a", 1),
            m("b", 1),
            m("a", 2)
          ])
          const heads = yield* store.read(q, { limit: 10, ordered: true })
          assert.deepStrictEqual(
            heads.map((x) => x.msgId),
            [a0, b0]
          )
          const stale = { msgId: b0!, readCt: 0 }
          const next = yield* store.archiveAndRead(q, [heads[0]!, stale], { limit: 10, ordered: true })
          assert.strictEqual(next.archived, 1, "a stale receipt archives nothing")
          assert.deepStrictEqual(
            next.messages.map((x) => x.msgId),
            [a1],
            "a's next is claimed by the statement that archived a's head; b's head is still in the queue"
          )
          const last = yield* store.archiveAndRead(q, [next.messages[0]!, heads[1]!], { limit: 10, ordered: true })
          assert.strictEqual(last.archived, 2)
          assert.deepStrictEqual(
            last.messages.map((x) => x.msgId),
            [b1, a2]
          )
        })
    )

    it.effect("archiveAndRead archives by receipt and claims the next messages in one statement", () =>
      Effect.gen(function* () {
        yield* startClockNow
        const store = yield* QueueStore
        const q = yield* newQueue("ackread")
        const ids = yield* store.sendBatch(q, [{ message: 1 }, { message: 2 }, { message: 3 }, { message: 4 }])
        const first = yield* store.read(q, { limit: 2, visibilityTimeout: "1 second" })
        assert.deepStrictEqual(
          first.map((m) => m.msgId),
          ids.slice(0, 2)
        )
        // the first claim lapsed: the read must not take back what the same statement archives
        yield* TestClock.adjust("2 seconds")
        const stale = { msgId: ids[1]!, readCt: 0 }
        const next = yield* store.archiveAndRead(q, [first[0]!, stale], { limit: 10 })
        assert.strictEqual(next.archived, 1, "a stale receipt archives nothing")
        assert.deepStrictEqual(
          next.messages.map((m) => m.msgId),
          ids.slice(2),
          "no message the statement names is claimed by it"
        )
        assert.isTrue(yield* store.isArchived(q, ids[0]!))
        assert.isFalse(yield* store.isArchived(q, ids[1]!))
        const last = yield* store.archiveAndRead(q, next.messages, { limit: 10 })
        assert.strictEqual(last.archived, 2)
        assert.deepStrictEqual(
          last.messages.map((m) => [m.msgId, m.readCt]),
          [[ids[1]!, 2]]
        )
        assert.deepStrictEqual(yield* store.archiveAndRead(q, last.messages, { limit: 10 }), {
          archived: 1,
          messages: [],
          more: false
        })
        assert.strictEqual((yield* store.metrics(q)).archiveSize, 4)
      }).pipe(onTestClock)
    )

    it.effect(
      "archiveAndRead says whether its claim left visible messages behind (more), exactly at the limit too",
      () =>
        Effect.gen(function* () {
          yield* startClockNow
          const store = yield* QueueStore
          const q = yield* newQueue("readmore")
          const ids = yield* store.sendBatch(q, [{ message: 1 }, { message: 2 }, { message: 3 }, { message: 4 }])
          const first = yield* store.archiveAndRead(q, [], { limit: 1 })
          assert.deepStrictEqual([first.messages.map((m) => m.msgId), first.more], [ids.slice(0, 1), true])
          const second = yield* store.archiveAndRead(q, first.messages, { limit: 2 })
          assert.deepStrictEqual(
            [second.archived, second.messages.map((m) => m.msgId), second.more],
            [1, ids.slice(1, 3), true]
          )
          // exactly the last one: nothing left (a read that fills its limit is not taken for a backlog)
          const third = yield* store.archiveAndRead(q, second.messages, { limit: 1 })
          assert.deepStrictEqual(
            [third.archived, third.messages.map((m) => m.msgId), third.more],
            [2, ids.slice(3), false]
          )
          const fourth = yield* store.archiveAndRead(q, [], { limit: 1 })
          assert.deepStrictEqual([fourth.messages.length, fourth.more], [0, false])
          // the row looked at beyond the limit was not claimed: its first delivery came later
          assert.deepStrictEqual(
            second.messages.map((m) => m.readCt),
            [1, 1]
          )
        }).pipe(onTestClock)
    )

    it.effect("archive retention removes archived rows older than the window, and only those", () =>
      Effect.gen(function* () {
        yield* startClockNow
        const store = yield* QueueStore
        const q = yield* newQueue("retention")
        const [old] = yield* store.sendBatch(q, [{ message: "old" }])
        yield* store.archive(q, [old!])
        yield* TestClock.adjust("3 days")
        const [young] = yield* store.sendBatch(q, [{ message: "young" }])
        yield* store.archive(q, [young!])
        yield* TestClock.adjust("1 day")
        const report = yield* store.cleanupArchive("2 days")
        assert.deepStrictEqual(
          report.filter((r) => r.queue === q),
          [{ queue: q, deleted: 1 }]
        )
        assert.isFalse(yield* store.isArchived(q, old!))
        assert.isTrue(yield* store.isArchived(q, young!))
      }).pipe(onTestClock)
    )

    it.effect("release gives a claimed message back at once, its read count kept", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const q = yield* newQueue("release")
        yield* store.send(q, "x")
        const [m] = yield* store.read(q, { visibilityTimeout: "1 hour" })
        assert.strictEqual(yield* store.release(q, [m!]), 1)
        const [again] = yield* store.read(q)
        assert.strictEqual(again?.msgId, m?.msgId)
        assert.strictEqual(again?.readCt, 2)
      })
    )

    it.effect(
      "giveBackUnread gives read-ahead back as if unread where this process holds it; its old receipts are void",
      () =>
        Effect.gen(function* () {
          const store = yield* QueueStore
          const q = yield* newQueue("give_back")
          yield* store.send(q, "mine")
          yield* store.send(q, "theirs")
          const [mine] = yield* store.read(q, { visibilityTimeout: "1 hour", claimedBy: "p1#4" })
          const [theirs] = yield* store.read(q, { visibilityTimeout: "1 hour", claimedBy: "p2#1" })
          assert.strictEqual(
            yield* store.giveBackUnread(q, [mine!, theirs!], "p1"),
            1,
            "another process's claim left alone"
          )
          const again = yield* store.read(q, { limit: 2, visibilityTimeout: "1 hour", claimedBy: "p3#1" })
          assert.deepStrictEqual(
            again.map((m) => [m.message, m.readCt]),
            [["mine", 1]],
            "its next delivery is its first"
          )
          // the same id and read count, but another process's claim now: left alone
          assert.strictEqual(yield* store.giveBackUnread(q, [mine!], "p1"), 0)
          assert.deepStrictEqual(yield* store.read(q), [], "both still claimed")
        })
    )

    it.effect("unclaim gives a message back at once as if unread, by its claim's mark; its old receipt is void", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const q = yield* newQueue("unclaim")
        yield* store.send(q, "x")
        const [m] = yield* store.read(q, { visibilityTimeout: "1 hour", claimedBy: "p#1" })
        assert.strictEqual(m?.readCt, 1)
        assert.isFalse(yield* store.unclaim(q, m!, "p#2"), "another claim's mark")
        assert.isTrue(yield* store.unclaim(q, m!, "p#1"))
        const [again] = yield* store.read(q, { visibilityTimeout: "1 hour", claimedBy: "p#3" })
        assert.strictEqual(again?.msgId, m?.msgId)
        assert.strictEqual(again?.readCt, 1, "its next delivery is its first")
        // the same id and read count, but the claim is another one now: left alone
        assert.isFalse(yield* store.unclaim(q, m!, "p#1"))
        assert.deepStrictEqual(yield* store.read(q), [], "still claimed by the second read")
      })
    )
  })

  describe("dead letters", () => {
    it.effect("dead-lettering keeps the message's headers and writes the reason block", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const q = yield* newQueue("dead")
        const headers = { traceparent: "00-abc-def-01", "x-pgmq-group": "tenant-1" }
        yield* store.send(q, { job: "Explode" }, { headers })
        const [m] = yield* store.read(q)
        assert.isTrue(
          yield* store.recordFailure(
            q,
            m!,
            { errorClass: "BoomError", message: "it broke", stack: "Error: it broke\n    at a\n    at b", attempt: 1 },
            "0 millis"
          )
        )
        const [m2] = yield* store.read(q)
        assert.strictEqual(m2?.lastError?.error_class, "BoomError")
        const moved = yield* store.moveToDeadLetter(q, m2!, { source: "worker" })
        assert.isTrue(Option.isSome(moved))
        assert.strictEqual((yield* store.metrics(q)).depth, 0)

        const [dead] = yield* store.browse(`${q}_dlq`)
        assert.deepStrictEqual(dead?.message, { job: "Explode" })
        assert.strictEqual(dead?.headers.traceparent, headers.traceparent)
        assert.strictEqual(dead?.headers["x-pgmq-group"], "tenant-1")
        const block = store.deadLetterOf(dead!).deadLetter
        assert.isDefined(block)
        expect(block).toMatchObject({
          version: 1,
          reason: "max_retries_exceeded",
          source: "worker",
          source_queue: `pgbus_${q}`,
          attempts: 2,
          max_retries: 5,
          error_class: "BoomError",
          error_message: "it broke",
          error_attempt: 1
        })
        assert.match(block!.dead_lettered_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
        assert.isString(block!.error_recorded_at)
        assert.strictEqual(block!.backtrace, "Error: it broke\n    at a\n    at b")
        assert.isUndefined(block!.retries_from_dlq)
      })
    )

    it.effect("retrying a dead letter puts it back without the block and counts the trip", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const q = yield* newQueue("retry")
        yield* store.send(q, { n: 1 }, { headers: { keep: "me" } })
        const [m] = yield* store.read(q)
        yield* store.moveToDeadLetter(q, m!, {
          source: "worker",
          failure: { errorClass: "X", message: "x", attempt: 1 }
        })
        const [dead] = yield* store.browse(`${q}_dlq`)
        const [back] = yield* store.retryDeadLetters(`${q}_dlq`, [dead!.msgId])
        assert.isDefined(back)
        const [live] = yield* store.read(q)
        assert.deepStrictEqual(live?.message, { n: 1 })
        assert.strictEqual(live?.headers.keep, "me")
        assert.isUndefined(live?.headers[DEAD_LETTER_HEADER])
        assert.strictEqual(live?.headers[DLQ_RETRIES_HEADER], 1)
        yield* store.moveToDeadLetter(q, live!, { source: "worker" })
        const [deadAgain] = yield* store.browse(`${q}_dlq`)
        assert.strictEqual(store.deadLetterOf(deadAgain!).deadLetter?.retries_from_dlq, 1)
      })
    )
  })

  describe("transactions and wake-ups", () => {
    it.effect("a send inside a transaction that rolls back leaves nothing and wakes no one", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const notifier = yield* Notifier
        const sql = yield* SqlClient.SqlClient
        const q = yield* newQueue("rollback")
        const physical = (yield* store.validateName(q)).physical
        const wakeups = yield* notifier.subscribe([physical])
        // let the LISTEN connection come up and drain the reconnect wake-up
        yield* Effect.repeat(notifier.status, { until: (s) => s === "listening" })
        yield* wakeups.await(Duration.millis(200))
        const before = (yield* notifier.stats).received

        const exit = yield* sql
          .withTransaction(
            Effect.gen(function* () {
              yield* store.send(q, { n: 1 })
              yield* store.sendBatch(q, [{ message: 2 }, { message: 3 }])
              return yield* Effect.fail("abort" as const)
            })
          )
          .pipe(Effect.exit)
        assert.isTrue(Exit.isFailure(exit))
        assert.isFalse(yield* wakeups.await(Duration.millis(300)), "no wake-up after a rollback")
        assert.strictEqual((yield* notifier.stats).received, before)
        assert.strictEqual((yield* store.metrics(q)).depth, 0)

        // the same send committed does wake us
        yield* sql.withTransaction(store.send(q, { n: 4 }))
        assert.isTrue(yield* wakeups.await(Duration.seconds(5)))
      })
    )

    it.effect("read with poll returns promptly after a send from another connection", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const q = yield* newQueue("poll")
        const notifier = yield* Notifier
        yield* Effect.scoped(
          Effect.gen(function* () {
            yield* notifier.subscribe("all")
            yield* Effect.repeat(notifier.status, { until: (s) => s === "listening" })
          })
        )
        const reader = yield* store
          .readWithPoll(q, { maxWait: "10 seconds", pollInterval: "5 seconds" })
          .pipe(Effect.timed, Effect.forkChild)
        yield* Effect.sleep("100 millis")
        const sentAt = Date.now()
        yield* store.send(q, { ping: true })
        const [elapsed, got] = yield* Fiber.join(reader)
        const latency = Date.now() - sentAt
        assert.strictEqual(got.length, 1)
        assert.isBelow(latency, 1_000, `woken by NOTIFY (took ${latency} ms), not by the 5 s poll`)
        assert.isBelow(Duration.toMillis(elapsed), 5_000)
      })
    )
  })

  describe("bad input", () => {
    it.effect("invalid queue names are rejected before any SQL, injection attempts included", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        for (const bad of ["a; drop table x", "A-B", "a".repeat(200), "", "1abc", "Upper", 'q"; --', "a-b"]) {
          const error = yield* store.send(bad, { x: 1 }).pipe(Effect.flip)
          assert.strictEqual(error._tag, "InvalidQueueName", bad)
          const createError = yield* store.create(bad).pipe(Effect.flip)
          assert.strictEqual(createError._tag, "InvalidQueueName", bad)
        }
        const queues = yield* store.list
        assert.isFalse(queues.some((q) => q.name.includes("drop")))
      })
    )

    it.effect("a payload over the cap fails with PayloadTooLarge and writes nothing", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const q = yield* newQueue("big")
        const error = yield* store.send(q, { blob: "x".repeat(200_000) }).pipe(Effect.flip)
        assert.strictEqual(error._tag, "PayloadTooLarge")
        const batchError = yield* store
          .sendBatch(q, [{ message: 1 }, { message: "y".repeat(200_000) }])
          .pipe(Effect.flip)
        assert.strictEqual(batchError._tag, "PayloadTooLarge")
        assert.strictEqual((yield* store.metrics(q)).depth, 0)
      })
    )

    it.effect("unserialisable messages, bad headers and bad delays fail with InvalidMessage", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const q = yield* newQueue("invalid")
        const cases: ReadonlyArray<Effect.Effect<unknown, { readonly _tag: string }>> = [
          store.send(q, undefined),
          store.send(q, { n: 1n }),
          store.send(q, 1, { headers: [] as unknown as Record<string, unknown> }),
          store.send(q, 1, { delay: -5 }),
          store.send(q, 1, { at: new Date(Number.NaN) }),
          store.read(q, { limit: 0 })
        ]
        for (const c of cases) {
          assert.strictEqual((yield* Effect.flip(c))._tag, "InvalidMessage")
        }
        assert.strictEqual((yield* store.metrics(q)).depth, 0)
      })
    )

    it.effect("operations on a queue that does not exist fail with QueueNotFound", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const error = yield* store.send("never_created", 1).pipe(Effect.flip)
        assert.strictEqual(error._tag, "QueueNotFound")
      })
    )

    it.effect("create is idempotent and drop removes the queue and its dead-letter queue", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const q = fresh("lifecycle")
        yield* Effect.all([store.create(q), store.create(q), store.create(q)], { concurrency: 3 })
        const names = (yield* store.list).map((i) => i.name)
        assert.include(names, q)
        assert.include(names, `${q}_dlq`)
        assert.strictEqual((yield* store.list).find((i) => i.name === `${q}_dlq`)?.deadLetterOf, q)
        assert.isTrue(yield* store.drop(q))
        assert.isFalse(yield* store.drop(q))
        const after = (yield* store.list).map((i) => i.name)
        assert.notInclude(after, q)
        assert.notInclude(after, `${q}_dlq`)
        assert.strictEqual((yield* store.send(q, 1).pipe(Effect.flip))._tag, "QueueNotFound")
      })
    )
  })
})

layer(TestDatabase.layer({ listenNotify: false, pollingInterval: "50 millis" }), { excludeTestServices: true })(
  "queue store without LISTEN/NOTIFY",
  (it) => {
    it.effect("read with poll still finds a message sent later, by polling", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const notifier = yield* Notifier
        assert.strictEqual(yield* notifier.status, "disabled")
        const q = yield* newQueue("nopoll")
        const reader = yield* store.readWithPoll(q, { maxWait: "5 seconds" }).pipe(Effect.forkChild)
        yield* Effect.sleep("150 millis")
        yield* store.send(q, { ping: 1 })
        const got = yield* Fiber.join(reader)
        assert.strictEqual(got.length, 1)
      })
    )

    it.effect("read with poll gives up after maxWait with nothing", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const q = yield* newQueue("empty")
        const [elapsed, got] = yield* store.readWithPoll(q, { maxWait: "300 millis" }).pipe(Effect.timed)
        assert.strictEqual(got.length, 0)
        assert.isAtLeast(Duration.toMillis(elapsed), 290)
      })
    )
  }
)
