/**
 * The transition table governs the runner too: each internal statement, from every run state.
 * A run (and the step the statement acts on) is written in each state; the statement moves it
 * to the table's target from the states its row allows, and from every other state writes
 * nothing: no step, no event, the run untouched. As test/transitions.test.ts does for the
 * outside verbs.
 */
import { assert, describe, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../src/Config.ts"
import * as QueueName from "../src/Queue/QueueName.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import * as States from "../src/Workflow/States.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { makeWorkflowSql, type WorkflowSql } from "../src/Workflow/WorkflowSql.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

/** What a case needs to run its statement. */
interface Ctx {
  readonly statements: WorkflowSql
  readonly runId: string
  readonly stepId: bigint
  readonly physicalQueue: string
  readonly missedAt: Date
}

/** One internal statement: the table's rows it binds, the step it acts on, how it is called. */
interface Case {
  readonly name: string
  /** The rows whose from-states the statement binds (their union is the guard). */
  readonly verbs: ReadonlyArray<States.Verb>
  /** The step the run has: its status (none: the run has no step). */
  readonly step: States.StepStatus | null
  /** The step's deadline is the missed one, and it is per-run and handed over (notices). */
  readonly deadline?: boolean
  /** Runs the statement; whether it applied. */
  readonly run: (c: Ctx) => Effect.Effect<boolean, unknown>
  /** The state reached from a legal state (default: the first of `verbs` legal from it). */
  readonly target?: (from: States.RunStatus) => States.RunStatus
}

const finish = (
  c: Ctx,
  next: Parameters<WorkflowSql["stepFinish"]>[0]["next"],
  status: "completed" | "failed" = "completed"
) =>
  Effect.map(
    c.statements.stepFinish({
      workflow: "Internal",
      runId: c.runId,
      stepId: c.stepId,
      status,
      output: null,
      error: null,
      definitionHash: null,
      next,
      worker: "tester",
      appRevision: null,
      now: null
    }),
    (rows) => rows[0]?.applied === 1n
  )

/** claimAndFinishMany of one claim (of `claimRunId`) and one finish (of `finished`'s step); its rows, checked to be a claim's and a finish's. */
const claimAndFinishOne = (c: Ctx, claimRunId: string, finished: { readonly runId: string; readonly stepId: bigint }) =>
  Effect.tap(
    c.statements.claimAndFinishMany(
      [{ runId: claimRunId, name: "one", queue: "default", timeoutMs: null, claimedBy: null, now: null }],
      [{ ...finished, output: null, definitionHash: null, next: { _tag: "finish", output: null }, now: null }],
      "tester",
      null
    ),
    (rows) =>
      Effect.sync(() =>
        assert.deepStrictEqual(
          rows.map((r) => r.kind),
          ["c", "f"]
        )
      )
  )

const schedule = (c: Ctx, reattempt: boolean) =>
  ({
    _tag: "schedule",
    name: reattempt ? "one" : "two",
    attempt: reattempt ? 2 : 1,
    position: reattempt ? 0 : 1,
    queue: "default",
    physicalQueue: c.physicalQueue,
    delayMs: 0,
    reattempts: reattempt ? 1 : 0,
    reattempt
  }) as const

const some = <A>(rows: ReadonlyArray<A>) => rows.length > 0

const resolveWaiting = (c: Ctx, outcome: "skip" | "pause" | "cancel") =>
  Effect.map(
    c.statements.stepResolveWaiting({
      workflow: "Internal",
      runId: c.runId,
      stepId: c.stepId,
      outcome,
      error: outcome === "pause" ? JSON.stringify({ message: "timed out" }) : null,
      actor: "tester",
      reason: null,
      eventType: "wait_timed_out",
      eventDetails: null,
      physicalQueue: c.physicalQueue,
      now: null
    }),
    some
  )

const end = (c: Ctx, to: "finished" | "paused" | "cancelled") =>
  Effect.map(
    c.statements.runEndFromPerforming({
      runId: c.runId,
      to,
      output: null,
      error: null,
      pausedReason: to === "paused" ? "step_pause" : null,
      reason: null,
      definitionHash: null,
      now: null
    }),
    some
  )

const cases: ReadonlyArray<Case> = [
  {
    name: "stepClaim",
    verbs: ["claim"],
    step: "scheduled",
    run: (c) =>
      Effect.map(
        c.statements.stepClaim({
          runId: c.runId,
          stepId: c.stepId,
          worker: "tester",
          appRevision: null,
          claimedBy: null,
          now: null
        }),
        some
      )
  },
  {
    name: "runClaimContinue",
    verbs: ["claim"],
    step: null,
    run: (c) => Effect.map(c.statements.runClaimContinue(c.runId, null), some)
  },
  {
    // one run alone with a timeout JSON cannot carry (the single statement's case, folded into this one)
    name: "runClaimFirstMany (alone, an infinite timeout)",
    verbs: ["claim"],
    step: null,
    run: (c) =>
      Effect.map(
        c.statements.runClaimFirstMany(
          [{ runId: c.runId, name: "one", queue: "default", timeoutMs: Infinity, claimedBy: null, now: null }],
          "tester",
          null
        ),
        (rows) => rows[0]?.id !== null && rows[0]?.id !== undefined
      )
  },
  {
    name: "runClaimFirstMany",
    verbs: ["claim"],
    step: null,
    run: (c) =>
      Effect.map(
        c.statements.runClaimFirstMany(
          [{ runId: c.runId, name: "one", queue: "default", timeoutMs: null, claimedBy: null, now: null }],
          "tester",
          null
        ),
        (rows) => rows[0]?.id !== null && rows[0]?.id !== undefined
      )
  },
  {
    // shared with an outcome of another run (none here: its run does not exist, it applies nothing)
    name: "claimAndFinishMany (its claim)",
    verbs: ["claim"],
    step: null,
    run: (c) =>
      Effect.map(claimAndFinishOne(c, c.runId, { runId: crypto.randomUUID(), stepId: 0n }), (rows) => {
        assert.strictEqual(rows[1]?.f_applied, 0n)
        return rows[0]?.id !== null && rows[0]?.id !== undefined
      })
  },
  {
    name: "stepInsertClaimed",
    verbs: ["begin"],
    step: null,
    run: (c) =>
      Effect.map(
        c.statements.stepInsertClaimed({
          runId: c.runId,
          name: "one",
          attempt: 1,
          position: 0,
          queue: "default",
          reattempts: 0,
          timeoutMs: null,
          worker: "tester",
          appRevision: null,
          claimedBy: null,
          now: null
        }),
        some
      )
  },
  {
    name: "stepScheduleNew",
    verbs: ["schedule"],
    step: null,
    run: (c) =>
      Effect.map(
        c.statements.stepScheduleNew({
          workflow: "Internal",
          runId: c.runId,
          name: "one",
          attempt: 1,
          position: 0,
          queue: "default",
          physicalQueue: c.physicalQueue,
          delayMs: 60_000,
          dueAt: null,
          timeoutMs: null,
          reattempts: 0,
          now: null
        }),
        some
      )
  },
  { name: "runEndFromPerforming finished", verbs: ["end_finish"], step: null, run: (c) => end(c, "finished") },
  { name: "runEndFromPerforming paused", verbs: ["end_pause"], step: null, run: (c) => end(c, "paused") },
  { name: "runEndFromPerforming cancelled", verbs: ["end_cancel"], step: null, run: (c) => end(c, "cancelled") },
  {
    name: "runReleaseContinue",
    verbs: ["release"],
    step: null,
    run: (c) => Effect.map(c.statements.runReleaseContinue(c.runId, null), some)
  },
  {
    name: "runPauseUndeliverable",
    verbs: ["delivery_pause"],
    step: null,
    run: (c) =>
      Effect.map(
        c.statements.runPauseUndeliverable({
          runId: c.runId,
          error: JSON.stringify({ message: "undeliverable" }),
          reason: "no worker has it",
          now: null
        }),
        some
      )
  },
  {
    name: "stepFinish, next scheduled",
    verbs: ["advance", "hold"],
    step: "in_progress",
    run: (c) => finish(c, schedule(c, false))
  },
  {
    name: "stepFinish, a reattempt",
    verbs: ["reattempt", "hold"],
    step: "in_progress",
    run: (c) => finish(c, schedule(c, true), "failed")
  },
  {
    name: "stepFinish, next claimed at once",
    verbs: StepOutcomeOf(["advance", "hold"]),
    step: "in_progress",
    // advance then claim in one statement: a performing run keeps performing
    target: (from) => from,
    run: (c) =>
      finish(c, {
        _tag: "claim",
        name: "two",
        attempt: 1,
        position: 1,
        queue: "default",
        physicalQueue: c.physicalQueue,
        reattempts: 0,
        timeoutMs: null,
        claimedBy: null
      })
  },
  {
    name: "stepFinish, finish",
    verbs: ["finish"],
    step: "in_progress",
    run: (c) => finish(c, { _tag: "finish", output: null })
  },
  {
    name: "stepFinish, pause",
    verbs: ["step_pause", "hold"],
    step: "in_progress",
    run: (c) => finish(c, { _tag: "pause", reason: "step_pause", error: null, message: null })
  },
  {
    name: "stepFinish, cancel",
    verbs: ["step_cancel"],
    step: "in_progress",
    run: (c) => finish(c, { _tag: "cancel", reason: null })
  },
  {
    name: "stepFinishMany",
    verbs: ["finish"],
    step: "in_progress",
    run: (c) =>
      Effect.map(
        c.statements.stepFinishMany(
          [
            {
              runId: c.runId,
              stepId: c.stepId,
              output: null,
              definitionHash: null,
              next: { _tag: "finish", output: null },
              now: null
            }
          ],
          "tester",
          null
        ),
        (rows) => rows[0]?.applied === 1n
      )
  },
  {
    // shared with a claim of another run (none here: its run does not exist, it claims nothing)
    name: "claimAndFinishMany (its outcome)",
    verbs: ["finish"],
    step: "in_progress",
    run: (c) =>
      Effect.map(claimAndFinishOne(c, crypto.randomUUID(), { runId: c.runId, stepId: c.stepId }), (rows) => {
        assert.isNull(rows[0]?.id)
        return rows[1]?.f_applied === 1n
      })
  },
  {
    name: "stepPark",
    verbs: ["park", "hold"],
    step: "in_progress",
    run: (c) =>
      Effect.map(
        c.statements.stepPark({
          runId: c.runId,
          stepId: c.stepId,
          waitFor: "go",
          matcher: false,
          timeoutMs: null,
          timeoutAt: null,
          onTimeout: null,
          periodMs: null,
          now: null
        }),
        some
      )
  },
  {
    name: "stepPollAgain",
    verbs: ["poll", "hold"],
    step: "in_progress",
    run: (c) =>
      Effect.map(
        c.statements.stepPollAgain({
          workflow: "Internal",
          runId: c.runId,
          stepId: c.stepId,
          intervalMs: 60_000,
          timeoutMs: null,
          physicalQueue: c.physicalQueue,
          now: null
        }),
        some
      )
  },
  {
    name: "stepWake",
    verbs: ["wake", "hold"],
    step: "waiting",
    run: (c) =>
      Effect.map(
        c.statements.stepWake({
          workflow: "Internal",
          runId: c.runId,
          stepId: c.stepId,
          timedOut: false,
          physicalQueue: c.physicalQueue,
          now: null
        }),
        some
      )
  },
  {
    name: "stepWakeClaim",
    verbs: ["wake_claim"],
    step: "waiting",
    run: (c) =>
      Effect.map(
        c.statements.stepWakeClaim({
          workflow: "Internal",
          runId: c.runId,
          stepId: c.stepId,
          physicalQueue: c.physicalQueue,
          claim: { claimedBy: "tester:1", visibilityMs: 30_000 },
          worker: "tester",
          appRevision: null,
          now: null
        }),
        some
      )
  },
  {
    name: "stepResolveWaiting skip",
    verbs: ["wait_skip", "hold"],
    step: "waiting",
    run: (c) => resolveWaiting(c, "skip")
  },
  { name: "stepResolveWaiting pause", verbs: ["wait_pause"], step: "waiting", run: (c) => resolveWaiting(c, "pause") },
  {
    name: "stepResolveWaiting cancel",
    verbs: ["wait_cancel"],
    step: "waiting",
    run: (c) => resolveWaiting(c, "cancel")
  },
  {
    name: "stepNotifyLate",
    verbs: ["notice"],
    step: "waiting",
    deadline: true,
    run: (c) =>
      Effect.map(
        c.statements.stepNotifyLate({ runId: c.runId, stepId: c.stepId, missedAt: c.missedAt, now: null }),
        some
      )
  },
  {
    name: "stepNotifyLate, a renewal that failed",
    verbs: ["notice_pause"],
    step: "waiting",
    deadline: true,
    run: (c) =>
      Effect.map(
        c.statements.stepNotifyLate({
          runId: c.runId,
          stepId: c.stepId,
          missedAt: c.missedAt,
          renewal: { at: null, periodMs: null, pauseError: JSON.stringify({ message: "boom" }) },
          now: null
        }),
        some
      )
  },
  {
    name: "stepRequestRenewal",
    verbs: ["notice"],
    step: "waiting",
    deadline: true,
    run: (c) =>
      Effect.map(
        c.statements.stepRequestRenewal({
          workflow: "Internal",
          runId: c.runId,
          stepId: c.stepId,
          missedAt: c.missedAt,
          physicalQueue: c.physicalQueue,
          // the fixture's notice was handed over an hour ago: handed over again
          thresholdMs: 1_000,
          now: null
        }),
        some
      )
  },
  {
    name: "runRewait",
    verbs: ["rewait"],
    step: "waiting",
    deadline: true,
    run: (c) => Effect.map(c.statements.runRewait(c.runId, c.stepId, null), some)
  },
  {
    name: "runSetStatus, unpause",
    verbs: ["unpause"],
    step: "in_progress",
    run: (c) =>
      Effect.map(
        c.statements.runSetStatus({
          id: c.runId,
          from: States.fromStates("unpause"),
          to: States.targetOf("unpause", "paused"),
          now: null
        }),
        some
      )
  }
]

/** The outcome verbs a case names, checked against the table's list (a typo fails here). */
function StepOutcomeOf(verbs: ReadonlyArray<States.InternalVerb>): ReadonlyArray<States.Verb> {
  for (const verb of verbs) if (!States.StepOutcomeVerbs.includes(verb)) throw new Error(`${verb} is no outcome`)
  return verbs
}

const targetFor = (c: Case, from: States.RunStatus): States.RunStatus => {
  if (c.target !== undefined) return c.target(from)
  const verb = c.verbs.find((v) => States.isLegal(v, from))!
  return States.targetOf(verb, from)
}

/** A run in `status` (and its step), written directly. */
const fixture = (status: States.RunStatus, c: Case, missedAt: Date) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const runId = crypto.randomUUID()
    const terminal = States.isTerminal(status)
    yield* sql`INSERT INTO pgbus.workflow_runs (id, workflow, payload, status, engine_version, created_at, updated_at,
        finished_at, paused_at, paused_reason)
      VALUES (${runId}::uuid, 'Internal', '{}'::jsonb, ${status}, 1, now() - interval '1 hour', now() - interval '1 hour',
        ${terminal ? sql`now()` : sql`NULL`}, ${status === "paused" ? sql`now() - interval '1 minute'` : sql`NULL`},
        ${status === "paused" ? "manual" : null})`
    if (c.step === null) return { runId, stepId: 0n }
    const [row] = yield* sql<{ readonly id: bigint }>`INSERT INTO pgbus.workflow_steps (run_id, name, attempt, position,
        status, queue, scheduled_at, due_at, started_at, claimed_by, wait_for, timeout_at, wait_deadline_per_run,
        deadline_renewal_for, deadline_renewal_at)
      VALUES (${runId}::uuid, 'one', 1, 0, ${c.step}, 'default', now() - interval '1 hour', now() - interval '1 hour',
        ${c.step === "in_progress" ? sql`now()` : sql`NULL`}, NULL, ${c.step === "waiting" ? "go" : null},
        ${c.deadline === true ? missedAt : null}::timestamptz, ${c.deadline === true},
        ${c.deadline === true ? missedAt : null}::timestamptz,
        ${c.deadline === true ? sql`now() - interval '1 hour'` : sql`NULL`})
      RETURNING id`
    return { runId, stepId: row!.id }
  })

