/**
 * bench:workflows: workload W3 of the team's peer harness (shared/bench/peers) run on
 * effect-pgbus, DBOS Transact 5.3.0 (`direct`), pg-workflows 0.15.0 (`workers10`) and the harness's raw SQL floor in one
 * session, on one PostgreSQL server: 1,000 runs of a 3-step no-op workflow (each step returns its
 * input + 1), started by 10 concurrent starters, worker concurrency 10, timed from the first start
 * call to the last run finished. Every run is its own Node process
 * (packages/bench/src/peers/<library>.ts w3) on a freshly created database, dropped once the
 * process has exited; runs go round-robin (run 1 of every case, then run 2, ...) and the table
 * shows medians [min-max].
 *
 *   npm run bench:workflows                  # from the repository root (installs the peers first)
 *   RUNS=1 BENCH_ONLY='ours' npm run bench:workflows
 *
 * Knobs (env): RUNS (3), BENCH_ONLY (regex on the case key, e.g. `ours|dbos`),
 * BENCH_OURS_READ_AHEAD (tuned read-aheads tried besides the default 0, "10"), BENCH_OURS_REPORTED_RA
 * (the tuned configuration, ours_tuned_runs_per_s in the JSON line, 10; the defaults, no readAhead given, are ours_runs_per_s), BENCH_W3_RUNS (1000),
 * BENCH_W3_POLL_MS (completion polling of effect-pgbus, 10; pg-workflows keeps the harness's 10),
 * BENCH_CONCURRENCY (10), BENCH_POOL_MAX (20), BENCH_W3_WIDE (the diagnostic cases' concurrency, twice
 * BENCH_CONCURRENCY; 0 leaves them out), BENCH_PHASE_CAP_MS (120000), BENCH_RUN_TIMEOUT_MS
 * (per run, 300000), BENCH_RESULTS (append every run's JSON to this file), DATABASE_URL,
 * BENCH_OURS_STATEMENTS=1 (count effect-pgbus's statements per run: installs a counting tracer,
 * which makes the library open the spans it skips without one; a diagnostic, not for measuring).
 *
 * This file also holds the W3 driver the three run processes share (`runW3`); it runs the
 * orchestrator only when it is the program itself, and loads nothing heavy for the peers.
 *
 * The last line of stdout is one JSON object:
 * {"bench":"workflows","ours_runs_per_s":N (defaults),"ours_tuned_runs_per_s":N,"dbos_runs_per_s":N,
 *  "pgworkflows_runs_per_s":N,"raw_runs_per_s":N, then commits and WAL bytes per run of each: "<lib>_commits_per_run", "<lib>_wal_bytes_per_run"}
 */
