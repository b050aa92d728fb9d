/**
 * bench:jobs: the job workloads of the team's peer harness (shared/bench/peers) run on
 * effect-pgbus, graphile-worker 0.18.0, pg-boss 12.38.0 and the harness's raw SQL floor (W1, W2) in one session, on one PostgreSQL
 * server. Every run is its own Node process (packages/bench/src/peers/<library>.ts) on a freshly
 * created database, dropped afterwards; runs go round-robin (run 1 of every case, then run 2, ...;
 * within each workload the cases take turns at going first)
 * and the tables show medians [min-max].
 *
 *   npm run bench:jobs                      # from the repository root (installs the peers first)
 *   RUNS=1 BENCH_ONLY='^w2' npm run bench:jobs
 *
 * Knobs (env): RUNS (3), BENCH_ONLY (regex on the case key, e.g. `ours|graphile`, `^w1`),
 * BENCH_OURS_READ_AHEAD (tuned read-aheads tried in W1, "190,590"), BENCH_OURS_REPORTED_RA (the
 * configuration reported as ours, 590), BENCH_OURS_W2_READ_AHEAD (0), BENCH_W1_JOBS (20000),
 * BENCH_ENQ_SINGLE_JOBS (2000), BENCH_W2_JOBS (1000), BENCH_W2_SPACING_MS (5), BENCH_W2_WARMUP_JOBS
 * (20), BENCH_AWAIT_JOBS (500, awaited results), BENCH_CONCURRENCY (10), BENCH_POOL_MAX (20), BENCH_PHASE_CAP_MS (120000),
 * BENCH_RUN_TIMEOUT_MS (per run, 300000), BENCH_RESULTS (append every run's JSON to this file),
 * DATABASE_URL (the server; default postgres://postgres@127.0.0.1:5432/postgres).
 *
 * The last line of stdout is one JSON object:
 * {"bench":"jobs","ours_jobs_per_s":N,"graphile_jobs_per_s":N,"pgboss_jobs_per_s":N,
 *  "raw_jobs_per_s":N,"ours_tuned_over_raw":N,
 *  "ours_enqueue_bulk_per_s":N,"ours_insert_ms":N,"ours_p50_ms":N,"ours_p99_ms":N,
 *  "graphile_p50_ms":N,"graphile_p99_ms":N,"raw_p50_ms":N,"raw_p99_ms":N,"raw_insert_p50_ms":N,"ours_nolocal_p50_ms":N,"ours_nolocal_p99_ms":N,
 *  "ours_keys_jobs_per_s":N,"ours_await_p50_ms":N,"ours_await_p99_ms":N}
 */
import os from "node:os"
import { fileURLToPath } from "node:url"
import { machine, median } from "./common.ts"
import { type RunCost, runCost } from "./cost.ts"
import {
  cellOf,
  fmt,
  intList,
  log,
  num as numAt,
  onInterrupt,
  type ResultLine,
  rounded,
  roundRobin,
  runCaseProcess,
  runsCell,
  selected
} from "./orchestrate.ts"
import {
  CONCURRENCY,
  dropDatabase,
  ENQ_SINGLE_JOBS,
  PHASE_CAP_MS,
  POOL_MAX,
  pkgVersion,
  serverInfo,
  serverUrl,
  W1_JOBS,
  W2_JOBS,
  W2_SPACING_MS,
  W2_WARMUP_JOBS
} from "./peers/common.ts"

type Library = "ours" | "graphile" | "pgboss" | "raw"
type Workload = "enq" | "w1" | "w2" | "await"

interface Case {
  readonly key: string
  readonly library: Library
  readonly workload: Workload
  readonly variant: string
}

/** A run's result line (a peers/<library>.ts process), with its database's commits and the phase's WAL. */
type RunResult = ResultLine<RunCost> & { readonly workload: string }

