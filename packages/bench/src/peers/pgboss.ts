/**
 * pg-boss, configured exactly as the team's peer harness configures it
 * (shared/bench/peers/src/pgboss.ts). Public API only: new PgBoss(), start, createQueue, insert,
 * send, work, stop.
 *   tsx packages/bench/src/peers/pgboss.ts <enq|w1|w2> [--variant V] [--run N]
 * Variants:
 *   W1: b100 = localConcurrency 10, batchSize 100, burstWhenBatchFull (its best; the default here)
 *       b1   = localConcurrency 10, batchSize 1, pollingIntervalSeconds 0.5 (poll-bound, capped at 20 s)
 *   W2: <mode>-b<batch>: poll2 = pollingIntervalSeconds 2 (default), poll0.5 = the minimum,
 *       notify = useListenNotify + queue { notify: true } (its best; the default here).
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

interface Boss {
  on(event: "error", listener: (error: unknown) => void): unknown
  start(): Promise<unknown>
  stop(options: { graceful: boolean; timeout: number }): Promise<void>
  createQueue(name: string, options?: Record<string, unknown>): Promise<void>
  insert(name: string, jobs: ReadonlyArray<{ data: object }>): Promise<unknown>
  send(name: string, data: object): Promise<unknown>
  work(
    name: string,
    options: Record<string, unknown>,
    handler: (batch: ReadonlyArray<{ data: unknown }>) => Promise<void>
  ): Promise<string>
}

interface PgBossModule {
  PgBoss: new (options: { connectionString: string; max: number; useListenNotify: boolean }) => Boss
}

const { PgBoss } = await load<PgBossModule>("pg-boss")

const args = parseArgs()
guard()
const DB = databaseName("pgboss")

const variant = args.variant === "default" ? (args.workload === "w2" ? "notify-b1" : "b100") : args.variant
const w2m = /^(poll2|poll0\.5|notify)-b(\d+)$/.exec(variant)
const useListenNotify = w2m?.[1] === "notify"

await resetDatabase(DB)
const boss = new PgBoss({ connectionString: urlFor(DB), max: POOL_MAX, useListenNotify })
boss.on("error", (e) => console.error("pg-boss error:", e instanceof Error ? e.message : e))
await boss.start()
const mon = await monitorClient(DB)

const base = { library: "pg-boss", version: pkgVersion("pg-boss"), workload: args.workload, variant }

try {
  if (args.workload === "enq") {
    await boss.createQueue("single")
    const r = await enqueueSingle((i) => boss.send("single", { i }))
    emit({ ...base, variant: "single-insert", config: { api: "boss.send(queue, data)", poolMax: POOL_MAX }, result: r })
  } else if (args.workload === "w1") {
    await boss.createQueue("w1")
    const jobs = Array.from({ length: W1_JOBS }, (_, i) => ({ data: { i } }))
    const enq = await measure(() => boss.insert("w1", jobs))
    const workOpts: Record<string, unknown> =
      variant === "b1"
        ? { localConcurrency: CONCURRENCY, batchSize: 1, pollingIntervalSeconds: 0.5 }
        : { localConcurrency: CONCURRENCY, batchSize: 100, burstWhenBatchFull: true }
    let handled = 0
    const proc = await timeProcessing({
      total: W1_JOBS,
      handled: () => handled,
      start: async () => {
        await boss.work("w1", workOpts, async (batch) => {
          handled += batch.length
        })
      },
      // b1 is poll-bound (~20 jobs/s); its phase is capped at 20 s and the partial rate reported.
      ...(variant === "b1" ? { capMs: Number(process.env.BENCH_PGBOSS_B1_CAP_MS ?? 20_000) } : {}),
      remaining: async () =>
        (
          await mon.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'w1' AND state IN ('created','retry','active')"
          )
        ).rows[0]!.n
    })
    emit({
      ...base,
      config: { work: workOpts, poolMax: POOL_MAX, insert: `boss.insert(queue, ${W1_JOBS} jobs) in one call` },
      result: {
        enqueueBulkPerSec: Math.round((W1_JOBS / enq.m.wallMs) * 1000),
        enqueueBulkMs: Math.round(enq.m.wallMs),
        enqueuePgCpuS: round2(enq.m.pgCpuS),
        ...proc
      }
    })
  } else if (args.workload === "w2") {
    if (!w2m) throw new Error(`bad w2 variant ${variant}`)
    await boss.createQueue("w2", useListenNotify ? { notify: true } : {})
    const rec = makeLatencyRecorder()
    const batchSize = Number(w2m[2])
    const workOpts: Record<string, unknown> = { localConcurrency: CONCURRENCY, batchSize }
    if (batchSize > 1) workOpts.burstWhenBatchFull = true
    if (w2m[1] === "poll0.5") workOpts.pollingIntervalSeconds = 0.5
    await boss.work("w2", workOpts, async (batch) => {
      for (const j of batch) {
        const p = j.data as LatencyPayload
        rec.record(p.t, p.w)
      }
    })
    await sleep(500)
    const r = await runLatency({ rec, send: (p) => boss.send("w2", p) })
    emit({
      ...base,
      config: { work: workOpts, useListenNotify, queueNotify: useListenNotify, poolMax: POOL_MAX },
      result: r
    })
  } else {
    console.error(`unknown workload ${args.workload}`)
    process.exitCode = 2
  }
} finally {
  await boss.stop({ graceful: true, timeout: 5000 })
  await mon.end()
  await finishRun(DB)
}
process.exit(process.exitCode ?? 0)
