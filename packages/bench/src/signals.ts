/**
 * bench:signals (issue 5): SIG_RUNS (1,000) workflow runs each parked on a signal, then one
 * signal per run from SIG_SENDERS (10) concurrent senders; p50/p99 of "signal commit -> woken
 * step start" (performance.now() when the woken step's body starts - performance.now() when the
 * send call returned, its transaction committed; same process, same clock) and signals/s
 * (SIG_RUNS / first send -> every run finished). effect-pgbus, DBOS Transact 5.3.0 (`recv` /
 * `send`) and pg-workflows 0.15.0 (`step.waitFor` / `triggerEvent`) run in one session, on one
 * PostgreSQL server. Every run is its own Node process (packages/bench/src/peers/<library>-signals.ts)
 * on a freshly created database, dropped once the process has exited; runs go round-robin and the
 * table shows medians [min-max]. Diagnostic cases: effect-pgbus and DBOS with one sender (so no
 * backlog can build), and effect-pgbus with local dispatch off (`default-nolocal`: every woken step goes
 * through NOTIFY, read and claim, as for signals sent from a process without a worker of the queue;
 * in the JSON line as ours_nolocal_*). The off-process case (`default-offprocess`, ours_offprocess_*)
 * is that path for real: the senders are a Node process of their own without a worker
 * (peers/ours-signals-sender.ts), their times brought to the run process's clock.
 *
 *   npm run bench:signals                   # from the repository root (installs the peers first)
 *   RUNS=1 BENCH_ONLY='ours' npm run bench:signals
 *
 * Knobs (env): RUNS (3), BENCH_ONLY (regex on the case key), BENCH_SIGNALS_RUNS (1000),
 * BENCH_SIGNALS_SENDERS (10), BENCH_SENDER_CPUPROF (<file>: a V8 CPU profile of the off-process case's sends),
 * BENCH_SIGNALS_BY_ID (1: the off-process senders signal by run id,
 * `WorkflowClient.signal`, not through the ref), BENCH_SIGNALS_POLL_MS (completion reads, 5), BENCH_SIGNALS_SETTLE_MS
 * (quiet between "all parked" and the first send, 1000), BENCH_OURS_READ_AHEAD (fixed read-aheads
 * tried besides the library's default, none; 0 was the default before the adaptive read-ahead), BENCH_CONCURRENCY (worker concurrency, 10), BENCH_POOL_MAX (20),
 * BENCH_SIGNALS_RATE (signals/s over all senders, 0 = as fast as the senders go; a fixed rate compares
 * latencies at the same offered load, which a faster send would otherwise raise by queueing),
 * BENCH_PHASE_CAP_MS (120000), BENCH_RUN_TIMEOUT_MS (per run, 300000), BENCH_RESULTS (append every
 * run's JSON to this file), DATABASE_URL, BENCH_OURS_STATEMENTS=1 (count effect-pgbus's statements
 * per signal: installs a counting tracer, which makes the library open the spans it skips without
 * one; a diagnostic, not for measuring).
 *
 * This file also holds the driver the run processes share (`park`, `runSignals`,
 * `makeStartRecorder`); it runs the orchestrator only when it is the program itself, and loads
 * nothing heavy for the peers.
 *
 * The last line of stdout is one JSON object:
 * {"bench":"signals","ours_p50_ms":N,"ours_p99_ms":N,"ours_signals_per_s":N,"ours_call_p50_ms":N,...,"dbos_p50_ms":N,...,
 *  "pgworkflows_signals_per_s":N}
 */
import os from "node:os"
import { resolve } from "node:path"
import { fileURLToPath } from "node:url"
import {
  cellOf,
  defined,
  intList,
  log,
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
  latencySummary,
  measure,
  monitorClient,
  now,
  PHASE_CAP_MS,
  POOL_MAX,
  percentile,
  pkgVersion,
  round2,
  serverInfo,
  serverUrl,
  sleep,
  waitUntil
} from "./peers/common.ts"

