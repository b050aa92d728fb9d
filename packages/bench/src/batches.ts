/**
 * bench:batches: one batch of 10,000 no-op jobs, from the first enqueue call to the start of
 * its onFinish callback, on a supervisor in the same process (one capsule, concurrency 10,
 * read-ahead 190 as bench:jobs reports ours). Each round alternates with the same 10,000 jobs
 * enqueued without a batch, to show what membership costs the job path. Medians of RUNS
 * rounds after one warm-up round of each.
 *
 *   npm run bench:batches
 *   RUNS=3 BENCH_BATCH_JOBS=2000 npm run bench:batches
 *
 * Knobs (env): RUNS (5), BENCH_BATCH_JOBS (10000), BENCH_CONCURRENCY (10), BENCH_READ_AHEAD (190),
 * BENCH_POOL_MAX (20), DATABASE_URL.
 * Each round's commits and WAL bytes per job come from the WAL (cost.ts, `phaseCost`).
 * Last line: {"bench":"batches","ours_jobs_per_s":N,"callback_lag_ms":N,"ours_commits_per_job":N,
 *   "ours_wal_bytes_per_job":N,"plain_commits_per_job":N,"plain_wal_bytes_per_job":N}
 */
import { NodeRuntime } from "@effect/platform-node"
import { Deferred, Effect, Layer, References, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Batch, Job, PgBus, QueueStore, Registry, Supervisor } from "../../../src/index.ts"
import { benchConfig, benchDatabase, exitOnWorkersFailure, machine, median, round } from "./common.ts"
import { type PhaseCost, perUnit, withPhaseCost } from "./cost.ts"

const RUNS = Number(process.env.RUNS ?? 5)
const JOBS = Number(process.env.BENCH_BATCH_JOBS ?? 10_000)
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 10)
const READ_AHEAD = Number(process.env.BENCH_READ_AHEAD ?? 190)
const POOL_MAX = Number(process.env.BENCH_POOL_MAX ?? 20)
const QUEUE = "bench"

/** What one round measured (ms from the first enqueue call, `performance.now()` clock). */
interface Round {
  readonly enqueueMs: number
  readonly lastHandledMs: number
  readonly callbackMs: number | undefined
}

// The handlers only count: the figures are the machinery's.
let handled = 0
let lastHandledAt = 0
let allHandled: Deferred.Deferred<void> | undefined
let callbackStarted: Deferred.Deferred<{ readonly at: number; readonly finished: Batch.Finished }> | undefined

const Member = Job.make("BatchBenchMember", { payload: Schema.Struct({ i: Schema.Number }), queue: QUEUE }, () =>
  Effect.suspend(() => {
    handled++
    lastHandledAt = performance.now()
    return handled === JOBS && allHandled ? Deferred.succeed(allHandled, undefined) : Effect.void
  })
)

const Done = Job.make("BatchBenchDone", { payload: Batch.Finished, queue: QUEUE }, (finished) =>
  Effect.suspend(() =>
    callbackStarted ? Deferred.succeed(callbackStarted, { at: performance.now(), finished }) : Effect.void
  )
)

const payloads = Array.from({ length: JOBS }, (_, i) => ({ i }))

const resetRound = Effect.gen(function* () {
  handled = 0
  lastHandledAt = 0
  allHandled = yield* Deferred.make<void>()
  callbackStarted = yield* Deferred.make<{ readonly at: number; readonly finished: Batch.Finished }>()
  return { allHandled, callbackStarted }
})

/** One batch of JOBS members, enqueue to callback. */
const batchRound = Effect.gen(function* () {
  const { callbackStarted } = yield* resetRound
  const t0 = performance.now()
  const batch = yield* Batch.make({ onFinish: Done, description: "bench:batches" })
  yield* batch.enqueue(Member.enqueueMany(payloads))
  const enqueued = performance.now()
  const { at, finished } = yield* Deferred.await(callbackStarted)
  if (finished.completedJobs !== JOBS || finished.batchId !== batch.id) {
    return yield* Effect.die(new Error(`the callback reported ${finished.completedJobs} of ${JOBS} members`))
  }
  return { enqueueMs: enqueued - t0, lastHandledMs: lastHandledAt - t0, callbackMs: at - t0 } satisfies Round
})

/** The same jobs without a batch, enqueue to the last handler. */
const plainRound = Effect.gen(function* () {
  const { allHandled } = yield* resetRound
  const store = yield* QueueStore
  const t0 = performance.now()
  yield* Member.enqueueMany(payloads)
  const enqueued = performance.now()
  yield* Deferred.await(allHandled)
  const last = lastHandledAt
  // the next round starts on an empty queue: wait for the last archives
  while ((yield* store.metrics(QUEUE)).depth > 0) yield* Effect.sleep("5 millis")
  return { enqueueMs: enqueued - t0, lastHandledMs: last - t0, callbackMs: undefined } satisfies Round
})

const serverVersion = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql<{ readonly v: string; readonly s: string }>`SELECT current_setting('server_version') AS v,
    'shared_buffers=' || current_setting('shared_buffers') || ' synchronous_commit=' ||
    current_setting('synchronous_commit') || ' fsync=' || current_setting('fsync') AS s`
).pipe(Effect.map(([row]) => `PostgreSQL ${row?.v ?? "?"} (${row?.s ?? ""})`))

const fmt = (xs: ReadonlyArray<number>, digits = 0) =>
  xs.length === 0
    ? "n/a"
    : `${round(median(xs), digits)} [${round(Math.min(...xs), digits)}-${round(Math.max(...xs), digits)}]`

