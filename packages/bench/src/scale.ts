/**
 * bench:scale (issue 24, item 3): is a claim's cost flat as the tables grow? W1 (no-op jobs, one
 * capsule at default settings) drains BENCH_SCALE_JOBS jobs from a backlog of each size in
 * BENCH_SCALE_SIZES, beside an archive of BENCH_SCALE_ARCHIVE rows; then W3 (a 3-step no-op
 * workflow, BENCH_SCALE_WF_RUNS runs) runs with no finished run in the tables and with
 * BENCH_SCALE_WF_FINISHED finished runs (each with the steps and events of a real one).
 * Backlogs and archives are filled with one INSERT ... SELECT generate_series each (copies of a
 * row the API wrote), not through the API. One database, one process; every size repeated
 * BENCH_SCALE_REPEATS times, sizes in turn (10k, 100k, 1M, 10k, ...; a smaller size truncates the queue and fills it again), medians [min-max].
 *
 * Per size: jobs/s (first job handled -> the BENCH_SCALE_JOBS-th), the claim statement (the
 * worker's own `messageRead`, as QueueSql builds it, limit BENCH_SCALE_CLAIM_LIMIT) under
 * EXPLAIN (ANALYZE, BUFFERS) in a rolled-back transaction, three times before the run (median
 * execution time, shared buffers hit + read), and the queue table's and its indexes' buffers
 * (pg_statio) per claim during the run, and its commits and WAL bytes per job (from the WAL:
 * cost.ts, `phaseCost`; W3's per run). Before each run the backlog is topped up to its size and
 * vacuumed (as autovacuum would have).
 *
 * Delayed messages (BENCH_SCALE_DELAYED, 1,000,000 scheduled a day ahead, one INSERT ... SELECT
 * generate_series as well): a full claim (from id 0) under EXPLAIN, and per phase the claims,
 * queue-table buffers per claim and the bench database's Postgres CPU, for an idle worker (nothing
 * due) and W1 draining BENCH_SCALE_DELAYED_JOBS live jobs beside the delayed rows (lower ids),
 * interleaved with as many delayed ones, and alone; then a steady BENCH_SCALE_STEADY_RATE jobs/s.
 *
 *   npm run bench:scale
 *   BENCH_SCALE_SIZES=10000,100000 BENCH_SCALE_ARCHIVE=0 BENCH_SCALE_WF_FINISHED=0 npm run bench:scale
 *   BENCH_SCALE_SIZES= BENCH_SCALE_ARCHIVE=0 BENCH_SCALE_WF_FINISHED=0 npm run bench:scale   # the delayed part alone
 *
 * Knobs (env): BENCH_SCALE_SIZES (10000,100000,1000000), BENCH_SCALE_ARCHIVE (5000000),
 * BENCH_SCALE_JOBS (5000), BENCH_SCALE_REPEATS (3), BENCH_SCALE_CLAIM_LIMIT (100),
 * BENCH_SCALE_WF_FINISHED (1000000; 0 skips the workflow part), BENCH_SCALE_WF_RUNS (1000),
 * BENCH_SCALE_DELAYED (1000000; 0 skips the delayed part), BENCH_SCALE_DELAYED_JOBS (50000),
 * BENCH_SCALE_IDLE_S (10), BENCH_SCALE_STEADY_RATE (2000), BENCH_SCALE_STEADY_S (10),
 * BENCH_CONCURRENCY (10), BENCH_POOL_MAX (20), DATABASE_URL.
 *
 * The last line of stdout is one JSON object:
 * {"bench":"scale","w1_jobs_per_s":{"10000":N,...},"w1_ratio_largest_vs_smallest":N,
 *  "claim_ms":{...},"claim_buffers":{...},"w1_commits_per_job":{...},"w1_wal_bytes_per_job":{...},
 *  "w3_wal_bytes_per_run_empty":N,"w3_wal_bytes_per_run_finished":N,"w3_runs_per_s_empty":N,"w3_runs_per_s_finished":N,
 *  "delayed":{"<phase>_<queue>":{"claim_buffers":N,"jobs_per_s":N,"buffers_per_claim":N,"pg_cores":N},...}}
 */
import os from "node:os"
import { Cause, Effect, Fiber, Layer, ManagedRuntime, References, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Job, JobClient, PgBus, PgBusConfig, Registry, Supervisor, Workflow } from "../../../src/index.ts"
import * as QueueName from "../../../src/Queue/QueueName.ts"
import { makeQueueSql } from "../../../src/Queue/QueueSql.ts"
import type { QueueStore } from "../../../src/Queue/QueueStore.ts"
import { WorkerQueueStore } from "../../../src/Queue/WorkerQueueStore.ts"
import { benchConfig, machine, median } from "./common.ts"
import { phaseCost, walMark } from "./cost.ts"
import {
  CONCURRENCY,
  dropDatabase,
  env,
  measure,
  monitorClient,
  now,
  type PgClientLike,
  POOL_MAX,
  resetDatabase,
  serverInfo,
  sleep,
  waitUntil
} from "./peers/common.ts"

