/**
 * Shared helpers for bench:jobs: one run = one Node process on a freshly created database.
 * Adapted from the team's peer harness (shared/bench/peers/src/lib/common.ts): the same knobs,
 * the same timing of every phase, the same workload drivers, so the three libraries are
 * measured by one piece of code. Differences: `pg` (node-postgres) instead of postgres.js for the
 * admin and monitor connections, `DATABASE_URL` for the server, and a result line on stdout
 * instead of a results file.
 *
 * The peers and `pg` are dependencies of packages/bench only (installed by `npm run bench:jobs`),
 * not of the library: they are loaded with a dynamic `import()` of a non-literal specifier and
 * typed by the small interfaces below, so the repository's typecheck passes without them.
 */
import { readdirSync, readFileSync } from "node:fs"
import { performance } from "node:perf_hooks"

/** Prefix of the one stdout line a run prints with its result (read by jobs.ts). */
export const RESULT_MARK = "BENCH_JOBS_RESULT "

/** A non-negative number from the environment, or `fallback` when unset. */
export const env = (key: string, fallback: number): number => {
  const raw = process.env[key]
  if (raw === undefined || raw === "") return fallback
  const n = Number(raw)
  if (!Number.isFinite(n) || n < 0) throw new Error(`${key} must be a non-negative number, got ${raw}`)
  return n
}

/** Connection pool size given to every library. */
export const POOL_MAX = env("BENCH_POOL_MAX", 20)
/** Worker concurrency for every library. */
export const CONCURRENCY = env("BENCH_CONCURRENCY", 10)
export const W1_JOBS = env("BENCH_W1_JOBS", 20_000)
export const ENQ_SINGLE_JOBS = env("BENCH_ENQ_SINGLE_JOBS", 2_000)
export const W2_JOBS = env("BENCH_W2_JOBS", 1_000)
export const W2_SPACING_MS = env("BENCH_W2_SPACING_MS", 5)
export const W2_WARMUP_JOBS = env("BENCH_W2_WARMUP_JOBS", 20)
/** Hard cap on a measured processing phase, so no run can hang the session. */
export const PHASE_CAP_MS = env("BENCH_PHASE_CAP_MS", 120_000)
/** W2: how long to wait for stragglers after the last enqueue. */
export const W2_WAIT_MS = env("BENCH_W2_WAIT_MS", 30_000)

/** The server; each run swaps the database name. */
export const serverUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"

export const urlFor = (database: string): string => {
  const url = new URL(serverUrl)
  url.pathname = `/${database}`
  return url.toString()
}

/** Name of this run's database: `bench_jobs_<library>_<tag>` (tag: the orchestrator's pid). */
export const databaseName = (library: string): string => {
  const tag = process.env.BENCH_JOBS_TAG ?? String(process.pid)
  const name = `bench_jobs_${library}_${tag}`
  if (!/^[a-z0-9_]+$/.test(name)) throw new Error(`bad database name ${name}`)
  return name
}

export const now = (): number => performance.now()
export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))
export const round2 = (x: number): number => Math.round(x * 100) / 100

// ---------------------------------------------------------------------------------------------
// node-postgres, loaded at run time

/** The part of a `pg.Client` used here. */
export interface PgClientLike {
  connect(): Promise<unknown>
  query<R = Record<string, unknown>>(text: string, values?: ReadonlyArray<unknown>): Promise<{ rows: Array<R> }>
  end(): Promise<void>
  on(event: "error", listener: (error: Error) => void): unknown
}

interface PgModule {
  readonly Client: new (options: { connectionString: string }) => PgClientLike
}

/** Loads a package from packages/bench/node_modules (resolved from this file). */
export const load = async <T>(specifier: string): Promise<T> => {
  const mod = (await import(specifier)) as { default?: unknown }
  return mod as T
}

const pgModule = async (): Promise<PgModule> => {
  const mod = await load<{ default: PgModule }>("pg")
  return mod.default
}

/** A single node-postgres connection, used only to observe (never on the hot path). */
export const monitorClient = async (database: string): Promise<PgClientLike> => {
  const { Client } = await pgModule()
  const client = new Client({ connectionString: urlFor(database) })
  client.on("error", (e) => console.error("bench monitor:", e.message))
  await client.connect()
  return client
}

const admin = async <A>(f: (client: PgClientLike) => Promise<A>): Promise<A> => {
  const client = await monitorClient(new URL(serverUrl).pathname.slice(1) || "postgres")
  try {
    return await f(client)
  } finally {
    await client.end()
  }
}

/** Drops and re-creates a database, so every run starts from an empty one. */
export const resetDatabase = (name: string): Promise<void> =>
  admin(async (c) => {
    await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await c.query(`CREATE DATABASE ${name}`)
  })