/** Runs parked, and signals sent (one per run). */
export const SIG_RUNS = env("BENCH_SIGNALS_RUNS", 1_000)
/** Concurrent senders. */
export const SIG_SENDERS = env("BENCH_SIGNALS_SENDERS", CONCURRENCY)
/** How often the count of finished runs is read once every signal is sent. */
export const SIG_POLL_MS = env("BENCH_SIGNALS_POLL_MS", 5)
/** Quiet time between "all parked" and the first signal. */
export const SIG_SETTLE_MS = env("BENCH_SIGNALS_SETTLE_MS", 1_000)
/** Signals per second over all senders (0: each sender sends as soon as its last send returned). */
export const SIG_RATE = env("BENCH_SIGNALS_RATE", 0)

/**
 * Records when the woken code of run i starts (`performance.now()`, the clock of the senders).
 * The first start of a run counts; later ones (a redelivery) are counted as repeats.
 */
export const makeStartRecorder = (n: number = SIG_RUNS) => {
  const startedAt = new Float64Array(n).fill(Number.NaN)
  let started = 0
  let repeats = 0
  let wrong = 0
  return {
    startedAt,
    get started() {
      return started
    },
    get repeats() {
      return repeats
    },
    /** Payloads that did not carry the run's own index. */
    get wrong() {
      return wrong
    },
    /** Call first thing in the woken code, with the run's index and the signal's index. */
    record(i: number, t: number, signalled?: number) {
      if (signalled !== undefined && signalled !== i) wrong++
      if (!(i >= 0 && i < n)) return
      if (Number.isNaN(startedAt[i]!)) {
        startedAt[i] = t
        started++
      } else repeats++
    }
  }
}

export type StartRecorder = ReturnType<typeof makeStartRecorder>

/**
 * The parking phase: SIG_SENDERS starters call `start(i)` for every run, then `parked()` is read
 * every 20 ms until it reports SIG_RUNS (capped by the phase cap); then SIG_SETTLE_MS of quiet.
 */
export const park = async (opts: {
  readonly start: (i: number) => Promise<unknown>
  readonly parked: () => Promise<number> | number
}) => {
  const t0 = now()
  let next = 0
  await Promise.all(
    Array.from({ length: SIG_SENDERS }, async () => {
      while (next < SIG_RUNS) {
        const i = next++
        await opts.start(i)
      }
    })
  )
  const startedMs = now() - t0
  let parked = 0
  const ok = await waitUntil(
    async () => {
      parked = await opts.parked()
      return parked >= SIG_RUNS
    },
    PHASE_CAP_MS,
    20
  )
  const parkMs = now() - t0
  if (ok) await sleep(SIG_SETTLE_MS)
  return { ok, parked, startedMs: Math.round(startedMs), parkMs: Math.round(parkMs) }
}

/** What one signals measurement gives. */
export interface SignalsResult {
  readonly done: boolean
  /** Runs finished at the end of the phase. */
  readonly completed: number
  /** Woken code started (first time per run). */
  readonly woken: number
  readonly repeats: number
  readonly wrongPayload: number
  /** signal commit -> woken code start, ms. */
  readonly latencyMs: ReturnType<typeof latencySummary> & { readonly min: number; readonly p90: number }
  /** Latencies below zero (the woken code started before the sender's await resumed). */
  readonly negative: number
  /** The send call itself (call -> returned), ms. */
  readonly sendMs: ReturnType<typeof latencySummary>
  /** The send call's start -> woken code start, ms: what a caller sees, the call's own queueing included. */
  readonly callToStartMs: ReturnType<typeof latencySummary>
  readonly allSentMs: number
  readonly wallMs: number
  readonly signalsPerSec: number
  readonly pgCpuS: number
  readonly nodeCpuS: number
  readonly polls: number
}

/** When each run's send was called and returned (the senders' clock; NaN: not sent), and each call's duration. */
export interface SendTimes {
  readonly calledAt: Float64Array
  readonly sentAt: Float64Array
  readonly sendMs: Array<number>
  /** First send -> the last send returned. */
  readonly allSentMs: number
}

/**
 * SIG_SENDERS senders call `send(i)` one after the other, in `order`, until every run has its
 * signal or `capMs` has passed (`performance.now()` taken when the call returns, i.e. once its
 * transaction has committed); at SIG_RATE > 0, send k is due k / rate after the first.
 */