import os from "node:os"
import { resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { type RunCost, runCost } from "./cost.ts"
import {
  cellOf,
  defined,
  intList,
  log,
  median,
  medianOf,
  num,
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
  env,
  measure,
  now,
  PHASE_CAP_MS,
  POOL_MAX,
  pkgVersion,
  round2,
  serverInfo,
  serverUrl,
  sleep,
  walLsn
} from "./peers/common.ts"

/** Runs per measurement. */
export const W3_RUNS = env("BENCH_W3_RUNS", 1_000)
/** How often effect-pgbus's completion is polled once every run is started. */
export const W3_POLL_MS = env("BENCH_W3_POLL_MS", 10)

// ---------------------------------------------------------------------------------------------
// The W3 driver (shared by the run processes)

/** What one W3 measurement gives. */
export interface W3Result {
  readonly done: boolean
  readonly completed: number
  readonly allStartedMs: number
  readonly wallMs: number
  readonly runsPerSec: number
  readonly pgCpuS: number
  readonly nodeCpuS: number
  /** Completion queries made after the starts (each one a transaction of its own). */
  readonly polls: number
  /** `pg_current_wal_lsn()` at the phase's start and end (cost.ts attributes the WAL between). */
  readonly walStart: string | undefined
  readonly walEnd: string | undefined
}

/**
 * W3: CONCURRENCY starters call `start(i)` one after the other until W3_RUNS runs are started;
 * then `finished()` is polled every `pollMs` until it reports W3_RUNS (or the phase cap). Timed
 * from the first start call. For DBOS `direct` `start` runs the workflow to its end and
 * `finished` only reads a counter.
 */
export const runW3 = async (opts: {
  readonly start: (i: number) => Promise<unknown>
  readonly finished: () => Promise<number> | number
  readonly pollMs: number
}): Promise<W3Result> => {
  let startedMs = 0
  let polls = 0
  const walStart = await walLsn()
  const res = await measure(async () => {
    const t0 = now()
    const deadline = t0 + PHASE_CAP_MS
    let next = 0
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < W3_RUNS && now() < deadline) {
          const i = next++
          await opts.start(i)
        }
      })
    )
    startedMs = now() - t0
    for (;;) {
      const n = await opts.finished()
      polls++
      if (n >= W3_RUNS || now() > deadline) return n
      await sleep(opts.pollMs)
    }
  })
  const completed = res.value
  const walEnd = await walLsn()
  return {
    done: completed >= W3_RUNS,
    completed,
    allStartedMs: Math.round(startedMs),
    wallMs: Math.round(res.m.wallMs),
    runsPerSec: round2((completed / res.m.wallMs) * 1000),
    pgCpuS: round2(res.m.pgCpuS),
    nodeCpuS: round2(res.m.nodeCpuS),
    polls,
    walStart,
    walEnd
  }
}

// ---------------------------------------------------------------------------------------------
// The orchestrator

type Library = "ours" | "dbos" | "pgworkflows" | "raw"

interface Case {
  readonly key: string
  readonly library: Library
  readonly variant: string
  /** A diagnostic case's concurrency (starters and workers), on a pool that fits it; unset: CONCURRENCY. */
  readonly concurrency?: number
}

/** A run's result line, with the run database's counters and its WAL. */
type RunResult = ResultLine<RunCost>

const FILES: Record<Library, string> = { ours: "ours-workflows", dbos: "dbos", pgworkflows: "pgworkflows", raw: "raw" }
/** The database a run process of this library uses (`databaseName` in peers/common.ts). */
const dbOf = (library: Library, tag: string) => `bench_jobs_wf_${library}_${tag}`

