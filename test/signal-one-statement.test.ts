/**
 * A signal sent where no reader of this process takes the woken step goes in one statement
 * (`signalStoreWake`): the same rows, events and errors as the verb's transaction, and the
 * transaction whenever the statement cannot decide alone (a run changed under its snapshot).
 */
import { assert, describe, layer } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Notifier } from "../src/Queue/Notifier.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import { performNextStep } from "../src/Testing/Workflows.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { makeWorkflowSql } from "../src/Workflow/WorkflowSql.ts"
import { awaitLockWaiter } from "./support/connections.ts"
import * as TestDatabase from "./support/TestDatabase.ts"
import { statementTracer } from "./support/tracing.ts"

const Paid = Workflow.make(
  "OneStatementPaid",
  { payload: Schema.Struct({ id: Schema.String }), signals: { paid: Schema.Struct({ amount: Schema.Number }) } },
  function* ({ waitForSignal }) {
    const paid = yield* waitForSignal("paid")
    return paid.amount
  }
)
const Other = Workflow.make(
  "OneStatementOther",
  { payload: Schema.Struct({ id: Schema.String }), signals: { paid: Schema.Struct({ amount: Schema.Number }) } },
  function* ({ waitForSignal }) {
    return (yield* waitForSignal("paid")).amount
  }
)

// its steps on a queue of their own
const OwnQueue = Workflow.make(
  "OneStatementOwnQueue",
  { payload: Schema.Struct({ id: Schema.String }), queue: "own_queue" },
  function* ({ payload }) {
    return yield* Workflow.step("got", Effect.succeed(payload.id), { waitFor: "go" })
  }
)

// its wait has a matcher: only code that loads the workflow can judge a signal
const Matched = Workflow.make(
  "OneStatementMatched",
  {
    payload: Schema.Struct({ id: Schema.String }),
    signals: {
      paid: Workflow.signalMatcher("paid", {
        schema: Schema.Struct({ amount: Schema.Number }),
        matches: (p) => p.amount > 0
      })
    }
  },
  function* ({ waitForSignal }) {
    return (yield* waitForSignal("paid")).amount
  }
)

/** The statements an effect runs, counted under a tracing backend (BEGIN and COMMIT have no span). */
const statementsOf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const { tracer, texts } = statementTracer()
    const value = yield* effect.pipe(Effect.withTracer(tracer))
    return { value, statements: texts.length }
  })

const client = WorkflowClient
const registered = Effect.provide(Registry.layer([Paid, Other, OwnQueue, Matched]))
const rowsOf = (id: string) =>
  Effect.gen(function* () {
    const c = yield* client
    const info = (yield* c.get(id)).info
    const steps = (yield* c.steps(id)).map((s) => `${s.name}#${s.attempt}:${s.status}`)
    const signals = (yield* c.signals(id)).map((s) => `${s.name}:${s.status}`)
    // the trail without its ids and times; the idempotency key is the transaction's way in
    const events = (yield* c.events(id)).map((e) => {
      const { idempotency_key: _key, ...details } = (e.details ?? {}) as Record<string, unknown>
      const { signal_id: _id, ...rest } = details
      return { type: e.type, step: e.step, attempt: e.attempt, actor: e.actor, reason: e.reason, details: rest }
    })
    return { status: info.status, steps, signals, events }
  })
