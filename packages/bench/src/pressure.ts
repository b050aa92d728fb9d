/**
 * bench:pressure (issue 24, item 4): effect-pgbus under MVCC pressure, against itself clean.
 *
 * Two scenarios on one fresh database, one worker process (this one), library defaults unless
 * BENCH_PRESSURE_READ_AHEAD is set:
 *
 * 1. `saturated` (W1-like): the producer keeps a backlog of at least BENCH_PRESSURE_BACKLOG jobs
 *    queued, so the workers run flat out. First clean, then with one REPEATABLE READ reader
 *    holding its snapshot (vacuum can remove no row deleted after it began). Throughput held /
 *    clean is the figure (target ≥ 0.9).
 * 2. `steady` (PlanetScale's 2026 scenario at this machine's scale): a steady load of
 *    BENCH_PRESSURE_RATE jobs/s while long read transactions overlap (three readers, one after
 *    another, started a third of their length apart), then the load goes on after the last one
 *    ends. Reported per window: throughput, claim latency p50/p99/max (the claim statements' own
 *    time, as the client sees it), backlog, dead tuples of the queue table; how long after
 *    the last reader ends throughput and backlog are back (within 10 % of the rate, backlog
 *    under one second's worth), whether every later 5-s window stays so to the end, and the
 *    worst 5-s window after the last reader. Per second: the slowest claim too. Every window
 *    also gives its commits per job (`pg_stat_database`, sampled each second) and WAL bytes per
 *    job (`pg_current_wal_lsn()` each second: the server's, every database's; during the bench
 *    its database is the only busy one).
 *
 * Short by default (~2 minutes). BENCH_PRESSURE_LONG=1: the 10-minute version (saturated 60 s
 * clean + 120 s held; steady 600 s with three 120-s readers started 60 s apart, the first at
 * 120 s).
 *
 * A probe runs `EXPLAIN (ANALYZE, BUFFERS)` of the full-walk claim (`vt <= now() ORDER BY msg_id
 * LIMIT 11 FOR UPDATE SKIP LOCKED`, the claim before issue 24) in a rolled-back transaction: the
 * buffers it touches show how many dead rows a claim from the start of the queue would walk. It
 * has its own connection and loop, once a second at most and resting nine times its own duration
 * after each run: behind a held snapshot one probe takes seconds, and in the producer's loop it
 * starved the workers (the held window's 0.50 of 2026-12-04 was that, see the README).
 *
 * Per window of the saturated scenario the report also gives where the time went: every SQL
 * statement kind as the client times it (a tracer records every statement span), this process's
 * CPU per job, the producer's and the probe's time, and the buffers of a 100-row enqueue and
 * archive (`EXPLAIN (ANALYZE, BUFFERS)`, rolled back) at the window's end.
 *
 * Run it against a server with autovacuum on (packages/bench/README.md says how to make a second
 * cluster for it); when autovacuum is off the first line printed is a warning.
 *
 *   npm run bench:pressure
 *   BENCH_PRESSURE_LONG=1 npm run bench:pressure
 *
 * Knobs (env): BENCH_PRESSURE_LONG, BENCH_PRESSURE_RATE (jobs/s; unset: half the saturated clean
 * throughput of the same run, 500 when only steady runs), BENCH_PRESSURE_BACKLOG
 * (5000), BENCH_PRESSURE_READ_AHEAD (unset: the library's default), BENCH_PRESSURE_ONLY
 * (`saturated` or `steady`), BENCH_CONCURRENCY (10), BENCH_POOL_MAX (20), DATABASE_URL.
 * The last line of stdout is one JSON object (see the end of this file).
 */
import { Effect, type Exit, Fiber, Layer, ManagedRuntime, References, Schema, Tracer } from "effect"
import { Job, JobClient, PgBus, Registry, Supervisor } from "../../../src/index.ts"
import { benchConfig, exitOnWorkersFailure, machine } from "./common.ts"
import {
  CONCURRENCY,
  dropDatabase,
  env,
  monitorClient,
  now,
  type PgClientLike,
  POOL_MAX,
  percentile,
  resetDatabase,
  round2,
  serverInfo,
  sleep
} from "./peers/common.ts"