const RUNS = Number(process.env.RUNS ?? 3)
const TUNED_RA = intList(process.env.BENCH_OURS_READ_AHEAD || undefined, [190, 590]).filter((n) => n !== 0)
const REPORTED_RA = Number(process.env.BENCH_OURS_REPORTED_RA ?? TUNED_RA[TUNED_RA.length - 1] ?? 0)
// W2 of effect-pgbus at its defaults unless a read-ahead is given
const W2_VARIANT =
  process.env.BENCH_OURS_W2_READ_AHEAD === undefined || process.env.BENCH_OURS_W2_READ_AHEAD === ""
    ? "default"
    : `ra${Number(process.env.BENCH_OURS_W2_READ_AHEAD)}`
const TAG = String(process.pid)
const LIBRARIES: ReadonlyArray<Library> = ["ours", "graphile", "pgboss", "raw"]

const W1_RAS = [...new Set([...TUNED_RA, REPORTED_RA])].filter((n) => n !== 0)
const ALL_CASES: ReadonlyArray<Case> = [
  ...LIBRARIES.filter((l) => l !== "raw").map(
    (library): Case => ({ key: `enq ${library}`, library, workload: "enq", variant: "default" })
  ),
  { key: "enq ours unique", library: "ours", workload: "enq", variant: "unique" },
  // the library's defaults (no readAhead given): the headline
  { key: "w1 ours default", library: "ours", workload: "w1", variant: "default" },
  ...W1_RAS.map((ra): Case => ({ key: `w1 ours ra${ra}`, library: "ours", workload: "w1", variant: `ra${ra}` })),
  // flow controls at the reported read-ahead: beside the plain W1 of the same run
  ...["limited", "rated", "fair1000"].map(
    (control): Case => ({
      key: `w1 ours ra${REPORTED_RA} ${control}`,
      library: "ours",
      workload: "w1",
      variant: `ra${REPORTED_RA}-${control}`
    })
  ),
  { key: `w1 ours ra${REPORTED_RA} keys`, library: "ours", workload: "w1", variant: `ra${REPORTED_RA}-keys` },
  { key: "w1 graphile batched", library: "graphile", workload: "w1", variant: "batched" },
  { key: "w1 pgboss b100", library: "pgboss", workload: "w1", variant: "b100" },
  // the raw SQL floor of the peer harness (10 loops claiming up to 100, one DELETE per claim)
  { key: "w1 raw c10-b100", library: "raw", workload: "w1", variant: "c10-b100" },
  { key: `w2 ours ${W2_VARIANT}`, library: "ours", workload: "w2", variant: W2_VARIANT },
  { key: `w2 ours ${W2_VARIANT} nolocal`, library: "ours", workload: "w2", variant: `${W2_VARIANT}-nolocal` },
  { key: "w2 graphile default", library: "graphile", workload: "w2", variant: "default" },
  { key: "w2 pgboss notify-b1", library: "pgboss", workload: "w2", variant: "notify-b1" },
  // the floor: postgres.js, INSERT + pg_notify in one statement, 10 loops claiming one job each
  { key: "w2 raw c10-b1", library: "raw", workload: "w2", variant: "c10-b1" },
  { key: `await ours ${W2_VARIANT}`, library: "ours", workload: "await", variant: W2_VARIANT }
]
const CASES = selected(ALL_CASES)

// ---------------------------------------------------------------------------------------------
// Running one case in its own process

// the run's database goes once its process (and every pool in it) is gone, after its commits
// (flushed by its backends at exit) and the phase's WAL are read
const runCase = (c: Case, run: number): Promise<RunResult | undefined> =>
  runCaseProcess<RunCost>({
    label: `${c.key} run ${run}`,
    file: fileURLToPath(new URL(`./peers/${c.library}.ts`, import.meta.url)),
    args: [c.workload, "--variant", c.variant, "--run", String(run)],
    env: { BENCH_JOBS_TAG: TAG },
    database: `bench_jobs_${c.library}_${TAG}`,
    cost: (database, result) => runCost(database, result.result as { walStart?: unknown; walEnd?: unknown })
  }) as Promise<RunResult | undefined>

