/** Batches (seed 002 "Batches"): membership, counters, callbacks, handles, bad input. */
import { assert, describe, layer } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Option, Queue, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Batch from "../src/Batch/Batch.ts"
import { DatabaseError } from "../src/Database.ts"
import { BATCH_EXECUTION_HEADER, BATCH_ID_HEADER, outcomesOf } from "../src/Job/BatchMembership.ts"
import * as Job from "../src/Job/Job.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { snapshot } from "./support/batches.ts"
import { terminateWhileWaiting } from "./support/connections.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const unique = (base: string) => `${base}_${n++}`

const Payload = Schema.Struct({ id: Schema.Number })

/** A callback job on `queue` that hands every payload it receives (and its headers) to a queue. */
const callbackJob = (name: string, queue: string) =>
  Effect.map(
    Queue.unbounded<{ readonly payload: Batch.Finished; readonly headers: Readonly<Record<string, unknown>> }>(),
    (received) => ({
      received,
      job: Job.make(name, { payload: Batch.Finished, queue }, (payload, ctx) =>
        Queue.offer(received, { payload, headers: ctx.headers })
      )
    })
  )

const takeN = <A>(queue: Queue.Queue<A>, count: number) =>
  Effect.forEach(Array.from({ length: count }), () => Queue.take(queue))

