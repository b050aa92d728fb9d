/**
 * effect-pgbus on the workloads of the peer harness, driven by the same code as the peers
 * (./common.ts): jobs defined with `Job.make`, enqueued with `enqueue` / `enqueueMany`, run by
 * `Supervisor.runWith` with one capsule, archive on success (the default). The Effect programs
 * run on a `ManagedRuntime` built once per process, so the Promise-based drivers call them
 * exactly as they call the peers' Promise APIs.
 *   tsx packages/bench/src/peers/ours.ts <enq|w1|w2> [--variant ra<N>] [--run N]
 * Variants: `ra<N>` = the capsule's read-ahead (messages claimed beyond the free slots); W1 is
 * run at ra0 (the default) and tuned values, W2 at ra0 unless told otherwise; `ra<N>-nolocal`
 * turns local dispatch off (W2's jobs then go through NOTIFY, read and claim).
 * Diagnostics (not to be measured): BENCH_OURS_PROFILE=1 (statements of the timed phase),
 * BENCH_OURS_CPUPROF=<file> (a V8 CPU profile of W1's timed phase), BENCH_OURS_OPS=1 (Effect
 * primitives per job, by primitive and span; BENCH_OURS_OPS_DETAIL=<span>|(none) by source),
 * BENCH_OURS_TIMELINE=1 with BENCH_OURS_PROFILE=1 (every span of the phase's first
 * BENCH_OURS_TIMELINE_MS, 200 by default), BENCH_OURS_W2_SERIES=1 (W2's samples in order),
 * BENCH_OURS_ROLES=workers (the supervisor runs the workers alone: no leader campaign, no
 * maintenance, as a worker process of a fleet whose maintenance runs elsewhere).
 */
import { Effect, type Exit, Fiber, Layer, ManagedRuntime, References, Schema, Tracer } from "effect"
import { Job, JobClient, PgBus, QueueStore, Registry, Supervisor } from "../../../../src/index.ts"
import { benchConfig, exitOnWorkersFailure } from "../common.ts"
import {
  CONCURRENCY,
  databaseName,
  emit,
  enqueueSingle,
  finishRun,
  guard,
  latencySummary,
  makeLatencyRecorder,
  measure,
  monitorClient,
  POOL_MAX,
  parseArgs,
  pgCpuSeconds,
  resetDatabase,
  round2,
  runLatency,
  sleep,
  timeProcessing,
  W1_JOBS
} from "./common.ts"
import { cpuProfiler } from "./cpuProfile.ts"
import { makeOpsCounter } from "./opsCount.ts"

const args = parseArgs()
const AWAIT_JOBS = Number(process.env.BENCH_AWAIT_JOBS ?? 500)
guard()
const DB = databaseName("ours")
// `default`: no readAhead given, the library's own (adaptive) choice; `ra<N>`: read-ahead N
const variantMatch = /^(?:ra(\d+)|default)(-nolocal|-limited|-rated|-fair1000|-keys)?$/.exec(args.variant)
const readAhead: number | undefined =
  variantMatch?.[1] !== undefined ? Number(variantMatch[1]) : variantMatch ? undefined : 0
// `-nolocal`: local dispatch off, so every W2 job goes through NOTIFY, read and claim, as a job
// enqueued by a process without a worker of its queue does. Flow controls (W1): `-limited` a
// concurrency limit above the capsule's concurrency, `-rated` a rate above W1's, `-fair1000`
// fair share over 1,000 keys. `unique` (enq): each insert with a uniqueness key. `-keys`: W1 on
// an ordered queue, every job carrying one of ORDER_KEYS ordering keys.
const localDispatch = variantMatch?.[2] !== "-nolocal"
const keyed = variantMatch?.[2] === "-keys"
const ORDER_KEYS = 1000
const control = variantMatch?.[2] === "-nolocal" || keyed ? undefined : variantMatch?.[2]
const variant =
  args.workload === "enq"
    ? args.variant
    : `${readAhead === undefined ? "default" : `ra${readAhead}`}${variantMatch?.[2] ?? ""}`

let handled = 0
const rec = makeLatencyRecorder()

const Single = Job.make("Single", { payload: Schema.Struct({ i: Schema.Number }), queue: "single" }, () => Effect.void)
const W1 = Job.make("W1", { payload: Schema.Struct({ i: Schema.Number }), queue: "bench" }, () =>
  Effect.sync(() => {
    handled++
  })
)
const I = Schema.Struct({ i: Schema.Number })
const SingleUnique = Job.make(
  "SingleUnique",
  { payload: I, queue: "single", unique: { key: ({ i }) => `k${i}` } },
  () => Effect.void
)
const count = () =>
  Effect.sync(() => {
    handled++
  })