const allDatabases = LIBRARIES.map((l) => `bench_jobs_${l}_${TAG}`)
onInterrupt(allDatabases)

// ---------------------------------------------------------------------------------------------
// Figures

/** A number of a run's result. */
const num = (r: RunResult, path: string): number | undefined => numAt(r.result, path)

/** Per job of a run: commits over the whole run process, WAL bytes of the timed phase. */
const jobsOf = (r: RunResult): number | undefined => {
  const n = num(r, "completed") ?? num(r, "received") ?? num(r, "jobs")
  return n === undefined || n === 0 ? undefined : n
}
const costOf = (r: RunResult, path: string): number | undefined => {
  const jobs = jobsOf(r)
  if (jobs === undefined || r.db === undefined) return undefined
  // W1b counts both its phases (sequential and concurrent)
  const n = r.workload === "enq" ? jobs * 2 : jobs
  if (path === "commitsPerJob") return r.db.xactCommit / n
  return r.db.walBytes === undefined ? undefined : r.db.walBytes / n
}

const values = (rs: ReadonlyArray<RunResult>, path: string): Array<number> =>
  rs
    .map((r) => (path === "commitsPerJob" || path === "walBytesPerJob" ? costOf(r, path) : num(r, path)))
    .filter((v): v is number => v !== undefined)

const medianOf = (rs: ReadonlyArray<RunResult>, path: string): number | undefined => {
  const xs = values(rs, path)
  return xs.length === 0 ? undefined : median(xs)
}

/** "median [min-max]" of a field over runs. */
const cell = (rs: ReadonlyArray<RunResult>, path: string, scale = 1): string =>
  cellOf(values(rs, path).map((x) => x * scale))

const rssCell = (rs: ReadonlyArray<RunResult>): string => {
  const xs = rs.map((r) => r.peakRssMiB).filter((x) => Number.isFinite(x))
  return xs.length === 0 ? "n/a" : fmt(median(xs))
}

const libraryLabel = (library: Library): string =>
  library === "ours"
    ? "effect-pgbus (this repo)"
    : library === "graphile"
      ? `graphile-worker ${pkgVersion("graphile-worker")}`
      : library === "raw"
        ? `raw SQL floor (postgres.js ${pkgVersion("postgres")})`
        : `pg-boss ${pkgVersion("pg-boss")}`

const variantLabel = (c: Case): string => {
  if (c.library !== "ours") return c.variant
  const control = /^ra\d+-(limited|rated|fair1000)$/.exec(c.variant)?.[1]
  if (control !== undefined) {
    const ra = Number(c.variant.slice(2, c.variant.indexOf("-")))
    return `read-ahead ${ra}, ${
      control === "limited"
        ? "**concurrency limit** `limit: { to: 1000 }` (above the capsule's)"
        : control === "rated"
          ? "**rate limit** 10,000,000/s (above W1's)"
          : "**fair share** over 1,000 keys"
    }`
  }
  const keys = c.variant.endsWith("-keys")
  const nolocal = c.variant.endsWith("-nolocal")
  if (c.variant.startsWith("default")) {
    const what = "defaults (no readAhead given: the library decides)"
    if (c.workload === "w2")
      return nolocal
        ? `concurrency ${CONCURRENCY}, ${what}, **local dispatch off**: LISTEN/NOTIFY, read, claim (diagnostic)`
        : `concurrency ${CONCURRENCY}, ${what}, local dispatch (default)`
    return c.workload === "w1" ? `${what} **= ours**` : what
  }
  const ra = Number(c.variant.slice(2, nolocal ? -"-nolocal".length : keys ? -"-keys".length : undefined))
  if (keys) return `read-ahead ${ra}, **per-key FIFO**: every job one of 1,000 ordering keys`
  if (c.workload === "w2")
    return nolocal
      ? `concurrency ${CONCURRENCY}, read-ahead ${ra}, **local dispatch off**: LISTEN/NOTIFY, read, claim (diagnostic)`
      : `concurrency ${CONCURRENCY}, read-ahead ${ra}${ra === 0 ? " (default)" : ""}, local dispatch (default)`
  const what = ra === 0 ? "default" : "tuned"
  return `read-ahead ${ra} (${what})`
}