const messagesOf = (id: string, queue = "default") =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM ${sql(`pgbus.q_pgbus_${queue}`)}
      WHERE message->'payload'->>'run' = ${id}`.pipe(Effect.map(([r]) => r!.n))
  )

layer(TestDatabase.layer(), { excludeTestServices: true })("a signal in one statement", (it) => {
  describe("the same outcome as the verb's transaction", () => {
    it.effect("stored, claimed and the step woken with its message: rows and trail as the transaction's", () =>
      Effect.gen(function* () {
        const one = yield* Paid.start({ id: "one" })
        const tx = yield* Paid.start({ id: "tx" })
        yield* performNextStep(one.id)
        yield* performNextStep(tx.id)
        const before = yield* messagesOf(one.id)
        const receipt = yield* one.signal("paid", { amount: 5 }, { actor: "webhook", reason: "callback" })
        // a reader of the queue in this process (one that never has room) makes it the transaction's
        const notifier = yield* Notifier
        const viaTx = yield* Effect.scoped(
          notifier
            .offerLocal(["pgbus_default"], { reserve: () => undefined })
            .pipe(Effect.andThen(tx.signal("paid", { amount: 5 }, { actor: "webhook", reason: "callback" })))
        )
        assert.deepInclude(receipt, { name: "paid", status: "claimed", claimed: true, duplicate: false })
        assert.deepInclude(viaTx, { name: "paid", status: "claimed", claimed: true, duplicate: false })
        const a = yield* rowsOf(one.id)
        assert.deepStrictEqual(a, yield* rowsOf(tx.id))
        assert.strictEqual(a.status, "ready")
        assert.deepStrictEqual(a.steps, ["wait:paid#1:scheduled"])
        assert.deepStrictEqual(a.signals, ["paid:claimed"])
        assert.deepStrictEqual(
          a.events.slice(-2).map((e) => [e.type, e.actor]),
          [
            ["signal_received", "webhook"],
            ["signal_claimed", "system"]
          ]
        )
        assert.strictEqual((yield* messagesOf(one.id)) - before, 1, "the woken step's message is sent")
        // and the run goes on with the signal's payload
        yield* performNextStep(one.id)
        assert.strictEqual((yield* (yield* client).get(one.id)).info.output, 5)
      }).pipe(registered)
    )

    it.effect(
      "a step on the workflow's own queue is sent there; one on another queue goes through the transaction",
      () =>
        Effect.gen(function* () {
          const c = yield* client
          const own = yield* OwnQueue.start({ id: "own" })
          yield* performNextStep(own.id)
          const before = yield* messagesOf(own.id, "own_queue")
          assert.isTrue((yield* own.signal("go", {})).claimed)
          assert.deepStrictEqual((yield* rowsOf(own.id)).steps, ["got#1:scheduled"])
          assert.strictEqual((yield* messagesOf(own.id, "own_queue")) - before, 1, "sent on the workflow's queue")
          // a deploy moved the workflow to a queue that does not exist yet: the run's step is still
          // on the old one, so the statement steps aside and the transaction sends it there
          const moved = yield* OwnQueue.start({ id: "moved" })
          yield* performNextStep(moved.id)
          const was = yield* messagesOf(moved.id, "own_queue")
          const receipt = yield* c.signal(
            moved.id,
            "go",
            {},
            { workflow: { name: OwnQueue.name, signals: {}, queue: "moved_queue" } }
          )
          assert.isTrue(receipt.claimed)
          assert.deepStrictEqual((yield* rowsOf(moved.id)).steps, ["got#1:scheduled"])
          assert.strictEqual((yield* messagesOf(moved.id, "own_queue")) - was, 1, "sent on the step's queue")
          assert.strictEqual(yield* messagesOf(moved.id, "moved_queue"), 0)
          yield* performNextStep(moved.id)
          assert.strictEqual((yield* c.get(moved.id)).info.output, "moved")
        }).pipe(registered)
    )

    it.effect("without the definition (the client by run id): one statement, the transaction's rows and trail", () =>
      Effect.gen(function* () {
        const c = yield* client
        const bare = yield* Paid.start({ id: "bare" })
        const typed = yield* Paid.start({ id: "typed" })
        yield* performNextStep(bare.id)
        yield* performNextStep(typed.id)
        const before = yield* messagesOf(bare.id)
        const viaClient = yield* statementsOf(c.signal(bare.id, "paid", { amount: 8 }, { actor: "api" }))
        const viaTx = yield* statementsOf(
          Effect.scoped(
            (yield* Notifier)
              .offerLocal(["pgbus_default"], { reserve: () => undefined })
              .pipe(Effect.andThen(c.signal(typed.id, "paid", { amount: 8 }, { actor: "api" })))
          )
        )
        assert.strictEqual(viaClient.statements, 1, "one statement")
        assert.isAbove(viaTx.statements, 1)
        assert.deepInclude(viaClient.value, { name: "paid", status: "claimed", claimed: true, duplicate: false })
        assert.deepStrictEqual(yield* rowsOf(bare.id), yield* rowsOf(typed.id))
        assert.strictEqual((yield* messagesOf(bare.id)) - before, 1, "the woken step's message is sent")
        yield* performNextStep(bare.id)
        assert.strictEqual((yield* c.get(bare.id)).info.output, 8)
        // stored unchecked, as the transaction stores it
        const unchecked = yield* Paid.start({ id: "unchecked" })
        yield* performNextStep(unchecked.id)
        const receipt = yield* c.signal(unchecked.id, "paid", { amount: "eight" })
        assert.isTrue(receipt.claimed)
        yield* performNextStep(unchecked.id)
        // the gate's decode fails the step, and the default policy pauses the run
        assert.strictEqual((yield* c.get(unchecked.id)).info.status, "paused")
        const failed = (yield* c.steps(unchecked.id)).find((st) => st.status === "failed")
        assert.include(JSON.stringify(failed?.error ?? null), "Expected number")
      }).pipe(registered)
    )

    it.effect("without the definition: a wait with a matcher, or on another queue, goes to the transaction", () =>
      Effect.gen(function* () {
        const c = yield* client
        const matched = yield* Matched.start({ id: "matched" })
        yield* performNextStep(matched.id)
        const judged = yield* statementsOf(c.signal(matched.id, "paid", { amount: 2 }))
        assert.isAbove(judged.statements, 1, "the statement stepped aside")
        // this process cannot judge without the definition: the step is woken to decide at its gate
        assert.deepInclude(judged.value, { status: "pending", claimed: false })
        assert.deepStrictEqual((yield* rowsOf(matched.id)).steps, ["wait:paid#1:scheduled"])
        yield* performNextStep(matched.id)
        assert.strictEqual((yield* c.get(matched.id)).info.output, 2)
        const own = yield* OwnQueue.start({ id: "own-bare" })
        yield* performNextStep(own.id)
        const was = yield* messagesOf(own.id, "own_queue")
        const sent = yield* statementsOf(c.signal(own.id, "go", {}))
        assert.isAbove(sent.statements, 1, "the statement stepped aside")
        assert.isTrue(sent.value.claimed)
        assert.strictEqual((yield* messagesOf(own.id, "own_queue")) - was, 1, "sent on the step's queue")
        yield* performNextStep(own.id)
        assert.strictEqual((yield* c.get(own.id)).info.output, "own-bare")
      }).pipe(registered)
    )

    it.effect("an idempotency key: stored and woken once; the repeat is a duplicate that wakes nothing", () =>
      Effect.gen(function* () {
        const run = yield* Paid.start({ id: "keyed" })
        yield* performNextStep(run.id)
        const before = yield* messagesOf(run.id)
        const first = yield* run.signal("paid", { amount: 6 }, { idempotencyKey: "evt-1" })
        assert.deepInclude(first, { status: "claimed", claimed: true, duplicate: false })
        const again = yield* run.signal("paid", { amount: 7 }, { idempotencyKey: "evt-1" })
        assert.deepInclude(again, { id: first.id, duplicate: true })
        assert.deepStrictEqual(again.payload, { amount: 6 }, "the stored signal, not the repeat")
        const rows = yield* rowsOf(run.id)
        assert.deepStrictEqual(rows.signals, ["paid:claimed"])
        assert.deepStrictEqual(rows.steps, ["wait:paid#1:scheduled"])
        assert.strictEqual((yield* messagesOf(run.id)) - before, 1, "one message for the two calls")
        const received = (yield* (yield* client).events(run.id)).filter((e) => e.type === "signal_received")
        assert.deepStrictEqual(
          received.map((e) => e.details),
          [
            { name: "paid", idempotency_key: "evt-1", duplicate: false },
            { name: "paid", idempotency_key: "evt-1", duplicate: true }
          ]
        )
        yield* performNextStep(run.id)
        assert.strictEqual((yield* (yield* client).get(run.id)).info.output, 6)
      }).pipe(registered)
    )

    it.effect("a run not waiting for it keeps the signal pending, as the transaction does", () =>
      Effect.gen(function* () {
        const run = yield* Paid.start({ id: "early" })
        const receipt = yield* run.signal("paid", { amount: 3 })
        assert.deepInclude(receipt, { status: "pending", claimed: false })
        const rows = yield* rowsOf(run.id)
        assert.strictEqual(rows.status, "ready")
        assert.deepStrictEqual(rows.signals, ["paid:pending"])
        assert.strictEqual(rows.events.at(-1)!.type, "signal_received")
        // the step takes it at its gate and does not wait
        yield* performNextStep(run.id)
        assert.strictEqual((yield* (yield* client).get(run.id)).info.output, 3)
      }).pipe(registered)
    )

    it.effect("a paused run takes the signal and stays paused (the transaction's way)", () =>
      Effect.gen(function* () {
        const run = yield* Paid.start({ id: "paused" })
        yield* performNextStep(run.id)
        yield* run.pause()
        const before = yield* messagesOf(run.id)
        const receipt = yield* run.signal("paid", { amount: 1 })
        assert.isTrue(receipt.claimed)
        const rows = yield* rowsOf(run.id)
        assert.strictEqual(rows.status, "paused")
        assert.deepStrictEqual(rows.steps, ["wait:paid#1:waiting"])
        assert.deepStrictEqual(rows.signals, ["paid:claimed"])
        assert.strictEqual(yield* messagesOf(run.id), before, "no message: its resume sends the step")
      }).pipe(registered)
    )

    it.effect("refused: unknown run, another workflow's run, another tenant's, a finished run; nothing stored", () =>
      Effect.gen(function* () {
        const c = yield* client
        const missing = yield* c
          .signal("00000000-0000-4000-8000-000000000000", "paid", { amount: 1 }, { workflow: Paid })
          .pipe(Effect.flip)
        assert.strictEqual(missing._tag, "RunNotFound")
        const other = yield* Other.start({ id: "other" })
        yield* performNextStep(other.id)
        const wrong = yield* c.signal(other.id, "paid", { amount: 1 }, { workflow: Paid }).pipe(Effect.flip)
        assert.strictEqual(wrong._tag, "RunNotFound")
        const tenant = yield* Paid.start({ id: "tenant" }, { resourceId: "acme" })
        yield* performNextStep(tenant.id)
        const foreign = yield* c
          .signal(tenant.id, "paid", { amount: 1 }, { workflow: Paid, resourceId: "globex" })
          .pipe(Effect.flip)
        assert.strictEqual(foreign._tag, "RunNotFound")
        const done = yield* Paid.start({ id: "done" })
        yield* performNextStep(done.id)
        yield* done.signal("paid", { amount: 2 })
        yield* performNextStep(done.id)
        const late = yield* done.signal("paid", { amount: 3 }).pipe(Effect.flip)
        assert.strictEqual(late._tag, "NotOngoing")
        assert.deepStrictEqual((yield* rowsOf(other.id)).signals, [])
        assert.deepStrictEqual((yield* rowsOf(tenant.id)).signals, [])
        assert.deepStrictEqual((yield* rowsOf(done.id)).signals, ["paid:consumed"])
      }).pipe(registered)
    )
  })

  describe("the run moved under the statement's snapshot", () => {
    it.effect("a step parked between the snapshot and the lock is woken: the transaction sends it", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const run = yield* Paid.start({ id: "race" })
        yield* performNextStep(run.id)
        // as if its step were still running: the park below is what a worker's gate does
        yield* sql`UPDATE pgbus.workflow_steps SET status = 'in_progress' WHERE run_id = ${run.id}::uuid`
        yield* sql`UPDATE pgbus.workflow_runs SET status = 'performing' WHERE id = ${run.id}::uuid`
        const parkLocked = yield* Deferred.make<void>()
        const commit = yield* Deferred.make<void>()
        const park = yield* sql
          .withTransaction(
            Effect.gen(function* () {
              yield* sql`SELECT id FROM pgbus.workflow_runs WHERE id = ${run.id}::uuid FOR UPDATE`
              yield* sql`UPDATE pgbus.workflow_steps SET status = 'waiting' WHERE run_id = ${run.id}::uuid`
              yield* sql`UPDATE pgbus.workflow_runs SET status = 'waiting' WHERE id = ${run.id}::uuid`
              yield* Deferred.succeed(parkLocked, undefined)
              yield* Deferred.await(commit)
            })
          )
          .pipe(Effect.forkChild)
        yield* Deferred.await(parkLocked)
        const before = yield* messagesOf(run.id)
        // the signal's statement takes its snapshot (the step running) and waits on the run's lock
        const signal = yield* run.signal("paid", { amount: 9 }).pipe(Effect.forkChild)
        yield* awaitLockWaiter()
        yield* Deferred.succeed(commit, undefined)
        assert.isTrue(Exit.isSuccess(yield* Fiber.await(park)))
        const receipt = yield* Fiber.join(signal)
        assert.isTrue(receipt.claimed, "the parked step takes the signal")
        const rows = yield* rowsOf(run.id)
        assert.strictEqual(rows.status, "ready")
        assert.deepStrictEqual(rows.steps, ["wait:paid#1:scheduled"])
        assert.deepStrictEqual(rows.signals, ["paid:claimed"])
        assert.strictEqual((yield* messagesOf(run.id)) - before, 1, "the woken step's message is sent")
      }).pipe(registered)
    )
  })

  describe("the hand-over's wake-and-claim (local dispatch, in the verb's transaction)", () => {
    it.effect(
      "takes the pending signal in its statement: the claim carries it held, signal_claimed before step_started",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const store = yield* QueueStore
          const run = yield* Paid.start({ id: "wake-claim" })
          yield* performNextStep(run.id)
          const [waiting] = yield* sql<{ readonly id: bigint }>`SELECT id FROM pgbus.workflow_steps
          WHERE run_id = ${run.id}::uuid AND status = 'waiting'`
          const [signal] = yield* sql<{ readonly id: bigint }>`INSERT INTO pgbus.workflow_signals
            (run_id, name, payload, status, received_at)
          VALUES (${run.id}::uuid, 'paid', '{"amount":4}'::jsonb, 'pending', now()) RETURNING id`
          const [claim] = yield* makeWorkflowSql(sql, "pgbus", store.messageCtes).stepWakeClaim({
            workflow: Paid.name,
            runId: run.id,
            stepId: waiting!.id,
            physicalQueue: "pgbus_default",
            claim: { claimedBy: "test#1", visibilityMs: 60_000 },
            worker: "tester",
            appRevision: null,
            claimSignal: signal!.id,
            now: null
          })
          assert.strictEqual(claim?.step_id, waiting!.id)
          assert.deepStrictEqual(claim?.held_signal, { id: String(signal!.id), name: "paid", payload: { amount: 4 } })
          const rows = yield* rowsOf(run.id)
          assert.strictEqual(rows.status, "performing")
          assert.deepStrictEqual(rows.steps, ["wait:paid#1:in_progress"])
          assert.deepStrictEqual(rows.signals, ["paid:claimed"])
          assert.deepStrictEqual(
            rows.events.slice(-2).map((e) => e.type),
            ["signal_claimed", "step_started"]
          )
        }).pipe(registered)
    )
  })
})