const main = async () => {
  const { machine } = await import("./common.ts")
  const RUNS = env("RUNS", 3)
  const TUNED_RA = intList(process.env.BENCH_OURS_READ_AHEAD, [10]).filter((n) => n !== 0)
  // the headline is the library's defaults (no readAhead given, ours_runs_per_s); the tuned read-ahead (10, with
  // concurrency 10) beside it in the table and the JSON line (ours_tuned_runs_per_s)
  const REPORTED_RA = env("BENCH_OURS_REPORTED_RA", 10)
  const TAG = String(process.pid)
  const LIBRARIES: ReadonlyArray<Library> = ["ours", "dbos", "pgworkflows", "raw"]
  const OURS_RAS = [...new Set([0, ...TUNED_RA, REPORTED_RA])]
  // the diagnostic cases' concurrency (0: none), each on a pool of twice that
  const WIDE = env("BENCH_W3_WIDE", 2 * CONCURRENCY)
  const ALL_CASES: ReadonlyArray<Case> = [
    // the library's defaults (no readAhead given): the headline
    { key: "w3 ours default", library: "ours", variant: "default" },
    ...OURS_RAS.map((ra): Case => ({ key: `w3 ours ra${ra}`, library: "ours", variant: `ra${ra}` })),
    { key: "w3 dbos direct", library: "dbos", variant: "direct" },
    { key: "w3 pgworkflows workers10", library: "pgworkflows", variant: "workers10" },
    // the peer harness's raw SQL floor: a run row, three checkpoint commits, a completion
    { key: "w3 raw 3-step", library: "raw", variant: "3-step" },
    // diagnostics: twice the concurrency for both (W3's ratio moves with it; not the headline)
    ...(WIDE > 0
      ? [
          { key: `w3 ours default c${WIDE}`, library: "ours", variant: "default", concurrency: WIDE } as const,
          { key: `w3 dbos direct c${WIDE}`, library: "dbos", variant: "direct", concurrency: WIDE } as const
        ]
      : [])
  ]
  const CASES = selected(ALL_CASES)

  const runCase = (c: Case, run: number): Promise<RunResult | undefined> =>
    runCaseProcess<RunCost>({
      label: `${c.key} run ${run}`,
      file: fileURLToPath(new URL(`./peers/${FILES[c.library]}.ts`, import.meta.url)),
      args: ["w3", "--variant", c.variant, "--run", String(run)],
      env: {
        BENCH_JOBS_TAG: TAG,
        ...(c.concurrency === undefined
          ? {}
          : { BENCH_CONCURRENCY: String(c.concurrency), BENCH_POOL_MAX: String(2 * c.concurrency) })
      },
      database: dbOf(c.library, TAG),
      cost: (database, result) => runCost(database, result.result as { walStart?: unknown; walEnd?: unknown })
    })
  const allDatabases = LIBRARIES.map((l) => dbOf(l, TAG))
  onInterrupt(allDatabases)

  // ---- figures

  /** Commits per run: the database's xact_commit over the whole process, less the completion polls. */
  const commitsPerRun = (r: RunResult): number | undefined => {
    const completed = num(r, "result.completed")
    if (r.db === undefined || !completed) return undefined
    return (r.db.xactCommit - (num(r, "result.polls") ?? 0)) / completed
  }
  /** WAL bytes of the timed phase (the run database's own records when pg_waldump could read them) / runs finished. */
  const walPerRun = (r: RunResult): number | undefined => {
    const completed = num(r, "result.completed")
    if (r.db?.walBytes === undefined || !completed) return undefined
    return r.db.walBytes / completed
  }
  const rowWritesPerRun = (r: RunResult): number | undefined => {
    const completed = num(r, "result.completed")
    if (r.db === undefined || !completed) return undefined
    return (r.db.tupInserted + r.db.tupUpdated + r.db.tupDeleted) / completed
  }
  const cell = (rs: ReadonlyArray<RunResult>, f: (r: RunResult) => number | undefined, scale = 1) =>
    cellOf(defined(rs.map(f)).map((x) => x * scale))
  /** Runs whose check failed: a wrong output (n + 3), or not one completed row per step (effect-pgbus). */
  const checkNote = (rs: ReadonlyArray<RunResult>): string => {
    const bad = rs.filter((r) => {
      const expected = num(r, "result.expectedRuns")
      const correct = num(r, "result.runsCorrect")
      const steps = num(r, "result.stepRows")
      return (
        expected !== undefined &&
        ((correct !== undefined && correct !== expected) || (steps !== undefined && steps !== 3 * expected))
      )
    }).length
    return bad > 0 ? ` (check failed in ${bad})` : ""
  }
  const label = (c: Case): string =>
    c.library === "ours"
      ? "effect-pgbus (this repo)"
      : c.library === "dbos"
        ? `DBOS ${pkgVersion("@dbos-inc/dbos-sdk")}`
        : c.library === "raw"
          ? `raw SQL floor (postgres.js ${pkgVersion("postgres")})`
          : `pg-workflows ${pkgVersion("pg-workflows")} (pg-boss ${pkgVersion("pg-boss")})`
  const configLabel = (c: Case): string => {
    if (c.concurrency !== undefined) {
      const who = c.library === "ours" ? "defaults, worker concurrency" : `\`${c.variant}\`, starters`
      return `${who} **${c.concurrency}**, pool ${2 * c.concurrency} (diagnostic)`
    }
    if (c.library !== "ours") return `\`${c.variant}\``
    if (c.variant === "default") return "defaults (no readAhead given: the library decides) **= ours**"
    const ra = Number(c.variant.slice(2))
    return `read-ahead ${ra}${ra === REPORTED_RA ? " (tuned) = ours_tuned" : ""}`
  }

  // ---- runs

  const startedAt = now()
  const machineLine = machine()
  let pg = "unknown"
  try {
    pg = await serverInfo()
  } catch (e) {
    log(`could not read the server version: ${e instanceof Error ? e.message : String(e)}`)
  }
  log(`bench:workflows: ${CASES.length} cases × ${RUNS} runs, round-robin; databases ${dbOf("ours", TAG)} etc.`)
  const results = await roundRobin({
    cases: CASES,
    runs: RUNS,
    run: runCase,
    describe: (r) => `${r.result.runsPerSec} runs/s${r.result.done === false ? " (NOT DONE)" : ""}`
  })
  await Promise.all(allDatabases.map((d) => dropDatabase(d).catch(() => undefined)))
  const totalS = (now() - startedAt) / 1000

  const lines: Array<string> = []
  const p = (s = "") => lines.push(s)
  p("## bench:workflows: effect-pgbus vs DBOS vs pg-workflows (W3, same run, same server)")
  p()
  p(
    `- Machine: ${machineLine} (start); load at the end ${os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(" ")}`
  )
  p(`- PostgreSQL: ${pg} (server ${new URL(serverUrl).host})`)
  p(
    `- Settings: RUNS=${RUNS} (round-robin, medians [min-max]), ${W3_RUNS} runs of a 3-step no-op workflow (each step returns input + 1), ` +
      `${CONCURRENCY} concurrent starters, worker concurrency ${CONCURRENCY}, pool max ${POOL_MAX}, phase cap ${PHASE_CAP_MS} ms, ` +
      `silent loggers, every run a fresh Node process on a fresh database; timed from the first start call to the last run finished; total ${totalS.toFixed(0)} s`
  )
  p(
    `- effect-pgbus: \`Workflow.make\` with 3 \`Workflow.step\`s (each its own row and events, the default), \`ThreeSteps.start({ n })\`, ` +
      `\`Supervisor.runWith\` with one capsule on the workflow queue (concurrency ${CONCURRENCY}), LISTEN/NOTIFY on (default), ` +
      `completion = \`WorkflowClient.counts\` finished, polled every ${W3_POLL_MS} ms once every run is started; "ours" = its defaults, "ours_tuned" = read-ahead ${REPORTED_RA}.`
  )
  p(
    "- DBOS `direct`: `DBOS.registerWorkflow` with 3 `DBOS.runStep`s, each starter `await wf(i)` (runs in-process, checkpointed in " +
      `PostgreSQL, no queue), systemDatabasePoolSize ${POOL_MAX}.`
  )
  p(
    "- pg-workflows `workers10`: `WORKFLOW_RUN_WORKERS=10` (pg-boss work loops; the engine hard-codes batchSize 1 and a 0.5 s poll), " +
      "3 `step.run`s, `engine.startWorkflow`, completion polled every 10 ms on `workflow_runs.status` (as the harness)."
  )
  p(
    "- Commits / run = the run database's `xact_commit` over the whole run process (setup included, completion polls removed) / runs finished; " +
      "row writes / run = its `tup_inserted + tup_updated + tup_deleted` / runs finished. PG CPU = every `postgres` process over the timed phase, " +
      "Node CPU = the run process; peak RSS its `VmHWM`. Statements / run (effect-pgbus only, with BENCH_OURS_STATEMENTS=1): SQL statements its client ran in the timed " +
      "phase (one span each), completion polls removed, / runs finished; counting them installs a tracer, which makes the library open spans " +
      "it skips without one, so the measured runs go without it (n/a) unless it is set."
  )
  p()
  p(`### W3 durable workflows: ${W3_RUNS} runs of a 3-step no-op workflow (first start call to last run finished)`)
  p()
  p(
    "| library | configuration | runs | runs/s | wall s | all started after s | PG CPU s | Node CPU s | commits / run | WAL bytes / run | statements / run | row writes / run | peak RSS MiB |"
  )
  p("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
  for (const c of CASES) {
    const rs = results.get(c.key) ?? []
    p(
      `| ${label(c)} | ${configLabel(c)}${checkNote(rs)} | ${runsCell(rs, RUNS, (r) => r.result.done === false)} | ${cell(rs, (r) => num(r, "result.runsPerSec"))} | ` +
        `${cell(rs, (r) => num(r, "result.wallMs"), 1 / 1000)} | ${cell(rs, (r) => num(r, "result.allStartedMs"), 1 / 1000)} | ` +
        `${cell(rs, (r) => num(r, "result.pgCpuS"))} | ${cell(rs, (r) => num(r, "result.nodeCpuS"))} | ` +
        `${cell(rs, commitsPerRun)} | ${cell(rs, walPerRun)} | ${cell(rs, (r) => num(r, "result.statementsPerRun"))} | ${cell(rs, rowWritesPerRun)} | ` +
        `${cell(rs, (r) => r.peakRssMiB)} |`
    )
  }
  p()
  const get = (key: string) => results.get(key) ?? []
  const med = (rs: ReadonlyArray<RunResult>, f: (r: RunResult) => number | undefined) => {
    const xs = defined(rs.map(f))
    return xs.length === 0 ? undefined : median(xs)
  }
  const ours = get("w3 ours default")
  const tuned = get(`w3 ours ra${REPORTED_RA}`)
  const dbos = get("w3 dbos direct")
  const pgw = get("w3 pgworkflows workers10")
  const raw = get("w3 raw 3-step")
  const summary = {
    bench: "workflows",
    ours_runs_per_s: rounded(medianOf(ours, "result.runsPerSec"), 1),
    ours_tuned_runs_per_s: rounded(medianOf(tuned, "result.runsPerSec"), 1),
    dbos_runs_per_s: rounded(medianOf(dbos, "result.runsPerSec"), 1),
    pgworkflows_runs_per_s: rounded(medianOf(pgw, "result.runsPerSec"), 1),
    raw_runs_per_s: rounded(medianOf(raw, "result.runsPerSec"), 1),
    ours_commits_per_run: rounded(med(ours, commitsPerRun), 2),
    ours_wal_bytes_per_run: rounded(med(ours, walPerRun)),
    ours_tuned_commits_per_run: rounded(med(tuned, commitsPerRun), 2),
    ours_tuned_wal_bytes_per_run: rounded(med(tuned, walPerRun)),
    dbos_commits_per_run: rounded(med(dbos, commitsPerRun), 2),
    dbos_wal_bytes_per_run: rounded(med(dbos, walPerRun)),
    pgworkflows_commits_per_run: rounded(med(pgw, commitsPerRun), 2),
    pgworkflows_wal_bytes_per_run: rounded(med(pgw, walPerRun)),
    ours_wide_runs_per_s: rounded(medianOf(get(`w3 ours default c${WIDE}`), "result.runsPerSec"), 1),
    dbos_wide_runs_per_s: rounded(medianOf(get(`w3 dbos direct c${WIDE}`), "result.runsPerSec"), 1),
    wide_concurrency: WIDE
  }
  const exact = [...results.values()].flat().every((r) => r.db?.walExact !== false)
  p(
    "JSON: medians; ours = effect-pgbus at its defaults (no readAhead given), ours_tuned = read-ahead " +
      `${REPORTED_RA}, dbos = DBOS \`direct\`, pgworkflows = pg-workflows \`workers10\`, raw = the peer harness's raw SQL floor (a run row claimed with SKIP LOCKED, three checkpoint commits, a completion); *_commits_per_run and ` +
      `*_wal_bytes_per_run as in the table; ours_wide and dbos_wide = the diagnostic cases at concurrency ${WIDE} (BENCH_W3_WIDE; 0 leaves them out) (WAL ${exact ? "attributed to the run's database with pg_waldump" : "partly the server-wide LSN difference: pg_waldump could not read the WAL of some runs"}).`
  )
  p()
  process.stdout.write(`${lines.join("\n")}\n${JSON.stringify(summary)}\n`)
}

const isMain = process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)
if (isMain) await main()
