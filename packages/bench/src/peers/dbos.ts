/**
 * DBOS Transact, configured exactly as the team's peer harness configures it
 * (shared/bench/peers/src/dbos.ts). Public API only: DBOS.setConfig, registerWorkflow, runStep,
 * launch, shutdown.
 *   tsx packages/bench/src/peers/dbos.ts w3 [--variant direct] [--run N]
 * Variant:
 *   direct = 10 concurrent callers, each `await wf(i)`: the workflow runs in the caller's process,
 *            checkpointed in PostgreSQL (no queue hop); DBOS's fastest mode in the harness
 */
import { runW3, W3_RUNS } from "../workflows.ts"
import {
  CONCURRENCY,
  databaseName,
  emit,
  finishRun,
  guard,
  load,
  POOL_MAX,
  parseArgs,
  pkgVersion,
  resetDatabase,
  urlFor
} from "./common.ts"

interface Dbos {
  setConfig(config: Record<string, unknown>): void
  registerWorkflow<Args extends Array<unknown>, R>(
    f: (...args: Args) => Promise<R>,
    config: { name: string }
  ): (...args: Args) => Promise<R>
  runStep<R>(f: () => Promise<R>, config: { name: string }): Promise<R>
  launch(): Promise<void>
  shutdown(): Promise<void>
}

const { DBOS } = await load<{ DBOS: Dbos }>("@dbos-inc/dbos-sdk")

const args = parseArgs()
guard()
const DB = databaseName("wf_dbos")
const variant = args.variant === "default" ? "direct" : args.variant

await resetDatabase(DB)
DBOS.setConfig({ name: "bench", systemDatabaseUrl: urlFor(DB), systemDatabasePoolSize: POOL_MAX, logLevel: "error" })

const inc = async (x: number) => x + 1
const threeSteps = DBOS.registerWorkflow(
  async (i: number) => {
    const a = await DBOS.runStep(() => inc(i), { name: "s1" })
    const b = await DBOS.runStep(() => inc(a), { name: "s2" })
    const c = await DBOS.runStep(() => inc(b), { name: "s3" })
    return c
  },
  { name: "bench3" }
)

await DBOS.launch()

const base = { library: "dbos", version: pkgVersion("@dbos-inc/dbos-sdk"), workload: args.workload, variant }

try {
  if (args.workload === "w3" && variant === "direct") {
    let completed = 0
    let correct = 0
    const r = await runW3({
      start: async (i) => {
        if ((await threeSteps(i)) === i + 3) correct++
        completed++
      },
      finished: () => completed,
      pollMs: 0
    })
    emit({
      ...base,
      config: { callers: CONCURRENCY, queue: null, systemDatabasePoolSize: POOL_MAX },
      result: { ...r, runsCorrect: correct, expectedRuns: W3_RUNS }
    })
  } else {
    console.error(`unknown workload/variant ${args.workload} ${variant}`)
    process.exitCode = 2
  }
} finally {
  await DBOS.shutdown()
  await finishRun(DB)
}
process.exit(process.exitCode ?? 0)