const SIZES = (process.env.BENCH_SCALE_SIZES ?? "10000,100000,1000000")
  .split(",")
  .map((s) => Number(s.trim()))
  .filter((n) => Number.isInteger(n) && n > 0)
// BENCH_SCALE_SIZES= (empty) skips W1
const ARCHIVE = env("BENCH_SCALE_ARCHIVE", 5_000_000)
const JOBS = env("BENCH_SCALE_JOBS", 5_000)
const REPEATS = env("BENCH_SCALE_REPEATS", 3)
const CLAIM_LIMIT = env("BENCH_SCALE_CLAIM_LIMIT", 100)
const WF_FINISHED = env("BENCH_SCALE_WF_FINISHED", 1_000_000)
const WF_RUNS = env("BENCH_SCALE_WF_RUNS", 1_000)
// the delayed part (issue 24's follow-up): a queue holding this many messages scheduled a day ahead
const DELAYED = env("BENCH_SCALE_DELAYED", 1_000_000)
const DELAYED_JOBS = env("BENCH_SCALE_DELAYED_JOBS", 50_000)
const IDLE_S = env("BENCH_SCALE_IDLE_S", 10)
const STEADY_RATE = env("BENCH_SCALE_STEADY_RATE", 2_000)
const STEADY_S = env("BENCH_SCALE_STEADY_S", 10)
/** How long the table statistics take to include every session's counts (PostgreSQL flushes idle sessions' within 10 s). */
const STATS_SETTLE_MS = 11_000
if (SIZES.some((n) => n < JOBS)) throw new Error(`every size must be at least BENCH_SCALE_JOBS (${JOBS})`)

const DB = `bench_scale_${process.pid}`
const log = (line: string) => process.stderr.write(`${line}\n`)
const fmt = (x: number) => (Math.abs(x) >= 100 ? String(Math.round(x)) : String(Math.round(x * 100) / 100))
const cell = (xs: ReadonlyArray<number>) =>
  xs.length === 0
    ? "n/a"
    : xs.length === 1
      ? fmt(xs[0]!)
      : `${fmt(median(xs))} [${fmt(Math.min(...xs))}-${fmt(Math.max(...xs))}]`

let handled = 0
const W1 = Job.make("W1", { payload: Schema.Struct({ i: Schema.Number }), queue: "bench" }, () =>
  Effect.sync(() => {
    handled++
  })
)
// the delayed part's queues: live jobs alone, beside delayed rows of lower ids, interleaved with them
const DELAYED_QUEUES = ["dl_none", "dl_low", "dl_mixed"] as const
const DelayedJobs = DELAYED_QUEUES.map((queue) =>
  Job.make(`W1_${queue}`, { payload: Schema.Struct({ i: Schema.Number }), queue }, () =>
    Effect.sync(() => {
      handled++
    })
  )
)
const ThreeSteps = Workflow.make(
  "ThreeSteps",
  { payload: Schema.Struct({ n: Schema.Number }) },
  function* ({ payload }) {
    const a = yield* Workflow.step("one", Effect.succeed(payload.n + 1))
    const b = yield* Workflow.step("two", Effect.succeed(a + 1))
    return yield* Workflow.step("three", Effect.succeed(b + 1))
  }
)

// errors only: stopping the workers between runs gives their buffered messages back, and the next
// run logs each one's second delivery as a warning
const quiet = Layer.succeed(References.MinimumLogLevel, "Error")

// The claims of a run: the worker's claim calls, counted on the store the supervisor's workers
// claim through (`WorkerQueueStore`, on the workers' session, since 2026-12-05; before, the
// shared `QueueStore`, which they no longer read through: the count then read 0), the same small
// cost at every size. Not with a counting tracer: a tracer other than the native one makes the
// library open the spans it skips without a tracing backend (queue reads, archives, sends), a
// cost a user without tracing does not pay.
let claimCalls = 0
const counted = (store: QueueStore["Service"]): QueueStore["Service"] => ({
  ...store,
  archiveAndRead: (queue, receipts, options) =>
    Effect.suspend(() => {
      claimCalls++
      return store.archiveAndRead(queue, receipts, options)
    }),
  read: (queue, options) =>
    Effect.suspend(() => {
      claimCalls++
      return store.read(queue, options)
    })
})
const countingClaims = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(WorkerQueueStore, (store) => Effect.provideService(effect, WorkerQueueStore, counted(store)))

await resetDatabase(DB)
const runtime = ManagedRuntime.make(
  Layer.mergeAll(quiet, PgBus.layerFrom(benchConfig(DB, { poolSize: POOL_MAX })).pipe(Layer.provide(quiet)))
)
const runP = <A, E>(effect: Effect.Effect<A, E, PgBus.PgBus>): Promise<A> =>
  runtime.runPromise(effect.pipe(Effect.provideService(References.MinimumLogLevel, "Error")))

