import { assert, describe, layer } from "@effect/vitest"
import { Effect, Layer, Result, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Http from "../src/Http/Http.ts"
import * as Job from "../src/Job/Job.ts"
import type { Failure } from "../src/Queue/Message.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import * as Recurring from "../src/Recurring/Recurring.ts"
import { RecurringScheduler } from "../src/Recurring/Scheduler.ts"
import { Registry } from "../src/Registry.ts"
import { performNextStep } from "../src/Testing/Workflows.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { family, familyRegistry } from "./support/family.ts"
import { type Call, webCaller } from "./support/http.ts"
import { freePort } from "./support/ports.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const unique = (base: string) => `${base}_${n++}`
const Payload = Schema.Struct({ id: Schema.Number })
const failure: Failure = { errorClass: "SmtpError", message: "refused", attempt: 1 }

const Flow = Workflow.make(
  "HttpFlow",
  { payload: Payload, signals: { go: Schema.Struct({ n: Schema.Number }) } },
  function* ({ payload, waitForSignal }) {
    yield* Workflow.step("first", Effect.succeed(payload.id))
    const go = yield* waitForSignal("go")
    yield* Workflow.sleep("nap", "1 hour")
    return go.n
  }
)
const step = (id: string) => performNextStep(id).pipe(Effect.provide(Registry.layer([Flow])))

/** The API with a header-driven caller: `x-role` (read|write|deny) and `x-tenant`. */
const hooked: Http.ApiOptions = {
  resolveContext: (request) => {
    const tenant = request.headers["x-tenant"]
    return tenant === "forbidden" ? Effect.fail(new Error("unknown tenant")) : Effect.succeed({ resourceId: tenant })
  },
  authorize: (request) => {
    const role = request.headers["x-role"]
    if (role === "deny" || role === undefined) return Effect.fail(new Error("no session"))
    return Effect.succeed({ actor: "alice", role: role === "write" ? "write" : "read" })
  }
}
const writer = { "x-role": "write" }
const reader = { "x-role": "read" }
const api = "/pgbus/api"

const withApi = (options: Http.ApiOptions) => webCaller(Http.layer(options), Http.routerConfig)

/** Starts a run, runs its first step: it waits for `go`. */
const waitingRun = (resourceId?: string) =>
  Effect.gen(function* () {
    const run = yield* Flow.start({ id: 1 }, resourceId === undefined ? {} : { resourceId })
    yield* step(run.id)
    return run.id
  })

const deadLetter = (queue: string) =>
  Effect.gen(function* () {
    const store = yield* QueueStore
    yield* store.create(queue)
    yield* store.send(queue, { job: "Mail", payload: { secret: "x" } })
    const [m] = yield* store.read(queue)
    yield* store.moveToDeadLetter(queue, m!, { source: "worker", failure })
    return `${queue}_dlq:${m!.msgId}`
  })

layer(TestDatabase.layer({ pollingInterval: "50 millis" }), { excludeTestServices: true, timeout: "60 seconds" })(
  "json api",
  (it) => {
    describe("reads", () => {
      it.effect("every read route answers; payloads are redacted for readers; OpenAPI and docs are served", () =>
        Effect.gen(function* () {
          const call: Call = yield* withApi({})
          const queue = unique("readq")
          const dlqId = yield* deadLetter(queue)
          const store = yield* QueueStore
          const msgId = yield* store.send(queue, { job: "Mail", payload: { to: "a" } })
          const runId = yield* waitingRun()

          const routes = [
            "/health",
            "/overview",
            "/processes",
            "/queues",
            `/queues/${queue}`,
            `/queues/${queue}/jobs?state=ready&limit=10`,
            `/queues/${queue}/jobs/${msgId}`,
            `/dead-letters?queue=${queue}&errorClass=SmtpError`,
            `/dead-letters/${dlqId}`,
            "/workflows?workflow=HttpFlow&status=waiting,ready",
            "/workflows/counts?workflow=HttpFlow",
            "/workflows/attention",
            "/workflows/definitions?windowMs=3600000",
            "/workflows/definitions/HttpFlow",
            `/workflows/${runId}`,
            "/events",
            "/outbox?state=pending",
            "/batches?status=pending",
            "/recurring"
          ]
          for (const route of routes) {
            const answer = yield* call("GET", `${api}${route}`)
            assert.strictEqual(answer.status, 200, `${route}: ${answer.text}`)
            assert.include(answer.contentType, "application/json", route)
          }

          const job = yield* call("GET", `${api}/queues/${queue}/jobs/${msgId}`)
          assert.strictEqual(job.json.payload, "[redacted]")
          const dead = yield* call("GET", `${api}/dead-letters/${dlqId}`)
          assert.deepStrictEqual([dead.json.errorClass, dead.json.payload], ["SmtpError", "[redacted]"])
          const run = yield* call("GET", `${api}/workflows/${runId}`)
          assert.strictEqual(run.json.run.status, "waiting")
          assert.include(run.json.run.description, "Waiting for signal `go`")
          assert.deepStrictEqual(run.json.run.availableActions, ["pause", "cancel", "skip", "signal"])
          assert.strictEqual(run.json.run.payload, "[redacted]")
          const list = yield* call("GET", `${api}/workflows?workflow=HttpFlow&limit=1`)
          assert.strictEqual(list.json.runs.length, 1)

          const openapi = yield* call("GET", `${api}/openapi.json`)
          assert.strictEqual(openapi.status, 200)
          assert.strictEqual(openapi.json.info.title, "effect-pgbus operations API")
          assert.property(openapi.json.paths, `${api}/workflows/{id}/cancel`)
          assert.property(openapi.json.paths, `${api}/queues/{queue}/pause`)
          assert.property(openapi.json.paths, `${api}/recurring`)
          assert.property(openapi.json.paths, `${api}/recurring/{key}/run-now`)
          const docs = yield* call("GET", `${api}/docs`)
          assert.strictEqual(docs.status, 200)
          assert.include(docs.contentType, "text/html")

          const live = yield* call("GET", `${api}/livez`)
          assert.strictEqual(live.status, 200)
          const ready = yield* call("GET", `${api}/readyz`)
          assert.include(["OK", "DEGRADED"], ready.json.status)
          assert.strictEqual(ready.status, 200)

          const missing = yield* call("GET", `${api}/workflows/00000000-0000-4000-8000-000000000000`)
          assert.deepStrictEqual([missing.status, missing.json.error], [404, "not_found"])
          const noQueue = yield* call("GET", `${api}/queues/nope_nope`)
          assert.strictEqual(noQueue.status, 404)
          const badLimit = yield* call("GET", `${api}/workflows?limit=abc`)
          assert.deepStrictEqual([badLimit.status, badLimit.json.error], [400, "validation"])
          const badStatus = yield* call("GET", `${api}/workflows?status=sleeping`)
          assert.strictEqual(badStatus.status, 400)
          const badTime = yield* call("GET", `${api}/workflows?createdFrom=yesterday`)
          assert.strictEqual(badTime.status, 400)
        })
      )

      it.effect("a writer with payloads allowed sees them", () =>
        Effect.gen(function* () {
          const call = yield* withApi(hooked)
          const queue = unique("payq")
          const store = yield* QueueStore
          yield* store.create(queue)
          const msgId = yield* store.send(queue, { job: "Mail", payload: { to: "a", token: "t0ps3cret" } })
          const asWriter = yield* call("GET", `${api}/queues/${queue}/jobs/${msgId}`, undefined, writer)
          assert.deepStrictEqual(asWriter.json.payload, { job: "Mail", payload: { to: "a", token: "[FILTERED]" } })
          const asReader = yield* call("GET", `${api}/queues/${queue}/jobs/${msgId}`, undefined, reader)
          assert.strictEqual(asReader.json.payload, "[redacted]")
        })
      )
    })

    describe("closed by default", () => {
      it.effect("writes answer 403 without a hook, 401 when the hook refuses, 403 to a reader", () =>
        Effect.gen(function* () {
          const open = yield* withApi({})
          const runId = yield* waitingRun()
          const noHook = yield* open("POST", `${api}/workflows/${runId}/cancel`, { reason: "x" })
          assert.deepStrictEqual([noHook.status, noHook.json.error], [403, "forbidden"])
          assert.include(noHook.json.message, "no authorize hook")
          const queue = unique("closedq")
          yield* (yield* QueueStore).create(queue)
          const noPause = yield* open("POST", `${api}/queues/${queue}/pause`, {})
          assert.strictEqual(noPause.status, 403)

          const call = yield* withApi(hooked)
          const denied = yield* call("POST", `${api}/workflows/${runId}/cancel`, {}, { "x-role": "deny" })
          assert.deepStrictEqual([denied.status, denied.json.error], [401, "unauthorized"])
          const deniedRead = yield* call("GET", `${api}/queues`, undefined, { "x-role": "deny" })
          assert.strictEqual(deniedRead.status, 401)
          const badTenant = yield* call("GET", `${api}/workflows`, undefined, { ...reader, "x-tenant": "forbidden" })
          assert.strictEqual(badTenant.status, 401)
          const asReader = yield* call("POST", `${api}/workflows/${runId}/cancel`, {}, reader)
          assert.deepStrictEqual([asReader.status, asReader.json.error], [403, "forbidden"])
          assert.strictEqual((yield* (yield* WorkflowClient).get(runId)).info.status, "waiting", "nothing changed")

          const done = yield* call("POST", `${api}/workflows/${runId}/cancel`, { reason: "customer asked" }, writer)
          assert.strictEqual(done.status, 200, done.text)
          assert.strictEqual(done.json.run.status, "cancelled")
          const events = yield* (yield* WorkflowClient).events(runId)
          const cancelled = events.find((e) => e.type === "cancelled")
          assert.deepStrictEqual([cancelled?.actor, cancelled?.reason], ["api:alice", "customer asked"])
        })
      )

      it.effect(
        "tenant scoping: another tenant's run is 404, lists hold only the caller's, cluster routes are 403",
        () =>
          Effect.gen(function* () {
            const call = yield* withApi(hooked)
            const mine = yield* waitingRun("acme")
            const theirs = yield* waitingRun("globex")
            const acme = { ...writer, "x-tenant": "acme" }
            assert.strictEqual((yield* call("GET", `${api}/workflows/${mine}`, undefined, acme)).status, 200)
            const other = yield* call("GET", `${api}/workflows/${theirs}`, undefined, acme)
            assert.deepStrictEqual([other.status, other.json.error], [404, "not_found"])
            const act = yield* call("POST", `${api}/workflows/${theirs}/pause`, {}, acme)
            assert.strictEqual(act.status, 404)
            assert.strictEqual((yield* (yield* WorkflowClient).get(theirs)).info.status, "waiting")
            const list = yield* call("GET", `${api}/workflows?workflow=HttpFlow`, undefined, acme)
            assert.isTrue(list.json.runs.length >= 1)
            assert.isTrue(list.json.runs.every((r: { resourceId: string }) => r.resourceId === "acme"))
            const bulk = yield* call("POST", `${api}/workflows/bulk/pause`, { ids: [mine, theirs] }, acme)
            assert.deepStrictEqual([bulk.json.moved, bulk.json.alreadyMovedOn], [1, 1])
            assert.strictEqual((yield* (yield* WorkflowClient).get(theirs)).info.status, "waiting")
            const queues = yield* call("GET", `${api}/queues`, undefined, acme)
            assert.strictEqual(queues.status, 403)
            const health = yield* call("GET", `${api}/health`, undefined, acme)
            assert.strictEqual(health.status, 200, "the verdict carries no tenant data")
          })
      )
    })

    describe("writes", () => {
      it.effect("flow controls: locks and rates read, a key released, a rate set and reset, all audited", () =>
        Effect.gen(function* () {
          const queue = unique("flowq")
          const Rated = Job.make(
            unique("HttpRated"),
            { payload: Payload, queue, rate: { limit: 5, period: "1 second" } },
            () => Effect.void
          )
          const Once = Job.make(
            unique("HttpOnce"),
            { payload: Payload, queue, unique: { key: ({ id }) => `order-${id}` } },
            () => Effect.void
          )
          const call = yield* withApi(hooked).pipe(Effect.provide(Registry.layer([Rated, Once])))
          const held = yield* Once.enqueue({ id: 42 })

          const locks = yield* call("GET", `${api}/locks`, undefined, reader)
          assert.strictEqual(locks.status, 200, locks.text)
          const key = locks.json.unique.keys.find((k: { job: string }) => k.job === Once.name)
          assert.deepStrictEqual([key?.key, key?.strategy, key?.holder], ["order-42", "untilExecuted", held.id])
          assert.strictEqual(
            (yield* call("GET", `${api}/locks`, undefined, { ...reader, "x-tenant": "acme" })).status,
            403
          )

          const release = { job: Once.name, key: "order-42", reason: "stuck holder" }
          const asReader = yield* call("POST", `${api}/locks/unique/release`, release, reader)
          assert.strictEqual(asReader.status, 403)
          const released = yield* call("POST", `${api}/locks/unique/release`, release, writer)
          assert.strictEqual(released.status, 200, released.text)
          assert.strictEqual(released.json.holder, held.id)
          const again = yield* call("POST", `${api}/locks/unique/release`, release, writer)
          assert.strictEqual(again.status, 404, "the key is gone")
          yield* Once.enqueue({ id: 42 }) // the key can be taken again

          const rates = yield* call("GET", `${api}/rates`, undefined, reader)
          const defined = rates.json.find((r: { job: string }) => r.job === Rated.name)
          assert.deepStrictEqual([defined?.defined, defined?.override], [{ limit: 5, periodMs: 1000 }, null])
          const rate = `${api}/rates/${Rated.name}`
          const badPeriod = yield* call("PUT", rate, { limit: 10, period: "soon" }, writer)
          assert.deepStrictEqual([badPeriod.status, badPeriod.json.error], [400, "validation"])
          const badLimit = yield* call("PUT", rate, { limit: 0, period: "1 second" }, writer)
          assert.strictEqual(badLimit.status, 400)
          assert.strictEqual((yield* call("PUT", rate, { limit: 10, period: "1 second" }, reader)).status, 403)
          const set = yield* call("PUT", rate, { limit: 50, period: "2 seconds", reason: "partner raised it" }, writer)
          assert.strictEqual(set.status, 200, set.text)
          assert.deepStrictEqual(set.json.effective, { limit: 50, periodMs: 2000 })
          assert.deepStrictEqual(
            [set.json.override.actor, set.json.override.reason],
            ["api:alice", "partner raised it"]
          )
          const reset = yield* call("POST", `${rate}/reset`, { reason: "back" }, writer)
          assert.strictEqual(reset.status, 200, reset.text)
          assert.deepStrictEqual([reset.json.override, reset.json.effective], [null, { limit: 5, periodMs: 1000 }])
        })
      )

      it.effect(
        "recurring tasks: listed with last and next fire; run-now enqueues (the ledger row names its message), starts a registered workflow's schedule, refuses bad keys and tenants",
        () =>
          Effect.gen(function* () {
            const queue = unique("recq")
            const Nightly = Job.make(unique("HttpNightly"), { payload: Payload, queue }, () => Effect.void)
            const Sync = Workflow.make(
              "HttpSync",
              { payload: Payload, schedule: "every day at 3am", schedulePayload: { id: 9 } },
              function* (run) {
                return yield* Workflow.step("sync", Effect.succeed(run.payload.id))
              }
            )
            const nightly = Recurring.make("http-nightly", {
              schedule: "0 2 * * *",
              timezone: "Europe/Berlin",
              job: Nightly,
              payload: { id: 1 },
              description: "the nightly report"
            })
            const sync = Result.getOrThrow(Recurring.fromWorkflow(Sync))!
            yield* (yield* RecurringScheduler).sync([nightly, sync])
            const sql = yield* SqlClient.SqlClient
            const ledger = (key: string) =>
              sql<{
                readonly manual: boolean
                readonly msg_id: bigint | null
                readonly actor: string | null
                readonly reason: string | null
              }>`SELECT manual, msg_id, actor, reason FROM pgbus.recurring_executions WHERE task_key = ${key}
                ORDER BY run_at`
            const bare = yield* withApi(hooked)
            const loaded = yield* withApi(hooked).pipe(Effect.provide(Registry.layer([Sync])))

            const listed = yield* bare("GET", `${api}/recurring`, undefined, reader)
            assert.strictEqual(listed.status, 200, listed.text)
            const row = listed.json.find((t: { key: string }) => t.key === "http-nightly")
            assert.deepStrictEqual(
              [row.kind, row.job, row.workflow, row.queue, row.timeZone, row.description, row.lastRunAt, row.fires],
              ["job", Nightly.name, null, queue, "Europe/Berlin", "the nightly report", null, 0]
            )
            assert.isNull(row.lastManualRun, "never run by hand")
            // 02:00 in Berlin is 00:00 or 01:00 UTC
            assert.match(row.nextRunAt, /T0[01]:00:00\.000Z$/)
            const flowRow = listed.json.find((t: { key: string }) => t.key === "workflow:HttpSync")
            assert.deepStrictEqual([flowRow.kind, flowRow.job, flowRow.workflow], ["workflow", null, "HttpSync"])
            const tenant = yield* bare("GET", `${api}/recurring`, undefined, { ...reader, "x-tenant": "acme" })
            assert.strictEqual(tenant.status, 403)
            const overview = yield* bare("GET", `${api}/overview`, undefined, reader)
            assert.strictEqual(overview.json.recurring.total, 2)
            assert.include(["http-nightly", "workflow:HttpSync"], overview.json.recurring.nextTask)

            const run = `${api}/recurring/http-nightly/run-now`
            assert.strictEqual((yield* bare("POST", run, { reason: "x" }, reader)).status, 403, "a reader")
            const scoped = yield* bare("POST", run, { reason: "x" }, { ...writer, "x-tenant": "acme" })
            assert.deepStrictEqual([scoped.status, scoped.json.error], [403, "forbidden"], "a tenant-scoped caller")
            assert.strictEqual((yield* ledger("http-nightly")).length, 0, "refused: nothing fired")
            // a reason past the workflow verbs' bound (500) is a 400 before anything runs
            const tooLong = yield* bare("POST", run, { reason: "r".repeat(501) }, writer)
            assert.deepStrictEqual([tooLong.status, tooLong.json.error], [400, "validation"], tooLong.text)
            assert.strictEqual((yield* ledger("http-nightly")).length, 0, "too long a reason: nothing fired")
            const fired = yield* bare("POST", run, { reason: "report needed now" }, writer)
            assert.strictEqual(fired.status, 200, fired.text)
            const messages = yield* (yield* QueueStore).browse(queue)
            assert.deepStrictEqual(
              messages.map((m) => m.message),
              [{ job: Nightly.name, payload: { id: 1 } }],
              "one message: the refused calls enqueued nothing"
            )
            assert.deepStrictEqual(
              [fired.json.task, fired.json.messageId, fired.json.runId],
              ["http-nightly", `${queue}:${messages[0]!.msgId}`, null]
            )
            assert.include(fired.json.summary, "enqueued http-nightly now")
            const rows = yield* ledger("http-nightly")
            // the ledger row names the authorize hook's actor and the reason
            assert.deepStrictEqual(
              rows.map((r) => [r.manual, r.msg_id, r.actor, r.reason]),
              [[true, messages[0]!.msgId, "api:alice", "report needed now"]]
            )
            const after = yield* bare("GET", `${api}/recurring`, undefined, reader)
            const ranRow = after.json.find((t: { key: string }) => t.key === "http-nightly")
            assert.deepStrictEqual([ranRow.lastRunAt, ranRow.fires], [fired.json.runAt, 1])
            assert.deepStrictEqual(ranRow.lastManualRun, {
              runAt: fired.json.runAt,
              actor: "api:alice",
              reason: "report needed now"
            })
            // the ledger's fires, newest first, name who ran it now and why
            const fires = yield* bare("GET", `${api}/recurring/http-nightly/executions`, undefined, reader)
            assert.strictEqual(fires.status, 200, fires.text)
            assert.deepStrictEqual(
              fires.json.map((e: Record<string, unknown>) => [
                e.runAt,
                e.manual,
                e.queue,
                e.messageId,
                e.actor,
                e.reason
              ]),
              [[fired.json.runAt, true, queue, `${queue}:${messages[0]!.msgId}`, "api:alice", "report needed now"]]
            )
            const badLimit = yield* bare("GET", `${api}/recurring/http-nightly/executions?limit=0`, undefined, reader)
            assert.strictEqual(badLimit.status, 400, badLimit.text)
            const noFires = yield* bare("GET", `${api}/recurring/no-such-task/executions`, undefined, reader)
            assert.deepStrictEqual([noFires.status, noFires.json.error], [404, "not_found"])

            const unknown = yield* bare("POST", `${api}/recurring/no-such-task/run-now`, {}, writer)
            assert.deepStrictEqual([unknown.status, unknown.json.error], [404, "not_found"])
            assert.include(unknown.json.message, "recurring task no-such-task not found")
            // a key may have 128 characters: past the router's default cap of 100, within Http.routerConfig
            const long = yield* bare("POST", `${api}/recurring/${"k".repeat(128)}/run-now`, {}, writer)
            assert.deepStrictEqual([long.status, long.json.error], [404, "not_found"])
            const blank = yield* bare("POST", `${api}/recurring/%20/run-now`, {}, writer)
            assert.deepStrictEqual([blank.status, blank.json.error], [400, "validation"])

            const flowRun = `${api}/recurring/${encodeURIComponent("workflow:HttpSync")}/run-now`
            const notLoaded = yield* bare("POST", flowRun, {}, writer)
            assert.deepStrictEqual([notLoaded.status, notLoaded.json.error], [400, "validation"])
            assert.include(notLoaded.json.message, "not registered in this process")
            assert.include(notLoaded.json.message, "Registry.layer")
            assert.strictEqual((yield* ledger("workflow:HttpSync")).length, 0, "nothing recorded")
            const started = yield* loaded("POST", flowRun, { reason: "sync now" }, writer)
            assert.strictEqual(started.status, 200, started.text)
            const runs = (yield* (yield* WorkflowClient).list({ workflow: "HttpSync" })).runs
            assert.deepStrictEqual(
              runs.map((r) => r.id),
              [started.json.runId]
            )
            assert.isNull(started.json.messageId)
            assert.deepStrictEqual(
              (yield* ledger("workflow:HttpSync")).map((r) => [r.manual, r.actor, r.reason]),
              [[true, "api:alice", "sync now"]]
            )
            // the run's own audit trail names who fired it, and why
            const [startEvent] = yield* (yield* WorkflowClient).events(started.json.runId)
            assert.strictEqual(startEvent!.actor, "api:alice")
            assert.match(startEvent!.reason ?? "", /^run now, slot .+: sync now$/)
          })
      )

      it.effect("every workflow verb goes through its guard; an illegal one is 409 with the current status", () =>
        Effect.gen(function* () {
          // with the workflow registered in the API's process, signals are checked against its Schemas
          const call = yield* withApi(hooked).pipe(Effect.provide(Registry.layer([Flow])))
          const id = yield* waitingRun()
          const run = `${api}/workflows/${id}`

          const illegal = yield* call("POST", `${run}/resume`, {}, writer)
          assert.deepStrictEqual(
            [illegal.status, illegal.json.error, illegal.json.status],
            [409, "conflict", "waiting"]
          )
          assert.deepStrictEqual(illegal.json.allowed, ["pause", "cancel", "skip", "signal"])
          const mismatch = yield* call("POST", `${run}/pause`, { expectedStatus: "ready" }, writer)
          assert.deepStrictEqual([mismatch.status, mismatch.json.status], [409, "waiting"])

          const badSignal = yield* call("POST", `${run}/signal`, { name: "go", payload: { n: "not a number" } }, writer)
          assert.strictEqual(badSignal.status, 400, "the declared Schema checks the payload")
          const signalled = yield* call(
            "POST",
            `${run}/signal`,
            { name: "go", payload: { n: 7 }, idempotencyKey: "k1" },
            writer
          )
          assert.strictEqual(signalled.status, 200, signalled.text)
          assert.isFalse(signalled.json.signal.duplicate)
          const again = yield* call(
            "POST",
            `${run}/signal`,
            { name: "go", payload: { n: 7 }, idempotencyKey: "k1" },
            writer
          )
          assert.isTrue(again.json.signal.duplicate)
          yield* step(id)
          const napping = yield* call("GET", run, undefined, writer)
          assert.deepStrictEqual([napping.json.run.status, napping.json.run.currentStep], ["ready", "nap"])

          const at = new Date(Date.now() + 7_200_000).toISOString()
          const rescheduled = yield* call("POST", `${run}/reschedule`, { at, reason: "later" }, writer)
          assert.strictEqual(rescheduled.status, 200, rescheduled.text)
          const badAt = yield* call("POST", `${run}/reschedule`, { at: "soon" }, writer)
          assert.strictEqual(badAt.status, 400)
          const now = yield* call("POST", `${run}/run-now`, {}, writer)
          assert.strictEqual(now.status, 200, now.text)
          const paused = yield* call("POST", `${run}/pause`, { reason: "look" }, writer)
          assert.strictEqual(paused.json.run.status, "paused")
          const resumedAt = yield* call("POST", `${run}/resume-at`, { step: "first" }, writer)
          assert.strictEqual(resumedAt.status, 200, resumedAt.text)
          yield* call("POST", `${run}/pause`, {}, writer)
          const unknownStep = yield* call("POST", `${run}/resume-at`, { step: "nope" }, writer)
          assert.strictEqual(unknownStep.status, 404)
          const resumed = yield* call("POST", `${run}/resume`, {}, writer)
          assert.strictEqual(resumed.status, 200)
          const cancelled = yield* call("POST", `${run}/cancel`, {}, writer)
          assert.strictEqual(cancelled.json.run.status, "cancelled")
          const rerun = yield* call("POST", `${run}/rerun`, { reason: "try again" }, writer)
          assert.strictEqual(rerun.status, 200, rerun.text)
          assert.notStrictEqual(rerun.json.run.id, id)

          const waiting = yield* waitingRun()
          const skipped = yield* call("POST", `${api}/workflows/${waiting}/skip`, {}, writer)
          assert.strictEqual(skipped.status, 200, skipped.text)
          assert.notStrictEqual(skipped.json.run.status, "waiting")

          const badBody = yield* call("POST", `${run}/pause`, { expectedStatus: "sleeping" }, writer)
          assert.deepStrictEqual([badBody.status, badBody.json.error], [400, "validation"])
        })
      )

      it.effect(
        "a run shows priority, singleton, schedule slot, parent and children; cancel leaves children, cancelChildren ends them (audited)",
        () =>
          Effect.gen(function* () {
            const call = yield* withApi(hooked).pipe(Effect.provide(familyRegistry))
            const { parentId, childId } = yield* family({ singleton: true })
            const parent = yield* call("GET", `${api}/workflows/${parentId}`, undefined, reader)
            assert.strictEqual(parent.status, 200, parent.text)
            assert.deepStrictEqual(
              [
                parent.json.run.priority,
                parent.json.run.singleton,
                parent.json.run.scheduledFor,
                parent.json.run.parentRunId
              ],
              [2, true, null, null]
            )
            assert.include(parent.json.run.description, "Waiting for its child run at `kid`")
            assert.deepStrictEqual(parent.json.children, [
              { id: childId, workflow: "FamilyKid", step: "kid", status: "ready" }
            ])
            const child = yield* call("GET", `${api}/workflows/${childId}`, undefined, reader)
            assert.deepStrictEqual(
              [child.json.run.parentRunId, child.json.run.parentStep, child.json.run.priority, child.json.children],
              [parentId, "kid", 2, []],
              "a child inherits its parent's priority"
            )
            const listed = yield* call("GET", `${api}/workflows?workflow=FamilyKid`, undefined, reader)
            const row = (
              listed.json.runs as ReadonlyArray<{ id: string; parentRunId: string; parentStep: string }>
            ).find((r) => r.id === childId)
            assert.deepStrictEqual([row?.parentRunId, row?.parentStep], [parentId, "kid"])

            const badFlag = yield* call(
              "POST",
              `${api}/workflows/${parentId}/cancel`,
              { cancelChildren: "yes" },
              writer
            )
            assert.deepStrictEqual([badFlag.status, badFlag.json.error], [400, "validation"])
            const alone = yield* call(
              "POST",
              `${api}/workflows/${parentId}/cancel`,
              { reason: "only the parent" },
              writer
            )
            assert.strictEqual(alone.status, 200, alone.text)
            assert.strictEqual(alone.json.run.status, "cancelled")
            const after = yield* call("GET", `${api}/workflows/${parentId}`, undefined, reader)
            assert.strictEqual(after.json.children[0].status, "ready", "without cancelChildren the child runs on")

            const second = yield* family()
            const both = yield* call(
              "POST",
              `${api}/workflows/${second.parentId}/cancel`,
              { reason: "the whole family", cancelChildren: true },
              writer
            )
            assert.strictEqual(both.status, 200, both.text)
            assert.include(both.json.summary, "it is cancelled (and 1 live child run(s))")
            const gone = yield* call("GET", `${api}/workflows/${second.parentId}`, undefined, reader)
            assert.strictEqual(gone.json.children[0].status, "cancelled")
            const kid = yield* call("GET", `${api}/workflows/${second.childId}`, undefined, reader)
            const cancelled = (kid.json.events as ReadonlyArray<{ type: string; actor: string; reason: string }>).find(
              (e) => e.type === "cancelled"
            )
            assert.deepStrictEqual([cancelled?.actor, cancelled?.reason], ["api:alice", "the whole family"])

            // in bulk too; and only with cancel
            const third = yield* family()
            const pauseWith = yield* call(
              "POST",
              `${api}/workflows/bulk/pause`,
              { ids: [third.parentId], cancelChildren: true },
              writer
            )
            assert.deepStrictEqual([pauseWith.status, pauseWith.json.error], [400, "validation"], pauseWith.text)
            const bulk = yield* call(
              "POST",
              `${api}/workflows/bulk/cancel`,
              { ids: [third.parentId], cancelChildren: true, reason: "bulk family" },
              writer
            )
            assert.strictEqual(bulk.status, 200, bulk.text)
            assert.strictEqual(bulk.json.moved, 1)
            const thirdKid = yield* call("GET", `${api}/workflows/${third.childId}`, undefined, reader)
            assert.strictEqual(thirdKid.json.run.status, "cancelled", "the bulk cancel ended the child too")
          })
      )

      it.effect("a bulk verb of 600 runs is refused; on a filter it is capped at 500, already-moved-on counted", () =>
        Effect.gen(function* () {
          const call = yield* withApi(hooked)
          const Many = Workflow.make("HttpMany", { payload: Payload }, function* () {
            return yield* Workflow.step("only", Effect.succeed(1))
          })
          const runs = yield* Effect.forEach(
            Array.from({ length: 600 }, (_, i) => i),
            (id) => Many.start({ id }),
            {
              concurrency: 20
            }
          )
          const ids = runs.map((r) => r.id)
          const refused = yield* call("POST", `${api}/workflows/bulk/cancel`, { ids }, writer)
          assert.deepStrictEqual([refused.status, refused.json.error], [400, "validation"])
          assert.include(refused.json.message, "at most 500")
          yield* call("POST", `${api}/workflows/${ids[0]}/pause`, {}, writer)
          const capped = yield* call(
            "POST",
            `${api}/workflows/bulk/cancel`,
            { filter: { workflow: "HttpMany", status: ["ready", "paused"] }, reason: "cleanup" },
            writer
          )
          assert.strictEqual(capped.status, 200, capped.text)
          assert.deepStrictEqual([capped.json.requested, capped.json.moved, capped.json.capped], [500, 500, true])
          const rest = yield* call("POST", `${api}/workflows/bulk/cancel`, { ids: ids.slice(0, 550) }, writer)
          assert.deepStrictEqual([rest.status, rest.json.error], [400, "validation"])
          const tail = yield* call("POST", `${api}/workflows/bulk/cancel`, { ids: ids.slice(100, 600) }, writer)
          assert.deepStrictEqual([tail.json.requested, tail.json.moved, tail.json.alreadyMovedOn], [500, 100, 400])
          assert.include(tail.json.summary, "400 had already moved on")
        })
      )

      it.effect("queue pause, resume and purge; dead-letter retry, discard and bulk", () =>
        Effect.gen(function* () {
          const call = yield* withApi(hooked)
          const queue = unique("writeq")
          const dlqId = yield* deadLetter(queue)
          const second = yield* deadLetter(queue)
          const third = yield* deadLetter(queue)

          const paused = yield* call("POST", `${api}/queues/${queue}/pause`, { reason: "incident 42" }, writer)
          assert.strictEqual(paused.status, 200, paused.text)
          assert.deepStrictEqual(
            [paused.json.paused, paused.json.pause.actor, paused.json.pause.reason],
            [true, "api:alice", "incident 42"]
          )
          const resumed = yield* call("POST", `${api}/queues/${queue}/resume`, {}, writer)
          assert.isFalse(resumed.json.paused)

          const retried = yield* call("POST", `${api}/dead-letters/${dlqId}/retry`, {}, writer)
          assert.strictEqual(retried.status, 200, retried.text)
          const gone = yield* call("POST", `${api}/dead-letters/${dlqId}/retry`, {}, writer)
          assert.strictEqual(gone.status, 404)
          const discarded = yield* call("POST", `${api}/dead-letters/${second}/discard`, {}, writer)
          assert.isTrue(discarded.json.discarded)
          const bulk = yield* call("POST", `${api}/dead-letters/retry`, { ids: [second, third] }, writer)
          assert.deepStrictEqual([bulk.json.moved, bulk.json.alreadyMovedOn], [1, 1])
          yield* deadLetter(queue)
          const discardAll = yield* call(
            "POST",
            `${api}/dead-letters/discard`,
            { queue, errorClass: "SmtpError" },
            writer
          )
          assert.deepStrictEqual([discardAll.json.requested, discardAll.json.moved], [1, 1])
          const tooMany = yield* call(
            "POST",
            `${api}/dead-letters/retry`,
            { ids: Array.from({ length: 501 }, (_, i) => `${queue}_dlq:${i + 1}`) },
            writer
          )
          assert.strictEqual(tooMany.status, 400)

          const purged = yield* call("POST", `${api}/queues/${queue}/purge`, { reason: "reset" }, writer)
          assert.deepStrictEqual([purged.status, purged.json.purged], [200, 2])
          const badId = yield* call("POST", `${api}/dead-letters/not-an-id/retry`, {}, writer)
          assert.strictEqual(badId.status, 400)
        })
      )
    })

    it.effect("serves standalone on a port of its own", () =>
      Effect.gen(function* () {
        const port = yield* freePort
        const context = yield* Effect.context<Http.ApiRequirements>()
        yield* Layer.build(Http.serve({ port }).pipe(Layer.provide(Layer.succeedContext(context))))
        const response = yield* Effect.promise(() => fetch(`http://127.0.0.1:${port}/pgbus/api/health`))
        assert.strictEqual(response.status, 200)
        const body = (yield* Effect.promise(() => response.json())) as { status: string }
        assert.include(["OK", "DEGRADED", "STALLED"], body.status)
      })
    )
  }
)