/** Drops a database (end of a run). */
export const dropDatabase = (name: string): Promise<void> =>
  admin(async (c) => {
    await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
  })

/**
 * End of a run. Under jobs.ts (BENCH_JOBS_TAG set) the orchestrator drops the database once this
 * process has exited, so no pool of the library is still connected. Run alone, the process drops
 * it itself; `WITH (FORCE)` then terminates the libraries' idle pooled connections, whose pools
 * report it as an 'error' event (node-postgres throws one without a listener): that one error,
 * caused by the drop, is ignored.
 */
export const finishRun = async (database: string): Promise<void> => {
  if (process.env.BENCH_JOBS_TAG !== undefined) return
  process.on("uncaughtException", (error: Error & { code?: string }) => {
    if (error.code === "57P01") return
    console.error(error)
    process.exit(1)
  })
  await dropDatabase(database)
}

/**
 * The server's current WAL insert position (`pg_current_wal_lsn()`), read on an admin connection
 * (a read writes no WAL). Taken at the start and end of a timed phase; the orchestrator turns the
 * two marks into WAL bytes (cost.ts). NaN-safe: undefined when the server cannot be asked.
 */
export const walLsn = (): Promise<string | undefined> =>
  admin(async (c) => (await c.query<{ l: string }>("SELECT pg_current_wal_lsn()::text AS l")).rows[0]?.l).catch(
    () => undefined
  )

/** Server version and the settings that matter for commits. */
export const serverInfo = (): Promise<string> =>
  admin(async (c) => {
    const { rows } = await c.query<{ v: string; s: string }>(
      `SELECT version() AS v, 'shared_buffers=' || current_setting('shared_buffers') || ' synchronous_commit=' ||
         current_setting('synchronous_commit') || ' fsync=' || current_setting('fsync') || ' max_connections=' ||
         current_setting('max_connections') || ' autovacuum=' || current_setting('autovacuum') AS s`
    )
    return `${rows[0]?.v ?? "?"}; ${rows[0]?.s ?? ""}`
  })

/** Installed version of a package of packages/bench/node_modules. */
export const pkgVersion = (name: string): string => {
  try {
    const url = new URL(`../../node_modules/${name}/package.json`, import.meta.url)
    return (JSON.parse(readFileSync(url, "utf8")) as { version: string }).version
  } catch {
    return "?"
  }
}

// ---------------------------------------------------------------------------------------------
// CPU and memory probes (Linux /proc)

const CLK_TCK = 100

/**
 * CPU seconds used so far by every process named `postgres` (postmaster, backends, background
 * workers): utime+stime plus cutime+cstime of reaped children. Take a delta around a phase.
 * With `database`: only the processes serving that database (its backends and autovacuum
 * workers, named by their process title), which other work on a shared server does not move
 * (backends that exit during the phase are missed).
 */
export const pgCpuSeconds = (database?: string): number => {
  let ticks = 0
  let dirs: Array<string>
  try {
    dirs = readdirSync("/proc")
  } catch {
    return Number.NaN
  }
  for (const d of dirs) {
    const c = d.charCodeAt(0)
    if (c < 48 || c > 57) continue
    let s: string
    try {
      s = readFileSync(`/proc/${d}/stat`, "utf8")
    } catch {
      continue
    }
    const lp = s.indexOf("(")
    const rp = s.lastIndexOf(")")
    if (s.slice(lp + 1, rp) !== "postgres") continue
    if (database !== undefined) {
      let title: string
      try {
        title = readFileSync(`/proc/${d}/cmdline`, "utf8")
      } catch {
        continue
      }
      if (!title.includes(` ${database} `)) continue
    }
    const f = s.slice(rp + 2).split(" ")
    ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])
  }
  return ticks / CLK_TCK
}

/** Peak resident set size of this process (VmHWM), MiB. */
export const peakRssMiB = (): number => {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"))
    return m ? Math.round(Number(m[1]) / 1024) : Number.NaN
  } catch {
    return Number.NaN
  }
}

/** CPU seconds (user+system) of this process so far. */
export const nodeCpuSeconds = (): number => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1e6
}

/** Wall time, Postgres CPU and Node CPU around an async phase. */
export const measure = async <T>(fn: () => Promise<T>, database?: string) => {
  const pg0 = pgCpuSeconds()
  const db0 = database === undefined ? Number.NaN : pgCpuSeconds(database)
  const n0 = nodeCpuSeconds()
  const t0 = now()
  const value = await fn()
  const wallMs = now() - t0
  const pgDbCpuS = database === undefined ? undefined : pgCpuSeconds(database) - db0
  return { value, m: { wallMs, pgCpuS: pgCpuSeconds() - pg0, pgDbCpuS, nodeCpuS: nodeCpuSeconds() - n0 } }
}