/** W1 as run: the plain job, or one with a flow control. */
const W1Run =
  control === "-limited"
    ? Job.make("W1", { payload: I, queue: "bench", limit: { to: 1000 } }, count)
    : control === "-rated"
      ? Job.make("W1", { payload: I, queue: "bench", rate: { limit: 10_000_000, period: "1 second" } }, count)
      : keyed
        ? Job.make("W1", { payload: I, queue: "bench", orderKey: (p) => `k${p.i % ORDER_KEYS}` }, count)
        : W1
// the await-result latency: a no-op job that keeps a result, awaited by the enqueuer
const Echo = Job.make("Echo", { payload: I, success: I, queue: "bench" }, (p) => Effect.succeed(p))
// BENCH_OURS_W2_SERIES=1: W2's samples in order to stderr (i, insert ms, pickup ms, sent at ms
// from the phase's start): where the tail is, and with BENCH_OURS_TIMELINE what ran beside it
const SERIES = process.env.BENCH_OURS_W2_SERIES === "1"
const series = new Map<number, { insert?: number; pickup?: number; at?: number }>()
const W2 = Job.make(
  "W2",
  { payload: Schema.Struct({ t: Schema.Number, i: Schema.Number, w: Schema.Boolean }), queue: "bench" },
  (p) =>
    Effect.sync(() => {
      if (SERIES && !p.w) series.set(p.i, { ...(series.get(p.i) ?? {}), pickup: performance.now() - p.t })
      rec.record(p.t, p.w)
    })
)

// Silent like the peers' loggers: warnings and errors only.
const quiet = Layer.succeed(References.MinimumLogLevel, "Warn")

// BENCH_OURS_PROFILE=1: a diagnostic run (not to be measured: a tracer makes spans and adds the
// traceparent header) that tallies every SQL statement of the timed phase by text (count, total
// and mean time, first start and last end in ms from the phase's start) and prints it to stderr.
const PROFILE = process.env.BENCH_OURS_PROFILE === "1"
// BENCH_OURS_TIMELINE=1 (with BENCH_OURS_PROFILE=1): every span that starts in the first 200 ms
// of the timed phase, in order, with its start and end (what the boot does before the first job)
const TIMELINE = process.env.BENCH_OURS_TIMELINE === "1"
// BENCH_OURS_CPUPROF=<file>: a V8 CPU profile of the timed phase only (no startup, migration or
// enqueue), written to <file> (.cpuprofile, for DevTools or a script): a diagnostic run.
const CPUPROF = process.env.BENCH_OURS_CPUPROF
const tally = new Map<string, { count: number; ns: bigint; first: bigint; last: bigint }>()
let recordingFrom = 0n
let recording = false
const timeline: Array<[number, number, string]> = []
class CountingSpan extends Tracer.NativeSpan {
  override end(endTime: bigint, exit: Exit.Exit<unknown, unknown>): void {
    if (recording && this.status._tag === "Started" && TIMELINE) {
      const st = Number(this.status.startTime - recordingFrom) / 1e6
      if (st < Number(process.env.BENCH_OURS_TIMELINE_MS ?? 200))
        timeline.push([
          st,
          Number(endTime - recordingFrom) / 1e6,
          `${this.name} ${String(this._attributes?.get("db.query.text") ?? "")
            .replace(/\s+/g, " ")
            .slice(0, 80)}`
        ])
    }
    if (recording && this.status._tag === "Started") {
      const text = this._attributes?.get("db.query.text")
      if (typeof text === "string") {
        const key = text.replace(/\s+/g, " ").slice(0, 110)
        const t = tally.get(key) ?? { count: 0, ns: 0n, first: this.status.startTime, last: endTime }
        t.last = endTime
        t.count++
        t.ns += endTime - this.status.startTime
        tally.set(key, t)
      }
    }
    super.end(endTime, exit)
  }
}
// BENCH_OURS_OPS=1: counts the Effect primitives every fiber evaluates during the timed phase (by
// primitive, and by the innermost span they run in), through the tracer's per-primitive `context`
// hook: a load-independent measure of the work per job. Without BENCH_OURS_PROFILE the hook is
// put on the native tracer itself, so that the library takes the path it takes without a tracing
// backend (a tracer of its own would make it open the spans it skips for the native one).
// BENCH_OURS_OPS_DETAIL=<span name>|(none): that span's primitives by the source of their function.
const OPS = process.env.BENCH_OURS_OPS === "1"
const OPS_DETAIL = process.env.BENCH_OURS_OPS_DETAIL
const opsCounter = makeOpsCounter(() => recording, OPS_DETAIL)
const counting = Tracer.make({
  span: (options) => new CountingSpan(options),
  ...(OPS ? { context: opsCounter.context } : {})
})
if (OPS && !PROFILE) {
  // diagnostic only: the hook on the native tracer (a plain object), provided explicitly below so
  // that every fiber's context holds it (the runtime reads the hook from the context's tracer)
  ;(Tracer.nativeTracer as { context?: Tracer.Tracer["context"] }).context = opsCounter.context
}
const installed = PROFILE ? counting : OPS ? Tracer.nativeTracer : undefined
const tracing = installed === undefined ? Layer.empty : Layer.succeed(Tracer.Tracer, installed)
const withTracer = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  installed === undefined ? effect : Effect.provideService(effect, Tracer.Tracer, installed)
const printTally = () => {
  if (!PROFILE) return
  for (const [a, b, n] of timeline.sort((x, y) => x[0] - y[0])) console.error(`T ${a.toFixed(1)}-${b.toFixed(1)} ${n}`)
  const rows = [...tally].sort((a, b) => b[1].count - a[1].count)
  const total = rows.reduce((n, [, t]) => n + t.count, 0)
  console.error(`ours profile (${args.workload}, timed phase): ${total} statements; count, total ms, mean ms, text`)
  for (const [text, t] of rows) {
    const ms = Number(t.ns) / 1e6
    const at = (ns: bigint) => (Number(ns - recordingFrom) / 1e6).toFixed(1)
    console.error(`  ${t.count}\t${ms.toFixed(0)}\t${(ms / t.count).toFixed(2)}\t${at(t.first)}-${at(t.last)}\t${text}`)
  }
}
/** Prints the primitives per job (BENCH_OURS_OPS) and returns their number per job. */
const printOps = (jobs: number): number | undefined => {
  if (!OPS) return undefined
  const per = (n: number) => n / Math.max(1, jobs)
  console.error(`ours Effect primitives (${args.workload}, timed phase): ${per(opsCounter.total()).toFixed(1)} per job`)
  for (const [id, n] of opsCounter.by().slice(0, OPS_DETAIL !== undefined ? 120 : 40)) {
    console.error(`  ${per(n).toFixed(2).padStart(8)}  ${id}`)
  }
  return Math.round(per(opsCounter.total()) * 10) / 10
}

