/**
 * What the peer orchestrators (jobs.ts, workflows.ts, signals.ts) share: running one case in a
 * process of its own, the round-robin over cases and runs, and the figures' cells. Light on
 * purpose: the run processes import workflows.ts and signals.ts for their drivers, so nothing
 * here loads the library.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { appendFileSync } from "node:fs"
import { dropDatabase, env, now, PHASE_CAP_MS, RESULT_MARK } from "./peers/common.ts"

/** A line of the orchestrator's progress, on stderr (stdout ends with the JSON line). */
export const log = (line: string): void => {
  process.stderr.write(`${line}\n`)
}

/** How long a run process may take before it is killed. */
export const runTimeoutMs = (): number => env("BENCH_RUN_TIMEOUT_MS", Math.max(300_000, PHASE_CAP_MS * 2 + 60_000))

/** A comma-separated list of whole numbers from the environment (`fallback` when unset, none when empty). */
export const intList = (raw: string | undefined, fallback: ReadonlyArray<number>): ReadonlyArray<number> => {
  if (raw === undefined) return fallback
  if (raw.trim() === "") return []
  const out = raw.split(",").map((s) => Number(s.trim()))
  if (out.some((n) => !Number.isInteger(n) || n < 0)) throw new Error(`not a list of read-aheads: ${raw}`)
  return out
}

/** The cases whose key BENCH_ONLY (a regular expression) matches; all of them when it is unset. */
export const selected = <C extends { readonly key: string }>(cases: ReadonlyArray<C>): ReadonlyArray<C> => {
  const only = process.env.BENCH_ONLY ? new RegExp(process.env.BENCH_ONLY) : undefined
  return cases.filter((c) => only === undefined || only.test(c.key))
}

/** A run's result line, as printed by a peers/<library>.ts process, with what the orchestrator adds. */
export interface ResultLine<Cost> {
  readonly library: string
  readonly version: string
  readonly variant: string
  readonly peakRssMiB: number
  readonly config: Readonly<Record<string, unknown>>
  readonly result: Readonly<Record<string, unknown>>
  /** Added by the orchestrator: the run database's counters once its process has exited. */
  db?: Cost
}

let current: ChildProcess | undefined

/**
 * Runs one case: `file` in a child process (this process's Node and loader) with `args`, its
 * stdout's result line parsed and the rest logged; killed after `runTimeoutMs`. Once it has
 * exited (and every pool in it is gone), `cost` reads its database's counters into the result,
 * then the database is dropped. Undefined when the process printed no result.
 */
export const runCaseProcess = <Cost>(opts: {
  readonly label: string
  readonly file: string
  readonly args: ReadonlyArray<string>
  readonly env?: Readonly<Record<string, string>>
  readonly database: string
  readonly cost: (database: string, result: ResultLine<Cost>) => Promise<Cost | undefined>
}): Promise<ResultLine<Cost> | undefined> =>
  new Promise((done) => {
    const child = spawn(process.execPath, [...process.execArgv, opts.file, ...opts.args], {
      env: { ...process.env, ...opts.env },
      stdio: ["ignore", "pipe", "inherit"]
    })
    current = child
    let out = ""
    let result: ResultLine<Cost> | undefined
    child.stdout?.setEncoding("utf8")
    child.stdout?.on("data", (chunk: string) => {
      out += chunk
      let nl = out.indexOf("\n")
      while (nl >= 0) {
        const line = out.slice(0, nl)
        out = out.slice(nl + 1)
        if (line.startsWith(RESULT_MARK)) result = JSON.parse(line.slice(RESULT_MARK.length)) as ResultLine<Cost>
        else if (line.trim() !== "") log(`   ${line}`)
        nl = out.indexOf("\n")
      }
    })
    const timeoutMs = runTimeoutMs()
    const timer = setTimeout(() => {
      log(`!! ${opts.label}: no result after ${timeoutMs} ms, killing it`)
      child.kill("SIGKILL")
    }, timeoutMs)
    child.on("close", (code) => {
      clearTimeout(timer)
      current = undefined
      if (code !== 0) log(`!! ${opts.label}: exited with ${code}`)
      const read = result === undefined ? Promise.resolve(undefined) : opts.cost(opts.database, result)
      read
        .then((cost) => {
          if (result && cost) result.db = cost
        })
        .catch((e) => log(`!! could not read the counters of ${opts.database}: ${messageOf(e)}`))
        .then(() => dropDatabase(opts.database))
        .catch((e) => log(`!! could not drop ${opts.database}: ${messageOf(e)}`))
        .finally(() => done(result))
    })
  })

/** On Ctrl-C: the running case's process is killed and the run databases dropped. */
export const onInterrupt = (databases: ReadonlyArray<string>): void => {
  process.on("SIGINT", () => {
    current?.kill("SIGKILL")
    void Promise.all(databases.map((d) => dropDatabase(d).catch(() => undefined))).finally(() => process.exit(130))
  })
}