// ---------------------------------------------------------------------------------------------
// Statistics

export const percentile = (sorted: ReadonlyArray<number>, p: number): number => {
  if (sorted.length === 0) return Number.NaN
  const idx = (p / 100) * (sorted.length - 1)
  const lo = Math.floor(idx)
  const hi = Math.ceil(idx)
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (idx - lo)
}

export const latencySummary = (samples: ReadonlyArray<number>) => {
  const s = [...samples].sort((a, b) => a - b)
  return {
    n: s.length,
    p50: round2(percentile(s, 50)),
    p95: round2(percentile(s, 95)),
    p99: round2(percentile(s, 99)),
    max: round2(s[s.length - 1] ?? Number.NaN),
    mean: round2(s.reduce((a, b) => a + b, 0) / (s.length || 1))
  }
}

/** Resolves true when check() holds (polled every `everyMs`), false after capMs. */
export const waitUntil = async (
  check: () => boolean | Promise<boolean>,
  capMs: number,
  everyMs = 5
): Promise<boolean> => {
  const deadline = now() + capMs
  while (now() < deadline) {
    if (await check()) return true
    await sleep(everyMs)
  }
  return false
}

// ---------------------------------------------------------------------------------------------
// Workload drivers (identical for every library)

/**
 * Times a W1 processing phase: start() starts the workers; the phase ends when the handler has
 * seen `total` jobs AND the database holds no unfinished job (remaining() === 0), i.e. the
 * completions are committed, not merely handled. Capped: then the partial rate is reported.
 */
export const timeProcessing = async (opts: {
  readonly total: number
  readonly handled: () => number
  readonly start: () => Promise<void>
  readonly remaining: () => Promise<number>
  readonly capMs?: number
  /** The run's database: its own backends' CPU is reported too (pgDbCpuMsPerKJob). */
  readonly database?: string
}) => {
  const capMs = opts.capMs ?? PHASE_CAP_MS
  const walStart = await walLsn()
  const pg0 = pgCpuSeconds()
  const db0 = opts.database === undefined ? Number.NaN : pgCpuSeconds(opts.database)
  const n0 = nodeCpuSeconds()
  const t0 = now()
  await opts.start()
  const deadline = t0 + capMs
  let done = false
  // when the handler had seen its first job, a tenth and nine tenths of them (sampled every 2 ms):
  // the steady rate between the last two, beside the phase's, shows what start-up costs
  let firstAt: number | undefined
  let tenthAt: number | undefined
  let ninthAt: number | undefined
  while (now() < deadline) {
    const seen = opts.handled()
    if (firstAt === undefined && seen > 0) firstAt = now()
    if (tenthAt === undefined && seen >= opts.total / 10) tenthAt = now()
    if (ninthAt === undefined && seen >= (opts.total * 9) / 10) ninthAt = now()
    if (seen >= opts.total) {
      if ((await opts.remaining()) === 0) {
        done = true
        break
      }
      await sleep(5)
    } else {
      await sleep(2)
    }
  }
  const wallMs = now() - t0
  const pgCpuS = pgCpuSeconds() - pg0
  const pgDbCpuS = opts.database === undefined ? undefined : pgCpuSeconds(opts.database) - db0
  const nodeCpuS = nodeCpuSeconds() - n0
  const walEnd = await walLsn()
  const handled = opts.handled()
  const completed = done ? opts.total : opts.total - (await opts.remaining())
  return {
    done,
    capMs: done ? undefined : capMs,
    handled,
    completed,
    wallMs: Math.round(wallMs),
    jobsPerSec: Math.round((completed / wallMs) * 1000),
    ...(firstAt === undefined ? {} : { firstJobMs: Math.round(firstAt - t0) }),
    ...(tenthAt === undefined || ninthAt === undefined || ninthAt <= tenthAt
      ? {}
      : { steadyJobsPerSec: Math.round(((opts.total * 0.8) / (ninthAt - tenthAt)) * 1000) }),
    pgCpuS: round2(pgCpuS),
    nodeCpuS: round2(nodeCpuS),
    pgCpuMsPerKJob: round2((pgCpuS * 1e6) / Math.max(completed, 1)),
    ...(pgDbCpuS === undefined ? {} : { pgDbCpuMsPerKJob: round2((pgDbCpuS * 1e6) / Math.max(completed, 1)) }),
    nodeCpuMsPerKJob: round2((nodeCpuS * 1e6) / Math.max(completed, 1)),
    // WAL marks of the phase: the orchestrator counts the WAL of this run's database between them
    walStart,
    walEnd
  }
}

