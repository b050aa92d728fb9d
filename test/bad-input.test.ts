/**
 * Bad input at every public entry point: each call fails with a typed (tagged) error, never a
 * defect nor PostgreSQL's refusal, and writes nothing (every table of the schema unchanged).
 */
import { assert, describe, layer } from "@effect/vitest"
import { Cause, Effect, Exit, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Batch from "../src/Batch/Batch.ts"
import { PgBusConfig } from "../src/Config.ts"
import * as EventBus from "../src/EventBus/EventBus.ts"
import * as Input from "../src/Input.ts"
import * as Job from "../src/Job/Job.ts"
import { JobClient } from "../src/Job/JobClient.ts"
import { checkPolicy } from "../src/Job/Retry.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Text = Schema.Struct({ s: Schema.String })
const Work = Job.make("BadInputWork", { payload: Text, queue: "bad_input" }, () => Effect.void)
const Flow = Workflow.make("BadInputFlow", { payload: Text }, function* () {})

/** Rows of every table of the schema (queue tables included), by table. */
const snapshot = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(
    sql<{ readonly table_name: string; readonly n: number }>`SELECT table_name,
        (xpath('/row/n/text()', query_to_xml(format('SELECT count(*) AS n FROM %I.%I', table_schema, table_name),
          false, true, '')))[1]::text::int AS n
      FROM information_schema.tables WHERE table_schema = 'pgbus' AND table_type = 'BASE TABLE'
      ORDER BY table_name`,
    (rows) => Object.fromEntries(rows.map((r) => [r.table_name, r.n]))
  )
)

type Services = QueueStore | JobClient | EventBus.EventBus | WorkflowClient | Batch.Batches
const store = <A, E>(f: (s: QueueStore["Service"]) => Effect.Effect<A, E>) => Effect.flatMap(QueueStore, f)
const bus = <A, E>(f: (b: EventBus.EventBus["Service"]) => Effect.Effect<A, E>) => Effect.flatMap(EventBus.EventBus, f)
const flows = <A, E>(f: (c: WorkflowClient["Service"]) => Effect.Effect<A, E>) => Effect.flatMap(WorkflowClient, f)
const jobs = <A, E>(f: (c: JobClient["Service"]) => Effect.Effect<A, E>) => Effect.flatMap(JobClient, f)
/** A value the types forbid, given as a caller without types would. */
const bad = <T>(value: unknown): T => value as T

const NUL = "a\u0000b"
const LONE = "a\ud800b"
const big = "x".repeat(300_000)
const fn = () => 1
/** A run that exists: verbs on it reach their checks (made in the setup). */
let RUN = "00000000-0000-4000-8000-000000000000"

