/**
 * graphile-worker, configured exactly as the team's peer harness configures it
 * (shared/bench/peers/src/graphile.ts). Public API only: runMigrations, makeWorkerUtils
 * (addJob/addJobs), run().
 *   tsx packages/bench/src/peers/graphile.ts <enq|w1|w2> [--variant default|batched] [--run N]
 * Variants:
 *   default = concurrency 10, one fetch + one completion per job (library defaults otherwise)
 *   batched = + preset.worker.localQueue.size 100 (batch fetch) and completeJobBatchDelay 0 (batched completions)
 */
import {
  CONCURRENCY,
  databaseName,
  emit,
  enqueueSingle,
  finishRun,
  guard,
  type LatencyPayload,
  load,
  makeLatencyRecorder,
  measure,
  monitorClient,
  POOL_MAX,
  parseArgs,
  pkgVersion,
  resetDatabase,
  round2,
  runLatency,
  sleep,
  timeProcessing,
  urlFor,
  W1_JOBS
} from "./common.ts"

interface WorkerUtils {
  addJob(identifier: string, payload: unknown): Promise<unknown>
  addJobs(specs: ReadonlyArray<{ identifier: string; payload: unknown }>): Promise<unknown>
  release(): Promise<void>
}

interface GraphileWorker {
  run(options: Record<string, unknown>): Promise<{ stop(): Promise<void> }>
  runMigrations(options: Record<string, unknown>): Promise<void>
  makeWorkerUtils(options: Record<string, unknown>): Promise<WorkerUtils>
  Logger: new (factory: () => (level: string, message: string) => void) => unknown
}

const { run, runMigrations, makeWorkerUtils, Logger } = await load<GraphileWorker>("graphile-worker")

const args = parseArgs()
guard()
const DB = databaseName("graphile")
const variant = args.variant

// graphile-worker logs every completed job at info level; a silent logger is used for every library.
const logger = new Logger(() => (level: string, message: string) => {
  if (level === "error") console.error("graphile-worker:", message)
})
const shared = { connectionString: urlFor(DB), logger, maxPoolSize: POOL_MAX }

await resetDatabase(DB)
await runMigrations(shared)
const utils = await makeWorkerUtils(shared)
const mon = await monitorClient(DB)

const workerPreset =
  variant === "batched" ? { worker: { localQueue: { size: 100 }, completeJobBatchDelay: 0 } } : undefined

const base = { library: "graphile-worker", version: pkgVersion("graphile-worker"), workload: args.workload, variant }

type Task = (payload: unknown) => Promise<void>
const runnerOpts = (taskList: Record<string, Task>) => ({
  ...shared,
  concurrency: CONCURRENCY,
  noHandleSignals: true,
  pollInterval: 2000, // the default; LISTEN/NOTIFY ("jobs:insert") is always on
  taskList,
  ...(workerPreset ? { preset: workerPreset } : {})
})

try {
  if (args.workload === "enq") {
    const r = await enqueueSingle((i) => utils.addJob("single", { i }))
    emit({
      ...base,
      variant: "single-insert",
      config: { api: "workerUtils.addJob(task, payload)", poolMax: POOL_MAX },
      result: r
    })
  } else if (args.workload === "w1") {
    const specs = Array.from({ length: W1_JOBS }, (_, i) => ({ identifier: "w1", payload: { i } }))
    const enq = await measure(() => utils.addJobs(specs))
    let handled = 0
    let runner: { stop(): Promise<void> } | undefined
    const proc = await timeProcessing({
      total: W1_JOBS,
      handled: () => handled,
      start: async () => {
        runner = await run(
          runnerOpts({
            w1: async () => {
              handled++
            }
          })
        )
      },
      remaining: async () =>
        (await mon.query<{ n: number }>("SELECT count(*)::int AS n FROM graphile_worker._private_jobs")).rows[0]!.n
    })
    await runner?.stop()
    emit({
      ...base,
      config: {
        concurrency: CONCURRENCY,
        pollInterval: 2000,
        preset: workerPreset ?? null,
        poolMax: POOL_MAX,
        insert: `workerUtils.addJobs(${W1_JOBS} specs) in one call`
      },
      result: {
        enqueueBulkPerSec: Math.round((W1_JOBS / enq.m.wallMs) * 1000),
        enqueueBulkMs: Math.round(enq.m.wallMs),
        enqueuePgCpuS: round2(enq.m.pgCpuS),
        ...proc
      }
    })
  } else if (args.workload === "w2") {
    const rec = makeLatencyRecorder()
    const runner = await run(
      runnerOpts({
        w2: async (p) => {
          const payload = p as LatencyPayload
          rec.record(payload.t, payload.w)
        }
      })
    )
    await sleep(500)
    const r = await runLatency({ rec, send: (p) => utils.addJob("w2", p) })
    await runner.stop()
    emit({
      ...base,
      config: {
        concurrency: CONCURRENCY,
        pollInterval: 2000,
        listenNotify: true,
        preset: workerPreset ?? null,
        poolMax: POOL_MAX
      },
      result: r
    })
  } else {
    console.error(`unknown workload ${args.workload}`)
    process.exitCode = 2
  }
} finally {
  await utils.release()
  await mon.end()
  await finishRun(DB)
}
process.exit(process.exitCode ?? 0)