/** What a statement could have changed: the run row, its steps, its events. */
const snapshot = (runId: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [run] = yield* sql<{ readonly status: States.RunStatus; readonly updated_at: Date }>`SELECT status, updated_at
      FROM pgbus.workflow_runs WHERE id = ${runId}::uuid`
    const steps = yield* sql<{ readonly s: string }>`SELECT name || '#' || attempt || ':' || status AS s
      FROM pgbus.workflow_steps WHERE run_id = ${runId}::uuid ORDER BY id`
    const [events] = yield* sql<{ readonly n: bigint }>`SELECT count(*) AS n FROM pgbus.workflow_events
      WHERE run_id = ${runId}::uuid`
    return {
      status: run!.status,
      updatedAt: run!.updated_at.getTime(),
      steps: steps.map((s) => s.s),
      events: events!.n
    }
  })

const Internal = Workflow.make("Internal", { payload: Schema.Struct({}) }, function* () {
  yield* Workflow.step("one", Effect.void)
})

layer(TestDatabase.layer(), { excludeTestServices: true })("the transition table, internal moves", (it) => {
  it.effect("every internal verb of the table is bound by a statement tested here", () =>
    Effect.sync(() => {
      const bound = new Set([...cases.flatMap((c) => c.verbs), "start"])
      // resolve is the waiting step's outcome applied through its claim (wake_claim, then an outcome)
      const notHere = States.InternalVerbs.filter((v) => !bound.has(v) && v !== "resolve")
      assert.deepStrictEqual(notHere, [])
    })
  )

  it.effect("start: a new run is ready, as the table says", () =>
    Effect.gen(function* () {
      const handle = yield* Internal.start({})
      assert.strictEqual((yield* handle.refresh).info.status, States.targetOf("start", "ready"))
    })
  )

  for (const c of cases) {
    const guard = States.fromStatesOf(c.verbs)
    describe(`${c.name}: ${c.verbs.join(" + ")} from ${guard.join(", ")}`, () => {
      for (const from of States.RunStatuses) {
        const legal = guard.includes(from)
        it.effect(legal ? `from ${from} it reaches ${targetFor(c, from)}` : `from ${from} it changes nothing`, () =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            const config = yield* PgBusConfig
            const store = yield* QueueStore
            // the queue's table, created as a start does
            yield* Internal.start({})
            const statements = makeWorkflowSql(sql, config.schema, store.messageCtes)
            const missedAt = new Date(Date.now() - 60_000)
            const { runId, stepId } = yield* fixture(from, c, missedAt)
            const before = yield* snapshot(runId)
            const applied = yield* c.run({
              statements,
              runId,
              stepId,
              physicalQueue: QueueName.physicalOf(config.queuePrefix, config.workflowQueue),
              missedAt
            })
            const after = yield* snapshot(runId)
            if (legal) {
              assert.isTrue(applied, "the statement applied")
              assert.strictEqual(after.status, targetFor(c, from))
            } else {
              assert.isFalse(applied, "the statement did not apply")
              assert.deepStrictEqual(after, before)
            }
          })
        )
      }
    })
  }
})