const cases: ReadonlyArray<readonly [name: string, run: Effect.Effect<unknown, unknown, Services>, tags: string]> = [
  // QueueStore
  ["QueueStore.archive with a null target list", store((s) => s.archive("bad_input", bad(null))), "InvalidMessage"],
  ["QueueStore.archive with a null target", store((s) => s.archive("bad_input", bad([null]))), "InvalidMessage"],
  ["QueueStore.delete with a null target list", store((s) => s.delete("bad_input", bad(null))), "InvalidMessage"],
  ["QueueStore.delete with a number target", store((s) => s.delete("bad_input", bad([5]))), "InvalidMessage"],
  ["QueueStore.release with null", store((s) => s.release("bad_input", bad(null))), "InvalidMessage"],
  [
    "QueueStore.giveBackUnread with null",
    store((s) => s.giveBackUnread("bad_input", bad(null), "p")),
    "InvalidMessage"
  ],
  [
    "QueueStore.giveBackUnread with a number receipt",
    store((s) => s.giveBackUnread("bad_input", bad([5]), "p")),
    "InvalidMessage"
  ],
  [
    "QueueStore.giveBackUnread with an empty process id",
    store((s) => s.giveBackUnread("bad_input", [{ msgId: 1n, readCt: 1 }], "")),
    "InvalidMessage"
  ],
  [
    "QueueStore.giveBackUnread with a claim's mark for a process id",
    store((s) => s.giveBackUnread("bad_input", [{ msgId: 1n, readCt: 1 }], "p#1")),
    "InvalidMessage"
  ],
  ["QueueStore.unclaim with a null receipt", store((s) => s.unclaim("bad_input", bad(null), "p#1")), "InvalidMessage"],
  ["QueueStore.unclaim with a number receipt", store((s) => s.unclaim("bad_input", bad(5), "p#1")), "InvalidMessage"],
  [
    "QueueStore.unclaim with an empty mark",
    store((s) => s.unclaim("bad_input", { msgId: 1n, readCt: 1 }, "")),
    "InvalidMessage"
  ],
  [
    "QueueStore.setVisibility with a null target",
    store((s) => s.setVisibility("bad_input", bad([null]), "1 second")),
    "InvalidMessage"
  ],
  [
    "QueueStore.moveToDeadLetter with a null target",
    store((s) => s.moveToDeadLetter("bad_input", bad(null), { source: "operator" })),
    "InvalidMessage"
  ],
  [
    "QueueStore.retryDeadLetters with null ids",
    store((s) => s.retryDeadLetters("bad_input_dlq", bad(null))),
    "InvalidMessage"
  ],
  ["QueueStore.get with a null id", store((s) => s.get("bad_input", bad(null))), "InvalidMessage"],
  ["QueueStore.send a NUL in the message", store((s) => s.send("bad_input", { s: NUL })), "InvalidMessage"],
  ["QueueStore.send a lone surrogate", store((s) => s.send("bad_input", { s: LONE })), "InvalidMessage"],
  ["QueueStore.send a NaN", store((s) => s.send("bad_input", { n: Number.NaN })), "InvalidMessage"],
  ["QueueStore.send a function", store((s) => s.send("bad_input", fn)), "InvalidMessage"],
  [
    "QueueStore.send headers as a string",
    store((s) => s.send("bad_input", {}, { headers: bad("abc") })),
    "InvalidMessage"
  ],
  [
    "QueueStore.send a NUL in a header",
    store((s) => s.send("bad_input", {}, { headers: { h: NUL } })),
    "InvalidMessage"
  ],
  [
    "QueueStore.send headers over maxPayloadSize",
    store((s) => s.send("bad_input", {}, { headers: { h: big } })),
    "PayloadTooLarge"
  ],
  ["QueueStore.send delay NaN", store((s) => s.send("bad_input", {}, { delay: Number.NaN })), "InvalidMessage"],
  ["QueueStore.send delay {}", store((s) => s.send("bad_input", {}, { delay: bad({}) })), "InvalidMessage"],
  ["QueueStore.send delay -1", store((s) => s.send("bad_input", {}, { delay: -1 })), "InvalidMessage"],
  ["QueueStore.send delay 1e300 ms", store((s) => s.send("bad_input", {}, { delay: 1e300 })), "InvalidMessage"],
  [
    "QueueStore.read visibility 1e300 ms",
    store((s) => s.read("bad_input", { visibilityTimeout: 1e300 })),
    "InvalidMessage"
  ],
  ["Job.enqueue priority 1e12", Work.enqueue({ s: "x" }, { priority: 1e12 }), "InvalidMessage"],
  ["EventBus.publish delay 1e300 ms", bus((b) => b.publish("bad.input", {}, { delay: 1e300 })), "InvalidEventPayload"],
  ["QueueStore.sendBatch(5)", store((s) => s.sendBatch("bad_input", bad(5))), "InvalidMessage"],
  ["QueueStore.sendBatch([null])", store((s) => s.sendBatch("bad_input", bad([null]))), "InvalidMessage"],
  ["QueueStore.send to a NUL queue name", store((s) => s.send(NUL, {})), "InvalidQueueName"],
  ["QueueStore.read limit NaN", store((s) => s.read("bad_input", { limit: Number.NaN })), "InvalidMessage"],
  // Jobs
  ["Job.enqueue a NUL in the payload", Work.enqueue({ s: NUL }), "InvalidMessage"],
  ["Job.enqueue a lone surrogate in the payload", Work.enqueue({ s: LONE }), "InvalidMessage"],
  ["Job.enqueue headers as a string", Work.enqueue({ s: "x" }, { headers: bad("abc") }), "InvalidMessage"],
  ["Job.enqueue headers over maxPayloadSize", Work.enqueue({ s: "x" }, { headers: { h: big } }), "PayloadTooLarge"],
  ["Job.enqueue delay NaN", Work.enqueue({ s: "x" }, { delay: Number.NaN }), "InvalidMessage"],
  ["Job.enqueue delay {}", Work.enqueue({ s: "x" }, { delay: bad({}) }), "InvalidMessage"],
  ["Job.enqueue at an invalid Date", Work.enqueue({ s: "x" }, { at: new Date(Number.NaN) }), "InvalidMessage"],
  ["Job.enqueue to a dead-letter queue", Work.enqueue({ s: "x" }, { queue: "x_dlq" }), "InvalidQueueName"],
  ["Job.enqueue options not an object", Work.enqueue({ s: "x" }, bad("soon")), "InvalidMessage"],
  ["Job.enqueueMany(5)", Work.enqueueMany(bad(5)), "InvalidPayload"],
  ["Job.enqueueMany([null])", Work.enqueueMany(bad([null])), "InvalidPayload"],
  ["Job.enqueueMany headers as a string", Work.enqueueMany([{ s: "x" }], { headers: bad("abc") }), "InvalidMessage"],
  ["JobClient.enqueue(null)", jobs((c) => c.enqueue(bad<typeof Work>(null), { s: "x" })), "InvalidPayload"],
  // Event bus
  ["EventBus.publish a function payload", bus((b) => b.publish("bad.input", fn)), "InvalidEventPayload"],
  ["EventBus.publish a function inside", bus((b) => b.publish("bad.input", { f: fn })), "InvalidEventPayload"],
  ["EventBus.publish a NaN", bus((b) => b.publish("bad.input", { n: Number.NaN })), "InvalidEventPayload"],
  ["EventBus.publish a NUL", bus((b) => b.publish("bad.input", NUL)), "InvalidEventPayload"],
  ["EventBus.publish a lone surrogate", bus((b) => b.publish("bad.input", { s: LONE })), "InvalidEventPayload"],
  [
    "EventBus.publish headers as a string",
    bus((b) => b.publish("bad.input", {}, { headers: bad("abc") })),
    "InvalidEventPayload"
  ],
  ["EventBus.publish a NUL routing key", bus((b) => b.publish(NUL, {})), "InvalidRoutingKey"],
  ["EventBus.publish delay NaN", bus((b) => b.publish("bad.input", {}, { delay: Number.NaN })), "InvalidEventPayload"],
  ["EventBus.publishMany(5)", bus((b) => b.publishMany(bad(5))), "InvalidEventPayload"],
  ["EventBus.publishMany([null])", bus((b) => b.publishMany(bad([null]))), "InvalidEventPayload"],
  ["EventBus.publishMany(null)", bus((b) => b.publishMany(bad(null))), "InvalidEventPayload"],
  // Workflows
  ["WorkflowClient.start(null)", flows((c) => c.start(bad<typeof Flow>(null), { s: "x" })), "InvalidWorkflowPayload"],
  ["WorkflowClient.start a NUL in the payload", Flow.start({ s: NUL }), "InvalidWorkflowPayload"],
  ["WorkflowClient.start a NUL subject", Flow.start({ s: "x" }, { subject: NUL }), "InvalidWorkflowPayload"],
  [
    "WorkflowClient.start a lone surrogate in the idempotency key",
    Flow.start({ s: "x" }, { idempotencyKey: LONE }),
    "InvalidWorkflowPayload"
  ],
  [
    "WorkflowClient.start a resource id as a number",
    Flow.start({ s: "x" }, { resourceId: bad(5) }),
    "InvalidWorkflowPayload"
  ],
  ["WorkflowClient.start options not an object", Flow.start({ s: "x" }, bad(7)), "InvalidWorkflowPayload"],
  ["WorkflowClient.get(null)", flows((c) => c.get(bad(null))), "InvalidInput"],
  ["WorkflowClient.signal a NUL name", flows((c) => c.signal(RUN, NUL, {})), "InvalidSignal"],
  ["WorkflowClient.signal a function payload", flows((c) => c.signal(RUN, "go", fn)), "InvalidSignal"],
  ["WorkflowClient.signal a NaN payload", flows((c) => c.signal(RUN, "go", { n: Number.NaN })), "InvalidSignal"],
  ["WorkflowClient.cancel a NUL reason", flows((c) => c.cancel(RUN, { reason: NUL })), "InvalidInput"],
  ["WorkflowClient.cancel a NUL actor", flows((c) => c.cancel(RUN, { actor: LONE })), "InvalidInput"],
  ["WorkflowClient.list a NUL workflow", flows((c) => c.list({ workflow: NUL })), "InvalidInput"],
  ["WorkflowClient.findBySubject a NUL subject", flows((c) => c.findBySubject("BadInputFlow", NUL)), "InvalidInput"],
  [
    "RunHandle.pause a NUL reason",
    flows((c) => Effect.flatMap(c.get(RUN), (run) => run.pause({ reason: NUL }))),
    "InvalidInput"
  ],
  [
    "RunHandle.signal a function payload",
    flows((c) => Effect.flatMap(c.get(RUN), (run) => run.signal("go", fn))),
    "InvalidSignal"
  ],
  ["Workflow.get(null)", Flow.get(bad(null)), "InvalidInput"],
  ["QueueStore.create(null)", store((s) => s.create(bad(null))), "InvalidQueueName"],
  ["QueueStore.browse limit NaN", store((s) => s.browse("bad_input", { limit: Number.NaN })), "InvalidMessage"],
  ["QueueStore.browse after a string", store((s) => s.browse("bad_input", { after: bad("x") })), "InvalidMessage"],
  [
    "QueueStore.read visibility NaN",
    store((s) => s.read("bad_input", { visibilityTimeout: Number.NaN })),
    "InvalidMessage"
  ],
  ["Batch.make properties as a string", Batch.make({ properties: bad("abc") }), "InvalidBatchOptions"],
  ["Batch.make properties with a function", Batch.make({ properties: { f: fn } }), "InvalidBatchOptions"],
  ["Batch.make properties over maxPayloadSize", Batch.make({ properties: { big } }), "InvalidBatchOptions"],
  ["Batch.make a NUL description", Batch.make({ description: NUL }), "InvalidBatchOptions"],
  ["EventBus.routes a NUL key", bus((b) => b.routes(NUL)), "InvalidRoutingKey"]
]

