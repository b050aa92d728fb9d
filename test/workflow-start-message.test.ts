import { assert, describe, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import { type StepMessage, WorkflowRunner } from "../src/Workflow/Engine.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { makeWorkflowSql } from "../src/Workflow/WorkflowSql.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ id: Schema.String })

const eventTypes = (id: string) =>
  Effect.flatMap(WorkflowClient, (c) =>
    Effect.map(c.events(id), (es) =>
      es.map((e) => (e.step === null || e.step === undefined ? e.type : `${e.type}:${e.step}`))
    )
  )

const stepRows = (id: string) =>
  Effect.flatMap(WorkflowClient, (c) =>
    Effect.map(c.steps(id), (ss) => ss.map((s) => `${s.name}#${s.attempt}:${s.status}`))
  )

/** The audit trail of a three-step run (one, two, three) that ran to its end. */
const threeStepEvents = [
  "started",
  "step_scheduled:one",
  "step_started:one",
  "step_completed:one",
  "step_scheduled:two",
  "step_started:two",
  "step_completed:two",
  "step_scheduled:three",
  "step_started:three",
  "step_completed:three",
  "finished"
]

const info = (id: string) => Effect.flatMap(WorkflowClient, (c) => Effect.map(c.get(id), (h) => h.info))

/** The start message of a run, as it sits in the queue. */
const startMessage = (runId: string) =>
  Effect.gen(function* () {
    const store = yield* QueueStore
    const messages = yield* store.browse("default", { limit: 10_000 })
    const found = messages
      .map((m) => (m.message as { readonly payload?: StepMessage }).payload)
      .find((p) => p?.run === runId && p.step === null)
    assert.isDefined(found, "the start message is queued")
    return found!
  })

/** Executes a run's start message (as the worker would), with a registry of these workflows. */
const executeStart = <const W extends ReadonlyArray<Workflow.AnyWorkflow>>(workflows: W, runId: string, attempt = 1) =>
  Effect.gen(function* () {
    const message = yield* startMessage(runId)
    const runner = yield* WorkflowRunner
    const registry = yield* Registry.pipe(Effect.provide(Registry.layer(workflows)))
    yield* runner.execute(registry.workflows, message, { attempt })
    return message
  })