/** Starts the supervisor (one capsule, default settings) in the background; the returned function drains it. */
const startWorkers = (queue: string): (() => Promise<void>) => {
  // a delayed part's queue: its job alone (a capsule per registered job's queue would be started)
  const delayedJob = DelayedJobs[DELAYED_QUEUES.indexOf(queue as (typeof DELAYED_QUEUES)[number])]
  const fiber = runtime.runFork(
    Supervisor.runWith({ capsules: [{ name: "bench", queues: [queue], concurrency: CONCURRENCY }] }).pipe(
      Effect.provide(delayedJob === undefined ? Registry.layer([W1, ThreeSteps]) : Registry.layer([delayedJob])),
      countingClaims,
      Effect.provideService(References.MinimumLogLevel, "Error"),
      Effect.tapCause((cause) => Effect.sync(() => log(`workers of ${queue} failed: ${Cause.pretty(cause)}`)))
    )
  )
  return () => runtime.runPromise(Fiber.interrupt(fiber))
}

/** The columns of a table a copy writes: all but generated identity ones. */
const columnsOf = async (c: PgClientLike, schema: string, table: string): Promise<Array<string>> => {
  const { rows } = await c.query<{ n: string }>(
    `SELECT attname AS n FROM pg_attribute
      WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attidentity = ''
      ORDER BY attnum`,
    [`"${schema}"."${table}"`]
  )
  return rows.map((r) => r.n)
}

/**
 * `n` copies of the rows of `table` that `where` picks, in one INSERT ... SELECT generate_series
 * (`g` is the copy's number); `set` replaces columns by expressions of `s` (the row) and `g`.
 */
const copyRows = async (
  c: PgClientLike,
  schema: string,
  table: string,
  where: string,
  n: number,
  set: Record<string, string>
) => {
  const cols = await columnsOf(c, schema, table)
  const list = cols.map((col) => `"${col}"`).join(", ")
  const exprs = cols.map((col) => set[col] ?? `s."${col}"`).join(", ")
  await c.query(
    `INSERT INTO "${schema}"."${table}" (${list})
     SELECT ${exprs} FROM (SELECT * FROM "${schema}"."${table}" WHERE ${where}) AS s, generate_series(1, ${n}) AS g`
  )
}

interface ClaimPlan {
  readonly ms: number
  readonly buffers: number
  readonly rows: number
}

/** A statement under EXPLAIN (ANALYZE, BUFFERS), rolled back: execution time, shared buffers hit + read, rows. */
const explainClaim = async (c: PgClientLike, text: string, params: ReadonlyArray<unknown>): Promise<ClaimPlan> => {
  await c.query("BEGIN")
  try {
    const { rows } = await c.query<{ "QUERY PLAN": Array<{ Plan: Record<string, number>; "Execution Time": number }> }>(
      `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`,
      // @effect/sql-pg's typed parameters (PgTypes.float8 ...) carry their value
      params.map((x) => (typeof x === "object" && x !== null && "oid" in x && "value" in x ? x.value : x))
    )
    const plan = rows[0]!["QUERY PLAN"][0]!
    return {
      ms: plan["Execution Time"],
      buffers: (plan.Plan["Shared Hit Blocks"] ?? 0) + (plan.Plan["Shared Read Blocks"] ?? 0),
      rows: plan.Plan["Actual Rows"] ?? 0
    }
  } finally {
    await c.query("ROLLBACK")
  }
}

/** Buffers (hit + read) of a table and its indexes so far. */
const tableBuffers = async (c: PgClientLike, schema: string, table: string): Promise<number> => {
  const { rows } = await c.query<{ b: string }>(
    `SELECT (coalesce(heap_blks_hit, 0) + coalesce(heap_blks_read, 0) + coalesce(idx_blks_hit, 0)
             + coalesce(idx_blks_read, 0))::text AS b
       FROM pg_statio_user_tables WHERE schemaname = $1 AND relname = $2`,
    [schema, table]
  )
  return Number(rows[0]?.b ?? 0)
}

interface DelayedResult {
  /** idle (nothing due), drain (DELAYED_JOBS live jobs) or steady (STEADY_RATE jobs/s enqueued) */
  readonly phase: "idle" | "drain" | "steady"
  readonly queue: (typeof DELAYED_QUEUES)[number]
  /** a full claim (from id 0) under EXPLAIN (ANALYZE, BUFFERS) before the phase */
  readonly claimMs: number
  readonly claimBuffers: number
  readonly jobsPerS: number
  readonly claims: number
  readonly claimsPerS: number
  readonly buffersPerClaim: number
  /** CPU of the bench database's server processes over the phase, in cores */
  readonly pgCores: number
}

/**
 * The delayed part: queue `dl_low` holds DELAYED messages due in a day (lower ids than any live
 * job), `dl_mixed` live jobs interleaved one for one with delayed ones, `dl_none` live jobs
 * alone. An idle worker polls `dl_low` (nothing due) and the empty `dl_none`; W1 drains
 * DELAYED_JOBS live jobs from each; then a producer enqueues STEADY_RATE jobs/s for STEADY_S s.
 */
