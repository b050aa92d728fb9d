import { assert, describe, expect, layer } from "@effect/vitest"
import { Context, Deferred, Duration, Effect, Exit, Layer, Option, Schema, Tracer } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import { DatabaseError } from "../src/Database.ts"
import * as Job from "../src/Job/Job.ts"
import { JobClient, TRACEPARENT } from "../src/Job/JobClient.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { WorkerQueueStore } from "../src/Queue/WorkerQueueStore.ts"
import { Registry } from "../src/Registry.ts"
import { Processes } from "../src/Supervisor/Processes.ts"
import * as Supervisor from "../src/Supervisor/Supervisor.ts"
import { YIELD_EVERY } from "../src/Supervisor/worker/Execute.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { terminateWhileWaiting } from "./support/connections.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const unique = (base: string) => `${base}_${n++}`

const Payload = Schema.Struct({ id: Schema.Number })

/** Registers the row of a worker process that is not running (its claims are the test's). */
const registerGone = (id: string) =>
  Effect.flatMap(Processes, (processes) =>
    processes.register({
      id,
      pid: 1,
      host: "gone",
      roles: ["workers"],
      capsules: [],
      capacity: 1,
      appRevision: undefined,
      version: "test"
    })
  )

layer(
  TestDatabase.layer({
    visibilityTimeout: "30 seconds",
    retryBackoff: "200 millis",
    retryBackoffMax: "10 seconds",
    maxRetries: 3,
    pollingInterval: "50 millis"
  }),
  { excludeTestServices: true }
)("jobs", (it) => {
  describe("enqueue", () => {
    it.effect("a bad payload fails with InvalidPayload and writes nothing", () =>
      Effect.gen(function* () {
        const queue = unique("badpayload")
        const job = Job.make("Typed", { payload: Payload, queue }, () => Effect.void)
        const error = yield* job.enqueue({ id: "not a number" } as unknown as { id: number }).pipe(Effect.flip)
        assert.strictEqual(error._tag, "InvalidPayload")
        const store = yield* QueueStore
        const depth = yield* store.metrics(queue).pipe(
          Effect.map((m) => m.depth),
          Effect.catchTag("QueueNotFound", () => Effect.succeed(0))
        )
        assert.strictEqual(depth, 0)
      })
    )

    it.effect("an enqueue inside a transaction that rolls back runs nothing", () =>
      Effect.gen(function* () {
        const queue = unique("rollback")
        const ran: Array<number> = []
        const job = Job.make("RolledBack", { payload: Payload, queue }, ({ id }) => Effect.sync(() => ran.push(id)))
        const client = yield* JobClient
        yield* client.ensureQueue(queue)
        const sql = yield* SqlClient.SqlClient
        yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 2 }] })
        const exit = yield* sql
          .withTransaction(Effect.andThen(job.enqueue({ id: 1 }), Effect.fail("abort" as const)))
          .pipe(Effect.exit)
        assert.isTrue(Exit.isFailure(exit))
        yield* job.enqueue({ id: 2 })
        yield* eventually(
          "the committed job ran",
          Effect.sync(() => ran.includes(2))
        )
        yield* Effect.sleep("200 millis")
        assert.deepStrictEqual(ran, [2])
      }).pipe(Effect.scoped)
    )

    it.effect("enqueueMany sends many jobs in one statement, in order", () =>
      Effect.gen(function* () {
        const queue = unique("many")
        const job = Job.make("Many", { payload: Payload, queue }, () => Effect.void)
        const refs = yield* job.enqueueMany([{ id: 1 }, { id: 2 }, { id: 3 }])
        assert.strictEqual(refs.length, 3)
        assert.isTrue(refs[0]!.msgId < refs[1]!.msgId && refs[1]!.msgId < refs[2]!.msgId)
        const store = yield* QueueStore
        const rows = yield* store.browse(queue)
        assert.deepStrictEqual(
          rows.map((r) => r.message),
          [1, 2, 3].map((id) => ({ job: "Many", payload: { id } }))
        )
      })
    )
  })

  describe("execution", () => {
    it.effect("a job that succeeds runs exactly once and is archived", () =>
      Effect.gen(function* () {
        const queue = unique("success")
        const runs: Array<{ id: number; attempt: number }> = []
        const job = Job.make("Succeeds", { payload: Payload, queue }, ({ id }, ctx) =>
          Effect.sync(() => runs.push({ id, attempt: ctx.attempt }))
        )
        const store = yield* QueueStore
        yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 3 }] })
        const refs = yield* job.enqueueMany(Array.from({ length: 20 }, (_, id) => ({ id })))
        yield* eventually(
          "all archived",
          Effect.map(store.metrics(queue), (m) => m.archiveSize === 20)
        )
        yield* Effect.sleep("200 millis")
        assert.strictEqual(runs.length, 20)
        assert.deepStrictEqual(
          runs.map((r) => r.id).sort((a, b) => a - b),
          Array.from({ length: 20 }, (_, i) => i)
        )
        assert.isTrue(runs.every((r) => r.attempt === 1))
        for (const ref of refs) assert.isTrue(yield* store.isArchived(queue, ref.msgId))
        assert.strictEqual((yield* store.metrics(queue)).depth, 0)
      }).pipe(Effect.scoped)
    )

    it.effect("short synchronous jobs run back to back still let the event loop turn every few jobs", () =>
      Effect.gen(function* () {
        // an executor yields every YIELD_EVERY jobs that did not suspend, not after each one: timers,
        // socket reads and heartbeats must still get the loop between short bursts of jobs
        const queue = unique("burst")
        const concurrency = 2
        let turns = 0
        let ticking = true
        const tick = () => {
          turns++
          if (ticking) setImmediate(tick)
        }
        setImmediate(tick)
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            ticking = false
          })
        )
        const seen: Array<number> = []
        const job = Job.make("Burst", { payload: Payload, queue }, () => Effect.sync(() => seen.push(turns)))
        const store = yield* QueueStore
        yield* job.enqueueMany(Array.from({ length: 400 }, (_, id) => ({ id })))
        yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency }] })
        yield* eventually(
          "all archived",
          Effect.map(store.metrics(queue), (m) => m.archiveSize === 400)
        )
        // the longest run of jobs that saw the same turn of the loop
        let longest = 0
        let run = 0
        for (let i = 0; i < seen.length; i++) {
          run = i > 0 && seen[i] === seen[i - 1] ? run + 1 : 1
          longest = Math.max(longest, run)
        }
        assert.strictEqual(seen.length, 400)
        assert.isAbove(seen[seen.length - 1]! - seen[0]!, 400 / (concurrency * YIELD_EVERY) - 1)
        assert.isAtMost(longest, concurrency * YIELD_EVERY + concurrency)
      }).pipe(Effect.scoped)
    )

    it.effect("a failing job is retried with the seed's backoff and dead-lettered with a complete block", () =>
      Effect.gen(function* () {
        const queue = unique("failing")
        const attempts: Array<number> = []
        const job = Job.make("AlwaysFails", { payload: Payload, queue }, (_, ctx) =>
          Effect.sync(() => attempts.push(ctx.attempt)).pipe(
            Effect.andThen(Effect.fail(new Error(`boom ${ctx.attempt}`)))
          )
        )
        const store = yield* QueueStore
        yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        const ref = yield* job.enqueue({ id: 7 })

        // after each failure the row carries vt = failure time + delay; check the delay's band
        const deltas: Array<number> = []
        for (const attempt of [1, 2]) {
          let seen: { vt: Date; recorded: string } | undefined
          yield* eventually(
            `failure ${attempt} recorded`,
            Effect.map(store.get(queue, ref.msgId), (row) => {
              const e = Option.getOrUndefined(row)?.lastError
              if (e?.error_attempt === attempt && e.error_recorded_at) {
                seen = { vt: Option.getOrThrow(row).vt, recorded: e.error_recorded_at }
                return true
              }
              return false
            })
          )
          deltas.push(seen!.vt.getTime() - Date.parse(seen!.recorded))
        }
        // base 200 ms: 200 * 2^(attempt-1), ±15%
        expect(deltas[0]).toBeGreaterThanOrEqual(170)
        expect(deltas[0]).toBeLessThanOrEqual(230)
        expect(deltas[1]).toBeGreaterThanOrEqual(340)
        expect(deltas[1]).toBeLessThanOrEqual(460)

        yield* eventually(
          "dead-lettered",
          Effect.map(store.browse(`${queue}_dlq`), (rows) => rows.length === 1)
        )
        assert.deepStrictEqual(attempts, [1, 2, 3], "maxRetries 3: three deliveries run, then the DLQ")
        const [dead] = yield* store.browse(`${queue}_dlq`)
        assert.deepStrictEqual(dead?.message, { job: "AlwaysFails", payload: { id: 7 } })
        const block = store.deadLetterOf(dead!).deadLetter
        expect(block).toMatchObject({
          version: 1,
          reason: "max_retries_exceeded",
          source: "worker",
          source_queue: `pgbus_${queue}`,
          attempts: 3,
          max_retries: 3,
          error_class: "Error",
          error_message: "boom 3",
          error_attempt: 3
        })
        assert.include(block!.backtrace ?? "", "boom 3")
        assert.strictEqual((yield* store.metrics(queue)).depth, 0)
      }).pipe(Effect.scoped)
    )

    it.effect("a typed failure is recorded by its _tag, and a job can override the retry policy", () =>
      Effect.gen(function* () {
        class PaymentDeclined extends Schema.TaggedError<PaymentDeclined>()("PaymentDeclined", {
          reason: Schema.String
        }) {}
        const queue = unique("typed")
        const job = Job.make("Declines", { payload: Payload, queue, retry: { maxRetries: 1 } }, () =>
          Effect.fail(new PaymentDeclined({ reason: "card expired" }))
        )
        const store = yield* QueueStore
        yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        yield* job.enqueue({ id: 1 })
        yield* eventually(
          "dead-lettered on the first failure",
          Effect.map(store.browse(`${queue}_dlq`), (rows) => rows.length === 1)
        )
        const [dead] = yield* store.browse(`${queue}_dlq`)
        const block = store.deadLetterOf(dead!).deadLetter
        assert.strictEqual(block?.error_class, "PaymentDeclined")
        assert.strictEqual(block?.attempts, 1)
      }).pipe(Effect.scoped)
    )

    it.effect("the dead-letter block names the job's own retry limit, not the config's (3 here)", () =>
      Effect.gen(function* () {
        const queue = unique("ownlimit")
        const attempts: Array<number> = []
        const fast = { backoff: "10 millis", backoffMax: "20 millis" } as const
        const Eight = Job.make(
          "FailsEightTimes",
          { payload: Payload, queue, retry: { maxRetries: 8, ...fast } },
          (_, ctx) => Effect.sync(() => attempts.push(ctx.attempt)).pipe(Effect.andThen(Effect.fail(new Error("no"))))
        )
        const Once = Job.make("FailsOnce", { payload: Payload, queue, retry: { maxRetries: 1 } }, () =>
          Effect.fail(new Error("no"))
        )
        const store = yield* QueueStore
        yield* startSupervisor([Eight, Once], { capsules: [{ name: "c", queues: [queue], concurrency: 2 }] })
        yield* Eight.enqueue({ id: 8 })
        yield* Once.enqueue({ id: 1 })
        yield* eventually(
          "both dead-lettered",
          Effect.map(store.browse(`${queue}_dlq`), (rows) => rows.length === 2),
          "30 seconds"
        )
        assert.deepStrictEqual(attempts, [1, 2, 3, 4, 5, 6, 7, 8])
        const blocks = new Map(
          (yield* store.browse(`${queue}_dlq`)).map((m) => [
            (m.message as { job: string }).job,
            store.deadLetterOf(m).deadLetter
          ])
        )
        expect(blocks.get("FailsEightTimes")).toMatchObject({ attempts: 8, max_retries: 8, error_attempt: 8 })
        expect(blocks.get("FailsOnce")).toMatchObject({ attempts: 1, max_retries: 1, error_attempt: 1 })
      }).pipe(Effect.scoped)
    )

    it.effect(
      "a delivery past the job's own limit with no verdict (its runner died) is dead-lettered naming that limit",
      () =>
        Effect.gen(function* () {
          const queue = unique("ownlimitdead")
          const ran: Array<number> = []
          const job = Job.make("LimitTwo", { payload: Payload, queue, retry: { maxRetries: 2 } }, ({ id }) =>
            Effect.sync(() => ran.push(id))
          )
          const store = yield* QueueStore
          const ref = yield* job.enqueue({ id: 1 })
          // two deliveries whose processes died before a verdict: claimed, then given back
          for (const _ of [1, 2]) {
            const [claimed] = yield* store.read(queue, { limit: 1 })
            assert.strictEqual(claimed?.msgId, ref.msgId)
            yield* store.release(queue, [{ msgId: claimed!.msgId, readCt: claimed!.readCt }])
          }
          yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
          yield* eventually(
            "dead-lettered unrun",
            Effect.map(store.browse(`${queue}_dlq`), (rows) => rows.length === 1)
          )
          const [dead] = yield* store.browse(`${queue}_dlq`)
          expect(store.deadLetterOf(dead!).deadLetter).toMatchObject({
            reason: "max_retries_exceeded",
            source: "worker",
            attempts: 3,
            max_retries: 2
          })
          assert.deepStrictEqual(ran, [])
        }).pipe(Effect.scoped)
    )

    it.effect("a defect and a timeout are failures of the delivery, not of the worker", () =>
      Effect.gen(function* () {
        const queue = unique("defects")
        const ran: Array<string> = []
        const Dies = Job.make("Dies", { payload: Payload, queue, retry: { maxRetries: 1 } }, () =>
          Effect.die(new TypeError("undefined is not a function"))
        )
        const Slow = Job.make(
          "Slow",
          { payload: Payload, queue, retry: { maxRetries: 1 }, timeout: "100 millis" },
          () => Effect.sleep("5 seconds")
        )
        const Fine = Job.make("Fine", { payload: Payload, queue }, () => Effect.sync(() => ran.push("fine")))
        const store = yield* QueueStore
        yield* startSupervisor([Dies, Slow, Fine], { capsules: [{ name: "c", queues: [queue], concurrency: 2 }] })
        yield* Dies.enqueue({ id: 1 })
        yield* Slow.enqueue({ id: 2 })
        yield* Fine.enqueue({ id: 3 })
        yield* eventually(
          "both dead-lettered",
          Effect.map(store.browse(`${queue}_dlq`), (rows) => rows.length === 2)
        )
        const classes = (yield* store.browse(`${queue}_dlq`)).map((m) => store.deadLetterOf(m).deadLetter?.error_class)
        assert.sameMembers(classes as Array<string>, ["TypeError", "JobTimeout"])
        yield* eventually(
          "the good job still ran",
          Effect.sync(() => ran.length === 1)
        )
      }).pipe(Effect.scoped)
    )

    it.effect(
      "an unknown job and an undecodable payload end in the DLQ with the reason; the worker keeps running",
      () =>
        Effect.gen(function* () {
          const queue = unique("poison")
          const ran: Array<number> = []
          const Good = Job.make("Good", { payload: Payload, queue }, ({ id }) => Effect.sync(() => ran.push(id)))
          const store = yield* QueueStore
          const client = yield* JobClient
          yield* client.ensureQueue(queue)
          yield* store.send(queue, { job: "NobodyKnowsMe", payload: {} })
          yield* store.send(queue, { job: "Good", payload: { id: "not a number" } })
          yield* store.send(queue, "not even an envelope")
          yield* startSupervisor([Good], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
          yield* Good.enqueue({ id: 42 })
          yield* eventually(
            "three dead letters",
            Effect.map(store.browse(`${queue}_dlq`), (rows) => rows.length === 3),
            "20 seconds"
          )
          const classes = (yield* store.browse(`${queue}_dlq`)).map(
            (m) => store.deadLetterOf(m).deadLetter?.error_class
          )
          assert.sameMembers(classes as Array<string>, ["UnknownJob", "PayloadDecodeError", "PayloadDecodeError"])
          const unknown = (yield* store.browse(`${queue}_dlq`)).find(
            (m) => store.deadLetterOf(m).deadLetter?.error_class === "UnknownJob"
          )
          assert.include(store.deadLetterOf(unknown!).deadLetter?.error_message ?? "", "NobodyKnowsMe")
          assert.deepStrictEqual(ran, [42])
        }).pipe(Effect.scoped)
    )
  })

  describe("the registry", () => {
    const build = (definitions: ReadonlyArray<Job.AnyJob | Workflow.AnyWorkflow>) =>
      Layer.build(Registry.layer(definitions)).pipe(Effect.scoped, Effect.flip)

    it.effect("fails on two jobs or two workflows with one name", () =>
      Effect.gen(function* () {
        const job = Job.make("Twice", { payload: Payload }, () => Effect.void)
        const twoJobs = yield* build([job, Job.make("Twice", { payload: Payload }, () => Effect.void)])
        assert.strictEqual(twoJobs._tag, "InvalidJobDefinition")
        assert.include(twoJobs.message, "two jobs are registered with this name")
        const flow = Workflow.make("TwiceFlow", { payload: Payload }, function* () {})
        const twoFlows = yield* build([flow, flow])
        assert.strictEqual(twoFlows._tag, "InvalidWorkflowDefinition")
      })
    )

    it.effect("fails on a job named like one of the library's own (workflow steps, fan-out callbacks, events)", () =>
      Effect.gen(function* () {
        for (const [name, owner] of [
          ["pgbus.workflow.step", "workflows"],
          ["pgbus.workflow.fan_out_finished", "workflows"],
          ["pgbus.event", "events"]
        ] as const) {
          const error = yield* build([Job.make(name, { payload: Payload }, () => Effect.void)])
          assert.strictEqual(error._tag, "InvalidJobDefinition")
          assert.include(error.message, `${name}: the name is reserved for ${owner}`)
        }
      })
    )

    it.effect("lists the library's own jobs beside the user's, and every queue once", () =>
      Effect.gen(function* () {
        const a = Job.make("OnMailers", { payload: Payload, queue: "mailers" }, () => Effect.void)
        const b = Job.make("AlsoOnMailers", { payload: Payload, queue: "mailers" }, () => Effect.void)
        const c = Job.make("OnDefault", { payload: Payload }, () => Effect.void)
        const flow = Workflow.make("ListedFlow", { payload: Payload, queue: "flows" }, function* () {})
        const registry = yield* Layer.build(Registry.layer([a, b, c, flow])).pipe(
          Effect.map((context) => Context.get(context, Registry)),
          Effect.scoped
        )
        assert.sameMembers(
          [...registry.jobs.keys()],
          [
            "OnMailers",
            "AlsoOnMailers",
            "OnDefault",
            "pgbus.workflow.step",
            "pgbus.workflow.fan_out_finished",
            "pgbus.event"
          ]
        )
        assert.deepStrictEqual(registry.queues, ["mailers", "default", "flows"])
        assert.deepStrictEqual([...registry.workflows.keys()], ["ListedFlow"])
      })
    )
  })

  describe("priorities", () => {
    it.effect("with priority levels, a worker drains _p0 before it reads _p1 and _p2", () =>
      Effect.gen(function* () {
        const queue = unique("prio")
        const order: Array<string> = []
        const Low = Job.make("Low", { payload: Payload, queue, priority: 2 }, ({ id }) =>
          Effect.sync(() => order.push(`low${id}`))
        )
        const Normal = Job.make("Normal", { payload: Payload, queue }, ({ id }) =>
          Effect.sync(() => order.push(`normal${id}`))
        )
        const High = Job.make("High", { payload: Payload, queue, priority: 0 }, ({ id }) =>
          Effect.sync(() => order.push(`high${id}`))
        )
        const refs = [
          ...(yield* Low.enqueueMany([{ id: 1 }, { id: 2 }])),
          ...(yield* Normal.enqueueMany([{ id: 1 }])),
          ...(yield* High.enqueueMany([{ id: 1 }, { id: 2 }]))
        ]
        assert.deepStrictEqual(
          refs.map((r) => r.queue),
          [`${queue}_p2`, `${queue}_p2`, `${queue}_p1`, `${queue}_p0`, `${queue}_p0`]
        )
        yield* startSupervisor([Low, Normal, High], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        yield* eventually(
          "all five ran",
          Effect.sync(() => order.length === 5)
        )
        assert.deepStrictEqual(order, ["high1", "high2", "normal1", "low1", "low2"])
      }).pipe(
        Effect.scoped,
        Effect.provide(TestDatabase.layer({ priorityLevels: 3, pollingInterval: "50 millis" }), { local: true })
      )
    )
  })

  describe("visibility and wake-ups", () => {
    it.effect("a job running 3x the visibility timeout is not delivered a second time", () =>
      Effect.gen(function* () {
        const queue = unique("long")
        const runs: Array<number> = []
        const job = Job.make("Long", { payload: Payload, queue }, (_, ctx) =>
          Effect.sync(() => runs.push(ctx.attempt)).pipe(Effect.andThen(Effect.sleep("3600 millis")))
        )
        const store = yield* QueueStore
        yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 2 }] })
        const ref = yield* job.enqueue({ id: 1 })
        yield* eventually("archived", store.isArchived(queue, ref.msgId))
        assert.deepStrictEqual(runs, [1])
      }).pipe(
        Effect.scoped,
        // a lease of 1.2 s heartbeated every 400 ms (a third): 800 ms of margin for a loaded
        // machine's late heartbeat (with 600 ms, a CI pass redelivered it once)
        Effect.provide(TestDatabase.layer({ visibilityTimeout: "1200 millis", pollingInterval: "50 millis" }), {
          local: true
        })
      )
    )

    it.effect("an idle worker starts a job within milliseconds of its commit (LISTEN), not at its next poll", () =>
      Effect.gen(function* () {
        const queue = unique("latency")
        const started: Array<number> = []
        const job = Job.make("Ping", { payload: Schema.Struct({ sentAt: Schema.Number }), queue }, ({ sentAt }) =>
          Effect.sync(() => started.push(performance.now() - sentAt))
        )
        yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 2 }] })
        yield* Effect.sleep("300 millis")
        for (let i = 0; i < 10; i++) {
          yield* job.enqueue({ sentAt: performance.now() })
          yield* Effect.sleep("30 millis")
        }
        yield* eventually(
          "all ten ran",
          Effect.sync(() => started.length === 10)
        )
        const sorted = [...started].sort((a, b) => a - b)
        // the poll interval is 5 s here: only a notification explains a start within 250 ms
        assert.isBelow(sorted[5]!, 250, `median pickup ${sorted[5]} ms`)
      }).pipe(
        Effect.scoped,
        // local dispatch off: the enqueue and the worker share this process
        Effect.provide(TestDatabase.layer({ pollingInterval: "5 seconds", localDispatch: false }), { local: true })
      )
    )

    it.effect("with LISTEN/NOTIFY off, jobs still run (polling)", () =>
      Effect.gen(function* () {
        const queue = unique("polling")
        const ran: Array<number> = []
        const job = Job.make("Polled", { payload: Payload, queue }, ({ id }) => Effect.sync(() => ran.push(id)))
        yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 2 }] })
        yield* job.enqueueMany([{ id: 1 }, { id: 2 }])
        yield* eventually(
          "both ran",
          Effect.sync(() => ran.length === 2)
        )
      }).pipe(
        Effect.scoped,
        Effect.provide(TestDatabase.layer({ listenNotify: false, pollingInterval: "50 millis" }), { local: true })
      )
    )

    it.effect("dropping the LISTEN connection does not stop jobs", () =>
      Effect.gen(function* () {
        const queue = unique("droplisten")
        const ran: Array<number> = []
        const job = Job.make("AfterDrop", { payload: Payload, queue }, ({ id }) => Effect.sync(() => ran.push(id)))
        const sql = yield* SqlClient.SqlClient
        yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 2 }] })
        yield* job.enqueue({ id: 1 })
        yield* eventually(
          "first ran",
          Effect.sync(() => ran.length === 1)
        )
        const killed = yield* sql<{ readonly ok: boolean }>`SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
          WHERE datname = current_database() AND query LIKE 'LISTEN %'`
        assert.isAbove(killed.length, 0, "a listener was connected")
        yield* job.enqueue({ id: 2 })
        yield* eventually(
          "second ran after the drop",
          Effect.sync(() => ran.length === 2)
        )
      }).pipe(
        Effect.scoped,
        Effect.provide(TestDatabase.layer({ pollingInterval: "10 seconds", localDispatch: false }), { local: true })
      )
    )
  })

  describe("database connection restarts", () => {
    it.effect("every connection terminated while jobs run: the worker reconnects, no job is lost", () =>
      Effect.gen(function* () {
        const queue = unique("connkill")
        const runs = new Map<number, number>()
        const job = Job.make("SurvivesRestart", { payload: Payload, queue }, ({ id }) =>
          Effect.sync(() => runs.set(id, (runs.get(id) ?? 0) + 1)).pipe(Effect.andThen(Effect.sleep("50 millis")))
        )
        const store = yield* QueueStore
        const ids = Array.from({ length: 40 }, (_, i) => i)
        yield* job.enqueueMany(ids.map((id) => ({ id })))
        yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 4 }] })
        yield* eventually(
          "some ran",
          Effect.sync(() => runs.size >= 4)
        )
        // the worker's next archive or claim waits on the locked queue table when every other
        // connection (that one, the listener, idle ones) is terminated
        const blocked = yield* terminateWhileWaiting(`pgbus.q_pgbus_${queue}`)
        assert.isAbove(blocked, 0, "a statement in flight was terminated")
        yield* eventually(
          "every job archived",
          // this check's own connection may be one that was terminated: a failed check is "not yet"
          store.metrics(queue).pipe(
            Effect.map((m) => m.depth === 0 && m.archiveSize === ids.length),
            Effect.orElseSucceed(() => false)
          ),
          "20 seconds"
        )
        assert.deepStrictEqual(
          ids.filter((id) => !runs.has(id)),
          [],
          "every job ran"
        )
      }).pipe(
        Effect.scoped,
        // a claim whose reply was lost with its connection comes back after the visibility timeout
        Effect.provide(TestDatabase.layer({ visibilityTimeout: "2 seconds", pollingInterval: "100 millis" }), {
          local: true
        })
      )
    )

    it.effect(
      "a failure recorded while its connection is lost is written again: the retry comes after the backoff",
      () =>
        Effect.gen(function* () {
          const queue = unique("connfail")
          const reached = yield* Deferred.make<void>()
          const locked = yield* Deferred.make<void>()
          const attempts: Array<number> = []
          const job = Job.make("FailsThroughRestart", { payload: Payload, queue }, (_, { attempt }) =>
            Effect.gen(function* () {
              attempts.push(attempt)
              if (attempt > 1) return
              yield* Deferred.succeed(reached, undefined)
              yield* Deferred.await(locked)
              return yield* Effect.fail("first attempt fails")
            })
          )
          // one slot (no read while the job runs) and no dispatcher: the statement that waits on the
          // lock is the failure's record
          yield* startSupervisor([job], {
            roles: ["workers"],
            capsules: [{ name: "c", queues: [queue], concurrency: 1 }]
          })
          yield* job.enqueue({ id: 1 })
          yield* Deferred.await(reached)
          // the failure's record waits on the locked queue table when every other connection is terminated
          const blocked = yield* terminateWhileWaiting(`pgbus.q_pgbus_${queue}`, Deferred.succeed(locked, undefined))
          assert.isAbove(blocked, 0, "a statement in flight was terminated")
          // the visibility timeout is 30 s: only a recorded failure (200 ms backoff) brings it back this soon
          yield* eventually(
            "the second attempt ran",
            Effect.sync(() => attempts.length === 2),
            "5 seconds"
          )
          assert.deepStrictEqual(attempts, [1, 2])
        }).pipe(
          Effect.scoped,
          Effect.provide(
            TestDatabase.layer({
              visibilityTimeout: "30 seconds",
              retryBackoff: "200 millis",
              pollingInterval: "100 millis"
            }),
            { local: true }
          )
        )
    )
  })

  describe("fast recovery and tracing", () => {
    it.effect("messages claimed by a process that stopped beating are released at once", () =>
      Effect.gen(function* () {
        const queue = unique("recover")
        const store = yield* QueueStore
        const processes = yield* Processes
        const sql = yield* SqlClient.SqlClient
        yield* store.create(queue)
        yield* store.sendBatch(queue, [{ message: 1 }, { message: 2 }])
        yield* registerGone("dead-one")
        const claimed = yield* store.read(queue, { limit: 2, visibilityTimeout: "1 hour", claimedBy: "dead-one" })
        assert.strictEqual(claimed.length, 2)
        assert.strictEqual((yield* store.read(queue)).length, 0)
        // its last beat was long ago
        yield* sql`UPDATE pgbus.processes SET last_beat_at = now() - interval '1 hour' WHERE id = 'dead-one'`
        const report = yield* processes.reapStale
        assert.deepStrictEqual(report.deadProcesses, ["dead-one"])
        assert.deepStrictEqual(report.released, [{ queue, released: 2 }])
        const again = yield* store.read(queue, { limit: 2 })
        assert.strictEqual(again.length, 2)
        assert.isTrue(again.every((m) => m.readCt === 2))
        assert.strictEqual((yield* processes.list).filter((p) => p.id === "dead-one").length, 0)
      })
    )

    it.effect(
      "after failing to reach the database, a supervisor reaps no one until it has reached it for a stale threshold",
      () =>
        Effect.gen(function* () {
          const processes = yield* Processes
          const sql = yield* SqlClient.SqlClient
          yield* startSupervisor([], { roles: ["dispatcher"] })
          yield* eventually(
            "registered",
            Effect.map(processes.list, (ps) => ps.length === 1)
          )
          yield* registerGone("outage-peer")
          // this supervisor's next beat or reap waits on the locked processes table when its
          // connection is terminated: to it, the database was gone
          const blocked = yield* terminateWhileWaiting("pgbus.processes")
          assert.isAbove(blocked, 0, "a statement in flight was terminated")
          // the peer missed its beats during the outage (its connection may be one of those terminated)
          yield* sql`UPDATE pgbus.processes SET last_beat_at = now() - interval '1 hour' WHERE id = 'outage-peer'`.pipe(
            Effect.retry({ times: 3 })
          )
          yield* Effect.sleep("1200 millis")
          assert.isTrue(
            (yield* processes.list).some((p) => p.id === "outage-peer"),
            "not reaped within the threshold after the outage"
          )
          yield* eventually(
            "reaped once this process has reached the database for the threshold",
            Effect.map(processes.list, (ps) => !ps.some((p) => p.id === "outage-peer")),
            "5 seconds"
          )
        }).pipe(
          Effect.scoped,
          Effect.provide(
            TestDatabase.layer({
              processHeartbeatInterval: "200 millis",
              staleProcessThreshold: "2 seconds",
              dispatchInterval: "100 millis"
            }),
            { local: true }
          )
        )
    )

    it.effect("a claim's messages are released by its mark; fast recovery finds marked claims by their process", () =>
      Effect.gen(function* () {
        const queue = unique("marks")
        const store = yield* QueueStore
        const processes = yield* Processes
        const sql = yield* SqlClient.SqlClient
        yield* store.create(queue)
        yield* store.sendBatch(queue, [{ message: 1 }, { message: 2 }, { message: 3 }])
        yield* registerGone("marked-one")
        const first = yield* store.read(queue, { limit: 2, visibilityTimeout: "1 hour", claimedBy: "marked-one#1" })
        const second = yield* store.read(queue, { limit: 1, visibilityTimeout: "1 hour", claimedBy: "marked-one#2" })
        assert.deepStrictEqual([first.length, second.length], [2, 1])
        assert.strictEqual(yield* store.releaseClaim(queue, "marked-one#1"), 2)
        const again = yield* store.read(queue, { limit: 3 })
        assert.deepStrictEqual(
          again.map((m) => m.msgId),
          first.map((m) => m.msgId),
          "only that claim's messages came back"
        )
        assert.deepStrictEqual(
          again.map((m) => m.readCt),
          [1, 1],
          "as if unread: the claimer never got them, so this delivery is their first"
        )
        yield* sql`UPDATE pgbus.processes SET last_beat_at = now() - interval '1 hour' WHERE id = 'marked-one'`
        const report = yield* processes.reapStale
        assert.deepStrictEqual(report.released, [{ queue, released: 1 }], "the other claim, by its process")
      })
    )

    it.effect(
      "a claim whose reply is lost with its connection gives its messages back at once, not after the visibility timeout",
      () =>
        Effect.gen(function* () {
          const queue = unique("lostreply")
          const ran: Array<number> = []
          const job = Job.make("LostReply", { payload: Payload, queue }, (_, { attempt }) =>
            Effect.sync(() => ran.push(attempt))
          )
          const store = yield* WorkerQueueStore
          // the first claim of the queue commits, then fails as if its reply had been lost
          let lost = false
          const lossy = QueueStore.of({
            ...store,
            archiveAndRead: (q, receipts, options) =>
              Effect.flatMap(store.archiveAndRead(q, receipts, options), (result) => {
                if (lost || q !== queue || result.messages.length === 0) return Effect.succeed(result)
                lost = true
                return Effect.fail(
                  new DatabaseError({
                    operation: "read",
                    reason: "ConnectionError",
                    detail: "the reply was lost (test)",
                    retryable: true
                  })
                )
              })
          })
          yield* job.enqueue({ id: 1 })
          yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] }).pipe(
            Effect.provideService(WorkerQueueStore, lossy)
          )
          // the visibility timeout is 30 s
          yield* eventually(
            "the job ran",
            Effect.sync(() => ran.length === 1),
            "5 seconds"
          )
          assert.isTrue(lost, "a claim's reply was lost")
          assert.deepStrictEqual(ran, [1], "delivered once, after the lost claim, as its first delivery")
        })
    )

    it.effect(
      "a supervisor taken for dead registers again at its next beat, so its later claims stay recoverable",
      () =>
        Effect.gen(function* () {
          const processes = yield* Processes
          const sql = yield* SqlClient.SqlClient
          yield* startSupervisor([], { roles: ["workers"], capsules: [] })
          yield* eventually(
            "registered",
            Effect.map(processes.list, (ps) => ps.length === 1)
          )
          const [me] = yield* processes.list
          // as another process's reaper does with a process whose beats stopped
          yield* sql`DELETE FROM pgbus.processes WHERE id = ${me!.id}`
          yield* eventually(
            "registered again",
            Effect.map(processes.list, (ps) => ps.some((p) => p.id === me!.id))
          )
        }).pipe(
          Effect.scoped,
          Effect.provide(TestDatabase.layer({ processHeartbeatInterval: "200 millis" }), { local: true })
        )
    )

    it.effect("no process is taken for dead before the server has been up for the stale threshold", () =>
      Effect.gen(function* () {
        const processes = yield* Processes
        const sql = yield* SqlClient.SqlClient
        // the server started less than 100 days ago: as if it had restarted within the threshold,
        // during which no process could beat
        yield* registerGone("restart-peer")
        yield* sql`UPDATE pgbus.processes SET last_beat_at = now() - interval '200 days' WHERE id = 'restart-peer'`
        const report = yield* processes.reapStale
        assert.deepStrictEqual(report.deadProcesses, [])
        assert.isTrue((yield* processes.list).some((p) => p.id === "restart-peer"))
      }).pipe(Effect.provide(TestDatabase.layer({ staleProcessThreshold: "100 days" }), { local: true }))
    )

    it.effect("claims released by fast recovery wake a listening worker at once, not at its next poll", () =>
      Effect.gen(function* () {
        const queue = unique("recoverwake")
        const ran: Array<number> = []
        const job = Job.make("RecoverWake", { payload: Payload, queue }, ({ id }) => Effect.sync(() => ran.push(id)))
        const store = yield* QueueStore
        const processes = yield* Processes
        const sql = yield* SqlClient.SqlClient
        yield* job.enqueue({ id: 1 })
        yield* registerGone("dead-waker")
        assert.strictEqual(
          (yield* store.read(queue, { limit: 1, visibilityTimeout: "1 hour", claimedBy: "dead-waker#1" })).length,
          1
        )
        // a worker that polls every 10 s: its first claim finds nothing, then it waits for a NOTIFY
        yield* startSupervisor([job], {
          roles: ["workers"],
          capsules: [{ name: "c", queues: [queue], concurrency: 1 }]
        })
        yield* Effect.sleep("300 millis")
        yield* sql`UPDATE pgbus.processes SET last_beat_at = now() - interval '1 hour' WHERE id = 'dead-waker'`
        const report = yield* processes.reapStale
        assert.deepStrictEqual(report.released, [{ queue, released: 1 }])
        yield* eventually(
          "ran",
          Effect.sync(() => ran.length === 1),
          "2 seconds"
        )
      }).pipe(Effect.scoped, Effect.provide(TestDatabase.layer({ pollingInterval: "10 seconds" }), { local: true }))
    )

    it.effect("a supervisor with workers starts its dispatcher's rounds a second after their first claims", () =>
      Effect.gen(function* () {
        const processes = yield* Processes
        const sql = yield* SqlClient.SqlClient
        const queue = unique("bootramp")
        const ran: Array<number> = []
        const job = Job.make("BootRamp", { payload: Payload, queue }, ({ id }) => Effect.sync(() => ran.push(id)))
        yield* registerGone("dead-at-boot-3")
        yield* sql`UPDATE pgbus.processes SET last_beat_at = now() - interval '1 hour' WHERE id = 'dead-at-boot-3'`
        yield* job.enqueue({ id: 1 })
        // the supervisor's clock is a TestClock the test moves: the workers claim and run without
        // it, the dispatcher's first round waits a second of it after their first claims
        const clock = yield* Layer.build(TestClock.layer())
        yield* Supervisor.runWith({
          roles: ["workers", "dispatcher"],
          capsules: [{ name: "c", queues: [queue], concurrency: 1 }]
        }).pipe(Effect.provide(Registry.layer([job])), Effect.provide(clock), Effect.forkScoped)
        yield* eventually(
          "the backlog's job ran",
          Effect.sync(() => ran.length === 1),
          "10 seconds"
        )
        // the workers' first claim has ended: the old boot reaped within a few ms of it
        yield* Effect.sleep("500 millis")
        assert.isTrue(
          (yield* processes.list).some((p) => p.id === "dead-at-boot-3"),
          "reaped during the ramp"
        )
        yield* TestClock.adjust("1 second").pipe(Effect.provide(clock))
        yield* eventually(
          "reaped once the ramp is over",
          Effect.map(processes.list, (ps) => !ps.some((p) => p.id === "dead-at-boot-3")),
          "10 seconds"
        )
      }).pipe(Effect.scoped)
    )

    it.effect("a supervisor without workers starts its dispatcher at once (no first claim to wait for)", () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const processes = yield* Processes
        const sql = yield* SqlClient.SqlClient
        const job = Job.make("BootOrder", { payload: Payload, queue: unique("bootorder") }, () => Effect.void)
        // the dispatcher's first round would wait 1 s for workers' first claims
        const other = unique("bootorder_noworkers")
        yield* store.create(other)
        yield* store.send(other, { job: "BootOrder", payload: { id: 3 } })
        yield* registerGone("dead-at-boot-2")
        yield* sql`UPDATE pgbus.processes SET last_beat_at = now() - interval '1 hour' WHERE id = 'dead-at-boot-2'`
        assert.strictEqual(
          (yield* store.read(other, { limit: 1, visibilityTimeout: "1 hour", claimedBy: "dead-at-boot-2" })).length,
          1
        )
        // The supervisor runs on a TestClock that never moves: a dispatcher that waited for the
        // first claims (a 1 s timeout) would never reap, however long the test waits; one that
        // starts at once reaps on its first round, which takes no time. (A wall-clock bound of
        // 900 ms failed on a loaded machine, whose boot alone can take that long.)
        yield* Effect.scoped(
          Effect.gen(function* () {
            yield* Supervisor.runWith({ roles: ["dispatcher"] }).pipe(
              Effect.provide(Registry.layer([job])),
              Effect.provide(TestClock.layer()),
              Effect.forkScoped
            )
            yield* eventually(
              "reaped",
              Effect.map(processes.list, (ps) => !ps.some((p) => p.id === "dead-at-boot-2")),
              "30 seconds"
            )
          })
        )
      })
    )

    it.effect("an enqueue inside a span carries its trace context; the execution span links to it", () =>
      Effect.gen(function* () {
        const queue = unique("trace")
        const spans: Array<Tracer.Span> = []
        const tracer = Tracer.make({
          span: (options) => {
            const span = new Tracer.NativeSpan(options)
            spans.push(span)
            return span
          }
        })
        const job = Job.make("Traced", { payload: Payload, queue }, () => Effect.void)
        const store = yield* QueueStore
        yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] }).pipe(
          Effect.withTracer(tracer)
        )
        const ref = yield* job.enqueue({ id: 1 }).pipe(Effect.withSpan("request"), Effect.withTracer(tracer))
        const request = spans.find((s) => s.name === "request")!
        yield* eventually("archived", store.isArchived(queue, ref.msgId))
        const execution = spans.find((s) => s.name === "pgbus.job.execute")
        assert.isDefined(execution)
        assert.strictEqual(execution!.attributes.get("job"), "Traced")
        assert.strictEqual(execution!.attributes.get("attempt"), 1)
        const link = execution!.links[0]
        assert.isDefined(link, "the execution span links back to the enqueue")
        assert.strictEqual(link!.span.traceId, request.traceId)
        assert.notStrictEqual(execution!.parent._tag === "Some" ? execution!.parent.value.spanId : "", request.spanId)
        void TRACEPARENT
        void Duration
      }).pipe(Effect.scoped)
    )
  })
})
