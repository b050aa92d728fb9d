/**
 * Workflow runs under real processes: two supervisors SIGKILLed again and again at random
 * moments while runs of several shapes go through them; a drain whose timeout interrupts a step.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schedule } from "effect"
import { SqlClient } from "effect/sql"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import { Slow, shapes } from "./fixtures/crash-workflows.ts"
import { bundledFixture, type Child, spawnSupervisor } from "./support/child.ts"
import { eventually } from "./support/jobs.ts"
import { onFreshDatabase } from "./support/TestDatabase.ts"

const createLog = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql`CREATE TABLE wf_log (run uuid NOT NULL, step text NOT NULL, attempt int NOT NULL, pid int NOT NULL,
      at timestamptz NOT NULL DEFAULT clock_timestamp())`
)

/** A test on a fresh database with the log table the crash workflows write. */
const onCrashDatabase = <A, E, R>(body: (url: string, sql: SqlClient.SqlClient) => Effect.Effect<A, E, R>) =>
  onFreshDatabase({}, (url) =>
    Effect.gen(function* () {
      yield* createLog
      return yield* body(url, yield* SqlClient.SqlClient)
    })
  )

/** Steps started by a process (its pid). */
const startedBy = (pid: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM wf_log WHERE pid = ${pid}`, ([row]) => row!.n)
  )

/** A small seeded generator (mulberry32): a failing run can be replayed from its seed. */
const random = (seed: number) => {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const childEnv = (url: string, stallAction: string): Record<string, string> => ({
  DATABASE_URL: url,
  PGBUS_WORKFLOW_STALL_ACTION: stallAction,
  // fast recovery within a few seconds of a death; the stall threshold (an hour) never fires.
  // Not 1 s: a live child starved of CPU for a second on a loaded machine (the whole suite on
  // two cores) was reaped as dead, and its step paused as stalled, failing the pause test's
  // "only killed processes' steps stall" (the likely cause of one failure, in a full run at load 5)
  PGBUS_PROCESS_HEARTBEAT_INTERVAL: "0.2",
  PGBUS_STALE_PROCESS_THRESHOLD: "3",
  PGBUS_DISPATCH_INTERVAL: "0.2",
  // a fan-out member that died between its archive and its count is counted by the batch sweep
  PGBUS_BATCH_SWEEP_INTERVAL: "1",
  PGBUS_POLLING_INTERVAL: "0.05",
  CRASH_STEP_MS: "100",
  CHILD_CONCURRENCY: "8"
})

/** Starts child supervisors of the crash workflows with this environment (the fixture bundled once for the scope). */
const workflowChildren = (env: Record<string, string>) =>
  Effect.map(bundledFixture("test/fixtures/workflow-child.ts"), (bundle) => () => spawnSupervisor(env, bundle))

interface Started {
  readonly id: string
  readonly steps: ReadonlyArray<string>
}

/**
 * Runs of every shape go through two child supervisors while one of them is SIGKILLed (and
 * started again) `kills` times, each time at a random moment after it started running steps.
 * Returns the runs, the pids killed and the seed.
 */
const underKills = (url: string, stallAction: "reattempt" | "pause", kills: number) =>
  Effect.gen(function* () {
    const seed = Number(process.env.CRASH_SEED ?? Date.now() % 1_000_000)
    const next = random(seed)
    const client = yield* WorkflowClient
    const env = childEnv(url, stallAction)
    const workflowChild = yield* workflowChildren(env)
    const children: Array<Child> = [yield* workflowChild(), yield* workflowChild()]
    const killed = new Set<number>()
    const runs: Array<Started> = []
    let wave = 0
    const startWave = (perShape: number) =>
      Effect.forEach(
        shapes,
        ({ workflow, steps }) =>
          Effect.forEach(
            Array.from({ length: perShape }, (_, i) => `w${wave}-${i}`),
            (id) => Effect.map(workflow.start({ id }), (run) => void runs.push({ id: run.id, steps })),
            { discard: true }
          ),
        { discard: true }
      ).pipe(Effect.tap(() => Effect.sync(() => wave++)))
    // the signal shape waits for "go": sent as soon as a run waits
    yield* Effect.forkScoped(
      Effect.gen(function* () {
        const page = yield* client.list({ workflow: "CrashSignal", status: "waiting", limit: 100 })
        yield* Effect.forEach(
          page.runs,
          (run) => Effect.ignore(client.signal(run.id, "go", { n: 1 }, { idempotencyKey: run.id })),
          { discard: true }
        )
      }).pipe(Effect.ignore, Effect.repeat(Schedule.spaced("50 millis")))
    )
    yield* startWave(3)
    for (let k = 0; k < kills; k++) {
      const index = k % 2
      const victim = children[index]!
      const pid = victim.process.pid!
      // a moment while it runs steps: after its first step started, a random 0-600 ms later. A
      // fresh victim may find the other supervisor took every run (or paused ones hold none): a
      // new wave every 2 s gives it work until it runs some
      yield* startWave(1)
      yield* eventually(
        "the victim runs steps",
        Effect.map(startedBy(pid), (n) => n > 0),
        "2 seconds"
      ).pipe(
        Effect.catchDefect(() => startWave(1).pipe(Effect.andThen(Effect.fail("not yet" as const)))),
        Effect.retry({ times: 15 }),
        Effect.tapCause(() => Effect.logError(victim.output())),
        Effect.orDie
      )
      yield* Effect.sleep(Math.round(next() * 600))
      victim.process.kill("SIGKILL")
      yield* victim.exited
      killed.add(pid)
      children[index] = yield* workflowChild()
    }
    return { runs, killed, seed, children }
  })

/** Per run and step name: how many attempts completed, and how many step_completed events. */
const completions = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql<{ readonly run: string; readonly step: string; readonly rows: number; readonly events: number }>`
    SELECT s.run_id::text AS run, s.name AS step, count(*) FILTER (WHERE s.status = 'completed')::int AS rows,
      (SELECT count(*)::int FROM pgbus.workflow_events e
        WHERE e.run_id = s.run_id AND e.step = s.name AND e.type = 'step_completed') AS events
    FROM pgbus.workflow_steps s GROUP BY s.run_id, s.name`
)

const statuses = (runs: ReadonlyArray<Started>) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ readonly id: string; readonly status: string; readonly paused_reason: string | null }>`
      SELECT id::text, status, paused_reason FROM pgbus.workflow_runs WHERE id = ANY(${runs.map((r) => r.id)}::uuid[])`
  )

/** Each expected step of each finished run completed exactly once (one row, one event). */
const assertAppliedOnce = (runs: ReadonlyArray<Started>, finished: ReadonlySet<string>) =>
  Effect.gen(function* () {
    const rows = yield* completions
    for (const run of runs) {
      if (!finished.has(run.id)) continue
      for (const step of run.steps) {
        const row = rows.find((r) => r.run === run.id && r.step === step)
        assert.strictEqual(row?.rows, 1, `run ${run.id}: step ${step} completed once`)
        assert.strictEqual(row?.events, 1, `run ${run.id}: one step_completed event for ${step}`)
      }
    }
  })

const pidOf = (worker: string | null) => (worker === null ? undefined : Number(worker.split(":").pop()))

describe("workflow runs under SIGKILLs of their supervisors", () => {
  it.live(
    "stall action reattempt: every run finishes, each step's outcome applied once, no run left performing or ready",
    () =>
      onCrashDatabase((url, sql) =>
        Effect.gen(function* () {
          const { runs, killed, seed } = yield* underKills(url, "reattempt", 5)
          const settled = yield* eventually(
            "every run finished",
            Effect.map(statuses(runs), (rows) => rows.every((r) => r.status === "finished")),
            "40 seconds"
          ).pipe(
            Effect.tapCause(() =>
              Effect.flatMap(statuses(runs), (rows) =>
                Effect.logError(
                  `seed ${seed}: not finished: ${JSON.stringify(rows.filter((r) => r.status !== "finished"))}`
                )
              )
            ),
            Effect.exit
          )
          assert.strictEqual(settled._tag, "Success", `seed ${seed}: every run finished`)
          assert.strictEqual(killed.size, 5)
          yield* assertAppliedOnce(runs, new Set(runs.map((r) => r.id)))
          const [events] = yield* sql<{ readonly stalls: number; readonly pauses: number }>`
            SELECT count(*) FILTER (WHERE type = 'stall_detected')::int AS stalls,
              count(*) FILTER (WHERE type = 'paused')::int AS pauses FROM pgbus.workflow_events`
          assert.isAbove(events!.stalls, 0, "the kills caught steps in flight")
          assert.strictEqual(events!.pauses, 0)
        })
      ),
    120_000
  )

  it.live(
    "stall action pause: only runs whose step was in flight in a killed process pause; the others finish",
    () =>
      onCrashDatabase((url, sql) =>
        Effect.gen(function* () {
          const client = yield* WorkflowClient
          const { runs, killed, seed } = yield* underKills(url, "pause", 4)
          yield* eventually(
            "every run finished or paused",
            Effect.map(statuses(runs), (rows) => rows.every((r) => r.status === "finished" || r.status === "paused")),
            "40 seconds"
          ).pipe(
            Effect.tapCause(() =>
              Effect.flatMap(statuses(runs), (rows) =>
                Effect.logError(`seed ${seed}: ${JSON.stringify(rows.filter((r) => r.status !== "finished"))}`)
              )
            )
          )
          const rows = yield* statuses(runs)
          const paused = rows.filter((r) => r.status === "paused")
          assert.isAbove(paused.length, 0, "the kills caught steps in flight")
          for (const run of paused) {
            assert.strictEqual(run.paused_reason, "stalled", `seed ${seed}: run ${run.id} paused as stalled`)
            const stalled = yield* sql<{ readonly worker: string | null }>`SELECT worker FROM pgbus.workflow_steps
              WHERE run_id = ${run.id}::uuid AND status = 'failed' AND error->>'tag' = 'StepStalled'`
            assert.strictEqual(stalled.length, 1)
            const pid = pidOf(stalled[0]!.worker)
            assert.isTrue(
              pid !== undefined && killed.has(pid),
              `seed ${seed}: run ${run.id}'s stalled step ran in a killed process (${stalled[0]!.worker})`
            )
          }
          yield* assertAppliedOnce(runs, new Set(rows.filter((r) => r.status === "finished").map((r) => r.id)))
          // the paused runs resume and finish
          yield* Effect.forEach(paused, (run) => client.resume(run.id), { discard: true })
          yield* eventually(
            "every run finished",
            Effect.map(statuses(runs), (all) => all.every((r) => r.status === "finished")),
            "30 seconds"
          )
          yield* assertAppliedOnce(runs, new Set(runs.map((r) => r.id)))
        })
      ),
    120_000
  )
})