const program = Effect.gen(function* () {
  const machineLine = machine()
  const database = yield* benchDatabase(`bench_batches_${process.pid}`)
  const quiet = Layer.succeed(References.MinimumLogLevel, "Warn")
  const pgbus = PgBus.layerFrom(benchConfig(database, { poolSize: POOL_MAX }))
  yield* PgBus.migrate.pipe(Effect.provide(pgbus))

  const measured = Effect.gen(function* () {
    const pg = yield* serverVersion
    const workers = yield* Supervisor.runWith({
      capsules: [{ name: "bench", queues: [QUEUE], concurrency: CONCURRENCY, readAhead: READ_AHEAD }]
    }).pipe(Effect.provide(Registry.layer([Member, Done])), Effect.forkScoped)
    exitOnWorkersFailure(workers)
    // warm-up (JIT, prepared statements, the supervisor's start), not counted
    yield* batchRound
    yield* plainRound
    const batched: Array<Round> = []
    const plain: Array<Round> = []
    const batchedCosts: Array<PhaseCost> = []
    const plainCosts: Array<PhaseCost> = []
    for (let r = 0; r < RUNS; r++) {
      const [b, bCost] = yield* withPhaseCost(database, batchRound)
      batched.push(b)
      batchedCosts.push(bCost)
      const [p, pCost] = yield* withPhaseCost(database, plainRound)
      plain.push(p)
      plainCosts.push(pCost)
      process.stderr.write(`round ${r + 1}/${RUNS} done\n`)
    }
    return { pg, batched, plain, batchedCosts, plainCosts }
  }).pipe(Effect.scoped, Effect.provide(pgbus), Effect.provide(quiet))

  const { pg, batched, plain, batchedCosts, plainCosts } = yield* measured
  // per job (commits n/a where pg_waldump could not read the WAL)
  const commits = (costs: ReadonlyArray<PhaseCost>) =>
    costs.flatMap((c) => {
      const n = perUnit(c, JOBS).commits
      return n === null ? [] : [n]
    })
  const walBytes = (costs: ReadonlyArray<PhaseCost>) => costs.map((c) => perUnit(c, JOBS).walBytes)
  const rate = (rounds: ReadonlyArray<Round>, pick: (r: Round) => number | undefined) =>
    rounds.flatMap((r) => {
      const ms = pick(r)
      return ms === undefined ? [] : [(JOBS / ms) * 1000]
    })
  const toCallback = rate(batched, (r) => r.callbackMs)
  const lags = batched.flatMap((r) => (r.callbackMs === undefined ? [] : [r.callbackMs - r.lastHandledMs]))

  const lines = [
    `## bench:batches: one batch of ${JOBS} no-op jobs, enqueue to callback`,
    "",
    `- Machine: ${machineLine}`,
    `- ${pg}, server ${new URL(process.env.DATABASE_URL ?? "postgres://127.0.0.1:5432").host}`,
    `- Settings: RUNS=${RUNS} rounds after one warm-up (medians [min-max]); one supervisor in the bench process, ` +
      `one capsule, concurrency ${CONCURRENCY}, read-ahead ${READ_AHEAD}, pool ${POOL_MAX}, LISTEN/NOTIFY on, ` +
      "log level Warn; members enqueued with one `batch.enqueue(Member.enqueueMany(...))`; the onFinish callback on the " +
      "same queue; each batch round followed by the same jobs without a batch",
    "",
    "| jobs | runs | enqueue ms | enqueue → last handler, jobs/s | enqueue → callback, jobs/s | last member → callback, ms | commits / job | WAL bytes / job |",
    "|---|---|---|---|---|---|---|---|",
    `| in one batch | ${batched.length} | ${fmt(batched.map((r) => r.enqueueMs))} | ${fmt(rate(batched, (r) => r.lastHandledMs))} | ${fmt(toCallback)} | ${fmt(lags, 1)} | ${fmt(commits(batchedCosts), 3)} | ${fmt(walBytes(batchedCosts))} |`,
    `| no batch | ${plain.length} | ${fmt(plain.map((r) => r.enqueueMs))} | ${fmt(rate(plain, (r) => r.lastHandledMs))} | n/a | n/a | ${fmt(commits(plainCosts), 3)} | ${fmt(walBytes(plainCosts))} |`,
    "",
    "ours_jobs_per_s = enqueue → callback (median); callback_lag_ms = the end of the last member's handler → the start " +
      "of the callback's handler (median): its archive, the batch update that finishes it, the callback's send, the " +
      "wake-up and the claim. Commits / job: the commit records of the round's writing transactions, from the WAL."
  ]
  process.stdout.write(
    `${lines.join("\n")}\n${JSON.stringify({
      bench: "batches",
      ours_jobs_per_s: round(median(toCallback)),
      callback_lag_ms: round(median(lags), 1),
      ours_commits_per_job: commits(batchedCosts).length === RUNS ? round(median(commits(batchedCosts)), 3) : null,
      ours_wal_bytes_per_job: round(median(walBytes(batchedCosts))),
      plain_commits_per_job: commits(plainCosts).length === RUNS ? round(median(commits(plainCosts)), 3) : null,
      plain_wal_bytes_per_job: round(median(walBytes(plainCosts)))
    })}\n`
  )
}).pipe(Effect.scoped)

program.pipe(NodeRuntime.runMain({ disableErrorReporting: false }))