layer(
  TestDatabase.layer({
    pollingInterval: "50 millis",
    retryBackoff: "50 millis",
    retryBackoffMax: "1 second",
    maxRetries: 3
  }),
  { excludeTestServices: true }
)("batches", (it) => {
  describe("callbacks", () => {
    it.effect("a batch finishes once every member is archived: onFinish and onSuccess receive it, onFailure not", () =>
      Effect.gen(function* () {
        const queue = unique("batch_ok")
        const ran: Array<number> = []
        const Work = Job.make("BatchWork", { payload: Payload, queue }, ({ id }) => Effect.sync(() => ran.push(id)))
        const done = yield* callbackJob("BatchDone", queue)
        const ok = yield* callbackJob("BatchOk", queue)
        const bad = yield* callbackJob("BatchBad", queue)
        const batch = yield* Batch.make({
          onFinish: done.job,
          onSuccess: ok.job,
          onFailure: bad.job,
          description: "import users",
          properties: { initiatedBy: "alice", n: 5 }
        })
        assert.strictEqual(batch.status, "pending")
        assert.strictEqual(batch.totalJobs, 0)
        const refs = yield* batch.enqueue(Work.enqueueMany([1, 2, 3, 4, 5].map((id) => ({ id }))))
        assert.strictEqual(refs.length, 5)
        assert.deepStrictEqual(yield* snapshot(batch.id), {
          total: 5,
          completed: 0,
          failed: 0,
          rows: 5,
          status: "pending"
        })

        yield* startSupervisor([Work, done.job, ok.job, bad.job], {
          capsules: [{ name: "c", queues: [queue], concurrency: 3 }]
        })
        const [finish] = yield* takeN(done.received, 1)
        const [success] = yield* takeN(ok.received, 1)
        assert.deepStrictEqual(
          ran.sort((a, b) => a - b),
          [1, 2, 3, 4, 5]
        )
        for (const { payload } of [finish!, success!]) {
          assert.strictEqual(payload.batchId, batch.id)
          assert.isTrue(payload.succeeded)
          assert.strictEqual(payload.description, "import users")
          assert.deepStrictEqual(payload.properties, { initiatedBy: "alice", n: 5 })
          assert.strictEqual(payload.totalJobs, 5)
          assert.strictEqual(payload.completedJobs, 5)
          assert.strictEqual(payload.failedJobs, 0)
        }
        assert.strictEqual(finish!.payload.callback, "onFinish")
        assert.strictEqual(success!.payload.callback, "onSuccess")
        // a callback is never a member of its batch
        assert.isUndefined(finish!.headers[BATCH_ID_HEADER])
        assert.isUndefined(success!.headers[BATCH_EXECUTION_HEADER])

        const found = yield* Batch.find(batch.id)
        assert.strictEqual(found.status, "finished")
        assert.isTrue(found.finished)
        assert.strictEqual(found.completedJobs, 5)
        assert.strictEqual(found.pendingJobs, 0)
        assert.strictEqual(found.progressPercentage, 100)
        assert.isDefined(found.finishedAt)
        assert.deepStrictEqual(yield* snapshot(batch.id), {
          total: 5,
          completed: 5,
          failed: 0,
          rows: 0,
          status: "finished"
        })
        assert.strictEqual(yield* Queue.size(bad.received), 0)
      }).pipe(Effect.scoped)
    )

    it.effect("a dead-lettered member counts as failed: onFailure runs instead of onSuccess", () =>
      Effect.gen(function* () {
        const queue = unique("batch_fail")
        const Work = Job.make("BatchMaybe", { payload: Payload, queue, retry: { maxRetries: 1 } }, ({ id }) =>
          id === 3 ? Effect.fail(new Error("row 3 is bad")) : Effect.void
        )
        const done = yield* callbackJob("FailDone", queue)
        const ok = yield* callbackJob("FailOk", queue)
        const bad = yield* callbackJob("FailBad", queue)
        const batch = yield* Batch.make({ onFinish: done.job, onSuccess: ok.job, onFailure: bad.job })
        yield* batch.enqueue(Work.enqueueMany([1, 2, 3, 4].map((id) => ({ id }))))
        yield* startSupervisor([Work, done.job, ok.job, bad.job], {
          capsules: [{ name: "c", queues: [queue], concurrency: 2 }]
        })
        const [failure] = yield* takeN(bad.received, 1)
        const [finish] = yield* takeN(done.received, 1)
        assert.strictEqual(failure!.payload.callback, "onFailure")
        assert.isFalse(failure!.payload.succeeded)
        assert.strictEqual(failure!.payload.completedJobs, 3)
        assert.strictEqual(failure!.payload.failedJobs, 1)
        assert.isFalse(finish!.payload.succeeded)
        const found = yield* Batch.find(batch.id)
        assert.strictEqual(found.failedJobs, 1)
        assert.strictEqual(found.progressPercentage, 100)
        assert.strictEqual(yield* Queue.size(ok.received), 0)
        const store = yield* QueueStore
        assert.strictEqual((yield* store.browse(`${queue}_dlq`)).length, 1)
      }).pipe(Effect.scoped)
    )

    it.effect("a retried member keeps its one row and delays the outcome until it is terminal", () =>
      Effect.gen(function* () {
        const queue = unique("batch_retry")
        const seen: Array<{ attempt: number; status: string; pending: number; rows: number }> = []
        const Flaky = Job.make("BatchFlaky", { payload: Payload, queue }, (_, ctx) =>
          Effect.gen(function* () {
            const batch = Option.getOrThrow(yield* Batch.current)
            const snap = yield* snapshot(batch.id)
            seen.push({ attempt: ctx.attempt, status: batch.status, pending: batch.pendingJobs, rows: snap.rows })
            if (ctx.attempt < 3) return yield* Effect.fail(new Error(`attempt ${ctx.attempt} fails`))
          })
        )
        const done = yield* callbackJob("RetryDone", queue)
        const ok = yield* callbackJob("RetryOk", queue)
        const batch = yield* Batch.make({ onFinish: done.job, onSuccess: ok.job })
        yield* batch.enqueue(Flaky.enqueue({ id: 1 }))
        yield* startSupervisor([Flaky, done.job, ok.job], {
          capsules: [{ name: "c", queues: [queue], concurrency: 1 }]
        })
        const [success] = yield* takeN(ok.received, 1)
        // every earlier attempt saw the batch pending with its one member outstanding and one row
        assert.deepStrictEqual(seen, [
          { attempt: 1, status: "pending", pending: 1, rows: 1 },
          { attempt: 2, status: "pending", pending: 1, rows: 1 },
          { attempt: 3, status: "pending", pending: 1, rows: 1 }
        ])
        assert.isTrue(success!.payload.succeeded)
        assert.strictEqual(success!.payload.completedJobs, 1)
        assert.strictEqual(success!.payload.totalJobs, 1)
        yield* takeN(done.received, 1)
      }).pipe(Effect.scoped)
    )

    it.effect("callbacks go to the queue and with the delay they were configured with", () =>
      Effect.gen(function* () {
        const queue = unique("batch_cfg")
        const elsewhere = unique("batch_cb")
        const Work = Job.make("CfgWork", { payload: Payload, queue }, () => Effect.void)
        const done = yield* callbackJob("CfgDone", queue)
        const batch = yield* Batch.make({ onFinish: { job: done.job, queue: elsewhere, delay: "1 hour" } })
        yield* batch.enqueue(Work.enqueue({ id: 1 }))
        yield* startSupervisor([Work], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        const store = yield* QueueStore
        yield* eventually(
          "the callback is sent",
          Effect.map(store.browse(elsewhere), (rows) => rows.length === 1)
        )
        const [message] = yield* store.browse(elsewhere)
        assert.deepStrictEqual((message!.message as { job: string }).job, "CfgDone")
        const delayMs = message!.vt.getTime() - message!.enqueuedAt.getTime()
        assert.isAtLeast(delayMs, 3_600_000 - 1_000)
        assert.isAtMost(delayMs, 3_600_000 + 1_000)
        assert.strictEqual((yield* store.browse(queue)).length, 0, "not on the job's own queue")
      }).pipe(Effect.scoped)
    )

    it.effect("an enqueue block that adds nothing finishes the batch at once", () =>
      Effect.gen(function* () {
        const queue = unique("batch_empty")
        const done = yield* callbackJob("EmptyDone", queue)
        const store = yield* QueueStore
        const batch = yield* Batch.make({ onFinish: done.job, onSuccess: done.job })
        yield* batch.enqueue(Effect.void)
        const found = yield* Batch.find(batch.id)
        assert.isTrue(found.finished)
        assert.strictEqual(found.totalJobs, 0)
        assert.strictEqual(found.progressPercentage, 100)
        assert.deepStrictEqual(
          (yield* store.browse(queue)).map((m) => (m.message as { payload: Batch.Finished }).payload.callback),
          ["onFinish", "onSuccess"]
        )
      })
    )
  })

  describe("membership", () => {
    it.effect("only jobs enqueued inside batch.enqueue join; a member adds siblings only through its own batch", () =>
      Effect.gen(function* () {
        const queue = unique("batch_members")
        const ran: Array<string> = []
        const Outside = Job.make("Outside", { payload: Payload, queue }, () => Effect.sync(() => ran.push("outside")))
        const Sibling = Job.make("Sibling", { payload: Payload, queue }, () => Effect.sync(() => ran.push("sibling")))
        const Parent = Job.make("Parent", { payload: Payload, queue }, () =>
          Effect.gen(function* () {
            ran.push("parent")
            // a job enqueued by a member is not a member ...
            yield* Outside.enqueue({ id: 1 })
            // ... unless through the member's own batch
            const batch = Option.getOrThrow(yield* Batch.current)
            yield* batch.enqueue(Sibling.enqueue({ id: 2 }))
          })
        )
        const done = yield* callbackJob("MembersDone", queue)
        const store = yield* QueueStore
        const batch = yield* Batch.make({ onFinish: done.job })
        yield* Outside.enqueue({ id: 0 })
        yield* batch.enqueue(Parent.enqueue({ id: 1 }))
        const messages = yield* store.browse(queue)
        assert.deepStrictEqual(
          messages.map((m) => [(m.message as { job: string }).job, m.headers[BATCH_ID_HEADER] ?? null]),
          [
            ["Outside", null],
            ["Parent", batch.id]
          ]
        )
        yield* startSupervisor([Outside, Sibling, Parent, done.job], {
          capsules: [{ name: "c", queues: [queue], concurrency: 1 }]
        })
        const [finish] = yield* takeN(done.received, 1)
        assert.strictEqual(finish!.payload.totalJobs, 2, "the parent and its sibling")
        assert.strictEqual(finish!.payload.completedJobs, 2)
        assert.include(ran, "sibling")
      }).pipe(Effect.scoped)
    )

    it.effect("Batch.find gives status, counts, pending and progress; ends recorded twice count once", () =>
      Effect.gen(function* () {
        const queue = unique("batch_find")
        const Work = Job.make("FindWork", { payload: Payload, queue }, () => Effect.void)
        const store = yield* QueueStore
        const batches = yield* Batch.Batches
        const batch = yield* Batch.make({ description: "four", properties: { k: "v" } })
        yield* batch.enqueue(Work.enqueueMany([1, 2, 3, 4].map((id) => ({ id }))))
        const before = yield* Batch.find(batch.id)
        assert.deepStrictEqual(
          [before.status, before.totalJobs, before.pendingJobs, before.progressPercentage, before.finished],
          ["pending", 4, 4, 0, false]
        )
        assert.strictEqual(before.description, "four")
        assert.deepStrictEqual(before.properties, { k: "v" })
        // a worker's part, by hand: claim two, archive them, record their ends (twice)
        const claimed = yield* store.read(queue, { limit: 2 })
        yield* store.archive(queue, claimed)
        yield* batches.recordOutcomes(outcomesOf(claimed, "completed"))
        yield* batches.recordOutcomes(outcomesOf(claimed, "completed"))
        const half = yield* Batch.find(batch.id)
        assert.deepStrictEqual(
          [half.status, half.completedJobs, half.pendingJobs, half.progressPercentage],
          ["pending", 2, 2, 50]
        )
        assert.deepStrictEqual(yield* snapshot(batch.id), {
          total: 4,
          completed: 2,
          failed: 0,
          rows: 2,
          status: "pending"
        })
      })
    )

    it.effect("endMembers ends every outstanding member without running it, and the batch finishes", () =>
      Effect.gen(function* () {
        const queue = unique("batch_end")
        const cbQueue = unique("batch_end_cb")
        const Work = Job.make("EndWork", { payload: Payload, queue }, () => Effect.die("never runs"))
        const Cb = Job.make("EndCb", { payload: Batch.Finished, queue: cbQueue }, () => Effect.void)
        const store = yield* QueueStore
        const batches = yield* Batch.Batches
        const ok = yield* Batch.make({ onSuccess: Cb })
        yield* ok.enqueue(Work.enqueueMany([1, 2, 3].map((id) => ({ id }))))
        assert.deepStrictEqual(yield* batches.endMembers(ok.id, "completed"), { ended: 3, finished: true })
        assert.deepStrictEqual(yield* snapshot(ok.id), {
          total: 3,
          completed: 3,
          failed: 0,
          rows: 0,
          status: "finished"
        })
        assert.strictEqual((yield* store.metrics(queue)).archiveSize, 3)

        const bad = yield* Batch.make({ onFailure: Cb })
        yield* bad.enqueue(Work.enqueueMany([4, 5].map((id) => ({ id }))))
        assert.deepStrictEqual(yield* batches.endMembers(bad.id, "failed"), { ended: 2, finished: true })
        assert.deepStrictEqual(yield* snapshot(bad.id), {
          total: 2,
          completed: 0,
          failed: 2,
          rows: 0,
          status: "finished"
        })
        assert.strictEqual((yield* store.browse(`${queue}_dlq`)).length, 2)
        assert.deepStrictEqual(
          (yield* store.browse(cbQueue)).map((m) => (m.message as { payload: Batch.Finished }).payload.callback),
          ["onSuccess", "onFailure"]
        )
        assert.deepStrictEqual(yield* batches.endMembers(ok.id, "completed"), { ended: 0, finished: false })
      })
    )

    it.effect("a batch made and filled inside a transaction that rolls back leaves nothing", () =>
      Effect.gen(function* () {
        const queue = unique("batch_rollback")
        const Work = Job.make("RolledWork", { payload: Payload, queue }, () => Effect.void)
        const sql = yield* SqlClient.SqlClient
        const store = yield* QueueStore
        yield* Work.enqueue({ id: 0 })
        let id = ""
        const exit = yield* sql
          .withTransaction(
            Effect.gen(function* () {
              const batch = yield* Batch.make({ description: "doomed" })
              id = batch.id
              yield* batch.enqueue(Work.enqueueMany([{ id: 1 }, { id: 2 }]))
              return yield* Effect.fail("abort" as const)
            })
          )
          .pipe(Effect.exit)
        assert.isTrue(exit._tag === "Failure")
        const error = yield* Effect.flip(Batch.find(id))
        assert.strictEqual(error._tag, "BatchNotFound")
        assert.strictEqual((yield* store.browse(queue)).length, 1, "only the job enqueued outside")
      })
    )
  })

  describe("database connection restarts", () => {
    it.effect("a join whose connection is terminated fails with a retryable DatabaseError; nothing counted", () =>
      Effect.gen(function* () {
        const queue = unique("batch_joinkill")
        const Work = Job.make("BatchJoinWork", { payload: Payload, queue }, () => Effect.void)
        const store = yield* QueueStore
        yield* store.create(queue)
        const batch = yield* Batch.make({})
        // a first member keeps the batch pending (a block that adds nothing to an empty batch finishes it)
        yield* batch.enqueue(Work.enqueue({ id: 0 }))
        const joining = yield* Effect.forkChild(batch.enqueue(Work.enqueueMany([{ id: 1 }, { id: 2 }])))
        // the join's member rows wait on the lock inside its transaction when the connection goes
        const blocked = yield* terminateWhileWaiting("pgbus.batch_executions")
        assert.isAbove(blocked, 0, "a statement in flight was terminated")
        const exit = yield* Fiber.await(joining)
        assert.isTrue(Exit.isFailure(exit))
        const error = Exit.isFailure(exit) ? Cause.findErrorOption(exit.cause) : Option.none()
        assert.isTrue(
          Option.isSome(error) && error.value instanceof DatabaseError && error.value.retryable,
          `a typed, retryable DatabaseError, not ${Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "success"}`
        )
        assert.deepStrictEqual(yield* snapshot(batch.id), {
          total: 1,
          completed: 0,
          failed: 0,
          rows: 1,
          status: "pending"
        })
        assert.strictEqual((yield* store.metrics(queue)).depth, 1, "no message sent")
        // the batch takes the retry
        yield* batch.enqueue(Work.enqueueMany([{ id: 1 }, { id: 2 }]))
        assert.deepStrictEqual(yield* snapshot(batch.id), {
          total: 3,
          completed: 0,
          failed: 0,
          rows: 3,
          status: "pending"
        })
      }).pipe(Effect.scoped, Effect.provide(TestDatabase.layer({ pollingInterval: "50 millis" }), { local: true }))
    )

    it.effect("every connection terminated while members end: the batch finishes, counted right, callbacks once", () =>
      Effect.gen(function* () {
        const queue = unique("batch_connkill")
        const Work = Job.make("BatchConnWork", { payload: Payload, queue }, () => Effect.sleep("30 millis"))
        const done = yield* callbackJob("BatchConnDone", queue)
        const ok = yield* callbackJob("BatchConnOk", queue)
        const batch = yield* Batch.make({ onFinish: done.job, onSuccess: ok.job })
        const ids = Array.from({ length: 20 }, (_, i) => i)
        yield* batch.enqueue(Work.enqueueMany(ids.map((id) => ({ id }))))
        yield* startSupervisor([Work, done.job, ok.job], {
          capsules: [{ name: "c", queues: [queue], concurrency: 2 }]
        })
        // the batch row is locked so that the ends of the members archived meanwhile wait on it,
        // in flight; then every other connection is terminated
        const blocked = yield* terminateWhileWaiting(
          "pgbus.batches",
          Effect.void,
          `%DELETE FROM "pgbus"."batch_executions"%`
        )
        assert.isAbove(blocked, 0, "a statement in flight was terminated")
        const [finish] = yield* takeN(done.received, 1).pipe(Effect.timeout("20 seconds"))
        yield* takeN(ok.received, 1).pipe(Effect.timeout("5 seconds"))
        assert.strictEqual(finish!.payload.completedJobs, ids.length)
        assert.deepStrictEqual(yield* snapshot(batch.id), {
          total: ids.length,
          completed: ids.length,
          failed: 0,
          rows: 0,
          status: "finished"
        })
        // a few more sweeps: the callbacks are not sent again
        yield* Effect.sleep("1500 millis")
        assert.strictEqual(yield* Queue.size(done.received), 0, "onFinish once")
        assert.strictEqual(yield* Queue.size(ok.received), 0, "onSuccess once")
      }).pipe(
        Effect.scoped,
        // the sweep counts the members whose end was lost with its connection
        Effect.provide(
          TestDatabase.layer({
            pollingInterval: "50 millis",
            visibilityTimeout: "2 seconds",
            dispatchInterval: "200 millis",
            batchSweepInterval: "300 millis",
            batchStallThreshold: "1 second"
          }),
          { local: true }
        )
      )
    )
  })

  describe("finished batches", () => {
    it.effect(
      "adding to a finished batch through a stale handle fails with AlreadyFinished before a message is sent",
      () =>
        Effect.gen(function* () {
          const queue = unique("batch_stale")
          const Work = Job.make("StaleWork", { payload: Payload, queue }, () => Effect.void)
          // the callback goes to a queue nobody serves: the members' queue is left to the members
          const done = yield* callbackJob("StaleDone", unique("batch_stale_cb"))
          const store = yield* QueueStore
          const stale = yield* Batch.make({ onFinish: done.job })
          yield* stale.enqueue(Work.enqueue({ id: 1 }))
          yield* startSupervisor([Work], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
          yield* eventually(
            "the batch finished and sent its callback",
            Effect.map(store.browse(done.job.queue!), (rows) => rows.length === 1)
          )
          const archivedBefore = (yield* store.metrics(queue)).archiveSize
          assert.strictEqual(archivedBefore, 1)
          assert.strictEqual(stale.status, "pending", "the handle still says pending")

          let ran = false
          const error = yield* Effect.flip(
            stale.enqueue(
              Effect.sync(() => {
                ran = true
              }).pipe(Effect.andThen(Work.enqueue({ id: 2 })))
            )
          )
          assert.strictEqual(error._tag, "AlreadyFinished")
          assert.isFalse(ran, "the block did not run")
          // nor through a fresh handle
          const fresh = yield* Batch.find(stale.id)
          assert.strictEqual((yield* Effect.flip(fresh.enqueue(Work.enqueue({ id: 3 }))))._tag, "AlreadyFinished")
          const metrics = yield* store.metrics(queue)
          assert.strictEqual(metrics.depth, 0, "no message was sent")
          assert.strictEqual(metrics.archiveSize, archivedBefore)
          assert.deepStrictEqual(yield* snapshot(stale.id), {
            total: 1,
            completed: 1,
            failed: 0,
            rows: 0,
            status: "finished"
          })
        }).pipe(Effect.scoped)
    )

    it.effect("the batch cannot finish while an enqueue block is open, even with every member done", () =>
      Effect.gen(function* () {
        const queue = unique("batch_open")
        const Work = Job.make("OpenWork", { payload: Payload, queue }, () => Effect.void)
        const done = yield* callbackJob("OpenDone", queue)
        const batch = yield* Batch.make({ onFinish: done.job })
        const first = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        yield* startSupervisor([Work, done.job], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        const block = yield* batch
          .enqueue(
            Effect.gen(function* () {
              yield* Work.enqueue({ id: 1 })
              yield* Deferred.succeed(first, undefined)
              yield* Deferred.await(release)
              yield* Work.enqueue({ id: 2 })
            })
          )
          .pipe(Effect.forkChild)
        yield* Deferred.await(first)
        yield* eventually(
          "the first member is done",
          Effect.map(snapshot(batch.id), (s) => s.completed === 1)
        )
        assert.strictEqual((yield* snapshot(batch.id)).status, "pending")
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(block)
        const [finish] = yield* takeN(done.received, 1)
        assert.strictEqual(finish!.payload.totalJobs, 2)
        assert.strictEqual(finish!.payload.completedJobs, 2)
      }).pipe(Effect.scoped)
    )
  })

  describe("bad input", () => {
    it.effect("bad options fail with InvalidBatchOptions naming the option, and write nothing", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const count = Effect.map(sql<{ readonly n: bigint }>`SELECT count(*) AS n FROM pgbus.batches`, ([r]) =>
          Number(r!.n)
        )
        const before = yield* count
        const queue = unique("batch_bad")
        const done = Job.make("BadDone", { payload: Batch.Finished, queue }, () => Effect.void)
        const cases: ReadonlyArray<[unknown, string]> = [
          [{ properties: [1, 2] }, "properties"],
          [{ properties: { big: 1n } }, "properties"],
          [{ description: "x".repeat(1_001) }, "description"],
          [{ onFinish: "BadDone" }, "onFinish"],
          [{ onSuccess: { job: done, delay: -5 } }, "onSuccess"],
          [{ onFailure: { job: done, queue: "Not-A-Queue" } }, "onFailure"],
          [{ onFinish: { job: done, queue: "some_dlq" } }, "onFinish"],
          [{ onFinish: { job: done, retries: 3 } }, "onFinish"],
          [{ onDone: done }, "onDone"]
        ]
        for (const [options, option] of cases) {
          const error = yield* Effect.flip(Batch.make(options as Batch.BatchOptions))
          assert.strictEqual(error._tag, "InvalidBatchOptions", `${option}: ${JSON.stringify(String(options))}`)
          if (error._tag === "InvalidBatchOptions") assert.strictEqual(error.option, option)
        }
        assert.strictEqual(yield* count, before)
      })
    )

    it.effect("an unknown or malformed id is BatchNotFound", () =>
      Effect.gen(function* () {
        assert.strictEqual((yield* Effect.flip(Batch.find("not-a-uuid")))._tag, "BatchNotFound")
        assert.strictEqual(
          (yield* Effect.flip(Batch.find("00000000-0000-4000-8000-000000000000")))._tag,
          "BatchNotFound"
        )
      })
    )
  })
})
