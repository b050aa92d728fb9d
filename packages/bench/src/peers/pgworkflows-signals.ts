/**
 * pg-workflows (durable workflows on pg-boss) on bench:signals, configured as the team's peer
 * harness configures it (shared/bench/peers/src/pgworkflows.ts). Public API only: workflow(),
 * WorkflowEngine (start, startWorkflow, triggerEvent, stop).
 *   tsx packages/bench/src/peers/pgworkflows-signals.ts signals [--variant workers10] [--run N]
 * The workflow: `const data = await step.waitFor("wait", { eventName: "go" })`, then
 * `await step.run("got", async () => ...)`, whose body records `performance.now()` first thing (a
 * pg-workflows handler re-runs from the top on every job and goes on past a wait that paused the
 * run, so only a step's body runs once, after the event). SIG_RUNS runs started with
 * `engine.startWorkflow` and parked (`workflow_runs.status = 'paused'`), then one
 * `engine.triggerEvent({ runId, eventName: "go", data: { i } })` per run from SIG_SENDERS senders.
 * Variant workers10: WORKFLOW_RUN_WORKERS=10 (pg-boss work loops; the engine hard-codes
 * batchSize 1 and pollingIntervalSeconds 0.5 for them, and builds its own pg-boss on the pool,
 * polling only).
 * Not measured: pg-boss's LISTEN/NOTIFY (an engine given `new PgBoss({ useListenNotify: true })`
 * and the queue updated to `notify: true`). The engine's work loops then wait pg-boss's 30 s
 * notify backstop after every job that no notification followed, and their options cannot be
 * changed: parking 1,000 runs reached 150 in 120 s (tried 2026-12-02).
 */
import { makeStartRecorder, park, runSignals, SIG_POLL_MS, SIG_RUNS, SIG_SENDERS, SIG_SETTLE_MS } from "../signals.ts"
import {
  CONCURRENCY,
  databaseName,
  emit,
  finishRun,
  guard,
  load,
  monitorClient,
  now,
  POOL_MAX,
  parseArgs,
  pkgVersion,
  resetDatabase,
  urlFor
} from "./common.ts"

interface Step {
  waitFor<T>(name: string, options: { eventName: string }): Promise<T>
  run<R>(name: string, f: () => Promise<R>): Promise<R>
}

interface WorkflowEngine {
  start(): Promise<void>
  startWorkflow(params: { workflowId: string; input: unknown }): Promise<{ id: string }>
  triggerEvent(params: { runId: string; eventName: string; data?: unknown }): Promise<unknown>
  stop(): Promise<void>
}

interface PgWorkflows {
  workflow(
    id: string,
    body: (context: { step: Step; input: { i: number } }) => Promise<unknown>
  ): Readonly<Record<string, unknown>>
  WorkflowEngine: new (options: {
    pool: unknown
    workflows: ReadonlyArray<unknown>
    logger: { log: (m: string) => void; error: (m: string) => void }
  }) => WorkflowEngine
}

interface Pool {
  end(): Promise<void>
}

const { workflow, WorkflowEngine } = await load<PgWorkflows>("pg-workflows")
const pg = (await load<{ default: { Pool: new (options: { connectionString: string; max: number }) => Pool } }>("pg"))
  .default

const args = parseArgs()
guard()
const DB = databaseName("sig_pgworkflows")
const variant = args.variant === "default" ? "workers10" : args.variant
process.env.WORKFLOW_RUN_WORKERS = String(CONCURRENCY)

const recorder = makeStartRecorder()

const waiter = workflow("sigwait", async ({ step, input }) => {
  const data = await step.waitFor<{ i: number } | undefined>("wait", { eventName: "go" })
  return await step.run("got", async () => {
    recorder.record(input.i, now(), data?.i)
    return { i: data?.i }
  })
})

await resetDatabase(DB)
const pool = new pg.Pool({ connectionString: urlFor(DB), max: POOL_MAX })
const engine = new WorkflowEngine({
  pool,
  workflows: [waiter],
  logger: { log: () => {}, error: (m: string) => console.error("pg-workflows:", m) }
})
await engine.start()
const mon = await monitorClient(DB)

const base = {
  library: "pg-workflows",
  version: `${pkgVersion("pg-workflows")} (pg-boss ${pkgVersion("pg-boss")})`,
  workload: args.workload,
  variant
}
const count = async (sql: string): Promise<number> => (await mon.query<{ n: number }>(sql)).rows[0]?.n ?? 0

try {
  if (args.workload === "signals" && variant === "workers10") {
    const ids: Array<string> = new Array(SIG_RUNS)
    const parking = await park({
      start: async (i) => {
        ids[i] = (await engine.startWorkflow({ workflowId: "sigwait", input: { i } })).id
      },
      parked: () => count("SELECT count(*)::int AS n FROM workflow_runs WHERE status = 'paused'")
    })
    if (!parking.ok || recorder.started > 0) {
      throw new Error(`parking incomplete: ${JSON.stringify({ ...parking, woken: recorder.started })}`)
    }
    const r = await runSignals({
      send: (i) => engine.triggerEvent({ runId: ids[i]!, eventName: "go", data: { i } }),
      finished: () => count("SELECT count(*)::int AS n FROM workflow_runs WHERE status = 'completed'"),
      recorder
    })
    emit({
      ...base,
      config: {
        WORKFLOW_RUN_WORKERS: CONCURRENCY,
        senders: SIG_SENDERS,
        poolMax: POOL_MAX,
        engineWorkOptions: "batchSize 1, pollingIntervalSeconds 0.5 (hard-coded)",
        settleMs: SIG_SETTLE_MS,
        completion: `count of workflow_runs.status = 'completed' every ${SIG_POLL_MS} ms after the sends`
      },
      result: {
        ...r,
        parkedAfterMs: parking.parkMs,
        runsCorrect: r.woken - r.wrongPayload,
        expectedRuns: SIG_RUNS
      }
    })
  } else {
    console.error(`unknown workload ${args.workload}`)
    process.exitCode = 2
  }
} finally {
  await engine.stop()
  await mon.end()
  await pool.end()
  await finishRun(DB)
}
process.exit(process.exitCode ?? 0)
