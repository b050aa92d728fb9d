import { assert, describe, layer } from "@effect/vitest"
import { Deferred, Effect, Layer, Ref, Schema } from "effect"
import * as Job from "../src/Job/Job.ts"
import { Operations } from "../src/Operations/Operations.ts"
import { REDACTED } from "../src/Operations/Redact.ts"
import type { Failure } from "../src/Queue/Message.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import { performNextStep } from "../src/Testing/Workflows.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const unique = (base: string) => `${base}_${n++}`
const Payload = Schema.Struct({ id: Schema.Number })
const failure: Failure = { errorClass: "SmtpError", message: "connection refused: password=hunter2", attempt: 1 }
const operator = { actor: "test:alice", reason: "testing" }

const testLayer = Operations.layer.pipe(
  Layer.provideMerge(
    TestDatabase.layer({
      pollingInterval: "50 millis",
      stallThreshold: "1 second",
      drainTimeout: "1 second",
      processHeartbeatInterval: "200 millis",
      staleProcessThreshold: "3 seconds"
    })
  )
)

/** Sends `count` messages to a queue, claims them and dead-letters them with `errorClass`. */
const deadLetterMany = (queue: string, count: number, errorClass = "SmtpError") =>
  Effect.gen(function* () {
    const store = yield* QueueStore
    yield* store.create(queue)
    yield* store.sendBatch(
      queue,
      Array.from({ length: count }, (_, i) => ({ message: { job: "Mail", payload: { i } } }))
    )
    const claimed = yield* store.read(queue, { limit: count })
    yield* Effect.forEach(
      claimed,
      (m) => store.moveToDeadLetter(queue, m, { source: "worker", failure: { ...failure, errorClass } }),
      { concurrency: 8 }
    )
  })

const Simple = Workflow.make("OpsSimple", { payload: Payload }, function* ({ payload }) {
  yield* Workflow.step("first", Effect.succeed(payload.id))
  yield* Workflow.sleep("nap", "1 hour")
  return yield* Workflow.step("second", Effect.succeed(payload.id))
})