await resetDatabase(DB)
const runtime = ManagedRuntime.make(
  Layer.mergeAll(
    quiet,
    tracing,
    PgBus.layerFrom(
      benchConfig(DB, {
        poolSize: POOL_MAX,
        localDispatch,
        ...(control === "-fair1000"
          ? { fairShare: (job) => String(((job.payload as { i?: number }).i ?? 0) % 1000) }
          : {})
      })
    ).pipe(Layer.provide([quiet, tracing]))
  )
)
const runP = <A, E>(effect: Effect.Effect<A, E, PgBus.PgBus>): Promise<A> =>
  runtime.runPromise(effect.pipe(Effect.provideService(References.MinimumLogLevel, "Warn"), withTracer))

/** Starts the supervisor (one capsule on `bench`) in the background; the returned function drains it. */
const startWorkers = (): (() => Promise<void>) => {
  const fiber = runtime.runFork(
    Supervisor.runWith({
      capsules: [
        {
          name: "bench",
          queues: ["bench"],
          concurrency: CONCURRENCY,
          ...(readAhead === undefined ? {} : { readAhead })
        }
      ],
      ...(process.env.BENCH_OURS_ROLES === "workers" ? { roles: ["workers"] as const } : {})
    }).pipe(
      Effect.provide(Registry.layer([W1Run, W2, Echo])),
      Effect.provideService(References.MinimumLogLevel, "Warn"),
      withTracer
    )
  )
  exitOnWorkersFailure(fiber)
  return () => runtime.runPromise(Fiber.interrupt(fiber))
}

const metrics = () => runP(QueueStore.use((store) => store.metrics("bench")))
// the keyed W1's queue is created as enqueueing an ordered job creates it: with its order index
// (created without, the worker builds the index CONCURRENTLY in the timed phase, ordered claims
// scanning the table meanwhile)
const ensureQueue = (queue: string) =>
  runP(JobClient.use((client) => client.ensureQueue(queue, keyed ? { orderIndex: true } : undefined)))

const base = { library: "effect-pgbus", version: "workspace", workload: args.workload, variant }