export const sendAll = async (
  send: (i: number) => Promise<unknown>,
  order: ReadonlyArray<number>,
  capMs: number = PHASE_CAP_MS
): Promise<SendTimes> => {
  const n = order.reduce((m, i) => Math.max(m, i + 1), SIG_RUNS)
  const calledAt = new Float64Array(n).fill(Number.NaN)
  const sentAt = new Float64Array(n).fill(Number.NaN)
  const sendMs: Array<number> = []
  const t0 = now()
  const deadline = t0 + capMs
  let next = 0
  await Promise.all(
    Array.from({ length: SIG_SENDERS }, async () => {
      while (next < order.length && now() < deadline) {
        const k = next++
        const i = order[k]!
        // a fixed rate: send k is due at t0 + k / rate (a late sender sends at once)
        if (SIG_RATE > 0) {
          const due = t0 + (k * 1000) / SIG_RATE
          const wait = due - now()
          if (wait > 0) await sleep(wait)
        }
        const t = now()
        calledAt[i] = t
        await send(i)
        const back = now()
        sentAt[i] = back
        sendMs.push(back - t)
      }
    })
  )
  return { calledAt, sentAt, sendMs, allSentMs: now() - t0 }
}

/**
 * The timed phase: the runs get their signals (`sendAll` with `send`, or `senders`: senders
 * elsewhere, their times in this process's clock); then `finished()` is read every SIG_POLL_MS
 * until it reports SIG_RUNS. Timed from the first send to the read that saw the last run
 * finished. Latency of run i = the recorder's start of its woken code - the return of its send.
 */
export const runSignals = async (opts: {
  readonly send?: (i: number) => Promise<unknown>
  /** Senders in another process: they send in `order` and give back their times. */
  readonly senders?: (order: ReadonlyArray<number>) => Promise<SendTimes>
  readonly finished: () => Promise<number> | number
  readonly recorder: StartRecorder
  /** Called with the time each send returned, once every signal is sent. */
  readonly onSent?: (i: number, t: number) => void
  /** Order in which the runs get their signal (default 0..SIG_RUNS-1). */
  readonly order?: ReadonlyArray<number>
}): Promise<SignalsResult> => {
  const order = opts.order ?? Array.from({ length: SIG_RUNS }, (_, i) => i)
  const { send, senders } = opts
  let times: SendTimes | undefined
  let polls = 0
  const res = await measure(async () => {
    const deadline = now() + PHASE_CAP_MS
    if (senders !== undefined) times = await senders(order)
    else if (send !== undefined) times = await sendAll(send, order)
    else throw new Error("runSignals: give send or senders")
    for (;;) {
      const n = await opts.finished()
      polls++
      if (n >= SIG_RUNS || now() > deadline) return n
      await sleep(SIG_POLL_MS)
    }
  })
  const { calledAt, sentAt, sendMs, allSentMs } = times!
  if (opts.onSent) for (let i = 0; i < sentAt.length; i++) if (!Number.isNaN(sentAt[i]!)) opts.onSent(i, sentAt[i]!)
  const latencies: Array<number> = []
  const callToStart: Array<number> = []
  for (let i = 0; i < SIG_RUNS; i++) {
    const s = sentAt[i]!
    const b = opts.recorder.startedAt[i]!
    if (!Number.isNaN(s) && !Number.isNaN(b)) latencies.push(b - s)
    if (!Number.isNaN(calledAt[i]!) && !Number.isNaN(b)) callToStart.push(b - calledAt[i]!)
  }
  const sorted = [...latencies].sort((a, b) => a - b)
  const completed = res.value
  return {
    done: completed >= SIG_RUNS && latencies.length === SIG_RUNS,
    completed,
    woken: opts.recorder.started,
    repeats: opts.recorder.repeats,
    wrongPayload: opts.recorder.wrong,
    latencyMs: {
      ...latencySummary(latencies),
      min: round2(sorted[0] ?? Number.NaN),
      p90: round2(percentile(sorted, 90))
    },
    negative: latencies.filter((x) => x < 0).length,
    sendMs: latencySummary(sendMs),
    callToStartMs: latencySummary(callToStart),
    allSentMs: Math.round(allSentMs),
    wallMs: Math.round(res.m.wallMs),
    signalsPerSec: round2((Math.min(completed, SIG_RUNS) / res.m.wallMs) * 1000),
    pgCpuS: round2(res.m.pgCpuS),
    nodeCpuS: round2(res.m.nodeCpuS),
    polls
  }
}