layer(TestDatabase.layer({ pollingInterval: "50 millis" }), { excludeTestServices: true })(
  "a start's message",
  (it) => {
    describe("carries the run's input: its worker replays to the first step before claiming", () => {
      const Three = Workflow.make("StartThree", { payload: Payload }, function* ({ payload }) {
        const a = yield* Workflow.step("one", Effect.succeed(`${payload.id}1`))
        const b = yield* Workflow.step("two", Effect.succeed(`${a}2`))
        return yield* Workflow.step("three", Effect.succeed(`${b}3`))
      })

      it.effect("claims the run with its first step; every step still gets its row and events", () =>
        Effect.gen(function* () {
          const run = yield* Three.start({ id: "x" }, { subject: "s-1" })
          const message = yield* executeStart([Three], run.id)
          assert.deepStrictEqual(message.input, { payload: { id: "x" }, subject: "s-1", resource_id: null })
          const after = yield* info(run.id)
          assert.strictEqual(after.status, "finished")
          assert.deepStrictEqual(after.output, "x123")
          assert.deepStrictEqual(yield* stepRows(run.id), ["one#1:completed", "two#1:completed", "three#1:completed"])
          assert.deepStrictEqual(yield* eventTypes(run.id), threeStepEvents)
        })
      )

      it.effect("runs executed at once share their outcome statements; each run keeps its rows and events", () =>
        Effect.gen(function* () {
          const runs = yield* Effect.forEach(
            Array.from({ length: 12 }, (_, i) => `c${i}`),
            (id) => Three.start({ id })
          )
          yield* Effect.forEach(runs, (run) => executeStart([Three], run.id), { concurrency: "unbounded" })
          for (const [i, run] of runs.entries()) {
            const after = yield* info(run.id)
            assert.strictEqual(after.status, "finished")
            assert.deepStrictEqual(after.output, `c${i}123`)
            assert.deepStrictEqual(yield* stepRows(run.id), ["one#1:completed", "two#1:completed", "three#1:completed"])
            const steps = yield* Effect.flatMap(WorkflowClient, (c) => c.steps(run.id))
            assert.deepStrictEqual(
              steps.map((s) => s.output),
              [`c${i}1`, `c${i}12`, `c${i}123`]
            )
            assert.deepStrictEqual(yield* eventTypes(run.id), threeStepEvents)
          }
        })
      )

      it.effect("a shared claim passes over a run that is not ready: it keeps its status and gets no step", () =>
        Effect.gen(function* () {
          const runs = yield* Effect.forEach(["q0", "q1", "q2"], (id) => Three.start({ id }))
          const held = runs[1]!
          yield* held.pause({ reason: "held" })
          const sql = yield* SqlClient.SqlClient
          // the statement itself, so that the three runs surely share it
          const statements = makeWorkflowSql(sql, "pgbus", () => {
            throw new Error("sends no message")
          })
          const rows = yield* statements.runClaimFirstMany(
            runs.map((run) => ({
              runId: run.id,
              name: "one",
              queue: "default",
              timeoutMs: null,
              claimedBy: null,
              now: null
            })),
            "test-worker",
            null
          )
          assert.deepStrictEqual(
            rows.map((r) => r.id),
            [runs[0]!.id, null, runs[2]!.id]
          )
          assert.strictEqual((yield* info(held.id)).status, "paused")
          assert.deepStrictEqual(yield* stepRows(held.id), [])
          for (const run of [runs[0]!, runs[2]!]) {
            assert.strictEqual((yield* info(run.id)).status, "performing")
            assert.deepStrictEqual(yield* stepRows(run.id), ["one#1:in_progress"])
          }
        })
      )

      it.effect("a first step with a wait: the run is claimed alone and the step scheduled", () =>
        Effect.gen(function* () {
          const Later = Workflow.make("StartLater", { payload: Payload }, function* () {
            yield* Workflow.step("later", Effect.void, { wait: "1 hour" })
          })
          const run = yield* Later.start({ id: "w" })
          yield* executeStart([Later], run.id)
          assert.strictEqual((yield* info(run.id)).status, "ready")
          assert.deepStrictEqual(yield* stepRows(run.id), ["later#1:scheduled"])
          assert.deepStrictEqual(yield* eventTypes(run.id), ["started", "step_scheduled:later"])
        })
      )

      it.effect("a body with no step, or a patch before its first step, replays from the claim", () =>
        Effect.gen(function* () {
          const Empty = Workflow.make("StartEmpty", { payload: Payload }, function* ({ payload }) {
            return yield* Effect.succeed(payload.id)
          })
          const Patched = Workflow.make("StartPatched", { payload: Payload }, function* () {
            const patched = yield* Workflow.patched("p1")
            return yield* Workflow.step("only", Effect.succeed(patched))
          })
          const empty = yield* Empty.start({ id: "e" })
          yield* executeStart([Empty, Patched], empty.id)
          const emptyInfo = yield* info(empty.id)
          assert.strictEqual(emptyInfo.status, "finished")
          assert.deepStrictEqual(emptyInfo.output, "e")
          const patched = yield* Patched.start({ id: "p" })
          yield* executeStart([Empty, Patched], patched.id)
          const patchedInfo = yield* info(patched.id)
          assert.strictEqual(patchedInfo.status, "finished")
          assert.deepStrictEqual(patchedInfo.output, true)
        })
      )

      it.effect("delivered again to a run with a history: no new first step, the replay uses the history", () =>
        Effect.gen(function* () {
          let runs = 0
          const Counted = Workflow.make("StartCounted", { payload: Payload }, function* () {
            yield* Workflow.step(
              "one",
              Effect.sync(() => ++runs)
            )
            return yield* Workflow.step("two", Effect.succeed("done"))
          })
          const run = yield* Counted.start({ id: "c" })
          yield* executeStart([Counted], run.id)
          assert.strictEqual((yield* info(run.id)).status, "finished")
          // a run with a history and no open step, ready again (as after a skip's continue)
          const sql = yield* SqlClient.SqlClient
          yield* sql`UPDATE pgbus.workflow_runs SET status = 'ready', finished_at = NULL WHERE id = ${run.id}::uuid`
          yield* sql`DELETE FROM pgbus.workflow_steps WHERE run_id = ${run.id}::uuid AND name = 'two'`
          yield* executeStart([Counted], run.id, 2)
          assert.strictEqual(runs, 1, "the completed step did not run again")
          assert.strictEqual((yield* info(run.id)).status, "finished")
          assert.deepStrictEqual(yield* stepRows(run.id), ["one#1:completed", "two#1:completed"])
        })
      )

      it.effect("a payload over the limit is not carried: the worker claims, then replays", () =>
        Effect.gen(function* () {
          const big = "x".repeat(9_000)
          const run = yield* Three.start({ id: big })
          const message = yield* executeStart([Three], run.id)
          assert.isUndefined(message.input)
          const after = yield* info(run.id)
          assert.strictEqual(after.status, "finished")
          assert.deepStrictEqual(after.output, `${big}123`)
        })
      )
    })
  }
)
