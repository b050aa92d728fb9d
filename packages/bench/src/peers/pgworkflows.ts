/**
 * pg-workflows (durable workflows on pg-boss), configured exactly as the team's peer harness
 * configures it (shared/bench/peers/src/pgworkflows.ts). Public API only: workflow(),
 * WorkflowEngine (start, startWorkflow, stop).
 *   tsx packages/bench/src/peers/pgworkflows.ts w3 [--variant workers10] [--run N]
 * Variant:
 *   workers10 = WORKFLOW_RUN_WORKERS=10 (pg-boss work() loops; the engine hard-codes batchSize 1
 *               and pollingIntervalSeconds 0.5 for them; the library default is 3 workers)
 */
import { runW3, W3_RUNS } from "../workflows.ts"
import {
  CONCURRENCY,
  databaseName,
  emit,
  finishRun,
  guard,
  load,
  monitorClient,
  POOL_MAX,
  parseArgs,
  pkgVersion,
  resetDatabase,
  urlFor
} from "./common.ts"

interface Step {
  run<R>(name: string, f: () => Promise<R>): Promise<R>
}

interface WorkflowEngine {
  start(): Promise<void>
  startWorkflow(params: { workflowId: string; input: unknown }): Promise<unknown>
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
const DB = databaseName("wf_pgworkflows")
const variant = args.variant === "default" ? "workers10" : args.variant
const workers = variant === "workers3" ? 3 : CONCURRENCY
process.env.WORKFLOW_RUN_WORKERS = String(workers)

const threeSteps = workflow("bench3", async ({ step, input }) => {
  const a = await step.run("s1", async () => input.i + 1)
  const b = await step.run("s2", async () => a + 1)
  const c = await step.run("s3", async () => b + 1)
  return { c }
})

await resetDatabase(DB)
const pool = new pg.Pool({ connectionString: urlFor(DB), max: POOL_MAX })
const engine = new WorkflowEngine({
  pool,
  workflows: [threeSteps],
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

try {
  if (args.workload === "w3") {
    const r = await runW3({
      start: (i) => engine.startWorkflow({ workflowId: "bench3", input: { i } }),
      finished: async () => {
        const { rows } = await mon.query<{ n: number }>(
          "select count(*)::int as n from workflow_runs where status = 'completed'"
        )
        return rows[0]?.n ?? 0
      },
      pollMs: 10
    })
    emit({
      ...base,
      config: {
        WORKFLOW_RUN_WORKERS: workers,
        starters: CONCURRENCY,
        poolMax: POOL_MAX,
        engineWorkOptions: "batchSize 1, pollingIntervalSeconds 0.5 (hard-coded)",
        completion: "count of workflow_runs.status = 'completed' every 10 ms after the starts"
      },
      result: { ...r, expectedRuns: W3_RUNS }
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
