/**
 * A woken step's outcome shared with other executions' (`stepFinishMany`, `claimAndFinishMany`)
 * consumes the signal the step held, row for row and event for event as its own statement
 * (`stepFinish`) does. The runner shares the outcome of a woken step its worker's read claimed
 * (issue 24); one handed over by a signal of the process keeps its own statement.
 */
import { assert, layer } from "@effect/vitest"
import { Deferred, Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../src/Config.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { type FinishManyEntry, makeWorkflowSql } from "../src/Workflow/WorkflowSql.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { eventTypes, info, WOKEN_TRAIL } from "./support/runs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"
import { statementTracer } from "./support/tracing.ts"

const Woken = Workflow.make("Woken", { payload: Schema.Struct({}) }, function* () {
  yield* Workflow.step("one", Effect.void)
})

/** A performing run whose step is in progress with the signal it was woken by, written directly. */
const wokenRun = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const runId = crypto.randomUUID()
  yield* sql`INSERT INTO pgbus.workflow_runs (id, workflow, payload, status, engine_version, created_at, updated_at)
    VALUES (${runId}::uuid, 'Woken', '{}'::jsonb, 'performing', 1, now(), now())`
  const [step] = yield* sql<{ readonly id: bigint }>`INSERT INTO pgbus.workflow_steps (run_id, name, attempt,
      position, status, queue, scheduled_at, due_at, started_at, wait_for)
    VALUES (${runId}::uuid, 'one', 1, 0, 'in_progress', 'default', now(), now(), now(), 'go') RETURNING id`
  yield* sql`INSERT INTO pgbus.workflow_signals (run_id, name, payload, status, claimed_by_step, received_at, claimed_at)
    VALUES (${runId}::uuid, 'go', '{"i":1}'::jsonb, 'claimed', ${step!.id}, now(), now())`
  return { runId, stepId: step!.id }
})

/** What an outcome wrote for a run: its status, its step's, its signal's, its events in order. */
const written = (runId: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [run] = yield* sql<{ readonly status: string }>`SELECT status FROM pgbus.workflow_runs
      WHERE id = ${runId}::uuid`
    const steps = yield* sql<{ readonly status: string }>`SELECT status FROM pgbus.workflow_steps
      WHERE run_id = ${runId}::uuid ORDER BY id`
    const signals = yield* sql<{ readonly status: string; readonly consumed: boolean }>`SELECT status,
        consumed_at IS NOT NULL AS consumed FROM pgbus.workflow_signals WHERE run_id = ${runId}::uuid`
    const events = yield* sql<{ readonly type: string }>`SELECT type FROM pgbus.workflow_events
      WHERE run_id = ${runId}::uuid ORDER BY id`
    return {
      run: run!.status,
      steps: steps.map((s) => s.status),
      signals: signals.map((s) => `${s.status}${s.consumed ? " (at)" : ""}`),
      events: events.map((e) => e.type)
    }
  })

const finishEntry = (r: { readonly runId: string; readonly stepId: bigint }): FinishManyEntry => ({
  runId: r.runId,
  stepId: r.stepId,
  output: "1",
  definitionHash: null,
  next: { _tag: "finish", output: "1" },
  mayHoldSignal: true,
  now: null
})

