/**
 * Child workflows (seed 004 "Child workflows", issue 20 item 5): `Workflow.child` starts a child
 * run once per parent step, parks the parent holding no worker, resumes it with the child's typed
 * output, raises the child's failure into the parent's policies; cancel semantics; the sweep's
 * repair of a lost wake-up; a parent's process killed while its child runs, and a child that
 * finishes while its parent's process is down.
 */
import { assert, describe, expect, it, layer } from "@effect/vitest"
import { type Duration, Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Registry } from "../src/Registry.ts"
import { speedrun } from "../src/Testing/Workflows.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import { WorkflowSweep } from "../src/Workflow/Engine.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { Checkout, OrderInput, Receipt, ReceiptOutput } from "./fixtures/children-workflows.ts"
import { bundledFixture, spawnSupervisor } from "./support/child.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

interface ChildRow {
  readonly id: string
  readonly workflow: string
  readonly status: string
  readonly parent_step: string
}

/** The child runs a parent started. */
const childrenOf = (parentId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<ChildRow>`SELECT id::text, workflow, status, parent_step FROM pgbus.workflow_runs
      WHERE parent_run_id = ${parentId}::uuid ORDER BY created_at`
  )
/** Runs of a workflow. */
const runsOf = (workflow: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pgbus.workflow_runs WHERE workflow = ${workflow}`,
      ([row]) => row!.n
    )
  )
const status = (id: string) => Effect.flatMap(WorkflowClient, (c) => Effect.map(c.get(id), (h) => h.info.status))
const info = (id: string) => Effect.flatMap(WorkflowClient, (c) => Effect.map(c.get(id), (h) => h.info))
const eventsOf = (id: string, type: string) =>
  Effect.flatMap(WorkflowClient, (c) => Effect.map(c.events(id), (es) => es.filter((e) => e.type === type)))
/** Waits until run `id` is `wanted` (30 s at most unless `timeout`). */
const statusBecomes = (id: string, wanted: string, timeout: Duration.Input = "30 seconds") =>
  eventually(
    `run ${id} is ${wanted}`,
    Effect.map(status(id), (s) => s === wanted),
    timeout
  )
/** Waits until the checkout run `id` finished, and checks it recorded the receipt of `orderId`. */
const finishedWithReceipt = (id: string, orderId: string, timeout: Duration.Input = "30 seconds") =>
  Effect.gen(function* () {
    yield* statusBecomes(id, "finished", timeout)
    assert.deepStrictEqual((yield* info(id)).output, {
      receiptId: `rcpt_${orderId}`,
      recorded: `recorded rcpt_${orderId}`
    })
  })
/** The parent's only child, once it is in `wanted`. */
const childWhen = (parentId: string, wanted: string) =>
  Effect.gen(function* () {
    let found: ChildRow | undefined
    yield* eventually(
      `the child is ${wanted}`,
      Effect.map(childrenOf(parentId), (rows) => {
        found = rows[0]
        return found?.status === wanted
      }),
      "30 seconds"
    )
    return found!
  })

const capsules = (concurrency: number) => ({
  capsules: [{ name: "c", queues: ["parents", "children"], concurrency }]
})

const waitForGo = { orderId: "o1", waitForGo: true, slowMs: 0 }

/** A parent that catches a failed child with its own policy (skip: the step gives undefined). */
const Forgiving = Workflow.make("ParentForgiving", { payload: OrderInput, queue: "parents" }, function* ({ payload }) {
  const receipt = yield* Workflow.child("receipt", Receipt, payload, {
    output: ReceiptOutput,
    onError: [{ match: "ChildWorkflowFailed", action: "skip" }]
  })
  return { receiptId: receipt?.receiptId ?? null }
})

/** A child whose wait for `go` cancels it after 300 ms (the sweep applies it). */
const Impatient = Workflow.make(
  "ChildImpatient",
  { payload: Schema.Struct({ n: Schema.Number }), queue: "children" },
  function* () {
    yield* Workflow.waitForSignal("go", { timeout: "300 millis", onTimeout: "cancel" })
  }
)
/** A parent whose child's wait times out, skipping the failed child. */
const Hopeful = Workflow.make(
  "ParentHopeful",
  { payload: Schema.Struct({ n: Schema.Number }), queue: "parents" },
  function* () {
    yield* Workflow.child(
      "impatient",
      Impatient,
      { n: 1 },
      { onError: [{ match: "ChildWorkflowFailed", action: "skip" }] }
    )
    return "went on"
  }
)

/** A child that fails (its default policy pauses it with the error). */
const Broken = Workflow.make(
  "ChildBroken",
  { payload: Schema.Struct({ n: Schema.Number }), queue: "children" },
  function* () {
    yield* Workflow.step("explode", Effect.fail(new Error("the printer is on fire")))
  }
)
/** A parent that raises its child's pause (`onChildPause: "fail"`) and cancels itself on it. */
const Strict = Workflow.make(
  "ParentStrict",
  { payload: Schema.Struct({ n: Schema.Number }), queue: "parents" },
  function* () {
    yield* Workflow.child(
      "broken",
      Broken,
      { n: 1 },
      { onChildPause: "fail", onError: [{ match: "ChildWorkflowFailed", action: "cancel" }] }
    )
  }
)
/** A parent that waits out its child's pause (the default). */
const Patient = Workflow.make(
  "ParentPatient",
  { payload: Schema.Struct({ n: Schema.Number }), queue: "parents" },
  function* () {
    yield* Workflow.child("broken", Broken, { n: 2 })
  }
)
/** A parent whose child's input does not encode. */
const BadInput = Workflow.make("ParentBadInput", { payload: OrderInput, queue: "parents" }, function* () {
  yield* Workflow.child("receipt", Receipt, { orderId: 42 } as never)
})

layer(TestDatabase.layer(), { excludeTestServices: true })("child workflows", (it) => {
  it.effect("the parent waits holding no worker and resumes with the child's typed output", () =>
    Effect.gen(function* () {
      const client = yield* WorkflowClient
      const parent = yield* Checkout.start(waitForGo)
      // one worker: the child can only run if the waiting parent holds none
      yield* startSupervisor([Checkout, Receipt], capsules(1))
      const child = yield* childWhen(parent.id, "waiting")
      assert.strictEqual(child.workflow, "ChildReceipt")
      assert.strictEqual(child.parent_step, "receipt")
      assert.strictEqual(yield* status(parent.id), "waiting")
      const waiting = (yield* client.steps(parent.id)).find((s) => s.status === "waiting")
      assert.strictEqual(waiting?.waitingFor, "pgbus.child:receipt")
      yield* client.signal(child.id, "go", {})
      yield* finishedWithReceipt(parent.id, "o1")
      const childInfo = yield* info(child.id)
      assert.strictEqual(childInfo.status, "finished")
      assert.strictEqual(childInfo.parentRunId, parent.id)
      assert.strictEqual(childInfo.parentStep, "receipt")
      assert.strictEqual((yield* info(parent.id)).parentRunId, undefined)
      // one child for the step; the audit trail shows both sides
      assert.lengthOf(yield* childrenOf(parent.id), 1)
      const [started] = yield* eventsOf(parent.id, "child_started")
      expect(started).toMatchObject({ step: "receipt", details: { child_run_id: child.id, workflow: "ChildReceipt" } })
      const [ended] = yield* eventsOf(parent.id, "child_ended")
      expect(ended).toMatchObject({ step: "receipt", details: { child_run_id: child.id, status: "finished" } })
      // woken in the transaction that finished the child: one statement time
      const [childFinished] = yield* eventsOf(child.id, "finished")
      assert.strictEqual(ended!.at.getTime(), childFinished!.at.getTime())
      const [childStarted] = yield* eventsOf(child.id, "started")
      expect(childStarted!.details).toMatchObject({ parent_run_id: parent.id, parent_step: "receipt" })
      // the parent's step stored the child's output (a replay reads it back)
      const step = (yield* client.steps(parent.id)).find((s) => s.name === "receipt")
      expect(step?.output).toMatchObject({ receiptId: "rcpt_o1", workedMs: 0 })
    })
  )

  it.effect("a cancelled child fails the parent's step with ChildWorkflowFailed (the default policy pauses)", () =>
    Effect.gen(function* () {
      const client = yield* WorkflowClient
      const parent = yield* Checkout.start({ ...waitForGo, orderId: "o2" })
      yield* startSupervisor([Checkout, Receipt], capsules(2))
      const child = yield* childWhen(parent.id, "waiting")
      yield* client.cancel(child.id, { reason: "out of stock" })
      yield* statusBecomes(parent.id, "paused")
      expect((yield* info(parent.id)).error).toMatchObject({
        tag: "ChildWorkflowFailed",
        message: `step receipt: child workflow ChildReceipt run ${child.id} cancelled`
      })
      const [ended] = yield* eventsOf(parent.id, "child_ended")
      expect(ended!.details).toMatchObject({ child_run_id: child.id, status: "cancelled" })
    })
  )

  it.effect("the parent's own policy catches the child's failure and goes on", () =>
    Effect.gen(function* () {
      const client = yield* WorkflowClient
      const parent = yield* Forgiving.start({ ...waitForGo, orderId: "o3" })
      yield* startSupervisor([Forgiving, Receipt], capsules(2))
      const child = yield* childWhen(parent.id, "waiting")
      yield* client.cancel(child.id)
      yield* statusBecomes(parent.id, "finished")
      assert.deepStrictEqual((yield* info(parent.id)).output, { receiptId: null })
    })
  )

  it.effect("a child's pause fails the parent with onChildPause fail, and is waited out by default", () =>
    Effect.gen(function* () {
      const strict = yield* Strict.start({ n: 1 })
      const patient = yield* Patient.start({ n: 2 })
      yield* startSupervisor([Strict, Patient, Broken], capsules(2))
      yield* statusBecomes(strict.id, "cancelled")
      const [strictChild] = yield* childrenOf(strict.id)
      assert.strictEqual(strictChild?.status, "paused")
      const [paused] = yield* eventsOf(strict.id, "child_paused")
      expect(paused!.details).toMatchObject({ child_run_id: strictChild!.id, status: "paused" })
      // the patient parent's child paused too; the parent still waits on it
      yield* childWhen(patient.id, "paused")
      assert.strictEqual(yield* status(patient.id), "waiting")
      assert.lengthOf(yield* eventsOf(patient.id, "child_paused"), 0)
    })
  )

  it.effect("a child not registered, or an input its Schema refuses: a typed error and no child written", () =>
    Effect.gen(function* () {
      const before = yield* runsOf("ChildReceipt")
      const unregistered = yield* Checkout.start({ ...waitForGo, orderId: "o4" })
      // this process registers the parent only
      yield* Effect.scoped(
        Effect.gen(function* () {
          yield* startSupervisor([Checkout], capsules(2))
          yield* statusBecomes(unregistered.id, "paused")
        })
      )
      expect((yield* info(unregistered.id)).error).toMatchObject({
        tag: "WorkflowNotRegistered",
        message: "workflow ChildReceipt is not registered in this process"
      })
      const bad = yield* BadInput.start({ ...waitForGo, orderId: "o5" })
      yield* startSupervisor([BadInput, Receipt], capsules(2))
      yield* statusBecomes(bad.id, "paused")
      expect((yield* info(bad.id)).error).toMatchObject({ tag: "InvalidWorkflowPayload" })
      assert.lengthOf(yield* childrenOf(unregistered.id), 0)
      assert.lengthOf(yield* childrenOf(bad.id), 0)
      assert.strictEqual(yield* runsOf("ChildReceipt"), before)
      assert.lengthOf(yield* eventsOf(unregistered.id, "child_started"), 0)
      assert.lengthOf(yield* eventsOf(bad.id, "child_started"), 0)
    })
  )

  it.effect("cancelling the parent leaves its child running; cancelChildren cancels the child too", () =>
    Effect.gen(function* () {
      const client = yield* WorkflowClient
      const kept = yield* Checkout.start({ ...waitForGo, orderId: "o6" })
      const cascaded = yield* Checkout.start({ ...waitForGo, orderId: "o7" })
      yield* startSupervisor([Checkout, Receipt], capsules(2))
      const keptChild = yield* childWhen(kept.id, "waiting")
      const cascadedChild = yield* childWhen(cascaded.id, "waiting")
      yield* client.cancel(kept.id)
      yield* client.cancel(cascaded.id, { cancelChildren: true, reason: "order withdrawn" })
      assert.strictEqual(yield* status(cascadedChild.id), "cancelled")
      const [cancelled] = yield* eventsOf(cascadedChild.id, "cancelled")
      assert.strictEqual(cancelled?.reason, "order withdrawn")
      // the other child runs to its own end; its cancelled parent stays cancelled
      assert.strictEqual(yield* status(keptChild.id), "waiting")
      yield* client.signal(keptChild.id, "go", {})
      yield* statusBecomes(keptChild.id, "finished")
      assert.strictEqual(yield* status(kept.id), "cancelled")
      assert.lengthOf(yield* eventsOf(kept.id, "child_ended"), 0)
      // a bad option is refused before anything happens
      const refused = yield* client.cancel(keptChild.id, { cancelChildren: "yes" } as never).pipe(Effect.flip)
      assert.strictEqual(refused._tag, "InvalidInput")
    })
  )

  it.effect("a child cancelled by the sweep (its wait timed out) wakes its parent in the same transaction", () =>
    Effect.gen(function* () {
      const sweep = yield* WorkflowSweep
      const parent = yield* Hopeful.start({ n: 1 })
      yield* startSupervisor([Hopeful, Impatient], capsules(2))
      const child = yield* childWhen(parent.id, "waiting")
      yield* eventually(
        "the sweep cancelled the child",
        Effect.andThen(
          sweep.runOnce,
          Effect.map(status(child.id), (s) => s === "cancelled")
        ),
        "30 seconds"
      )
      yield* statusBecomes(parent.id, "finished")
      assert.strictEqual((yield* info(parent.id)).output, "went on")
      const [timedOut] = yield* eventsOf(child.id, "wait_timed_out")
      const [ended] = yield* eventsOf(parent.id, "child_ended")
      expect(ended!.details).toMatchObject({ child_run_id: child.id, status: "cancelled" })
      assert.strictEqual(ended!.at.getTime(), timedOut!.at.getTime(), "one transaction")
    })
  )

  it.effect("speedrun runs a parent through its child inline; a child that waits stops it with StepWaiting", () =>
    Effect.gen(function* () {
      const registry = Effect.provide(Registry.layer([Checkout, Receipt]))
      const parent = yield* Checkout.start({ orderId: "s1", waitForGo: false, slowMs: 0 })
      assert.strictEqual(yield* speedrun(parent.id).pipe(registry), "finished")
      expect((yield* info(parent.id)).output).toMatchObject({ receiptId: "rcpt_s1" })
      const waits = yield* Checkout.start({ orderId: "s2", waitForGo: true, slowMs: 0 })
      const stopped = yield* speedrun(waits.id).pipe(registry, Effect.flip)
      const [child] = yield* childrenOf(waits.id)
      expect(stopped).toMatchObject({ _tag: "StepWaiting", run: child!.id, step: "wait:go" })
    })
  )

  it.effect("the sweep wakes a parent whose child ended without waking it", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const parent = yield* Checkout.start({ ...waitForGo, orderId: "o8" })
      const child = yield* Effect.scoped(
        Effect.gen(function* () {
          yield* startSupervisor([Checkout, Receipt], capsules(2))
          return yield* childWhen(parent.id, "waiting")
        })
      )
      // the child ends behind the runner's back: no wake-up for its parent
      yield* sql`UPDATE pgbus.workflow_steps SET status = 'cancelled', finished_at = now()
        WHERE run_id = ${child.id}::uuid AND status = 'waiting'`
      yield* sql`UPDATE pgbus.workflow_runs SET status = 'finished', finished_at = now(),
        output = '{"receiptId":"rcpt_swept","workedMs":0}'::jsonb WHERE id = ${child.id}::uuid`
      assert.strictEqual(yield* status(parent.id), "waiting")
      const report = yield* (yield* WorkflowSweep).runOnce
      assert.strictEqual(report.childrenWoken, 1)
      assert.strictEqual((yield* (yield* WorkflowSweep).runOnce).childrenWoken, 0, "woken once")
      yield* startSupervisor([Checkout, Receipt], capsules(2))
      yield* statusBecomes(parent.id, "finished")
      expect((yield* info(parent.id)).output).toMatchObject({ receiptId: "rcpt_swept" })
    })
  )
})

const childEnv = (url: string, role: "both" | "children"): Record<string, string> => ({
  DATABASE_URL: url,
  CHILDREN_ROLE: role,
  PGBUS_WORKFLOW_STALL_ACTION: "reattempt",
  // fast recovery within about a second of a death
  PGBUS_PROCESS_HEARTBEAT_INTERVAL: "0.2",
  PGBUS_STALE_PROCESS_THRESHOLD: "1",
  PGBUS_DISPATCH_INTERVAL: "0.2",
  PGBUS_POLLING_INTERVAL: "0.05"
})

describe("child workflows across processes", () => {
  it.live(
    "a supervisor killed (SIGKILL) while the child runs: after a restart the child ends and the parent finishes, with one child",
    () =>
      TestDatabase.onFreshDatabase({}, (url) =>
        Effect.gen(function* () {
          const bundle = yield* bundledFixture("test/fixtures/children-child.ts")
          const parent = yield* Checkout.start({ orderId: "k1", waitForGo: false, slowMs: 5_000 })
          const first = yield* spawnSupervisor(childEnv(url, "both"), bundle)
          const child = yield* childWhen(parent.id, "performing")
          // the child's slow step is running in the process: kill it there
          first.process.kill("SIGKILL")
          yield* first.exited
          assert.strictEqual(yield* status(parent.id), "waiting")
          yield* spawnSupervisor(childEnv(url, "both"), bundle)
          yield* finishedWithReceipt(parent.id, "k1", "60 seconds")
          assert.strictEqual(yield* status(child.id), "finished")
          assert.lengthOf(yield* childrenOf(parent.id), 1)
          assert.lengthOf(yield* eventsOf(parent.id, "child_started"), 1)
        })
      ),
    120_000
  )

  it.live(
    "the child finishes while the parent's process is down: the parent is woken, and finishes once its process is back",
    () =>
      TestDatabase.onFreshDatabase({}, (url) =>
        Effect.gen(function* () {
          const client = yield* WorkflowClient
          const bundle = yield* bundledFixture("test/fixtures/children-child.ts")
          const parent = yield* Checkout.start({ orderId: "k2", waitForGo: true, slowMs: 0 })
          const parentProcess = yield* spawnSupervisor(childEnv(url, "both"), bundle)
          const child = yield* childWhen(parent.id, "waiting")
          parentProcess.process.kill("SIGKILL")
          yield* parentProcess.exited
          // children only from here: nothing runs the parent
          yield* spawnSupervisor(childEnv(url, "children"), bundle)
          yield* client.signal(child.id, "go", {})
          yield* statusBecomes(child.id, "finished", "60 seconds")
          // woken in the child's last transaction: its step is due, waiting for a process
          assert.strictEqual(yield* status(parent.id), "ready")
          assert.lengthOf(yield* eventsOf(parent.id, "child_ended"), 1)
          yield* spawnSupervisor(childEnv(url, "both"), bundle)
          yield* finishedWithReceipt(parent.id, "k2", "60 seconds")
        })
      ),
    120_000
  )
})