// ---------------------------------------------------------------------------------------------
// Main

const main = async () => {
  const startedAt = performance.now()
  const machineLine = machine()
  let pg = "unknown"
  try {
    pg = await serverInfo()
  } catch (e) {
    log(`could not read the server version: ${e instanceof Error ? e.message : String(e)}`)
  }
  log(`bench:jobs: ${CASES.length} cases × ${RUNS} runs, round-robin; databases bench_jobs_<library>_${TAG}`)
  const results = await roundRobin({
    cases: CASES,
    runs: RUNS,
    run: runCase,
    describe: () => "ok",
    groupOf: (c) => c.workload
  })
  await Promise.all(allDatabases.map((d) => dropDatabase(d).catch(() => undefined)))
  const totalS = (performance.now() - startedAt) / 1000

  const rowsOf = (workload: Workload) =>
    CASES.filter((c) => c.workload === workload).map((c) => ({ c, rs: results.get(c.key) ?? [] }))
  const lines: Array<string> = []
  const p = (s = "") => lines.push(s)

  p(`## bench:jobs: effect-pgbus vs graphile-worker vs pg-boss vs the raw SQL floor (same run, same server)`)
  p()
  p(
    `- Machine: ${machineLine} (start); load at the end ${os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(" ")}`
  )
  p(`- PostgreSQL: ${pg} (server ${new URL(serverUrl).host})`)
  p(
    `- Settings: RUNS=${RUNS} (round-robin, medians [min-max]), concurrency ${CONCURRENCY}, pool max ${POOL_MAX}, ` +
      `W1 ${W1_JOBS} jobs, W1b ${ENQ_SINGLE_JOBS} inserts, W2 ${W2_JOBS} jobs every ${W2_SPACING_MS} ms after ${W2_WARMUP_JOBS} warm-up jobs, ` +
      `phase cap ${PHASE_CAP_MS} ms, no-op handlers, silent loggers (effect-pgbus: minimum log level Warn), ` +
      `every run a fresh Node process on a fresh database; total ${totalS.toFixed(0)} s`
  )
  p(
    `- effect-pgbus: Supervisor.runWith, one capsule (concurrency ${CONCURRENCY}), archive on success (default), ` +
      `LISTEN/NOTIFY on (default); "ours" below = its defaults (no readAhead given), "ours_tuned" = the best of its plain W1 configurations in this run (defaults, read-ahead ${W1_RAS.join(", ")}) by median. graphile-worker and pg-boss as the peer harness configures them at their best.`
  )
  p(
    "- graphile-worker: `batched` = run({ concurrency: 10, pollInterval: 2000, preset: { worker: { localQueue: { size: 100 }, " +
      "completeJobBatchDelay: 0 } } }), jobs added with workerUtils.addJobs (one call); `default` = the same without the preset " +
      "(LISTEN/NOTIFY always on). Single inserts: workerUtils.addJob."
  )
  p(
    "- raw SQL floor (W1 only): the peer harness's floor on postgres.js: a minimal jobs table, 10 loops each claiming up to 100 jobs with " +
      "`UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 100) RETURNING`, one `DELETE ... WHERE id = any($ids)` per claim; " +
      "no retries, leases, archive or statistics. Issue 24's target: ours_tuned ≥ 0.75× it."
  )
  p(
    "- pg-boss: `b100` = work(q, { localConcurrency: 10, batchSize: 100, burstWhenBatchFull: true }), jobs added with " +
      "boss.insert (one call); `notify-b1` = new PgBoss({ useListenNotify: true }), createQueue(q, { notify: true }), " +
      "work(q, { localConcurrency: 10, batchSize: 1 }). Single inserts: boss.send."
  )
  p()
  p(`### W1 throughput: ${W1_JOBS} no-op jobs (bulk enqueue in one call, then workers drain; completed = committed)`)
  p()
  p(
    "| library | configuration | runs | bulk enqueue jobs/s | processing jobs/s | first job ms | steady jobs/s (10-90%) | commits / job | WAL bytes / job | PG CPU ms / 1k jobs | PG CPU ms / 1k jobs, run's backends | Node CPU ms / 1k jobs | peak RSS MiB |"
  )
  p("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
  for (const { c, rs } of rowsOf("w1")) {
    // effect-pgbus archives on success: every completed job must be in the archive
    const short = values(rs, "archived").filter((n) => n < W1_JOBS)
    const check = short.length > 0 ? ` (archive short: ${short.join(", ")})` : ""
    p(
      `| ${libraryLabel(c.library)} | ${variantLabel(c)}${check} | ${runsCell(rs, RUNS, (r) => r.result.done === false)} | ${cell(rs, "enqueueBulkPerSec")} | ` +
        `${cell(rs, "jobsPerSec")} | ${cell(rs, "firstJobMs")} | ${cell(rs, "steadyJobsPerSec")} | ${cell(rs, "commitsPerJob")} | ${cell(rs, "walBytesPerJob")} | ${cell(rs, "pgCpuMsPerKJob")} | ${cell(rs, "pgDbCpuMsPerKJob")} | ${cell(rs, "nodeCpuMsPerKJob")} | ${rssCell(rs)} |`
    )
  }
  p(
    "- first job ms: from the worker start call to the handler's first job; steady jobs/s: the handler's rate between a tenth and nine tenths of the jobs seen (sampled every 2 ms), without start-up and the last commits.\n" +
      "- PG CPU: every `postgres` process of the server (shared with anything else it serves); run's backends: only the processes serving the run's database (its connections and autovacuum), steady under other load."
  )
  p()
  p(
    `### W1b single-insert enqueue: ${ENQ_SINGLE_JOBS} jobs one insert per call, sequential, then from ${CONCURRENCY} concurrent producers`
  )
  p()
  p(
    "| library | runs | sequential jobs/s | mean ms / insert | 10 concurrent producers jobs/s | commits / job | PG CPU s (seq / conc) |"
  )
  p("|---|---|---|---|---|---|---|")
  for (const { c, rs } of rowsOf("enq")) {
    p(
      `| ${libraryLabel(c.library)}${c.variant === "unique" ? ", **uniqueness key**" : ""} | ${runsCell(rs, RUNS, (r) => r.result.done === false)} | ${cell(rs, "sequentialPerSec")} | ${cell(rs, "sequentialMeanMs")} | ` +
        `${cell(rs, "concurrent10PerSec")} | ${cell(rs, "commitsPerJob")} | ${cell(rs, "seqPgCpuS")} / ${cell(rs, "concPgCpuS")} |`
    )
  }
  p()
  p(
    `### W2 pickup latency: ${W2_JOBS} single jobs, ${W2_SPACING_MS} ms apart, idle workers (ms, handler start - enqueue call)`
  )
  p()
  p(
    "| library | configuration | runs | received | p50 | p95 | p99 | max | insert p50 | insert p99 | commits / job | WAL bytes / job | PG CPU s |"
  )
  p("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
  for (const { c, rs } of rowsOf("w2")) {
    p(
      `| ${libraryLabel(c.library)} | ${variantLabel(c)} | ${runsCell(rs, RUNS, (r) => r.result.done === false)} | ${cell(rs, "received")} | ` +
        `${cell(rs, "latencyMs.p50")} | ${cell(rs, "latencyMs.p95")} | ${cell(rs, "latencyMs.p99")} | ${cell(rs, "latencyMs.max")} | ` +
        `${cell(rs, "insertMs.p50")} | ${cell(rs, "insertMs.p99")} | ${cell(rs, "commitsPerJob")} | ${cell(rs, "walBytesPerJob")} | ${cell(rs, "pgCpuS")} |`
    )
  }
  p()

  p(
    "### Await result: enqueue a no-op job that keeps a result, then `awaitResult` (woken by NOTIFY), one at a time (ms)"
  )
  p()
  p("| library | configuration | runs | received | p50 | p95 | p99 | max | PG CPU s |")
  p("|---|---|---|---|---|---|---|---|---|")
  for (const { c, rs } of rowsOf("await")) {
    p(
      `| ${libraryLabel(c.library)} | ${variantLabel(c)} | ${runsCell(rs, RUNS, (r) => r.result.done === false)} | ${cell(rs, "received")} | ` +
        `${cell(rs, "latencyMs.p50")} | ${cell(rs, "latencyMs.p95")} | ${cell(rs, "latencyMs.p99")} | ${cell(rs, "latencyMs.max")} | ${cell(rs, "pgCpuS")} |`
    )
  }
  p()

  const get = (key: string) => results.get(key) ?? []
  const oursW1 = get("w1 ours default")
  // tuned: the best plain W1 configuration of this run by median (a user tuning picks the best;
  // since the adaptive read-ahead, fixed ones have been slower than the defaults)
  const tunedKey = ["w1 ours default", ...W1_RAS.map((ra) => `w1 ours ra${ra}`)].reduce((best, key) =>
    (medianOf(get(key), "jobsPerSec") ?? 0) > (medianOf(get(best), "jobsPerSec") ?? 0) ? key : best
  )
  const tunedW1 = get(tunedKey)
  const graphileW1 = get("w1 graphile batched")
  const pgbossW1 = get("w1 pgboss b100")
  const rawW1 = medianOf(get("w1 raw c10-b100"), "jobsPerSec")
  const tunedOverRaw = medianOf(tunedW1, "jobsPerSec")
  const summary = {
    bench: "jobs",
    ours_jobs_per_s: rounded(medianOf(oursW1, "jobsPerSec")),
    ours_tuned_jobs_per_s: rounded(medianOf(tunedW1, "jobsPerSec")),
    ours_tuned_config:
      tunedKey === "w1 ours default" ? "defaults" : `read-ahead ${tunedKey.slice("w1 ours ra".length)}`,
    [`ours_ra${REPORTED_RA}_jobs_per_s`]: rounded(medianOf(get(`w1 ours ra${REPORTED_RA}`), "jobsPerSec")),
    graphile_jobs_per_s: rounded(medianOf(get("w1 graphile batched"), "jobsPerSec")),
    pgboss_jobs_per_s: rounded(medianOf(get("w1 pgboss b100"), "jobsPerSec")),
    raw_jobs_per_s: rounded(rawW1),
    // the handler's rate between a tenth and nine tenths of the jobs (start-up left out)
    ours_steady_jobs_per_s: rounded(medianOf(oursW1, "steadyJobsPerSec")),
    graphile_steady_jobs_per_s: rounded(medianOf(graphileW1, "steadyJobsPerSec")),
    raw_steady_jobs_per_s: rounded(medianOf(get("w1 raw c10-b100"), "steadyJobsPerSec")),
    ours_first_job_ms: rounded(medianOf(oursW1, "firstJobMs")),
    graphile_first_job_ms: rounded(medianOf(graphileW1, "firstJobMs")),
    raw_first_job_ms: rounded(medianOf(get("w1 raw c10-b100"), "firstJobMs")),
    ours_tuned_over_raw: tunedOverRaw === undefined || rawW1 === undefined ? null : rounded(tunedOverRaw / rawW1, 2),
    ours_enqueue_bulk_per_s: rounded(medianOf(oursW1, "enqueueBulkPerSec")),
    ours_insert_ms: rounded(medianOf(get("enq ours"), "sequentialMeanMs"), 2),
    ours_p50_ms: rounded(medianOf(get(`w2 ours ${W2_VARIANT}`), "latencyMs.p50"), 2),
    ours_p99_ms: rounded(medianOf(get(`w2 ours ${W2_VARIANT}`), "latencyMs.p99"), 2),
    graphile_p50_ms: rounded(medianOf(get("w2 graphile default"), "latencyMs.p50"), 2),
    graphile_p99_ms: rounded(medianOf(get("w2 graphile default"), "latencyMs.p99"), 2),
    raw_p50_ms: rounded(medianOf(get("w2 raw c10-b1"), "latencyMs.p50"), 2),
    raw_p99_ms: rounded(medianOf(get("w2 raw c10-b1"), "latencyMs.p99"), 2),
    raw_insert_p50_ms: rounded(medianOf(get("w2 raw c10-b1"), "insertMs.p50"), 2),
    ours_nolocal_p50_ms: rounded(medianOf(get(`w2 ours ${W2_VARIANT} nolocal`), "latencyMs.p50"), 2),
    ours_nolocal_p99_ms: rounded(medianOf(get(`w2 ours ${W2_VARIANT} nolocal`), "latencyMs.p99"), 2),
    ours_keys_jobs_per_s: rounded(medianOf(get(`w1 ours ra${REPORTED_RA} keys`), "jobsPerSec")),
    ours_await_p50_ms: rounded(medianOf(get(`await ours ${W2_VARIANT}`), "latencyMs.p50"), 2),
    ours_await_p99_ms: rounded(medianOf(get(`await ours ${W2_VARIANT}`), "latencyMs.p99"), 2),
    // cost per job of W1: commits over the whole run process, WAL bytes of the processing phase
    ours_commits_per_job: rounded(medianOf(oursW1, "commitsPerJob"), 3),
    ours_wal_bytes_per_job: rounded(medianOf(oursW1, "walBytesPerJob")),
    ours_tuned_commits_per_job: rounded(medianOf(tunedW1, "commitsPerJob"), 3),
    ours_tuned_wal_bytes_per_job: rounded(medianOf(tunedW1, "walBytesPerJob")),
    graphile_commits_per_job: rounded(medianOf(graphileW1, "commitsPerJob"), 3),
    graphile_wal_bytes_per_job: rounded(medianOf(graphileW1, "walBytesPerJob")),
    pgboss_commits_per_job: rounded(medianOf(pgbossW1, "commitsPerJob"), 3),
    pgboss_wal_bytes_per_job: rounded(medianOf(pgbossW1, "walBytesPerJob"))
  }
  p(
    `JSON: ours_jobs_per_s = W1 processing of effect-pgbus at its defaults (no readAhead given), ours_tuned_jobs_per_s = the best of its plain configurations in this run (ours_tuned_config names it; ours_ra${REPORTED_RA}_jobs_per_s the fixed read-ahead that used to be reported as tuned); ours_enqueue_bulk_per_s = its bulk enqueue at defaults; ` +
      "*_commits_per_job = the run database's xact_commit over the whole W1 run process (setup and enqueue included) / jobs, " +
      "*_wal_bytes_per_job = WAL of the processing phase written for the run's database (pg_waldump; the LSN difference when it cannot read the WAL) / jobs; " +
      "raw = the peer harness's raw SQL floor (postgres.js, 10 loops claiming up to 100 jobs, one DELETE per claim; no retries, leases or archive), ours_tuned_over_raw = ours_tuned_jobs_per_s / raw_jobs_per_s (target ≥ 0.75); raw_p50_ms/raw_p99_ms/raw_insert_p50_ms = W2 on the raw floor (INSERT + pg_notify in one statement, 10 loops claiming one job each): the pickup latency of PostgreSQL and a Node driver on this machine; " +
      `graphile = batched (W1) / default (W2); pg-boss = b100; ours_insert_ms = W1b sequential mean; p50/p99 = W2 medians over runs; ` +
      `ours_nolocal_* = W2 of effect-pgbus with local dispatch off (a diagnostic: jobs enqueued by a process without an idle worker of the queue); ` +
      `ours_keys_jobs_per_s = W1 on an ordered queue (1,000 ordering keys); ours_await_* = enqueue-to-result latency of awaitResult.`
  )
  p()
  process.stdout.write(`${lines.join("\n")}\n${JSON.stringify(summary)}\n`)
}

await main()