const LONG = process.env.BENCH_PRESSURE_LONG === "1"
// unset: half the saturated clean throughput measured just before (the scenario's "near half of
// W1's rate"), 500 jobs/s when the saturated scenario is not run
const RATE_SET = process.env.BENCH_PRESSURE_RATE !== undefined && process.env.BENCH_PRESSURE_RATE !== ""
let RATE = env("BENCH_PRESSURE_RATE", 500)
const BACKLOG = env("BENCH_PRESSURE_BACKLOG", 5000)
const READ_AHEAD = process.env.BENCH_PRESSURE_READ_AHEAD
const ONLY = process.env.BENCH_PRESSURE_ONLY
const S = 1000
// the full-walk probe rests this many times its own duration after each run
const PROBE_IDLE_FACTOR = 9
// saturated: clean, then held
const SAT_CLEAN_MS = (LONG ? 60 : 15) * S
const SAT_HELD_MS = (LONG ? 120 : 25) * S
// steady: readers of READER_MS, started READER_MS/2 apart (long: 120 s, 60 s apart), the first at
// STEADY_PRE_MS; the load goes on STEADY_POST_MS after the last one ends
const READER_MS = (LONG ? 120 : 20) * S
const READER_GAP_MS = (LONG ? 60 : 10) * S
const STEADY_PRE_MS = (LONG ? 120 : 15) * S
const STEADY_TOTAL_MS = LONG ? 600 * S : STEADY_PRE_MS + READER_GAP_MS * 2 + READER_MS + 25 * S

const DB = `bench_pressure_${process.pid}`
const log = (line: string) => process.stderr.write(`${line}\n`)

// ---- statement timing: every SQL statement's time as the client sees it (span start to end,
// including the wait for a pooled connection), by kind; the claim's is the headline latency
type StatementKind = "claim" | "enqueue" | "archive" | "other"
const kindOf = (text: string): StatementKind =>
  text.includes("SKIP LOCKED")
    ? "claim"
    : /INSERT INTO "?[a-z_]+"?\."?a_/.test(text)
      ? "archive"
      : /INSERT INTO "?[a-z_]+"?\."?q_/.test(text)
        ? "enqueue"
        : "other"
const otherLabel = (text: string): string => text.replace(/\s+/g, " ").trim().slice(0, 48)
interface StatementSamples {
  at: Array<number>
  ms: Array<number>
}
let statementSamples = new Map<string, StatementSamples>()
const origin = performance.timeOrigin
class StatementSpan extends Tracer.NativeSpan {
  override end(endTime: bigint, exit: Exit.Exit<unknown, unknown>): void {
    if (this.status._tag === "Started") {
      const text = this._attributes?.get("db.query.text")
      if (typeof text === "string") {
        const kind = kindOf(text)
        const key = kind === "other" ? `other: ${otherLabel(text)}` : kind
        let s = statementSamples.get(key)
        if (s === undefined) {
          s = { at: [], ms: [] }
          statementSamples.set(key, s)
        }
        s.at.push(Number(endTime) / 1e6 - origin)
        s.ms.push(Number(endTime - this.status.startTime) / 1e6)
      }
    }
    super.end(endTime, exit)
  }
}
const claimTracer = Tracer.make({ span: (options) => new StatementSpan(options) })

let handled = 0
const Payload = Schema.Struct({ i: Schema.Number })
const Work = Job.make("PressureJob", { payload: Payload, queue: "bench" }, () =>
  Effect.sync(() => {
    handled++
  })
)

const quiet = Layer.succeed(References.MinimumLogLevel, "Warn")
const tracing = Layer.succeed(Tracer.Tracer, claimTracer)

interface Sample {
  readonly t: number
  /** the time the sample covers (ms): a second, a little more when the event loop was busy */
  readonly dtMs: number
  readonly done: number
  readonly backlog: number
  readonly deadTuples: number
  readonly probeBuffers: number
  readonly probeMs: number
  readonly readers: number
  /** this process's CPU (user + system) in the second, ms */
  readonly cpuMs: number
  /** the producer's time in enqueue calls in the second, ms */
  readonly enqueueMs: number
  /** the probe's time in the second (its statements, as the client sees them), ms */
  readonly probeClientMs: number
  /** The slowest claim statement that ended in this second (ms; 0 when none did). */
  readonly claimMaxMs: number
  /** WAL the server wrote in the second (every database's: the bench's is the only busy one), bytes */
  readonly walBytes: number
  /** The database's commits in the second (`pg_stat_database.xact_commit`, a second late at most) */
  readonly commits: number
}