layer(TestDatabase.layer({ maxPayloadSize: 200_000 }), { excludeTestServices: true })("bad input", (it) => {
  it.effect("setup: the queues exist (so that a refused call has nothing to create)", () =>
    Effect.gen(function* () {
      const s = yield* QueueStore
      yield* s.create("bad_input")
      yield* (yield* JobClient).ensureQueue("bad_input")
      const config = yield* PgBusConfig
      yield* (yield* JobClient).ensureQueue(config.workflowQueue)
      RUN = (yield* Flow.start({ s: "x" })).id
    })
  )

  describe("each public entry point refuses bad input with a typed error and writes nothing", () => {
    for (const [name, run, tag] of cases) {
      it.effect(name, () =>
        Effect.gen(function* () {
          const before = yield* snapshot
          const exit = yield* Effect.exit(run)
          assert.isTrue(Exit.isFailure(exit), `${name}: succeeded`)
          if (Exit.isFailure(exit)) {
            const error = Cause.findErrorOption(exit.cause)
            assert.isTrue(error._tag === "Some", `${name}: not a typed failure: ${Cause.pretty(exit.cause)}`)
            if (error._tag === "Some") {
              const tagged = error.value as { readonly _tag?: unknown }
              assert.strictEqual(tagged._tag, tag, `${name}: ${String(error.value)}`)
            }
          }
          assert.deepStrictEqual(yield* snapshot, before, `${name}: wrote something`)
        })
      )
    }
  })

  describe("the rules as Schema checks, for payload schemas of one's own", () => {
    it("StorableText, StorableJson and Headers refuse what the entry points refuse", () => {
      assert.isTrue(Exit.isFailure(Schema.decodeUnknownExit(Input.StorableText)(NUL)))
      assert.isTrue(Exit.isSuccess(Schema.decodeUnknownExit(Input.StorableText)("ok")))
      assert.isTrue(Exit.isFailure(Schema.decodeUnknownExit(Input.StorableJson)({ n: Number.NaN })))
      assert.isTrue(Exit.isFailure(Schema.decodeUnknownExit(Input.Headers)({ h: LONE })))
      assert.isTrue(Exit.isSuccess(Schema.decodeUnknownExit(Input.Headers)({ h: "v" })))
    })
    it("a bad target of a list is named by its index and field", () => {
      const ok = { msgId: 1n, readCt: 1 }
      assert.isUndefined(Input.listProblem([ok, 2n], Input.targetProblem, "targets"))
      assert.strictEqual(
        Input.listProblem([ok, { msgId: 1n, readCt: -1 }], Input.targetProblem, "targets"),
        "targets[1].readCt: must be an integer from 0 to 2147483647"
      )
      assert.strictEqual(
        Input.listProblem([ok, ok, { msgId: -1n, readCt: 1 }], Input.targetProblem, "targets"),
        "targets[2].msgId must be a message id (a bigint of 0 or more)"
      )
      assert.strictEqual(
        Input.listProblem([null], Input.targetProblem, "targets"),
        "targets[0] must be a receipt { msgId, readCt }"
      )
    })
    it.effect("a job whose payload schema uses StorableText refuses a NUL as InvalidPayload", () =>
      Effect.gen(function* () {
        const Strict = Job.make(
          "StrictText",
          { payload: Schema.Struct({ s: Input.StorableText }), queue: "bad_input" },
          () => Effect.void
        )
        const error = yield* Strict.enqueue({ s: NUL }).pipe(Effect.flip)
        assert.strictEqual(error._tag, "InvalidPayload")
      })
    )
  })

  describe("definitions", () => {
    it("a retry policy with an unknown key is refused", () => {
      assert.match(checkPolicy(bad({ maxRetries: 3, maxRetry: 5 })) ?? "", /unknown key/)
      assert.match(checkPolicy({ maxRetries: 3_000_000_000 }) ?? "", /maxRetries/)
      assert.throws(() =>
        Job.make("BadRetry", { payload: Text, retry: bad({ backof: "1 second" }) }, () => Effect.void)
      )
    })
  })
})