const delayedPart = async (
  mon: PgClientLike,
  schema: string,
  prefix: string,
  statements: ReturnType<typeof makeQueueSql>
): Promise<Array<DelayedResult>> => {
  const qs = new Map<string, { readonly q: string; readonly table: string; readonly physical: string }>()
  const samples = new Map<string, readonly [string, string | null]>()
  for (const [i, queue] of DELAYED_QUEUES.entries()) {
    await runP(JobClient.use((client) => client.ensureQueue(queue)))
    await runP(DelayedJobs[i]!.enqueue({ i: 0 }))
    const physical = QueueName.physicalOf(prefix, queue)
    const table = `q_${physical}`
    const q = `"${schema}"."${table}"`
    const row = (await mon.query<{ message: unknown; headers: unknown }>(`SELECT message, headers FROM ${q} LIMIT 1`))
      .rows[0]!
    samples.set(queue, [JSON.stringify(row.message), row.headers === null ? null : JSON.stringify(row.headers)])
    await mon.query(`DELETE FROM ${q}`)
    qs.set(queue, { q, table, physical })
  }
  const LATER = "now() + interval '1 day' + g * interval '1 millisecond'"
  const DUE = "now() - interval '1 second'"
  const insert = (queue: string, n: number, vt: string) =>
    mon.query(
      `INSERT INTO ${qs.get(queue)!.q} (read_ct, enqueued_at, vt, message, headers)
       SELECT 0, now(), ${vt}, jsonb_set($1::jsonb, '{payload,i}', to_jsonb(g)), $2::jsonb
         FROM generate_series(1, ${n}) AS g`,
      [...samples.get(queue)!]
    )
  const t = now()
  await insert("dl_low", DELAYED, LATER)
  await mon.query(`VACUUM ANALYZE ${qs.get("dl_low")!.q}`)
  log(`delayed: ${DELAYED} rows due in a day in dl_low in ${((now() - t) / 1000).toFixed(1)} s`)
  const fullClaim = async (queue: string) => {
    const [text, params] = statements
      .messageRead(qs.get(queue)!.physical, CLAIM_LIMIT, 30_000, "explain#1", null, 0n)
      .compile()
    const plans: Array<ClaimPlan> = []
    for (let i = 0; i < 3; i++) plans.push(await explainClaim(mon, text, params))
    return { ms: median(plans.map((x) => x.ms)), buffers: median(plans.map((x) => x.buffers)) }
  }
  const out: Array<DelayedResult> = []
  /** One phase on one queue: the worker runs `during` (it returns the jobs handled per s, if it measures them). */
  const phase = async (
    name: DelayedResult["phase"],
    queue: (typeof DELAYED_QUEUES)[number],
    during: () => Promise<number>
  ) => {
    const claim = await fullClaim(queue)
    await sleep(STATS_SETTLE_MS)
    const { table } = qs.get(queue)!
    const b0 = await tableBuffers(mon, schema, table)
    handled = 0
    claimCalls = 0
    const stop = startWorkers(queue)
    const { value: jobsPerS, m } = await measure(during, DB)
    const claims = claimCalls
    await stop()
    await sleep(STATS_SETTLE_MS)
    const b1 = await tableBuffers(mon, schema, table)
    const r: DelayedResult = {
      phase: name,
      queue,
      claimMs: claim.ms,
      claimBuffers: claim.buffers,
      jobsPerS,
      claims,
      claimsPerS: (claims / m.wallMs) * 1000,
      buffersPerClaim: claims > 0 ? (b1 - b0) / claims : Number.NaN,
      pgCores: (m.pgDbCpuS ?? Number.NaN) / (m.wallMs / 1000)
    }
    out.push(r)
    log(
      `>> delayed ${name} ${queue}: full claim ${fmt(r.claimMs)} ms, ${r.claimBuffers} buffers (EXPLAIN); ` +
        `${fmt(r.jobsPerS)} jobs/s, ${claims} claims (${fmt(r.claimsPerS)}/s), ${fmt(r.buffersPerClaim)} buffers per claim, ` +
        `postgres ${fmt(r.pgCores)} cores`
    )
  }
  // (a) an idle worker: nothing due (dl_low) against an empty queue (dl_none)
  for (const queue of ["dl_none", "dl_low"] as const) {
    await phase("idle", queue, async () => {
      await sleep(IDLE_S * 1000)
      return 0
    })
  }
  // (b), (c): W1 drains DELAYED_JOBS live jobs
  const drain = async () => {
    let first = Number.NaN
    const ok = await waitUntil(
      () => {
        if (handled > 0 && Number.isNaN(first)) first = now()
        return handled >= DELAYED_JOBS
      },
      120_000,
      1
    )
    return ok ? (DELAYED_JOBS / (now() - first)) * 1000 : Number.NaN
  }
  for (let rep = 1; rep <= REPEATS; rep++) {
    for (const queue of DELAYED_QUEUES) {
      if (queue === "dl_mixed") {
        await mon.query(`DELETE FROM ${qs.get(queue)!.q}`)
        await insert(queue, 2 * DELAYED_JOBS, `CASE WHEN g % 2 = 0 THEN ${LATER} ELSE ${DUE} END`)
      } else await insert(queue, DELAYED_JOBS, DUE)
      await mon.query(`VACUUM ANALYZE ${qs.get(queue)!.q}`)
      await phase("drain", queue, drain)
    }
  }
  // (b) steady: STEADY_RATE jobs/s enqueued (one INSERT every 100 ms) while the worker runs
  for (const queue of ["dl_none", "dl_low"] as const) {
    await mon.query(`DELETE FROM ${qs.get(queue)!.q} WHERE vt < now() + interval '1 hour'`)
    await mon.query(`VACUUM ANALYZE ${qs.get(queue)!.q}`)
    await phase("steady", queue, async () => {
      const end = now() + STEADY_S * 1000
      while (now() < end) {
        const tick = now()
        await insert(queue, Math.round(STEADY_RATE / 10), DUE)
        await sleep(Math.max(0, 100 - (now() - tick)))
      }
      await waitUntil(() => handled >= Math.round(STEADY_RATE / 10) * Math.round(STEADY_S * 10), 10_000, 5)
      return handled / STEADY_S
    })
  }
  return out
}