try {
  await runP(PgBus.migrate)
  if (args.workload === "enq") {
    await ensureQueue("single")
    const unique = args.variant === "unique"
    const r = await enqueueSingle((i) => runP(unique ? SingleUnique.enqueue({ i }) : Single.enqueue({ i })))
    emit({
      ...base,
      variant: unique ? "single-insert-unique" : "single-insert",
      config: { api: "Job.enqueue(payload) via ManagedRuntime.runPromise", poolMax: POOL_MAX },
      result: r
    })
  } else if (args.workload === "w1") {
    await ensureQueue("bench")
    const payloads = Array.from({ length: W1_JOBS }, (_, i) => ({ i }))
    const enq = await measure(() => runP(W1Run.enqueueMany(payloads)), DB)
    let stop: () => Promise<void> = async () => {}
    // started before the phase's clock (its own start is not the library's work)
    const stopProfile = await cpuProfiler(CPUPROF)
    // the phase's end is checked as the peers' are: one count of the queue's table on a client
    // of its own (store.metrics would also count the archive, 20,000 rows, at every check)
    const mon = await monitorClient(DB)
    const queueTable = `"pgbus"."q_pgbus_bench"`
    const proc = await timeProcessing({
      total: W1_JOBS,
      handled: () => handled,
      start: async () => {
        recording = true
        recordingFrom = BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6))
        stop = startWorkers()
      },
      remaining: async () =>
        (await mon.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${queueTable}`)).rows[0]!.n,
      database: DB
    })
    await mon.end()
    recording = false
    await stopProfile?.()
    printTally()
    const opsPerJob = printOps(proc.completed)
    await stop()
    const after = await metrics()
    emit({
      ...base,
      config: {
        capsule: { concurrency: CONCURRENCY, readAhead: readAhead ?? "default" },
        poolMax: POOL_MAX,
        archiveOnSuccess: true,
        insert: `Job.enqueueMany(${W1_JOBS} payloads) in one call`,
        ...(keyed ? { orderKeys: ORDER_KEYS } : {})
      },
      result: {
        enqueueBulkPerSec: Math.round((W1_JOBS / enq.m.wallMs) * 1000),
        enqueueBulkMs: Math.round(enq.m.wallMs),
        enqueuePgCpuS: round2(enq.m.pgCpuS),
        ...(enq.m.pgDbCpuS === undefined ? {} : { enqueuePgDbCpuS: round2(enq.m.pgDbCpuS) }),
        ...proc,
        ...(opsPerJob === undefined ? {} : { opsPerJob }),
        archived: after.archiveSize,
        depthAfter: after.depth
      }
    })
  } else if (args.workload === "w2") {
    await ensureQueue("bench")
    const stop = startWorkers()
    await sleep(500)
    recordingFrom = BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6))
    recording = true
    const r = await runLatency({
      rec,
      send: (p) =>
        runP(W2.enqueue(p)).then(() => {
          if (SERIES && !p.w)
            series.set(p.i, {
              ...(series.get(p.i) ?? {}),
              insert: performance.now() - p.t,
              at: performance.timeOrigin + p.t - Number(recordingFrom / 1000000n)
            })
        })
    })
    if (SERIES) {
      for (const [i, v] of [...series.entries()].sort((a, b) => a[0] - b[0]))
        console.error("W2S", i, v.insert?.toFixed(2), v.pickup?.toFixed(2), v.at?.toFixed(1))
    }
    recording = false
    printTally()
    await stop()
    emit({
      ...base,
      config: {
        capsule: { concurrency: CONCURRENCY, readAhead: readAhead ?? "default" },
        listenNotify: true,
        poolMax: POOL_MAX
      },
      result: r
    })
  } else if (args.workload === "await") {
    // enqueue a no-op job that keeps a result, then await it (woken by NOTIFY): one at a time
    await ensureQueue("bench")
    const stop = startWorkers()
    await sleep(500)
    const once = (i: number) =>
      runP(Effect.flatMap(Echo.enqueue({ i }), (ref) => Echo.awaitResult(ref, { timeout: "10 seconds" })))
    for (let i = 0; i < 20; i++) await once(i)
    const samples: Array<number> = []
    const pg0 = pgCpuSeconds()
    for (let i = 0; i < AWAIT_JOBS; i++) {
      const t0 = performance.now()
      await once(i)
      samples.push(performance.now() - t0)
    }
    const pgCpuS = round2(pgCpuSeconds() - pg0)
    await stop()
    emit({
      ...base,
      config: {
        capsule: { concurrency: CONCURRENCY, readAhead: readAhead ?? "default" },
        localDispatch,
        jobs: AWAIT_JOBS
      },
      result: { received: samples.length, latencyMs: latencySummary(samples), pgCpuS }
    })
  } else {
    console.error(`unknown workload ${args.workload}`)
    process.exitCode = 2
  }
} finally {
  await runtime.dispose()
  await finishRun(DB)
}
process.exit(process.exitCode ?? 0)
