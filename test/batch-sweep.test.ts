/** Batches under concurrency and crashes: the counter invariant, and every repair of the batch sweep. */
import { assert, describe, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Queue, Ref, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import * as Batch from "../src/Batch/Batch.ts"
import { layerEffectClock } from "../src/Database.ts"
import { outcomesOf } from "../src/Job/BatchMembership.ts"
import * as Job from "../src/Job/Job.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { snapshot } from "./support/batches.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const unique = (base: string) => `${base}_${n++}`

const Payload = Schema.Struct({ id: Schema.Number })

/** Runs a test on TestClock, statements bound to it, starting at the real time. */
const onTestClock = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    yield* TestClock.setTime(Date.now())
    return yield* effect
  }).pipe(Effect.provide([layerEffectClock, TestClock.layer()]))

/** The callbacks sent to a queue, by which callback they are. */
const callbacksOn = (queue: string) =>
  QueueStore.use((store) =>
    Effect.map(store.browse(queue), (rows) =>
      rows.flatMap((m) => {
        const payload = (m.message as { readonly payload?: Partial<Batch.Finished> }).payload
        return payload?.callback === undefined ? [] : [payload.callback]
      })
    )
  )

const Big = Schema.Struct({ blob: Schema.String })

layer(TestDatabase.layer({ pollingInterval: "50 millis" }), { excludeTestServices: true })("batch sweep", (it) => {
  describe("the counter invariant", () => {
    it.effect(
      "10 concurrent workers finish 1,000 members: total = rows + completed + failed at every commit; a crash between archive and row delete is repaired by the sweep",
      () =>
        Effect.gen(function* () {
          const queue = unique("batch_load")
          const Member = Job.make("LoadMember", { payload: Payload, queue }, () => Effect.void)
          const received = yield* Queue.unbounded<Batch.Finished>()
          const Done = Job.make("LoadDone", { payload: Batch.Finished, queue }, (f) => Queue.offer(received, f))
          const store = yield* QueueStore
          const batch = yield* Batch.make({ onFinish: Done, onSuccess: Done })

          // every snapshot of the counters, taken as fast as one connection allows, must add up
          const samples = yield* Ref.make({ taken: 0, broken: [] as Array<string> })
          const sampler = yield* Effect.forever(
            Effect.flatMap(snapshot(batch.id), (s) =>
              Ref.update(samples, (acc) => ({
                taken: acc.taken + 1,
                broken: s.total === s.rows + s.completed + s.failed ? acc.broken : [...acc.broken, JSON.stringify(s)]
              }))
            )
          ).pipe(Effect.forkChild)

          // four blocks at once, each adding 250 members in five statements
          yield* Effect.forEach(
            [0, 1, 2, 3],
            (block) =>
              batch.enqueue(
                Effect.forEach([0, 1, 2, 3, 4], (chunk) =>
                  Member.enqueueMany(Array.from({ length: 50 }, (_, i) => ({ id: block * 250 + chunk * 50 + i })))
                )
              ),
            { concurrency: 4, discard: true }
          )
          assert.deepStrictEqual(yield* snapshot(batch.id), {
            total: 1_000,
            completed: 0,
            failed: 0,
            rows: 1_000,
            status: "pending"
          })

          // a worker that archived 25 members and died before deleting their rows
          const crashed = yield* store.read(queue, { limit: 25 })
          assert.strictEqual(yield* store.archive(queue, crashed), 25)

          yield* startSupervisor([Member, Done], {
            roles: ["workers"],
            capsules: Array.from({ length: 10 }, (_, i) => ({ name: `w${i}`, queues: [queue], concurrency: 1 }))
          })
          yield* eventually(
            "the other 975 members are recorded",
            Effect.map(snapshot(batch.id), (s) => s.completed === 975),
            "60 seconds"
          )
          const metrics = yield* store.metrics(queue)
          assert.strictEqual(metrics.archiveSize, 1_000)
          assert.deepStrictEqual(yield* snapshot(batch.id), {
            total: 1_000,
            completed: 975,
            failed: 0,
            rows: 25,
            status: "pending"
          })
          assert.strictEqual(yield* Queue.size(received), 0, "no callback while rows remain")

          const report = yield* Batch.sweepOnce
          assert.strictEqual(report.recovered, 25)
          assert.strictEqual(report.uncounted, 0)
          assert.strictEqual(report.finished, 1)
          const callbacks = [yield* Queue.take(received), yield* Queue.take(received)]
          assert.sameMembers(
            callbacks.map((c) => c.callback),
            ["onFinish", "onSuccess"]
          )
          const finish = callbacks[0]!
          assert.strictEqual(finish.completedJobs, 1_000)
          assert.deepStrictEqual(yield* snapshot(batch.id), {
            total: 1_000,
            completed: 1_000,
            failed: 0,
            rows: 0,
            status: "finished"
          })
          // a second sweep finds nothing to do, and the callbacks were sent once
          const again = yield* Batch.sweepOnce
          assert.strictEqual(again.recovered + again.finished + again.callbacksSent, 0)
          yield* Fiber.interrupt(sampler)
          const { taken, broken } = yield* Ref.get(samples)
          assert.deepStrictEqual(broken, [])
          assert.isAbove(taken, 10)
          assert.strictEqual(yield* Queue.size(received), 0)
        }).pipe(Effect.scoped)
    )
  })

  describe("repairs", () => {
    it.effect(
      "members archived or dead-lettered by a worker that died before recording them are counted by the sweep",
      () =>
        Effect.gen(function* () {
          const queue = unique("batch_lost")
          const Member = Job.make("LostMember", { payload: Payload, queue }, () => Effect.void)
          const Cb = Job.make("LostCb", { payload: Batch.Finished, queue: unique("batch_lost_cb") }, () => Effect.void)
          const store = yield* QueueStore
          const batch = yield* Batch.make({ onSuccess: Cb, onFailure: Cb })
          yield* batch.enqueue(Member.enqueueMany([{ id: 1 }, { id: 2 }]))
          const [first, second] = yield* store.read(queue, { limit: 2 })
          yield* store.archive(queue, [first!])
          yield* store.moveToDeadLetter(queue, second!, { source: "worker" })
          const report = yield* Batch.sweepOnce
          assert.strictEqual(report.recovered, 2)
          assert.strictEqual(report.finished, 1)
          assert.deepStrictEqual(yield* snapshot(batch.id), {
            total: 2,
            completed: 1,
            failed: 1,
            rows: 0,
            status: "finished"
          })
          assert.deepStrictEqual(yield* callbacksOn(Cb.queue!), ["onFailure"])
        })
    )

    it.effect(
      "an enqueue that fails between its count and its send leaves no trace, even when the caller carries on",
      () =>
        Effect.gen(function* () {
          const queue = unique("batch_halfway")
          const Member = Job.make("HalfwayMember", { payload: Payload, queue }, () => Effect.void)
          const Huge = Job.make("HalfwayHuge", { payload: Big, queue }, () => Effect.void)
          const sql = yield* SqlClient.SqlClient
          const store = yield* QueueStore
          const batch = yield* Batch.make({})
          // counted, then refused by the send (too large): the caller catches it and commits
          yield* sql.withTransaction(
            batch.enqueue(
              Effect.gen(function* () {
                yield* Member.enqueue({ id: 1 })
                const error = yield* Effect.flip(Huge.enqueue({ blob: "x".repeat(200_000) }))
                assert.strictEqual(error._tag, "PayloadTooLarge")
                yield* Member.enqueue({ id: 2 })
              })
            )
          )
          assert.deepStrictEqual(yield* snapshot(batch.id), {
            total: 2,
            completed: 0,
            failed: 0,
            rows: 2,
            status: "pending"
          })
          assert.strictEqual((yield* store.browse(queue)).length, 2)
        })
    )

    it.effect(
      "a member whose message is in neither its queue, the archive nor the DLQ is un-counted, only after the stall threshold",
      () =>
        onTestClock(
          Effect.gen(function* () {
            const queue = unique("batch_unsent")
            const Member = Job.make("UnsentMember", { payload: Payload, queue }, () => Effect.void)
            const Cb = Job.make(
              "UnsentCb",
              { payload: Batch.Finished, queue: unique("batch_unsent_cb") },
              () => Effect.void
            )
            const store = yield* QueueStore
            const batch = yield* Batch.make({ onFinish: Cb })
            const [gone] = yield* batch.enqueue(Member.enqueueMany([{ id: 1 }, { id: 2 }, { id: 3 }]))
            // one message vanishes (deleted by hand: the state an enqueue that died between its
            // row and its send would leave); one dies; one stays queued
            assert.strictEqual(yield* store.delete(queue, [gone!.msgId]), 1)
            const [dying] = yield* store.read(queue, { limit: 1 })
            yield* store.moveToDeadLetter(queue, dying!, { source: "worker" })

            const early = yield* Batch.sweepOnce
            assert.strictEqual(early.uncounted, 0, "not before the stall threshold")
            assert.strictEqual(early.recovered, 1, "the dead letter is found by its marker under its new id")
            yield* TestClock.adjust("6 minutes")
            const late = yield* Batch.sweepOnce
            assert.strictEqual(late.uncounted, 1, "the vanished member only; the queued one stays")
            assert.deepStrictEqual(yield* snapshot(batch.id), {
              total: 2,
              completed: 0,
              failed: 1,
              rows: 1,
              status: "pending"
            })

            // the queued member ends; its worker dies before recording it
            const [claimed] = yield* store.read(queue, { limit: 1 })
            yield* store.archive(queue, [claimed!])
            const last = yield* Batch.sweepOnce
            assert.strictEqual(last.recovered, 1)
            assert.strictEqual(last.finished, 1)
            assert.deepStrictEqual(yield* callbacksOn(Cb.queue!), ["onFinish"])
          })
        )
    )

    it.effect(
      "a batch still pending after the stall threshold with no new row (its block never returned) is finished by the sweep",
      () =>
        onTestClock(
          Effect.gen(function* () {
            const queue = unique("batch_stalled")
            const Member = Job.make("StalledMember", { payload: Payload, queue }, () => Effect.void)
            const Cb = Job.make(
              "StalledCb",
              { payload: Batch.Finished, queue: unique("batch_stalled_cb") },
              () => Effect.void
            )
            const store = yield* QueueStore
            const batches = yield* Batch.Batches
            const stuck = yield* Batch.make({ onFinish: Cb, description: "stuck" })
            const waiting = yield* Batch.make({ description: "waiting for its member" })
            const untouched = yield* Batch.make({ description: "never entered" })
            yield* waiting.enqueue(Member.enqueue({ id: 0 }))

            // a block that never returns (its process hangs or died) after adding one member
            const added = yield* Deferred.make<void>()
            const block = yield* stuck
              .enqueue(
                Member.enqueue({ id: 1 }).pipe(
                  Effect.andThen(Deferred.succeed(added, undefined)),
                  Effect.andThen(Effect.never)
                )
              )
              .pipe(Effect.forkChild)
            yield* Deferred.await(added)
            const claimed = yield* store.read(queue, { limit: 2 })
            const mine = claimed.filter((m) => m.headers.pgbus_batch_id === stuck.id)
            yield* store.archive(queue, mine)
            yield* batches.recordOutcomes(outcomesOf(mine, "completed"))
            yield* store.release(
              queue,
              claimed.filter((m) => m.headers.pgbus_batch_id !== stuck.id)
            )
            assert.strictEqual((yield* snapshot(stuck.id)).status, "pending", "the open block holds it")

            yield* TestClock.adjust("4 minutes")
            const early = yield* Batch.sweepOnce
            assert.strictEqual(early.unstuck, 0)
            yield* TestClock.adjust("2 minutes")
            const late = yield* Batch.sweepOnce
            assert.strictEqual(late.unstuck, 2, "the stuck block and the batch never entered")
            assert.strictEqual(late.finished, 2)
            assert.deepStrictEqual(yield* snapshot(stuck.id), {
              total: 1,
              completed: 1,
              failed: 0,
              rows: 0,
              status: "finished"
            })
            assert.isTrue((yield* Batch.find(untouched.id)).finished)
            assert.strictEqual((yield* Batch.find(waiting.id)).status, "pending", "a member is still queued")
            assert.deepStrictEqual(yield* callbacksOn(Cb.queue!), ["onFinish"])
            // the block returning late changes nothing
            yield* Fiber.interrupt(block)
            assert.strictEqual((yield* snapshot(stuck.id)).status, "finished")
          })
        )
    )

    it.effect("a job cannot join a batch the sweep finished, even inside an open block; nothing is sent", () =>
      onTestClock(
        Effect.gen(function* () {
          const queue = unique("batch_late")
          const Member = Job.make("LateMember", { payload: Payload, queue }, () => Effect.void)
          const store = yield* QueueStore
          const batch = yield* Batch.make({})
          const error = yield* Effect.flip(
            batch.enqueue(
              Effect.gen(function* () {
                yield* TestClock.adjust("6 minutes")
                yield* Batch.sweepOnce
                assert.strictEqual((yield* snapshot(batch.id)).status, "finished")
                yield* Member.enqueue({ id: 1 })
              })
            )
          )
          assert.strictEqual(error._tag, "AlreadyFinished")
          assert.strictEqual(
            yield* store.metrics(queue).pipe(
              Effect.map((m) => m.depth),
              Effect.catchTag("QueueNotFound", () => Effect.succeed(0))
            ),
            0
          )
          assert.deepStrictEqual(yield* snapshot(batch.id), {
            total: 0,
            completed: 0,
            failed: 0,
            rows: 0,
            status: "finished"
          })
        })
      )
    )

    it.effect("callbacks of a batch whose finisher died before sending them are sent by the sweep, once", () =>
      Effect.gen(function* () {
        const Cb = Job.make(
          "OrphanCb",
          { payload: Batch.Finished, queue: unique("batch_orphan_cb") },
          () => Effect.void
        )
        const sql = yield* SqlClient.SqlClient
        const batch = yield* Batch.make({ onFinish: Cb, onSuccess: Cb })
        // finished, as the finisher's statement leaves it, and no callback sent
        yield* sql`UPDATE pgbus.batches SET status = 'finished', finished_at = now() WHERE id = ${batch.id}::uuid`
        const first = yield* Batch.sweepOnce
        assert.strictEqual(first.callbacksSent, 1)
        const second = yield* Batch.sweepOnce
        assert.strictEqual(second.callbacksSent, 0)
        assert.deepStrictEqual(yield* callbacksOn(Cb.queue!), ["onFinish", "onSuccess"])
      })
    )

    it.effect("finished batches older than the retention are deleted; pending ones stay", () =>
      onTestClock(
        Effect.gen(function* () {
          const queue = unique("batch_retention")
          const Member = Job.make("RetainedMember", { payload: Payload, queue }, () => Effect.void)
          const old = yield* Batch.make({ description: "done long ago" })
          yield* old.enqueue(Effect.void)
          const pending = yield* Batch.make({ description: "still going" })
          yield* pending.enqueue(Member.enqueue({ id: 1 }))
          const soon = yield* Batch.sweepOnce
          assert.strictEqual((yield* Batch.find(old.id)).finished, true, "kept within the retention")
          void soon
          yield* TestClock.adjust("8 days")
          const report = yield* Batch.sweepOnce
          assert.isAtLeast(report.deleted, 1)
          assert.strictEqual((yield* Effect.flip(Batch.find(old.id)))._tag, "BatchNotFound")
          assert.strictEqual((yield* Batch.find(pending.id)).status, "pending")
        })
      )
    )
  })
})