const main = async () => {
  await runP(PgBus.migrate)
  const config = await runP(PgBusConfig.use(Effect.succeed))
  const schema = config.schema
  const physical = QueueName.physicalOf(config.queuePrefix, "bench")
  const qTable = `q_${physical}`
  const aTable = `a_${physical}`
  const q = `"${schema}"."${qTable}"`
  await runP(JobClient.use((client) => client.ensureQueue("bench")))
  const mon = await monitorClient(DB)
  try {
    // ---- the backlog: copies of a row the API wrote
    await runP(W1.enqueue({ i: 0 }))
    // the row the API wrote, kept: every top-up copies it (it is claimed and archived like the rest)
    const sampleRow = (
      await mon.query<{ m: string; message: unknown; headers: unknown }>(
        `SELECT msg_id::text AS m, message, headers FROM ${q} LIMIT 1`
      )
    ).rows[0]!
    const sample = sampleRow.m
    const fillQueue = async (n: number) => {
      if (n <= 0) return
      await mon.query(
        `INSERT INTO ${q} (read_ct, enqueued_at, vt, message, headers)
         SELECT 0, now(), now() - interval '1 second', jsonb_set($1::jsonb, '{payload,i}', to_jsonb(g)), $2::jsonb
           FROM generate_series(1, ${n}) AS g`,
        [JSON.stringify(sampleRow.message), sampleRow.headers === null ? null : JSON.stringify(sampleRow.headers)]
      )
    }
    const backlog = async () =>
      Number((await mon.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${q}`)).rows[0]?.n ?? 0)

    // ---- the archive: ids below every live message's (an archived row keeps its message's id)
    if (ARCHIVE > 0) {
      const t = now()
      await mon.query(
        `INSERT INTO "${schema}"."${aTable}" (msg_id, read_ct, enqueued_at, archived_at, vt, message, headers)
         SELECT -g, 1, now() - interval '2 days', now() - interval '1 day' + g * interval '1 millisecond',
                now() - interval '1 day', jsonb_set(s.message, '{payload,i}', to_jsonb(g)), s.headers
           FROM ${q} s, generate_series(1, ${ARCHIVE}) AS g WHERE s.msg_id = ${sample}`
      )
      await mon.query(`VACUUM ANALYZE "${schema}"."${aTable}"`)
      log(`archive: ${ARCHIVE} rows in ${((now() - t) / 1000).toFixed(1)} s`)
    }

    const sql = await runP(SqlClient.SqlClient.use(Effect.succeed))
    const statements = makeQueueSql(sql, schema, "")
    // the archive sweep's batch (1,000) with nothing due (7 days' retention) and with 1,000 due
    const sweeps: Array<{ readonly due: string; readonly plan: ClaimPlan }> = []
    if (ARCHIVE > 0) {
      for (const [due, retentionMs] of [
        ["none due", 7 * 86_400_000],
        ["1,000 due of more", 86_400_000 - Math.min(ARCHIVE, 100_000)]
      ] as const) {
        const [text, params] = statements.archiveDeleteOlderThan(physical, retentionMs, 1000, null).compile()
        const plan = await explainClaim(mon, text, params)
        sweeps.push({ due, plan })
        log(`archive sweep (${due}): ${plan.ms.toFixed(2)} ms, ${plan.buffers} buffers`)
      }
    }
    const results: Array<W1Result> = []
    for (let rep = 1; rep <= REPEATS; rep++) {
      for (const size of SIZES) {
        // top up to the size, then vacuum (as autovacuum would have after the last run)
        let have = await backlog()
        if (have > size) {
          await mon.query(`TRUNCATE ${q}`)
          have = 0
        }
        const t = now()
        await fillQueue(size - Math.min(have, size))
        await mon.query(`VACUUM ANALYZE ${q}`)
        const fillS = (now() - t) / 1000
        // the claim a worker runs first (from the start of the table), three times
        const [text, params] = statements.messageRead(physical, CLAIM_LIMIT, 30_000, "explain#1", null, 0n).compile()
        const plans: Array<ClaimPlan> = []
        for (let i = 0; i < 3; i++) plans.push(await explainClaim(mon, text, params))
        // sessions report their table statistics at most once a second, idle ones within 10 s:
        // wait for every earlier count (the fill, the vacuum, the EXPLAINs) to be in
        await sleep(STATS_SETTLE_MS)
        const buffersBefore = await tableBuffers(mon, schema, qTable)
        handled = 0
        claimCalls = 0
        let first = Number.NaN
        const walStart = await walMark()
        const stop = startWorkers("bench")
        const ok = await waitUntil(
          () => {
            if (handled > 0 && Number.isNaN(first)) first = now()
            return handled >= JOBS
          },
          120_000,
          1
        )
        const last = now()
        const claims = claimCalls
        await stop()
        // every job the run handled, the drain's included (the buffers are read after it too)
        const handledAtStop = handled
        const cost = await phaseCost(DB, walStart, await walMark())
        await sleep(STATS_SETTLE_MS)
        const buffersAfter = await tableBuffers(mon, schema, qTable)
        const r: W1Result = {
          size,
          jobsPerS: ok ? (JOBS / (last - first)) * 1000 : Number.NaN,
          claimMs: median(plans.map((x) => x.ms)),
          claimBuffers: median(plans.map((x) => x.buffers)),
          claimRows: plans[0]?.rows ?? 0,
          runBuffersPerClaim: claims > 0 ? (buffersAfter - buffersBefore) / claims : Number.NaN,
          runBuffersPerJob: (buffersAfter - buffersBefore) / Math.max(1, handledAtStop),
          claims,
          commitsPerJob: cost.commits === undefined ? Number.NaN : cost.commits / Math.max(1, handledAtStop),
          walBytesPerJob: cost.walBytes / Math.max(1, handledAtStop)
        }
        results.push(r)
        log(
          `>> rep ${rep}/${REPEATS} W1 backlog ${size} (filled in ${fillS.toFixed(1)} s): ${Math.round(r.jobsPerS)} jobs/s, ` +
            `claim of ${CLAIM_LIMIT}: ${r.claimMs.toFixed(2)} ms, ${r.claimBuffers} buffers (EXPLAIN); ` +
            `${r.runBuffersPerClaim.toFixed(1)} queue-table buffers per claim over ${claims} claims in the run, ${r.runBuffersPerJob.toFixed(1)} per job; ` +
            `${r.commitsPerJob.toFixed(3)} commits and ${Math.round(r.walBytesPerJob)} WAL bytes per job`
        )
      }
    }
    await mon.query(`TRUNCATE ${q}`)

    // ---- workflows: W3 with no finished run, then with WF_FINISHED of them
    const wf: Array<{
      finished: number
      runsPerS: number
      buffersPerRun: number
      commitsPerRun: number
      walBytesPerRun: number
    }> = []
    if (WF_FINISHED > 0) {
      const queue = config.workflowQueue
      await runP(JobClient.use((client) => client.ensureQueue(queue)))
      const w3 = async (finishedBefore: number) => {
        const t0 = (await mon.query<{ t: string }>("SELECT now()::text AS t")).rows[0]!.t
        const blocks = async () =>
          Number(
            (
              await mon.query<{ b: string }>(
                "SELECT (blks_hit + blks_read)::text AS b FROM pg_stat_database WHERE datname = current_database()"
              )
            ).rows[0]?.b ?? 0
          )
        const b0 = await blocks()
        const walStart = await walMark()
        const stop = startWorkers(queue)
        const t = now()
        let next = 0
        await Promise.all(
          Array.from({ length: CONCURRENCY }, async () => {
            while (next < WF_RUNS) {
              const i = next++
              await runP(ThreeSteps.start({ n: i }))
            }
          })
        )
        const done = await waitUntil(
          async () =>
            Number(
              (
                await mon.query<{ n: string }>(
                  `SELECT count(*)::text AS n FROM "${schema}".workflow_runs WHERE status = 'finished' AND created_at >= $1::timestamptz`,
                  [t0]
                )
              ).rows[0]?.n ?? 0
            ) >= WF_RUNS,
          120_000,
          5
        )
        const ms = now() - t
        await stop()
        const b1 = await blocks()
        const cost = await phaseCost(DB, walStart, await walMark())
        const r = {
          finished: finishedBefore,
          runsPerS: done ? (WF_RUNS / ms) * 1000 : Number.NaN,
          buffersPerRun: (b1 - b0) / WF_RUNS,
          commitsPerRun: cost.commits === undefined ? Number.NaN : cost.commits / WF_RUNS,
          walBytesPerRun: cost.walBytes / WF_RUNS
        }
        wf.push(r)
        log(
          `>> W3 with ${finishedBefore} finished runs in the tables: ${Math.round(r.runsPerS)} runs/s, ${r.buffersPerRun.toFixed(0)} buffers per run (database), ` +
            `${r.commitsPerRun.toFixed(2)} commits and ${Math.round(r.walBytesPerRun)} WAL bytes per run`
        )
      }
      await w3(0)
      // copies of a finished run (runs, steps, events), created in the past
      const t = now()
      const { rows } = await mon.query<{ id: string }>(
        `SELECT id::text FROM "${schema}".workflow_runs WHERE status = 'finished' LIMIT 1`
      )
      const runId = rows[0]!.id
      const newId = "md5('scale' || g)::uuid"
      // the copies reference their own runs: the foreign keys' triggers are skipped while copying
      await mon.query("SET session_replication_role = replica")
      await copyRows(mon, schema, "workflow_runs", `id = '${runId}'`, WF_FINISHED, {
        id: newId,
        created_at: "now() - interval '2 days' + g * interval '1 millisecond'",
        updated_at: "now() - interval '1 day'",
        finished_at: "now() - interval '1 day'"
      })
      await copyRows(mon, schema, "workflow_steps", `run_id = '${runId}'`, WF_FINISHED, { run_id: newId })
      await copyRows(mon, schema, "workflow_events", `run_id = '${runId}'`, WF_FINISHED, { run_id: newId })
      await mon.query("SET session_replication_role = DEFAULT")
      await mon.query(
        `VACUUM ANALYZE "${schema}".workflow_runs, "${schema}".workflow_steps, "${schema}".workflow_events`
      )
      log(`workflows: ${WF_FINISHED} finished runs (steps and events) in ${((now() - t) / 1000).toFixed(1)} s`)
      for (let rep = 1; rep <= REPEATS; rep++) await w3(WF_FINISHED)
      // and empty again, to bracket the runs with the finished ones (the machine's load drifts)
      await mon.query(`TRUNCATE "${schema}".workflow_runs CASCADE`)
      await mon.query(
        `VACUUM ANALYZE "${schema}".workflow_runs, "${schema}".workflow_steps, "${schema}".workflow_events`
      )
      await w3(0)
    }
    const delayed = DELAYED > 0 ? await delayedPart(mon, schema, config.queuePrefix, statements) : []
    return { results, wf, sweeps, delayed }
  } finally {
    await mon.end()
  }
}

interface W1Result {
  readonly size: number
  readonly jobsPerS: number
  readonly claimMs: number
  readonly claimBuffers: number
  readonly claimRows: number
  readonly runBuffersPerClaim: number
  readonly runBuffersPerJob: number
  readonly claims: number
  /** Writing commits (from the WAL) per job handled; NaN where pg_waldump could not read it. */
  readonly commitsPerJob: number
  readonly walBytesPerJob: number
}

const startedAt = now()
const machineLine = machine()
const pg = await serverInfo().catch(() => "unknown")
let out: Awaited<ReturnType<typeof main>> | undefined
try {
  out = await main()
} finally {
  await runtime.dispose()
  await dropDatabase(DB)
}
const { results, wf, sweeps, delayed } = out
const lines: Array<string> = []
const p = (s = "") => lines.push(s)
p("## bench:scale: W1 and W3 as the tables grow")
p()
p(
  `- Machine: ${machineLine} (start); load at the end ${os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(" ")}`
)
p(`- PostgreSQL: ${pg}`)
p(
  `- Settings: backlogs ${SIZES.join(", ")} (each topped up and vacuumed before its run), archive ${ARCHIVE} rows, ` +
    `${JOBS} jobs drained per run at default settings (one capsule, concurrency ${CONCURRENCY}), ${REPEATS} repeats interleaved, ` +
    `W3 ${WF_RUNS} runs with 0 and ${WF_FINISHED} finished runs in the tables; total ${((now() - startedAt) / 1000).toFixed(0)} s`
)
p()
p(
  `| backlog | W1 jobs/s | claim of ${CLAIM_LIMIT} (EXPLAIN ANALYZE) ms | claim buffers (EXPLAIN) | queue-table buffers per claim (run) | per job (run) | claims per run | commits / job | WAL bytes / job |`
)
p("|---|---|---|---|---|---|---|---|---|")
const by = (size: number) => results.filter((r) => r.size === size)
for (const size of SIZES) {
  const rs = by(size)
  p(
    `| ${size} | ${cell(rs.map((r) => r.jobsPerS))} | ${cell(rs.map((r) => r.claimMs))} | ${cell(rs.map((r) => r.claimBuffers))} | ` +
      `${cell(rs.map((r) => r.runBuffersPerClaim))} | ${cell(rs.map((r) => r.runBuffersPerJob))} | ${cell(rs.map((r) => r.claims))} | ` +
      `${cell(rs.map((r) => r.commitsPerJob))} | ${cell(rs.map((r) => r.walBytesPerJob))} |`
  )
}
p()
for (const { due, plan } of sweeps) {
  p(
    `- Archive sweep batch (1,000) at ${ARCHIVE} archived rows, ${due}: ${fmt(plan.ms)} ms, ${plan.buffers} buffers (EXPLAIN ANALYZE)`
  )
}
if (sweeps.length > 0) p()
if (wf.length > 0) {
  p("| finished runs in the tables | W3 runs/s | database buffers per run | commits / run | WAL bytes / run |")
  p("|---|---|---|---|---|")
  for (const n of [...new Set(wf.map((w) => w.finished))]) {
    const ws = wf.filter((w) => w.finished === n)
    p(
      `| ${n} | ${cell(ws.map((w) => w.runsPerS))} | ${cell(ws.map((w) => w.buffersPerRun))} | ${cell(ws.map((w) => w.commitsPerRun))} | ${cell(ws.map((w) => w.walBytesPerRun))} |`
    )
  }
  p()
}
if (delayed.length > 0) {
  p(
    `Delayed messages: ${DELAYED} due in a day in dl_low (lower ids than its live jobs), dl_mixed one delayed per live job, dl_none none; ` +
      `idle ${IDLE_S} s, drain ${DELAYED_JOBS} jobs, steady ${STEADY_RATE} jobs/s for ${STEADY_S} s`
  )
  p()
  p(
    `| phase | queue | full claim of ${CLAIM_LIMIT} (EXPLAIN ANALYZE) ms | full claim buffers | jobs/s | claims/s | queue-table buffers per claim | postgres cores |`
  )
  p("|---|---|---|---|---|---|---|---|")
  for (const ph of ["idle", "drain", "steady"] as const) {
    for (const queue of DELAYED_QUEUES) {
      const ds = delayed.filter((d) => d.phase === ph && d.queue === queue)
      if (ds.length === 0) continue
      p(
        `| ${ph} | ${queue} | ${cell(ds.map((d) => d.claimMs))} | ${cell(ds.map((d) => d.claimBuffers))} | ${cell(ds.map((d) => d.jobsPerS))} | ` +
          `${cell(ds.map((d) => d.claimsPerS))} | ${cell(ds.map((d) => d.buffersPerClaim))} | ${cell(ds.map((d) => d.pgCores))} |`
      )
    }
  }
  p()
}
const medianOf = (xs: ReadonlyArray<number>) => (xs.length === 0 ? null : Math.round(median(xs) * 100) / 100)
const smallest = SIZES[0]!
const largest = SIZES[SIZES.length - 1]!
const summary = {
  bench: "scale",
  w1_jobs_per_s: Object.fromEntries(SIZES.map((s) => [s, medianOf(by(s).map((r) => r.jobsPerS))])),
  w1_ratio_largest_vs_smallest:
    medianOf(by(largest).map((r) => r.jobsPerS)) !== null && medianOf(by(smallest).map((r) => r.jobsPerS))
      ? Math.round((median(by(largest).map((r) => r.jobsPerS)) / median(by(smallest).map((r) => r.jobsPerS))) * 100) /
        100
      : null,
  claim_ms: Object.fromEntries(SIZES.map((s) => [s, medianOf(by(s).map((r) => r.claimMs))])),
  claim_buffers: Object.fromEntries(SIZES.map((s) => [s, medianOf(by(s).map((r) => r.claimBuffers))])),
  w1_commits_per_job: Object.fromEntries(SIZES.map((s) => [s, medianOf(by(s).map((r) => r.commitsPerJob))])),
  w1_wal_bytes_per_job: Object.fromEntries(SIZES.map((s) => [s, medianOf(by(s).map((r) => r.walBytesPerJob))])),
  w3_wal_bytes_per_run_empty: medianOf(wf.filter((w) => w.finished === 0).map((w) => w.walBytesPerRun)),
  w3_wal_bytes_per_run_finished: medianOf(wf.filter((w) => w.finished > 0).map((w) => w.walBytesPerRun)),
  w3_runs_per_s_empty: medianOf(wf.filter((w) => w.finished === 0).map((w) => w.runsPerS)),
  w3_runs_per_s_finished: medianOf(wf.filter((w) => w.finished > 0).map((w) => w.runsPerS)),
  delayed: Object.fromEntries(
    (["idle", "drain", "steady"] as const).flatMap((ph) =>
      DELAYED_QUEUES.flatMap((queue) => {
        const ds = delayed.filter((d) => d.phase === ph && d.queue === queue)
        return ds.length === 0
          ? []
          : [
              [
                `${ph}_${queue}`,
                {
                  claim_buffers: medianOf(ds.map((d) => d.claimBuffers)),
                  jobs_per_s: medianOf(ds.map((d) => d.jobsPerS)),
                  buffers_per_claim: medianOf(ds.map((d) => d.buffersPerClaim)),
                  pg_cores: medianOf(ds.map((d) => d.pgCores))
                }
              ]
            ]
      })
    )
  )
}
process.stdout.write(`${lines.join("\n")}\n${JSON.stringify(summary)}\n`)
process.exit(0)