layer(TestDatabase.layer(), { excludeTestServices: true })("a woken step's outcome in a shared statement", (it) => {
  it.effect("consumes the signal the step held, as the step's own statement does", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const config = yield* PgBusConfig
      const store = yield* QueueStore
      // the queue's table, created as a start does
      yield* Woken.start({})
      const statements = makeWorkflowSql(sql, config.schema, store.messageCtes)
      const alone = yield* wokenRun
      const a = yield* wokenRun
      const b = yield* wokenRun
      const c = yield* wokenRun
      yield* statements.stepFinish({
        workflow: "Woken",
        runId: alone.runId,
        stepId: alone.stepId,
        status: "completed",
        output: "1",
        error: null,
        definitionHash: null,
        next: { _tag: "finish", output: "1" },
        worker: "tester",
        appRevision: null,
        now: null
      })
      const shared = yield* statements.stepFinishMany([finishEntry(a), finishEntry(b)], "tester", null)
      assert.deepStrictEqual(
        shared.map((r) => r.applied),
        [1n, 1n]
      )
      // with a fresh run's claim in the same statement
      const claimed = yield* Woken.start({})
      const both = yield* statements.claimAndFinishMany(
        [{ runId: claimed.id, name: "one", queue: "default", timeoutMs: null, claimedBy: null, now: null }],
        [finishEntry(c)],
        "tester",
        null
      )
      assert.strictEqual(both.find((r) => r.kind === "f")?.f_applied, 1n)
      const expected = yield* written(alone.runId)
      assert.deepStrictEqual(expected, {
        run: "finished",
        steps: ["completed"],
        signals: ["consumed (at)"],
        events: ["step_completed", "finished"]
      })
      for (const r of [a, b, c]) assert.deepStrictEqual(yield* written(r.runId), expected)
    })
  )
})

/** How many woken steps end together. */
const TOGETHER = 6
let inBody = 0
/** Opened once TOGETHER bodies run: their outcomes then go to the database at the same moment. */
let gate: Deferred.Deferred<void> | undefined
const Together = Workflow.make(
  "WokenTogether",
  { payload: Schema.Struct({ i: Schema.Number }), signals: { go: Schema.Struct({ v: Schema.Number }) } },
  function* () {
    return yield* Workflow.step(
      "got",
      Effect.gen(function* () {
        inBody++
        if (gate !== undefined) {
          if (inBody >= TOGETHER) yield* Deferred.succeed(gate, undefined)
          yield* Deferred.await(gate)
        }
        return ((yield* Workflow.context).signal?.payload as { v: number } | undefined)?.v ?? -1
      }),
      { waitFor: "go" }
    )
  }
)

layer(
  TestDatabase.layer({
    pollingInterval: "50 millis",
    // every woken step goes through NOTIFY and the worker's read, as from a process with no worker
    localDispatch: false
  }),
  { excludeTestServices: true }
)("woken steps claimed in the worker's read", (it) => {
  it.effect("end together in shared statements that consume their signals, with the trail of their own", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      // the statements' texts, under a tracing backend (the runner opens its spans for one)
      const { tracer, texts } = statementTracer()
      yield* startSupervisor([Together], {
        capsules: [{ name: "c", queues: ["default"], concurrency: TOGETHER }]
      }).pipe(Effect.withTracer(tracer))
      const runs = yield* Effect.forEach(
        Array.from({ length: TOGETHER }, (_, i) => i),
        (i) => Together.start({ i })
      )
      yield* eventually(
        "all waiting",
        Effect.map(
          Effect.forEach(runs, (r) => info(r.id)),
          (infos) => infos.every((i) => i.status === "waiting")
        )
      )
      inBody = 0
      gate = yield* Deferred.make<void>()
      yield* Effect.forEach(runs, (r, i) => r.signal("go", { v: 10 + i }), { concurrency: "unbounded" })
      yield* eventually(
        "all finished",
        Effect.map(
          Effect.forEach(runs, (r) => info(r.id)),
          (infos) => infos.every((i) => i.status === "finished")
        )
      )
      gate = undefined
      for (const [i, r] of runs.entries()) {
        assert.strictEqual((yield* info(r.id)).output, 10 + i)
        assert.deepStrictEqual(yield* eventTypes(r.id), WOKEN_TRAIL)
      }
      const signals = yield* sql<{ readonly status: string; readonly consumed: boolean }>`SELECT status,
          consumed_at IS NOT NULL AS consumed FROM pgbus.workflow_signals`
      assert.deepStrictEqual(
        signals.map((s) => `${s.status}${s.consumed ? " (at)" : ""}`),
        Array.from({ length: TOGETHER }, () => "consumed (at)")
      )
      // the outcomes that ended together went in shared statements, which consumed their signals
      assert.isTrue(
        texts.some((t) => t.includes("fc AS (")),
        "a shared outcome statement consumed the signals its steps held"
      )
    }).pipe(Effect.scoped)
  )
})