/**
 * The cases of round `run` (from 1): the groups in their order, each group's cases rotated by
 * one place a round, so that no case always runs first after another group (such as the
 * latency cases after the throughput burst) or always last.
 */
export const roundOrder = <C>(cases: ReadonlyArray<C>, run: number, groupOf: (c: C) => string): Array<C> => {
  const groups = new Map<string, Array<C>>()
  for (const c of cases) groups.set(groupOf(c), [...(groups.get(groupOf(c)) ?? []), c])
  return [...groups.values()].flatMap((g) => {
    const k = (run - 1) % g.length
    return [...g.slice(k), ...g.slice(0, k)]
  })
}

/**
 * Runs every case `runs` times, round-robin (run 1 of each case, then run 2, ...) so that the
 * machine's noise spreads over the cases, the order within each group rotated a round
 * (`roundOrder`; one group unless `groupOf` says); each result is appended to BENCH_RESULTS
 * when set.
 */
export const roundRobin = async <C extends { readonly key: string }, R>(opts: {
  readonly cases: ReadonlyArray<C>
  readonly runs: number
  readonly run: (c: C, run: number) => Promise<R | undefined>
  /** What the progress line says of a result. */
  readonly describe: (r: R) => string
  /** The group a case is rotated within (all cases in one by default). */
  readonly groupOf?: (c: C) => string
}): Promise<Map<string, Array<R>>> => {
  const results = new Map<string, Array<R>>(opts.cases.map((c) => [c.key, []]))
  for (let run = 1; run <= opts.runs; run++) {
    for (const c of roundOrder(opts.cases, run, opts.groupOf ?? (() => ""))) {
      const t0 = now()
      const r = await opts.run(c, run)
      const secs = ((now() - t0) / 1000).toFixed(1)
      if (r !== undefined) {
        results.get(c.key)?.push(r)
        if (process.env.BENCH_RESULTS) appendFileSync(process.env.BENCH_RESULTS, `${JSON.stringify({ ...r, run })}\n`)
      }
      log(`>> run ${run}/${opts.runs} ${c.key}: ${r !== undefined ? opts.describe(r) : "FAILED"} (${secs} s)`)
    }
  }
  return results
}

// ---------------------------------------------------------------------------------------------
// Figures

const messageOf = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/** The number at a dotted path of a result (undefined when absent or not finite). */
export const num = (r: unknown, path: string): number | undefined => {
  let v: unknown = r
  for (const k of path.split("."))
    v = typeof v === "object" && v !== null ? (v as Record<string, unknown>)[k] : undefined
  return typeof v === "number" && Number.isFinite(v) ? v : undefined
}

/** The numbers among `xs`. */
export const defined = (xs: ReadonlyArray<number | undefined>): Array<number> =>
  xs.filter((x): x is number => x !== undefined)

/** The median (of a non-empty list). */
export const median = (xs: ReadonlyArray<number>): number => {
  const s = [...xs].sort((a, b) => a - b)
  const mid = Math.floor(s.length / 2)
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2
}

/** The median of the numbers at `path` over runs, undefined when none has it. */
export const medianOf = (rs: ReadonlyArray<unknown>, path: string): number | undefined => {
  const xs = defined(rs.map((r) => num(r, path)))
  return xs.length === 0 ? undefined : median(xs)
}

/** A figure for a table: whole above 100, one decimal above 10, two below. */
export const fmt = (x: number): string => {
  const a = Math.abs(x)
  return a >= 100
    ? String(Math.round(x))
    : a >= 10
      ? x.toFixed(1).replace(/\.0$/, "")
      : String(Math.round(x * 100) / 100)
}

/** A table cell: the median and, over more than one run, the range. */
export const cellOf = (xs: ReadonlyArray<number>): string => {
  if (xs.length === 0) return "n/a"
  const m = fmt(median(xs))
  return xs.length === 1 ? m : `${m} [${fmt(Math.min(...xs))}-${fmt(Math.max(...xs))}]`
}

/** The runs cell: how many gave a result, how many of those were not right (`bad`), how many failed. */
export const runsCell = <R>(
  rs: ReadonlyArray<R>,
  attempted: number,
  bad: (r: R) => boolean,
  badWord = "not done"
): string => {
  const notOk = rs.filter(bad).length
  const failed = attempted - rs.length
  return `${rs.length}${notOk > 0 ? ` (${notOk} ${badWord})` : ""}${failed > 0 ? ` (${failed} failed)` : ""}`
}

/** A figure for the JSON line: rounded, null when missing. */
export const rounded = (x: number | undefined, digits = 0): number | null =>
  x === undefined ? null : Number(x.toFixed(digits))