layer(testLayer, { excludeTestServices: true, timeout: "60 seconds" })("operations", (it) => {
  describe("queues", () => {
    it.effect("a queue's figures say what waits, runs and retries, and its status in words", () =>
      Effect.gen(function* () {
        const ops = yield* Operations
        const store = yield* QueueStore
        const queue = unique("figures")
        yield* store.create(queue)
        yield* store.sendBatch(queue, [{ message: { job: "A", payload: 1 } }, { message: { job: "A", payload: 2 } }])
        yield* store.send(queue, { job: "B", payload: 3 }, { delay: "1 hour" })
        yield* store.send(queue, { job: "C", payload: 4 })
        const [claimed] = yield* store.read(queue, { claimedBy: "someone" })
        const [other] = yield* store.read(queue, { claimedBy: "someone" })
        yield* store.recordFailure(queue, other!, failure, "1 hour")
        const summary = yield* ops.queue(queue)
        assert.deepStrictEqual(
          [summary.depth, summary.ready, summary.scheduled, summary.running, summary.retrying],
          [4, 1, 1, 1, 1]
        )
        assert.isFalse(summary.paused)
        assert.include(summary.status, "1 ready")
        assert.include(summary.status, "1 retrying")
        assert.isAtLeast(summary.claimableLatencyMs, 0)
        assert.isTrue(claimed !== undefined)

        const running = yield* ops.jobs({ queue, state: "running" })
        assert.deepStrictEqual(
          running.jobs.map((j) => j.id),
          [String(claimed!.msgId)]
        )
        const retrying = yield* ops.jobs({ queue, state: "retrying" })
        assert.strictEqual(retrying.jobs[0]?.lastError?.class, "SmtpError")
        assert.strictEqual(retrying.jobs[0]?.lastError?.message, REDACTED, "error text is redacted by default")
        const shown = yield* ops.jobs({ queue, state: "retrying" }, { payloads: true })
        assert.include(shown.jobs[0]?.lastError?.message ?? "", "connection refused")

        // paging: one a page, every job once
        const seen: Array<string> = []
        let cursor: string | undefined
        do {
          const page: typeof running = yield* ops.jobs({ queue, limit: 1, cursor })
          seen.push(...page.jobs.map((j) => j.id))
          cursor = page.next ?? undefined
        } while (cursor !== undefined)
        assert.strictEqual(seen.length, 4)

        const detail = yield* ops.job(queue, String(claimed!.msgId))
        assert.strictEqual(detail.payload, REDACTED)
        const full = yield* ops.job(queue, String(claimed!.msgId), { payloads: true })
        assert.deepStrictEqual(full.payload, { job: "A", payload: 1 })
        const missing = yield* Effect.flip(ops.job(queue, "999999"))
        assert.strictEqual(missing._tag, "NotFound")
        const badQueue = yield* Effect.flip(ops.queue("no_such_queue"))
        assert.strictEqual(badQueue._tag, "NotFound")
      })
    )

    it.effect("a paused queue is not claimed from by any worker within a second; resume wakes them", () =>
      Effect.gen(function* () {
        const ops = yield* Operations
        const queue = unique("pausable")
        const ran = yield* Ref.make<ReadonlyArray<number>>([])
        const Work = Job.make("PausableWork", { payload: Payload, queue }, ({ id }) =>
          Ref.update(ran, (r) => [...r, id])
        )
        yield* startSupervisor([Work], { capsules: [{ name: "p", queues: [queue], concurrency: 2 }] })
        yield* Work.enqueue({ id: 0 })
        yield* eventually(
          "the first job runs",
          Effect.map(Ref.get(ran), (r) => r.length === 1)
        )

        const paused = yield* ops.pauseQueue(queue, operator)
        assert.isTrue(paused.paused)
        assert.strictEqual(paused.pause?.actor, "test:alice")
        assert.strictEqual(paused.pause?.reason, "testing")
        // every process reads the paused set twice a second
        yield* Effect.sleep("1 second")
        yield* Work.enqueue({ id: 1 })
        yield* Work.enqueue({ id: 2 })
        yield* Effect.sleep("1500 millis")
        assert.deepStrictEqual(yield* Ref.get(ran), [0], "nothing is claimed from a paused queue")
        assert.strictEqual((yield* ops.queue(queue)).ready, 2)

        const resumed = yield* ops.resumeQueue(queue, operator)
        assert.isFalse(resumed.paused)
        yield* eventually(
          "the waiting jobs run after the resume",
          Effect.map(Ref.get(ran), (r) => r.length === 3)
        )
      })
    )

    it.effect("purge deletes a queue's messages and says how many", () =>
      Effect.gen(function* () {
        const ops = yield* Operations
        const store = yield* QueueStore
        const queue = unique("purgeable")
        yield* store.create(queue)
        yield* store.sendBatch(queue, [{ message: 1 }, { message: 2 }, { message: 3 }])
        const result = yield* ops.purgeQueue(queue, operator)
        assert.strictEqual(result.purged, 3)
        assert.strictEqual((yield* ops.queue(queue)).depth, 0)
      })
    )
  })

  describe("dead letters", () => {
    it.effect("lists by queue and error class, shows one redacted, retries and discards", () =>
      Effect.gen(function* () {
        const ops = yield* Operations
        const queue = unique("dlqlist")
        yield* deadLetterMany(queue, 3, "SmtpError")
        yield* deadLetterMany(queue, 2, "Timeout")
        const all = yield* ops.deadLetters({ queue })
        assert.strictEqual(all.total, 5)
        const smtp = yield* ops.deadLetters({ queue, errorClass: "SmtpError" })
        assert.strictEqual(smtp.total, 3)
        assert.isTrue(smtp.deadLetters.every((d) => d.errorClass === "SmtpError" && d.origin === queue))
        const one = yield* ops.deadLetter(smtp.deadLetters[0]!.id)
        assert.strictEqual(one.payload, REDACTED)
        assert.strictEqual(one.errorMessage, REDACTED)
        const shown = yield* ops.deadLetter(smtp.deadLetters[0]!.id, { payloads: true })
        assert.include(shown.errorMessage ?? "", "connection refused")

        const retried = yield* ops.retryDeadLetter(smtp.deadLetters[0]!.id, operator)
        assert.strictEqual(retried.queue, queue)
        const again = yield* Effect.flip(ops.retryDeadLetter(smtp.deadLetters[0]!.id, operator))
        assert.strictEqual(again._tag, "NotFound")
        yield* ops.discardDeadLetter(smtp.deadLetters[1]!.id, operator)
        assert.strictEqual((yield* ops.deadLetters({ queue })).total, 3)
        assert.strictEqual((yield* ops.queue(queue)).ready, 1, "the retried one is back on its queue")
      })
    )

    it.effect("a bulk verb of 600 is refused by id and capped at 500 on a filter, already-moved-on counted", () =>
      Effect.gen(function* () {
        const ops = yield* Operations
        const queue = unique("dlqbulk")
        yield* deadLetterMany(queue, 600)
        const ids = Array.from({ length: 600 }, (_, i) => `${queue}_dlq:${i + 1}`)
        const refused = yield* Effect.flip(ops.retryDeadLetters({ ids }, operator))
        assert.strictEqual(refused._tag, "InvalidRequest")
        assert.strictEqual((yield* ops.deadLetters({ queue })).total, 600, "a refused call changes nothing")

        const page = yield* ops.deadLetters({ queue, limit: 10 })
        const some = page.deadLetters.map((d) => d.id)
        yield* ops.discardDeadLetter(some[0]!, operator)
        yield* ops.discardDeadLetter(some[1]!, operator)
        const explicit = yield* ops.retryDeadLetters({ ids: some }, operator)
        assert.deepStrictEqual([explicit.requested, explicit.moved, explicit.alreadyMovedOn], [10, 8, 2])
        assert.include(explicit.summary, "2 had already moved on")

        const capped = yield* ops.retryDeadLetters({ queue }, operator)
        assert.deepStrictEqual([capped.requested, capped.moved, capped.capped], [500, 500, true])
        const rest = yield* ops.retryDeadLetters({ queue }, operator)
        assert.deepStrictEqual([rest.requested, rest.moved, rest.capped], [90, 90, false])
        assert.strictEqual((yield* ops.deadLetters({ queue })).total, 0)
        assert.strictEqual((yield* ops.queue(queue)).ready, 598)
      })
    )
  })

  describe("workflows", () => {
    it.effect("lists with filters, scopes by resource, shows a run with its trail, redacted", () =>
      Effect.gen(function* () {
        const ops = yield* Operations
        const subject = unique("order")
        const mine = yield* Simple.start({ id: 1 }, { subject, resourceId: "tenant-a" })
        const theirs = yield* Simple.start({ id: 2 }, { resourceId: "tenant-b" })
        yield* Simple.start({ id: 3 }, { resourceId: "tenant-a" })

        const bySubject = yield* ops.workflows({ subject })
        assert.deepStrictEqual(
          bySubject.runs.map((r) => r.id),
          [mine.id]
        )
        assert.deepStrictEqual(bySubject.runs[0]!.availableActions, [
          "pause",
          "cancel",
          "run_now",
          "reschedule",
          "signal"
        ])
        assert.include(bySubject.runs[0]!.description, "Ready")

        const scoped = yield* ops.workflows({ workflow: "OpsSimple" }, { resourceId: "tenant-a" })
        assert.isTrue(scoped.runs.every((r) => r.resourceId === "tenant-a"))
        assert.strictEqual(scoped.runs.length, 2)
        const hidden = yield* Effect.flip(ops.workflow(theirs.id, { resourceId: "tenant-a" }))
        assert.strictEqual(hidden._tag, "NotFound", "another tenant's run is not found")
        const denied = yield* Effect.flip(ops.act(theirs.id, "cancel", operator, { resourceId: "tenant-a" }))
        assert.strictEqual(denied._tag, "NotFound", "nor can it be acted on")
        assert.strictEqual((yield* (yield* WorkflowClient).get(theirs.id)).info.status, "ready")

        const detail = yield* ops.workflow(mine.id)
        assert.strictEqual(detail.run.payload, REDACTED)
        assert.deepStrictEqual(
          detail.events.map((e) => e.type),
          ["started"]
        )
        const shown = yield* ops.workflow(mine.id, { payloads: true })
        assert.deepStrictEqual(shown.run.payload, { id: 1 })

        const before = yield* ops.workflows({ workflow: "OpsSimple", step: "nap", subject })
        assert.strictEqual(before.runs.length, 0)
        yield* performNextStep(mine.id).pipe(Effect.provide(Registry.layer([Simple])))
        const byStep = yield* ops.workflows({ workflow: "OpsSimple", step: "nap", subject })
        assert.deepStrictEqual(
          byStep.runs.map((r) => r.id),
          [mine.id]
        )
        assert.include(byStep.runs[0]!.description, "`nap`")
        const bad = yield* Effect.flip(ops.workflows({ id: "not-a-uuid" }))
        assert.strictEqual(bad._tag, "InvalidRequest")
      })
    )

    it.effect("a verb records actor and reason; an illegal one is a Conflict naming the current status", () =>
      Effect.gen(function* () {
        const ops = yield* Operations
        const run = yield* Simple.start({ id: 1 })
        const paused = yield* ops.act(run.id, "pause", operator)
        assert.strictEqual("verb" in paused ? paused.run.status : "", "paused")
        const events = yield* (yield* WorkflowClient).events(run.id)
        const pauseEvent = events.find((e) => e.type === "paused")
        assert.strictEqual(pauseEvent?.actor, "test:alice")
        assert.strictEqual(pauseEvent?.reason, "testing")

        const conflict = yield* Effect.flip(ops.act(run.id, "pause", operator))
        assert.strictEqual(conflict._tag, "Conflict")
        if (conflict._tag === "Conflict") {
          assert.strictEqual(conflict.current, "paused")
          assert.deepStrictEqual(conflict.allowed, ["resume", "resume_at", "cancel", "signal"])
        }
        const mismatch = yield* Effect.flip(ops.act(run.id, "cancel", { ...operator, expectedStatus: "ready" }))
        assert.strictEqual(mismatch._tag, "Conflict")
        if (mismatch._tag === "Conflict") assert.strictEqual(mismatch.reason, "status_mismatch")
        assert.strictEqual((yield* ops.workflowSummary(run.id)).status, "paused", "a refused verb changes nothing")

        const counts = yield* ops.workflowCounts({ workflow: "OpsSimple" })
        assert.isAtLeast(counts.byStatus.paused ?? 0, 1)
        assert.isAtLeast(counts.stuck.paused_manual ?? 0, 1)
        const groups = yield* ops.needsAttention({ workflow: "OpsSimple" })
        const manual = groups.find((g) => g.stuckReason === "paused_manual")
        assert.isAtLeast(manual?.count ?? 0, 1)
        const stuckList = yield* ops.workflows({ workflow: "OpsSimple", stuckReason: "paused_manual" })
        assert.isTrue(stuckList.runs.some((r) => r.id === run.id))
      })
    )

    it.effect("a bulk verb of 600 runs is refused by id and capped at 500 on a filter, already-moved-on counted", () =>
      Effect.gen(function* () {
        const ops = yield* Operations
        const Bulk = Workflow.make("OpsBulk", { payload: Payload }, function* ({ payload }) {
          return yield* Workflow.step("only", Effect.succeed(payload.id))
        })
        const runs = yield* Effect.forEach(
          Array.from({ length: 600 }, (_, i) => i),
          (id) => Bulk.start({ id }),
          {
            concurrency: 20
          }
        )
        const ids = runs.map((r) => r.id)
        const refused = yield* Effect.flip(ops.actMany("pause", { ids }, operator))
        assert.strictEqual(refused._tag, "InvalidRequest")
        const counts = yield* ops.workflowCounts({ workflow: "OpsBulk" })
        assert.strictEqual(counts.byStatus.ready, 600, "a refused bulk verb changes nothing")

        // cancel two first: they have moved on when the bulk pause reaches them
        yield* ops.act(ids[0]!, "cancel", operator)
        yield* ops.act(ids[1]!, "cancel", operator)
        const some = yield* ops.actMany("pause", { ids: ids.slice(0, 10) }, operator)
        assert.deepStrictEqual([some.requested, some.moved, some.alreadyMovedOn, some.failed], [10, 8, 2, 0])
        assert.include(some.summary, "Paused 8; 2 had already moved on")

        const capped = yield* ops.actMany("pause", { filter: { workflow: "OpsBulk", status: ["ready"] } }, operator)
        assert.deepStrictEqual([capped.requested, capped.moved, capped.capped], [500, 500, true])
        const rest = yield* ops.actMany("pause", { filter: { workflow: "OpsBulk", status: ["ready"] } }, operator)
        assert.deepStrictEqual([rest.requested, rest.moved, rest.capped], [90, 90, false])
        const after = yield* ops.workflowCounts({ workflow: "OpsBulk" })
        assert.deepStrictEqual([after.byStatus.paused, after.byStatus.cancelled], [598, 2])
      })
    )
  })

  describe("cluster", () => {
    it.effect("processes say their status in words; a wedged worker makes the verdict STALLED", () =>
      Effect.gen(function* () {
        const ops = yield* Operations
        const queue = unique("wedged")
        const started = yield* Deferred.make<void>()
        const Stuck = Job.make("Wedge", { payload: Payload, queue }, () =>
          Deferred.succeed(started, undefined).pipe(Effect.andThen(Effect.never))
        )
        yield* startSupervisor([Stuck], { capsules: [{ name: "w", queues: [queue], concurrency: 1 }] })
        yield* Stuck.enqueue({ id: 1 })
        yield* Deferred.await(started)
        yield* Stuck.enqueue({ id: 2 })
        const processes = yield* ops.processes
        const mine = processes.find((p) => p.capsules.some((c) => c.queues.includes(queue)))
        assert.strictEqual(mine?.status, "healthy")
        assert.include(mine?.statusText ?? "", "healthy: beat")
        yield* eventually(
          "the verdict goes STALLED while the process beats",
          Effect.map(ops.health, (v) => v.status === "STALLED" && v.stalledQueues.includes(queue)),
          "15 seconds"
        )
        const verdict = yield* ops.health
        assert.isTrue(verdict.reasons.some((r) => r.includes(queue) && r.includes("beat")))
        const overview = yield* ops.overview
        assert.strictEqual(overview.verdict.status, "STALLED")
        assert.isAtLeast(overview.queues.ready, 1)
        assert.isTrue(overview.processes.some((p) => p.id === mine?.id))
      })
    )
  })
})