// ---------------------------------------------------------------------------------------------
// The orchestrator

type Library = "ours" | "dbos" | "pgworkflows"

interface Case {
  readonly key: string
  readonly library: Library
  readonly variant: string
  /** Concurrent senders of this case. */
  readonly senders: number
}

/** A run's result line (a peers/<library>-signals.ts process), with the run database's counters. */
type RunResult = ResultLine<DbStats>

interface DbStats {
  readonly xactCommit: number
  readonly tupWritten: number
}

const FILES: Record<Library, string> = {
  ours: "ours-signals",
  dbos: "dbos-signals",
  pgworkflows: "pgworkflows-signals"
}
/** The database a run process of this library uses (`databaseName` in peers/common.ts). */
const dbOf = (library: Library, tag: string) => `bench_jobs_sig_${library}_${tag}`

const main = async () => {
  const { machine } = await import("./common.ts")

  const RUNS = env("RUNS", 3)
  const TUNED_RA = intList(process.env.BENCH_OURS_READ_AHEAD, [])
  const TAG = String(process.pid)
  const LIBRARIES: ReadonlyArray<Library> = ["ours", "dbos", "pgworkflows"]
  const ALL_CASES: ReadonlyArray<Case> = [
    // at its defaults (no readAhead given: the library decides), then any fixed read-ahead asked for
    { key: "signals ours default", library: "ours", variant: "default", senders: SIG_SENDERS },
    ...[...new Set(TUNED_RA)].map(
      (ra): Case => ({ key: `signals ours ra${ra}`, library: "ours", variant: `ra${ra}`, senders: SIG_SENDERS })
    ),
    { key: "signals dbos recv", library: "dbos", variant: "recv", senders: SIG_SENDERS },
    { key: "signals pgworkflows workers10", library: "pgworkflows", variant: "workers10", senders: SIG_SENDERS },
    // diagnostics, not in the JSON line: one sender, so no backlog can build (the path's own latency)
    { key: "signals ours default senders1", library: "ours", variant: "default", senders: 1 },
    // local dispatch off: the path of signals sent from a process that runs no worker of the queue
    { key: "signals ours default nolocal", library: "ours", variant: "default-nolocal", senders: SIG_SENDERS },
    // the senders in a Node process of their own, which runs no worker: the path itself, with
    // the worker's event loop and pool to itself
    { key: "signals ours default offprocess", library: "ours", variant: "default-offprocess", senders: SIG_SENDERS },
    { key: "signals dbos recv senders1", library: "dbos", variant: "recv", senders: 1 }
  ]
  const CASES = selected(ALL_CASES).filter((c) => !(c.key.endsWith("senders1") && SIG_SENDERS === 1))

  const admin = async <A>(f: (client: Awaited<ReturnType<typeof monitorClient>>) => Promise<A>): Promise<A> => {
    const client = await monitorClient(new URL(serverUrl).pathname.slice(1) || "postgres")
    try {
      return await f(client)
    } finally {
      await client.end()
    }
  }

  /** The database's commit and row-write counters, read once every backend of the run has exited. */
  const dbStats = (database: string): Promise<DbStats | undefined> =>
    admin(async (c) => {
      const deadline = now() + 10_000
      while (now() < deadline) {
        const { rows } = await c.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1",
          [database]
        )
        if ((rows[0]?.n ?? 0) === 0) break
        await sleep(20)
      }
      const { rows } = await c.query<Record<string, string>>(
        `SELECT xact_commit::text AS c, (tup_inserted + tup_updated + tup_deleted)::text AS w
           FROM pg_stat_database WHERE datname = $1`,
        [database]
      )
      const row = rows[0]
      return row === undefined ? undefined : { xactCommit: Number(row.c), tupWritten: Number(row.w) }
    })

  const runCase = (c: Case, run: number): Promise<RunResult | undefined> =>
    runCaseProcess<DbStats>({
      label: `${c.key} run ${run}`,
      file: fileURLToPath(new URL(`./peers/${FILES[c.library]}.ts`, import.meta.url)),
      args: ["signals", "--variant", c.variant, "--run", String(run)],
      env: { BENCH_JOBS_TAG: TAG, BENCH_SIGNALS_SENDERS: String(c.senders) },
      database: dbOf(c.library, TAG),
      cost: (database) => dbStats(database)
    })
  const allDatabases = LIBRARIES.map((l) => dbOf(l, TAG))
  onInterrupt(allDatabases)

  // ---- figures

  const perRun = (r: RunResult, f: (db: DbStats) => number): number | undefined => {
    const completed = num(r, "result.completed")
    return r.db === undefined || !completed ? undefined : f(r.db) / completed
  }
  const cell = (rs: ReadonlyArray<RunResult>, f: (r: RunResult) => number | undefined, scale = 1): string =>
    cellOf(defined(rs.map(f)).map((x) => x * scale))
  /**
   * A run is good when every run finished and every woken code ran once with its own signal
   * (effect-pgbus also: one completed step per run, every signal consumed).
   */
  const bad = (r: RunResult): boolean => {
    const expected = num(r, "result.expectedRuns")
    const off = (path: string) => {
      const x = num(r, path)
      return x !== undefined && x !== expected
    }
    return (
      r.result.done !== true ||
      num(r, "result.runsCorrect") !== expected ||
      (num(r, "result.repeats") ?? 0) > 0 ||
      off("result.stepRows") ||
      off("result.signalsConsumed")
    )
  }
  const label = (c: Case): string =>
    (c.library === "ours"
      ? `effect-pgbus (this repo), ${readAheadLabel(c.variant.replace(/-(nolocal|offprocess)$/, ""))}${
          c.variant.endsWith("-nolocal")
            ? ", **local dispatch off** (diagnostic)"
            : c.variant.endsWith("-offprocess")
              ? ", **senders in another process**"
              : ""
        }`
      : c.library === "dbos"
        ? `DBOS ${pkgVersion("@dbos-inc/dbos-sdk")} \`recv\``
        : `pg-workflows ${pkgVersion("pg-workflows")} \`workers10\``) +
    (c.senders === SIG_SENDERS ? "" : `, **${c.senders} sender${c.senders === 1 ? "" : "s"}** (diagnostic)`)
  const readAheadLabel = (variant: string): string =>
    variant === "default" ? "defaults (no readAhead given: the library decides)" : `read-ahead ${variant.slice(2)}`

  // ---- runs

  const startedAt = now()
  const machineLine = machine()
  let pg = "unknown"
  try {
    pg = await serverInfo()
  } catch (e) {
    log(`could not read the server version: ${e instanceof Error ? e.message : String(e)}`)
  }
  log(`bench:signals: ${CASES.length} cases × ${RUNS} runs, round-robin; databases ${dbOf("ours", TAG)} etc.`)
  const results = await roundRobin({
    cases: CASES,
    runs: RUNS,
    run: runCase,
    describe: (r) =>
      `p50 ${num(r, "result.latencyMs.p50")} ms, p99 ${num(r, "result.latencyMs.p99")} ms, ${num(r, "result.signalsPerSec")} signals/s${bad(r) ? " (NOT DONE OR NOT CORRECT)" : ""}`
  })
  await Promise.all(allDatabases.map((d) => dropDatabase(d).catch(() => undefined)))
  const totalS = (now() - startedAt) / 1000

  const lines: Array<string> = []
  const p = (s = "") => lines.push(s)
  p("## bench:signals: effect-pgbus vs DBOS vs pg-workflows (same run, same server)")
  p()
  p(
    `- Machine: ${machineLine} (start); load at the end ${os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(" ")}`
  )
  p(`- PostgreSQL: ${pg} (server ${new URL(serverUrl).host})`)
  p(
    `- Settings: RUNS=${RUNS} (round-robin, medians [min-max]), ${SIG_RUNS} runs parked on a signal (all ${SIG_RUNS} checked parked, then ${SIG_SETTLE_MS} ms of quiet), ` +
      `then one signal per run from ${SIG_SENDERS} concurrent senders in the same process (each awaits its send, then sends the next), worker concurrency ${CONCURRENCY}, ` +
      `pool max ${POOL_MAX}, phase cap ${PHASE_CAP_MS} ms, silent loggers, every run a fresh Node process on a fresh database; total ${totalS.toFixed(0)} s`
  )
  p(
    "- Latency = `performance.now()` when the woken code starts − `performance.now()` when the send call returned (its transaction committed), " +
      "same process, same clock; signals/s = runs / (first send → the completion read that saw every run finished, " +
      `read every ${SIG_POLL_MS} ms once all are sent).`
  )
  p(
    '- effect-pgbus: `Workflow.step("got", body, { waitFor: "go" })` (the signal declared with a Schema), `SignalBench.start({ i })`, ' +
      '`handle.signal("go", { i })`; woken code = the step\'s body; `Supervisor.runWith` with one capsule on the workflow queue, LISTEN/NOTIFY on (default).'
  )
  p(
    '- DBOS `recv`: `DBOS.startWorkflow(wf)(i)`, the workflow blocked in `DBOS.recv("go", { timeoutSeconds: 600 })` in this process; ' +
      '`DBOS.send(workflowID, { i }, "go")`; woken code = the line after `recv` (DBOS resumes the blocked call, no re-execution).'
  )
  p(
    '- pg-workflows `workers10`: `step.waitFor("wait", { eventName: "go" })` then `step.run("got", body)`, `engine.triggerEvent`; ' +
      "woken code = that step's body; 10 pg-boss work loops, batchSize 1 and a 0.5 s poll (hard-coded by the engine)."
  )
  p()
  p(`### ${SIG_RUNS} parked runs, ${SIG_RUNS} signals (ms; signal commit → woken code start)`)
  p()
  p(
    "| library | runs | p50 | p90 | p99 | max | signals/s | all sent after s | wall s | send call p50 | send call p99 | call → woken p50 | call → woken p99 | returns after the woken start | PG CPU s | Node CPU s | statements / signal | commits / run | row writes / run | peak RSS MiB |"
  )
  p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
  for (const c of CASES) {
    const rs = results.get(c.key) ?? []
    p(
      `| ${label(c)} | ${runsCell(rs, RUNS, bad, "not done or not correct")} | ${cell(rs, (r) => num(r, "result.latencyMs.p50"))} | ${cell(rs, (r) => num(r, "result.latencyMs.p90"))} | ` +
        `${cell(rs, (r) => num(r, "result.latencyMs.p99"))} | ${cell(rs, (r) => num(r, "result.latencyMs.max"))} | ` +
        `${cell(rs, (r) => num(r, "result.signalsPerSec"))} | ${cell(rs, (r) => num(r, "result.allSentMs"), 1 / 1000)} | ` +
        `${cell(rs, (r) => num(r, "result.wallMs"), 1 / 1000)} | ${cell(rs, (r) => num(r, "result.sendMs.p50"))} | ` +
        `${cell(rs, (r) => num(r, "result.sendMs.p99"))} | ${cell(rs, (r) => num(r, "result.callToStartMs.p50"))} | ` +
        `${cell(rs, (r) => num(r, "result.callToStartMs.p99"))} | ${cell(rs, (r) => num(r, "result.negative"))} | ${cell(rs, (r) => num(r, "result.pgCpuS"))} | ${cell(rs, (r) => num(r, "result.nodeCpuS"))} | ` +
        `${cell(rs, (r) => num(r, "result.statementsPerSignal"))} | ${cell(rs, (r) => perRun(r, (d) => d.xactCommit))} | ` +
        `${cell(rs, (r) => perRun(r, (d) => d.tupWritten))} | ${cell(rs, (r) => r.peakRssMiB)} |`
    )
  }
  p()
  p(
    "Send call = the send API call itself (call → returned). Call → woken = the send call's start → the woken code's start: " +
      "what the caller sees, with the time a sender spends queued in its own call (the headline p50/p99 start at the call's return). " +
      "Returns after the woken start = signals whose send call returned after their woken code had started (a negative latency): the return stands for the commit, " +
      "and a busy sender sees its commit late. PG CPU = every `postgres` process, Node CPU = the run process (and the sender process, senders in another process), over the timed phase. " +
      "Statements / signal (effect-pgbus only, with BENCH_OURS_STATEMENTS=1): SQL statements it ran in the timed phase (sends and woken steps; " +
      "the completion reads removed) / signals; counting them installs a tracer, which makes the library open spans it skips without one, " +
      "so the measured runs go without it (n/a) unless it is set. " +
      "Commits and row writes / run: the run database's `xact_commit` and `tup_inserted + tup_updated + tup_deleted` over the whole process " +
      "(setup, parking and the signals) / runs."
  )
  const offRuns = results.get("signals ours default offprocess") ?? []
  if (offRuns.length > 0) {
    p()
    p(
      "Senders in another process: the senders are a Node process of their own (`ours-signals-sender.ts`, the library at its defaults, no supervisor), " +
        "`SignalBenchRef.signal(id, \"go\", { i })` (the workflow's ref: its name and Schemas, no body); their times reach the run process through the machine's monotonic clock (`process.hrtime`). " +
        "Their process's callbacks ran late by " +
        `${cell(offRuns, (r) => num(r, "result.sender.loopDelayMs.p50"))} ms at p50 and ${cell(offRuns, (r) => num(r, "result.sender.loopDelayMs.p99"))} ms at p99 ` +
        "(`monitorEventLoopDelay`): about that much of each signal's commit → woken start happens before its send call returns, so the headline figures of this row " +
        "are low by up to that much, and call → woken is its bound from above."
    )
  }
  p()
  const get = (key: string) => results.get(key) ?? []
  const ours = get("signals ours default")
  const dbos = get("signals dbos recv")
  const pgw = get("signals pgworkflows workers10")
  /** The JSON line's figures of one case under `prefix` (nothing when the case did not run). */
  const figures = (prefix: string, rs: ReadonlyArray<RunResult>): Record<string, unknown> =>
    rs.length === 0
      ? {}
      : {
          [`${prefix}_p50_ms`]: rounded(medianOf(rs, "result.latencyMs.p50"), 2),
          [`${prefix}_p99_ms`]: rounded(medianOf(rs, "result.latencyMs.p99"), 2),
          [`${prefix}_signals_per_s`]: rounded(medianOf(rs, "result.signalsPerSec"), 1),
          [`${prefix}_call_p50_ms`]: rounded(medianOf(rs, "result.callToStartMs.p50"), 2),
          [`${prefix}_call_p99_ms`]: rounded(medianOf(rs, "result.callToStartMs.p99"), 2)
        }
  const offprocess = get("signals ours default offprocess")
  const summary: Record<string, unknown> = {
    bench: "signals",
    ...figures("ours", ours),
    // local dispatch off: a sender in a process without a worker of the queue, emulated
    ...figures("ours_nolocal", get("signals ours default nolocal")),
    // the senders in a process of their own, without a worker of the queue
    ...figures("ours_offprocess", offprocess),
    ...(offprocess.length === 0
      ? {}
      : {
          ours_offprocess_negative: rounded(medianOf(offprocess, "result.negative"), 0),
          ours_offprocess_sender_loop_delay_p50_ms: rounded(medianOf(offprocess, "result.sender.loopDelayMs.p50"), 2)
        }),
    ...figures("dbos", dbos)
  }
  if (pgw.length > 0) {
    summary.pgworkflows_p50_ms = rounded(medianOf(pgw, "result.latencyMs.p50"), 2)
    summary.pgworkflows_p99_ms = rounded(medianOf(pgw, "result.latencyMs.p99"), 2)
    summary.pgworkflows_signals_per_s = rounded(medianOf(pgw, "result.signalsPerSec"), 1)
  }
  p(
    "JSON: medians over runs; ours = effect-pgbus at its defaults (no readAhead given), dbos = DBOS `recv`, pgworkflows = pg-workflows `workers10`; " +
      "*_call_* = call → woken."
  )
  p()
  process.stdout.write(`${lines.join("\n")}\n${JSON.stringify(summary)}\n`)
}

const isMain = process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)
if (isMain) await main()