/** An open REPEATABLE READ transaction that has taken its snapshot. */
const openReader = async (): Promise<PgClientLike> => {
  const c = await monitorClient(DB)
  await c.query("BEGIN ISOLATION LEVEL REPEATABLE READ")
  await c.query("SELECT count(*) FROM pgbus.queues")
  return c
}

const AUTOVACUUM_OFF_WARNING =
  "**WARNING: autovacuum is off on this server**: dead tuples are never reclaimed during the run, so they grow with the jobs done and the claim's cost with them; the figures describe the server, not the library. Run against a cluster with autovacuum on (packages/bench/README.md, bench:pressure)."

const main = async () => {
  // said first, before minutes of run: a server without autovacuum makes every figure moot
  const server = await serverInfo()
  if (server.includes("autovacuum=off")) log(AUTOVACUUM_OFF_WARNING)
  await resetDatabase(DB)
  const runtime = ManagedRuntime.make(
    Layer.mergeAll(quiet, tracing, PgBus.layerFrom(benchConfig(DB, { poolSize: POOL_MAX })).pipe(Layer.provide(quiet)))
  )
  const runP = <A, E>(effect: Effect.Effect<A, E, PgBus.PgBus>): Promise<A> =>
    runtime.runPromise(
      effect.pipe(
        Effect.provideService(References.MinimumLogLevel, "Warn"),
        Effect.provideService(Tracer.Tracer, claimTracer)
      )
    )
  const mon = await monitorClient(DB)
  const probeClient = await monitorClient(DB)
  const readers: Array<PgClientLike> = []
  try {
    await runP(PgBus.migrate)
    await runP(JobClient.use((client) => client.ensureQueue("bench")))
    const rel = (
      await mon.query<{ n: string }>(
        "SELECT c.relname AS n FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = 'pgbus' AND c.relname LIKE 'q\\_%bench' AND c.relkind = 'r'"
      )
    ).rows[0]?.n
    if (rel === undefined) throw new Error("no queue table for bench")
    const capsule = {
      name: "bench",
      queues: ["bench"],
      concurrency: CONCURRENCY,
      ...(READ_AHEAD === undefined ? {} : { readAhead: Number(READ_AHEAD) })
    }
    const fiber = runtime.runFork(
      Supervisor.runWith({ capsules: [capsule] }).pipe(
        Effect.provide(Registry.layer([Work])),
        Effect.provideService(References.MinimumLogLevel, "Warn"),
        Effect.provideService(Tracer.Tracer, claimTracer)
      )
    )
    exitOnWorkersFailure(fiber)

    let enqueued = 0
    let enqueueMs = 0
    const enqueue = async (n: number) => {
      const payloads = Array.from({ length: n }, (_, k) => ({ i: enqueued + k }))
      enqueued += n
      const t = now()
      await runP(Work.enqueueMany(payloads))
      enqueueMs += now() - t
    }
    let probeClientMs = 0

    // the probe has its own connection and loop: behind a held snapshot one probe walks every
    // dead row (seconds), and it must neither stop the producer nor take a core from the run
    const probe = async (): Promise<{ buffers: number; ms: number }> => {
      const t = now()
      try {
        await probeClient.query("BEGIN")
        const { rows } = await probeClient.query<{ "QUERY PLAN": Array<Record<string, unknown>> }>(
          `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT msg_id FROM pgbus.${rel} WHERE vt <= now() ORDER BY msg_id LIMIT 11 FOR UPDATE SKIP LOCKED`
        )
        await probeClient.query("ROLLBACK")
        const top = rows[0]?.["QUERY PLAN"]?.[0] as { Plan: Record<string, number>; "Execution Time": number }
        return {
          buffers: (top.Plan["Shared Hit Blocks"] ?? 0) + (top.Plan["Shared Read Blocks"] ?? 0),
          ms: top["Execution Time"]
        }
      } catch (e) {
        await probeClient.query("ROLLBACK").catch(() => undefined)
        log(`probe: ${e instanceof Error ? e.message : String(e)}`)
        return { buffers: Number.NaN, ms: Number.NaN }
      } finally {
        probeClientMs += now() - t
      }
    }
    /** Buffers and time of one `EXPLAIN (ANALYZE, BUFFERS)` in a rolled-back transaction. */
    const explainBuffers = async (statement: string): Promise<string> => {
      try {
        await mon.query("BEGIN")
        const { rows } = await mon.query<{ "QUERY PLAN": Array<Record<string, unknown>> }>(
          `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${statement}`
        )
        await mon.query("ROLLBACK")
        const top = rows[0]?.["QUERY PLAN"]?.[0] as { Plan: Record<string, number>; "Execution Time": number }
        return `${(top.Plan["Shared Hit Blocks"] ?? 0) + (top.Plan["Shared Read Blocks"] ?? 0)} buffers, ${round2(top["Execution Time"])} ms`
      } catch (e) {
        await mon.query("ROLLBACK").catch(() => undefined)
        return `failed: ${e instanceof Error ? e.message : String(e)}`
      }
    }
    const arc = rel.replace(/^q_/, "a_")
    // the library's enqueue and archive, 100 messages each (the archive takes the newest queued,
    // which no worker holds yet), rolled back
    const explainWrites = async () => {
      const ids = (
        await mon.query<{ id: string }>(`SELECT msg_id::text AS id FROM pgbus.${rel} ORDER BY msg_id DESC LIMIT 100`)
      ).rows.map((r) => r.id)
      const insert = `INSERT INTO pgbus.${rel} (enqueued_at, vt, message, headers) SELECT now(), now(), jsonb_build_object('i', g), NULL FROM generate_series(1, 100) g`
      return {
        // three in a row: the first may pay for finding heap pages with room (see the README)
        enqueue: `${await explainBuffers(insert)} / ${await explainBuffers(insert)} / ${await explainBuffers(insert)}`,
        archive: await explainBuffers(
          `WITH d AS (DELETE FROM pgbus.${rel} WHERE msg_id = ANY('{${ids.join(",")}}'::int8[]) RETURNING *) INSERT INTO pgbus.${arc} (msg_id, read_ct, enqueued_at, archived_at, vt, message, headers) SELECT msg_id, read_ct, enqueued_at, now(), vt, message, headers FROM d RETURNING msg_id`
        )
      }
    }
    const deadTuples = async (): Promise<number> =>
      Number(
        (
          await mon.query<{ n: string }>(`SELECT n_dead_tup::text AS n FROM pg_stat_user_tables WHERE relname = $1`, [
            rel
          ])
        ).rows[0]?.n ?? Number.NaN
      )

    /** The server's WAL position (bytes) and the database's commits so far. */
    const writes = async (): Promise<{ readonly wal: number; readonly commits: number }> => {
      const { rows } = await mon.query<{ w: string; c: string }>(
        `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text AS w,
           (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())::text AS c`
      )
      return { wal: Number(rows[0]?.w ?? Number.NaN), commits: Number(rows[0]?.c ?? Number.NaN) }
    }

    /**
     * Runs `ms` of a scenario in three loops: `tick` every 20 ms (the producer), a sample every
     * second (counters and `pg_stat_user_tables` only, cheap), and the full-walk probe, which
     * starts at most once a second and waits PROBE_IDLE_FACTOR times its own duration after each
     * run (so it holds a server core at most 1 / (1 + PROBE_IDLE_FACTOR) of the time).
     */
    const runFor = async (
      ms: number,
      tick: (elapsed: number) => Promise<void>,
      samples: Array<Sample>,
      t0: number
    ): Promise<void> => {
      const end = now() + ms
      let last = { buffers: Number.NaN, ms: Number.NaN }
      const producer = async () => {
        while (now() < end) {
          await tick(now() - t0)
          await sleep(20)
        }
      }
      const prober = async () => {
        while (now() < end) {
          const started = now()
          last = await probe()
          const took = now() - started
          const wait = Math.max(1000 - took, PROBE_IDLE_FACTOR * took)
          await sleep(Math.min(wait, Math.max(0, end - now())))
        }
      }
      const sampler = async () => {
        let lastWrites = await writes()
        let lastAt = now()
        let lastDone = handled
        let lastCpu = process.cpuUsage()
        let lastEnqueueMs = enqueueMs
        let lastProbeMs = probeClientMs
        let lastClaim = statementSamples.get("claim")?.ms.length ?? 0
        while (now() < end) {
          await sleep(Math.min(1000, Math.max(0, end - now())))
          // a few very slow claims hide in a window's p99: each second shows its slowest
          const claimMs = statementSamples.get("claim")?.ms ?? []
          const claimMaxMs = round2(claimMs.slice(lastClaim).reduce((m, c) => Math.max(m, c), 0))
          lastClaim = claimMs.length
          const at = now()
          const cpu = process.cpuUsage(lastCpu)
          const w = await writes()
          const done = handled - lastDone
          lastCpu = process.cpuUsage()
          lastDone = handled
          samples.push({
            t: Math.round((at - t0) / 100) / 10,
            dtMs: at - lastAt,
            done,
            backlog: enqueued - handled,
            deadTuples: await deadTuples(),
            probeBuffers: last.buffers,
            probeMs: round2(last.ms),
            readers: readers.length,
            cpuMs: (cpu.user + cpu.system) / 1000,
            enqueueMs: enqueueMs - lastEnqueueMs,
            probeClientMs: probeClientMs - lastProbeMs,
            claimMaxMs,
            walBytes: w.wal - lastWrites.wal,
            commits: w.commits - lastWrites.commits
          })
          lastWrites = w
          lastAt = at
          lastEnqueueMs = enqueueMs
          lastProbeMs = probeClientMs
        }
      }
      await Promise.all([producer(), prober(), sampler()])
    }

    const windowOf = (samples: ReadonlyArray<Sample>, from: number, to: number, t0: number) => {
      const ss = samples.filter((s) => s.t > from / 1000 && s.t <= to / 1000)
      const inWindow = (s: StatementSamples | undefined) => {
        const ms: Array<number> = []
        if (s !== undefined)
          for (let i = 0; i < s.at.length; i++) if (s.at[i]! - t0 > from && s.at[i]! - t0 <= to) ms.push(s.ms[i]!)
        return ms.sort((a, b) => a - b)
      }
      const claims = inWindow(statementSamples.get("claim"))
      // the samples' own durations: a sample may cover more than a second
      const secs = ss.reduce((n, s) => n + s.dtMs, 0) / 1000 || 1
      const done = ss.reduce((n, s) => n + s.done, 0)
      const statements = [...statementSamples.entries()]
        .map(([kind, s]) => {
          const ms = inWindow(s)
          const total = ms.reduce((a, b) => a + b, 0)
          return {
            kind,
            perS: round2(ms.length / secs),
            msPerS: round2(total / secs),
            msPer1kJobs: done > 0 ? round2((total / done) * 1000) : null,
            p50: ms.length ? round2(percentile(ms, 50)) : null,
            p99: ms.length ? round2(percentile(ms, 99)) : null
          }
        })
        .filter((s) => s.perS > 0)
        .sort((a, b) => b.msPerS - a.msPerS)
      return {
        statements,
        cpuMsPer1kJobs: done > 0 ? round2((ss.reduce((n, s) => n + s.cpuMs, 0) / done) * 1000) : null,
        cpuPct: round2(ss.reduce((n, s) => n + s.cpuMs, 0) / secs / 10),
        enqueueMsPerS: round2(ss.reduce((n, s) => n + s.enqueueMs, 0) / secs),
        probeMsPerS: round2(ss.reduce((n, s) => n + s.probeClientMs, 0) / secs),
        jobsPerS: Math.round(done / secs),
        commitsPerJob: done > 0 ? Math.round((ss.reduce((n, s) => n + s.commits, 0) / done) * 1000) / 1000 : null,
        walBytesPerJob: done > 0 ? Math.round(ss.reduce((n, s) => n + s.walBytes, 0) / done) : null,
        claimP50Ms: claims.length ? round2(percentile(claims, 50)) : null,
        claimP99Ms: claims.length ? round2(percentile(claims, 99)) : null,
        claimMaxMs: claims.length ? round2(claims.at(-1)!) : null,
        claims: claims.length,
        backlogMax: Math.max(0, ...ss.map((s) => s.backlog)),
        backlogEnd: ss.at(-1)?.backlog ?? null,
        deadTuplesMax: Math.max(0, ...ss.map((s) => s.deadTuples).filter(Number.isFinite)),
        probeBuffersMax: Math.max(0, ...ss.map((s) => s.probeBuffers).filter(Number.isFinite)),
        probeMsMax: Math.max(0, ...ss.map((s) => s.probeMs).filter(Number.isFinite))
      }
    }

    const out: Record<string, unknown> = {}
    const lines: Array<string> = []
    const p = (s = "") => lines.push(s)
    const row = (name: string, w: ReturnType<typeof windowOf>) =>
      p(
        `| ${name} | ${w.jobsPerS} | ${w.claimP50Ms ?? "n/a"} | ${w.claimP99Ms ?? "n/a"} | ${w.claimMaxMs ?? "n/a"} | ${w.backlogMax} | ${w.backlogEnd ?? "n/a"} | ${w.deadTuplesMax} | ${w.probeBuffersMax} | ${w.probeMsMax} | ${w.commitsPerJob ?? "n/a"} | ${w.walBytesPerJob ?? "n/a"} |`
      )
    const header = () => {
      p(
        "| window | jobs/s | claim p50 ms | claim p99 ms | claim max ms | backlog max | backlog at end | dead tuples max (q_ table) | full-walk probe buffers max | full-walk probe ms max | commits / job | WAL bytes / job (server's) |"
      )
      p("|---|---|---|---|---|---|---|---|---|---|---|---|")
    }

    /** Where a window's time went: this process's CPU, the producer, the probe, every statement kind. */
    const breakdown = (name: string, w: ReturnType<typeof windowOf>, writes?: { enqueue: string; archive: string }) => {
      p(
        `${name}: Node CPU ${w.cpuMsPer1kJobs ?? "n/a"} ms per 1k jobs (${w.cpuPct} % of one core); producer in enqueue ${w.enqueueMsPerS} ms/s; full-walk probe ${w.probeMsPerS} ms/s${writes === undefined ? "" : `; EXPLAIN (ANALYZE, BUFFERS) at the window's end, 100 rows: enqueue ${writes.enqueue}, archive ${writes.archive}`}`
      )
      p()
      p("| statement | per s | ms per s (summed) | ms per 1k jobs | p50 ms | p99 ms |")
      p("|---|---|---|---|---|---|")
      for (const st of w.statements)
        p(
          `| ${st.kind} | ${st.perS} | ${st.msPerS} | ${st.msPer1kJobs ?? "n/a"} | ${st.p50 ?? "n/a"} | ${st.p99 ?? "n/a"} |`
        )
      p()
    }

    // ---- 1. saturated
    if (ONLY === undefined || ONLY === "saturated") {
      log(`saturated: backlog ≥ ${BACKLOG}, ${SAT_CLEAN_MS / S} s clean, then ${SAT_HELD_MS / S} s with one reader`)
      await enqueue(BACKLOG)
      await sleep(2000) // warm up
      statementSamples = new Map()
      const samples: Array<Sample> = []
      const t0 = now()
      const topUp = async () => {
        const backlog = enqueued - handled
        if (backlog < BACKLOG) await enqueue(Math.min(BACKLOG, BACKLOG * 2 - backlog))
      }
      await runFor(SAT_CLEAN_MS, topUp, samples, t0)
      const cleanWrites = await explainWrites()
      readers.push(await openReader())
      await runFor(SAT_HELD_MS, topUp, samples, t0)
      const heldWrites = await explainWrites()
      await readers.pop()?.end()
      const clean = windowOf(samples, 0, SAT_CLEAN_MS, t0)
      const held = windowOf(samples, SAT_CLEAN_MS, SAT_CLEAN_MS + SAT_HELD_MS, t0)
      const ratio = clean.jobsPerS > 0 ? round2(held.jobsPerS / clean.jobsPerS) : null
      p(`### saturated (W1-like, backlog kept ≥ ${BACKLOG}): one REPEATABLE READ reader held ${SAT_HELD_MS / S} s`)
      p()
      header()
      row(`clean (${SAT_CLEAN_MS / S} s)`, clean)
      row(`reader held (${SAT_HELD_MS / S} s)`, held)
      p()
      p(`held / clean throughput: **${ratio}**`)
      p()
      breakdown("clean", clean, cleanWrites)
      breakdown("reader held", held, heldWrites)
      p(
        "Per second (t s: jobs done, backlog, dead tuples, probe buffers, readers open, Node CPU ms, enqueue ms, probe ms):"
      )
      p()
      p("```")
      p(
        samples
          .map(
            (s) =>
              `${s.t}: ${s.done} ${s.backlog} ${s.deadTuples} ${s.probeBuffers} ${s.readers} ${Math.round(s.cpuMs)} ${Math.round(s.enqueueMs)} ${Math.round(s.probeClientMs)}`
          )
          .join("\n")
      )
      p("```")
      p()
      if (!RATE_SET && clean.jobsPerS > 0) RATE = Math.max(50, Math.round(clean.jobsPerS / 2))
      out.saturated_clean_jobs_per_s = clean.jobsPerS
      out.saturated_held_jobs_per_s = held.jobsPerS
      out.saturated_ratio = ratio
      out.saturated_clean_claim_p99_ms = clean.claimP99Ms
      out.saturated_held_claim_p99_ms = held.claimP99Ms
      out.saturated_dead_tuples_max = held.deadTuplesMax
      out.saturated_clean_commits_per_job = clean.commitsPerJob
      out.saturated_clean_wal_bytes_per_job = clean.walBytesPerJob
      out.saturated_held_wal_bytes_per_job = held.walBytesPerJob
      // drain before the next scenario; let autovacuum clear the dead rows of this one
      while (enqueued - handled > 0) await sleep(50)
      await mon.query(`VACUUM pgbus.${rel}`).catch(() => undefined)
    }

    // ---- 2. steady
    if (ONLY === undefined || ONLY === "steady") {
      const starts = [0, 1, 2].map((k) => STEADY_PRE_MS + k * READER_GAP_MS)
      const lastEnd = starts[2]! + READER_MS
      log(
        `steady: ${RATE} jobs/s for ${STEADY_TOTAL_MS / S} s; readers of ${READER_MS / S} s at ${starts.map((s) => s / S).join(", ")} s`
      )
      statementSamples = new Map()
      const samples: Array<Sample> = []
      const t0 = now()
      let sent = 0
      const open: Array<{ end: number; c: PgClientLike }> = []
      let startedReaders = 0
      const tick = async (elapsed: number) => {
        const due = Math.floor((elapsed / 1000) * RATE) - sent
        if (due > 0) {
          sent += due
          await enqueue(due)
        }
        if (startedReaders < starts.length && elapsed >= starts[startedReaders]!) {
          const c = await openReader()
          readers.push(c)
          open.push({ end: starts[startedReaders]! + READER_MS, c })
          startedReaders++
        }
        for (const r of [...open]) {
          if (elapsed >= r.end) {
            open.splice(open.indexOf(r), 1)
            readers.splice(readers.indexOf(r.c), 1)
            await r.c.end()
          }
        }
      }
      await runFor(STEADY_TOTAL_MS, tick, samples, t0)
      const before = windowOf(samples, 0, STEADY_PRE_MS, t0)
      const during = windowOf(samples, STEADY_PRE_MS, lastEnd, t0)
      const after = windowOf(samples, lastEnd, STEADY_TOTAL_MS, t0)
      // recovered: the first second after the last reader from which a 5-s window runs within
      // 10 % of the rate and the backlog stays under one second's worth. A first recovery is not
      // enough (the 10-minute run of 2026-12-04 recovered at once, then collapsed 80 s later):
      // every later 5-s window must hold too, and the worst one of the after period is shown.
      const post = samples.filter((s) => s.t > lastEnd / 1000)
      const windows = post.slice(0, Math.max(0, post.length - 4)).map((s, i) => {
        const w = post.slice(i, i + 5)
        const rate = w.reduce((n, x) => n + x.done, 0) / 5
        return {
          t: s.t,
          rate,
          backlog: Math.max(...w.map((x) => x.backlog)),
          ok: Math.abs(rate - RATE) <= RATE * 0.1 && w.every((x) => x.backlog <= RATE)
        }
      })
      const first = windows.findIndex((w) => w.ok)
      const recoveredS = first < 0 ? null : round2(windows[first]!.t - lastEnd / 1000)
      const broken = first < 0 ? [] : windows.slice(first).filter((w) => !w.ok)
      const heldToEnd = first >= 0 && broken.length === 0
      const worst = windows.reduce<(typeof windows)[number] | undefined>(
        (m, w) => (m === undefined || w.rate < m.rate ? w : m),
        undefined
      )
      p(
        `### steady (${RATE} jobs/s; three REPEATABLE READ readers of ${READER_MS / S} s started ${READER_GAP_MS / S} s apart, the first at ${STEADY_PRE_MS / S} s; ${STEADY_TOTAL_MS / S} s in all)`
      )
      p()
      header()
      row(`before (0-${STEADY_PRE_MS / S} s)`, before)
      row(`during (${STEADY_PRE_MS / S}-${lastEnd / S} s)`, during)
      row(`after (${lastEnd / S}-${STEADY_TOTAL_MS / S} s)`, after)
      p()
      p(
        `recovered (5-s throughput within 10 % of the rate, backlog ≤ 1 s of load) ${recoveredS === null ? "**not within the run**" : `${recoveredS} s after the last reader ended`}; held to the end: ${heldToEnd ? "yes" : `**no**${broken.length > 0 ? ` (${broken.length} later 5-s windows out of bounds, the first from ${broken[0]!.t} s)` : ""}`}`
      )
      p()
      if (worst !== undefined)
        p(
          `worst 5-s window after the last reader: ${Math.round(worst.rate)} jobs/s (${Math.round((worst.rate / RATE) * 100)} % of the rate) from ${worst.t} s, backlog up to ${worst.backlog}`
        )
      p()
      p("Per second (t s: jobs done, backlog, dead tuples, probe buffers, readers open, slowest claim ms):")
      p()
      p("```")
      p(
        samples
          .map((s) => `${s.t}: ${s.done} ${s.backlog} ${s.deadTuples} ${s.probeBuffers} ${s.readers} ${s.claimMaxMs}`)
          .join("\n")
      )
      p("```")
      p()
      Object.assign(out, {
        steady_rate: RATE,
        steady_before_jobs_per_s: before.jobsPerS,
        steady_during_jobs_per_s: during.jobsPerS,
        steady_after_jobs_per_s: after.jobsPerS,
        steady_before_commits_per_job: before.commitsPerJob,
        steady_before_wal_bytes_per_job: before.walBytesPerJob,
        steady_during_wal_bytes_per_job: during.walBytesPerJob,
        steady_before_claim_p99_ms: before.claimP99Ms,
        steady_during_claim_p99_ms: during.claimP99Ms,
        steady_after_claim_p99_ms: after.claimP99Ms,
        steady_backlog_max: during.backlogMax,
        steady_dead_tuples_max: Math.max(during.deadTuplesMax, after.deadTuplesMax),
        steady_after_claim_max_ms: after.claimMaxMs,
        steady_recovered_after_s: recoveredS,
        steady_held_to_end: heldToEnd,
        steady_after_worst_5s_jobs_per_s: worst === undefined ? null : Math.round(worst.rate),
        steady_after_worst_5s_at_s: worst?.t ?? null
      })
    }

    await runtime.runPromise(Fiber.interrupt(fiber))
    const header0 = [
      `## bench:pressure: effect-pgbus under MVCC pressure${LONG ? " (10-minute version)" : " (short)"}`,
      "",
      ...(server.includes("autovacuum=off") ? [AUTOVACUUM_OFF_WARNING, ""] : []),
      `- Machine: ${machine()}`,
      `- PostgreSQL: ${server}`,
      `- effect-pgbus: one capsule on \`bench\`, concurrency ${CONCURRENCY}, read-ahead ${READ_AHEAD ?? "default"}, pool max ${POOL_MAX}, no-op handler, archive on success (default). Statement times (claim latency among them) = each SQL statement's span as the client sees it, wait for a pooled connection included (a tracer records every statement span: the library makes spans when one is installed, in every window alike). The full-walk probe runs on its own connection, off the producer's loop, at most ${Math.round(100 / (1 + PROBE_IDLE_FACTOR))} % of the time.`,
      ""
    ]
    process.stdout.write(
      `${[...header0, ...lines].join("\n")}\n${JSON.stringify({ bench: "pressure", long: LONG, ...out })}\n`
    )
  } finally {
    for (const r of readers) await r.end().catch(() => undefined)
    await mon.end().catch(() => undefined)
    await probeClient.end().catch(() => undefined)
    await runtime.dispose()
    await dropDatabase(DB).catch(() => undefined)
  }
}

await main()
process.exit(0)