/** W1b: `n` sequential single inserts, then `n` more from CONCURRENCY concurrent producers. */
export const enqueueSingle = async (send: (i: number) => Promise<unknown>, n = ENQ_SINGLE_JOBS) => {
  const seq = await measure(async () => {
    for (let i = 0; i < n; i++) await send(i)
  })
  let next = 0
  const conc = await measure(async () => {
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < n) {
          const i = next++
          await send(n + i)
        }
      })
    )
  })
  return {
    jobs: n,
    sequentialPerSec: Math.round((n / seq.m.wallMs) * 1000),
    sequentialMeanMs: round2(seq.m.wallMs / n),
    concurrent10PerSec: Math.round((n / conc.m.wallMs) * 1000),
    seqPgCpuS: round2(seq.m.pgCpuS),
    concPgCpuS: round2(conc.m.pgCpuS)
  }
}

/** The W2 payload: enqueue time (performance.now() just before the send), index, warm-up flag. */
export interface LatencyPayload {
  readonly t: number
  readonly i: number
  readonly w: boolean
}

/** Records handler start - enqueue call for every measured job (warm-up jobs only counted). */
export const makeLatencyRecorder = () => {
  const samples: Array<number> = []
  let warm = 0
  return {
    samples,
    get count() {
      return samples.length + warm
    },
    record(t: number, isWarmup: boolean) {
      if (isWarmup) warm++
      else samples.push(now() - t)
    }
  }
}

export type LatencyRecorder = ReturnType<typeof makeLatencyRecorder>

/** Fires `n` single enqueues on a fixed schedule, not waiting for the previous one to return. */
export const produceSpaced = async (
  n: number,
  spacingMs: number,
  send: (payload: LatencyPayload) => Promise<unknown>,
  warmup: boolean
) => {
  const insertLat: Array<number> = []
  const inflight: Array<Promise<unknown>> = []
  const t0 = now()
  for (let i = 0; i < n; i++) {
    const target = t0 + i * spacingMs
    const d = target - now()
    if (d > 0.5) await sleep(d)
    const t = now()
    inflight.push(send({ t, i, w: warmup }).then(() => insertLat.push(now() - t)))
  }
  await Promise.all(inflight)
  return { insertLat, spanMs: now() - t0 }
}

/** W2: warm-up jobs (not counted), a 1 s pause, then the measured jobs. */
export const runLatency = async (opts: {
  readonly send: (payload: LatencyPayload) => Promise<unknown>
  readonly rec: LatencyRecorder
}) => {
  if (W2_WARMUP_JOBS > 0) {
    await produceSpaced(W2_WARMUP_JOBS, W2_SPACING_MS, opts.send, true)
    await waitUntil(() => opts.rec.count >= W2_WARMUP_JOBS, W2_WAIT_MS)
    await sleep(1000)
  }
  const walStart = await walLsn()
  const pg0 = pgCpuSeconds()
  const n0 = nodeCpuSeconds()
  const { insertLat, spanMs } = await produceSpaced(W2_JOBS, W2_SPACING_MS, opts.send, false)
  const ok = await waitUntil(() => opts.rec.samples.length >= W2_JOBS, W2_WAIT_MS)
  return {
    done: ok,
    received: opts.rec.samples.length,
    produceSpanMs: Math.round(spanMs),
    latencyMs: latencySummary(opts.rec.samples),
    insertMs: latencySummary(insertLat),
    pgCpuS: round2(pgCpuSeconds() - pg0),
    nodeCpuS: round2(nodeCpuSeconds() - n0),
    walStart,
    walEnd: await walLsn()
  }
}

// ---------------------------------------------------------------------------------------------
// Runs

/** argv: <workload> [--variant v] [--run n] */
export const parseArgs = (argv: ReadonlyArray<string> = process.argv.slice(2)) => {
  const out = { workload: argv[0] ?? "", variant: "default", run: 1 }
  for (let i = 1; i < argv.length; i++) {
    const a = argv[i]!
    if (a === "--variant") out.variant = argv[++i] ?? ""
    else if (a === "--run") out.run = Number(argv[++i])
  }
  return out
}

/** Prints the run's result line (with node version and peak RSS). */
export const emit = (result: Record<string, unknown>): void => {
  const line = JSON.stringify({
    ...result,
    node: process.version,
    peakRssMiB: peakRssMiB(),
    at: new Date().toISOString()
  })
  process.stdout.write(`${RESULT_MARK}${line}\n`)
}

/** Ends this process if a run goes past `ms` (bounded load, no hung sessions). */
export const guard = (ms = PHASE_CAP_MS * 2 + 60_000): void => {
  setTimeout(() => {
    console.error(`bench: run exceeded ${ms} ms, exiting`)
    process.exit(3)
  }, ms).unref()
}