describe("a drain whose timeout interrupts a step", () => {
  it.live(
    "SIGTERM with a drain timeout shorter than a step: no run paused, the step runs again, exit 0",
    () =>
      onCrashDatabase((url, sql) =>
        Effect.gen(function* () {
          const client = yield* WorkflowClient
          const env = { ...childEnv(url, "pause"), PGBUS_DRAIN_TIMEOUT: "1", CRASH_SLOW_MS: "30000" }
          const workflowChild = yield* workflowChildren(env)
          const first = yield* workflowChild()
          const run = yield* Slow.start({ id: "drained" })
          yield* eventually(
            "the slow step started",
            Effect.map(startedBy(first.process.pid!), (n) => n > 0),
            "30 seconds"
          ).pipe(Effect.tapError(() => Effect.logError(first.output())))
          first.process.kill("SIGTERM")
          const exit = yield* first.exited
          assert.strictEqual(exit.code, 0, first.output())
          // the next supervisor (a deploy's new version) runs the step's next attempt
          const second = yield* workflowChild()
          yield* eventually(
            "the run finished",
            Effect.map(client.get(run.id), (h) => h.info.status === "finished"),
            "30 seconds"
          ).pipe(Effect.tapError(() => Effect.logError(second.output())))
          const steps = yield* client.steps(run.id)
          assert.deepStrictEqual(
            steps.map((s) => `${s.name}#${s.attempt}:${s.status}`),
            ["slow#1:failed", "slow#2:completed"]
          )
          assert.strictEqual((steps[0]!.error as { readonly tag?: string }).tag, "StepInterrupted")
          const events = yield* client.events(run.id)
          const types = events.map((e) => e.type)
          assert.notInclude(types, "paused")
          assert.notInclude(types, "stall_detected")
          const interrupted = events.find((e) => e.type === "step_interrupted")
          assert.isDefined(interrupted, "an event says why the step runs again")
          assert.include(interrupted!.reason ?? "", "drain")
          const [log] = yield* sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM wf_log WHERE step = 'slow'`
          assert.strictEqual(log!.n, 2, "the step ran again")
        })
      ),
    90_000
  )
})
