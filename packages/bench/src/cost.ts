/**
 * Cost per job (issue 24, item 5): the commits and WAL bytes one bench run cost its database.
 * Read by the orchestrators (jobs.ts, workflows.ts) once a run process has exited, before its
 * database is dropped.
 *
 * - Commits: the database's `pg_stat_database.xact_commit` once every backend of the run has
 *   exited (a backend flushes its statistics at exit; an idle one may hold them up to 10 s), so
 *   the figure covers the whole run process (setup, enqueue, processing, shutdown).
 * - WAL: the run process marks `pg_current_wal_lsn()` at the start and end of its timed phase.
 *   The server is shared (other databases write WAL at the same time), so the bytes between the
 *   marks are attributed with `pg_waldump`: the records that touch a relation of the run's
 *   database, plus the commit records of their transactions. When pg_waldump cannot read the WAL
 *   (not on the server's machine, no permission, segment recycled) the plain LSN difference is
 *   reported instead (`walExact: false`), which counts every database's WAL.
 *
 * The single-process benches (events, queue, batches, streams, scale) hold their database open while
 * they measure, so they take a phase's cost from the WAL alone (`phaseCost`): the bytes as above
 * and the commit records of the database's transactions (writing commits: a read-only
 * transaction writes none, and waits for no flush).
 */
import { spawn } from "node:child_process"
import { existsSync } from "node:fs"
import { createInterface } from "node:readline"
import { Effect } from "effect"
import { monitorClient, now, type PgClientLike, serverUrl, sleep, walLsn } from "./peers/common.ts"

/** What a run cost its database. */
export interface RunCost {
  readonly xactCommit: number
  readonly xactRollback: number
  readonly tupInserted: number
  readonly tupUpdated: number
  readonly tupDeleted: number
  /** WAL bytes of the timed phase (attributed to the database when walExact). */
  readonly walBytes?: number | undefined
  /** The LSN difference over the phase, every database of the server included. */
  readonly walServerBytes?: number | undefined
  readonly walExact?: boolean
}

const admin = async <A>(f: (client: PgClientLike) => Promise<A>): Promise<A> => {
  const client = await monitorClient(new URL(serverUrl).pathname.slice(1) || "postgres")
  try {
    return await f(client)
  } finally {
    await client.end()
  }
}

const RECORD = /^rmgr: (\w+)\s+len \(rec\/tot\):\s*\d+\/\s*(\d+), tx:\s*(\d+),.*?desc: (\S+)/
const REL = /rel \d+\/(\d+)\//g

/** What the WAL between two LSNs holds for one database. */
interface WalShare {
  readonly bytes: number
  /** Commit records of the transactions that wrote to the database. */
  readonly commits: number
}

/**
 * Sums the WAL records between two LSNs that belong to database `oid` (a relation of it in a
 * block reference or description, or the commit/abort of a transaction that wrote one), and
 * counts those transactions' commits.
 */
const waldumpShare = (binary: string, walDir: string, start: string, end: string, oid: string) =>
  new Promise<WalShare | undefined>((done) => {
    const child = spawn(binary, ["-p", walDir, "-s", start, "-e", end], { stdio: ["ignore", "pipe", "ignore"] })
    const txs = new Set<string>()
    let bytes = 0
    let commits = 0
    let lines = 0
    const rl = createInterface({ input: child.stdout })
    rl.on("line", (line) => {
      const m = RECORD.exec(line)
      if (m === null) return
      lines++
      const tx = m[3]!
      let ours = false
      for (const r of line.matchAll(REL)) {
        if (r[1] === oid) {
          ours = true
          break
        }
      }
      if (!ours && tx !== "0" && txs.has(tx)) ours = true
      if (ours) {
        bytes += Number(m[2])
        if (tx !== "0") txs.add(tx)
        if (m[1] === "Transaction" && m[4] === "COMMIT") commits++
      }
    })
    child.on("error", () => done(undefined))
    child.on("close", (code) => done(code === 0 || lines > 0 ? { bytes, commits } : undefined))
  })

/** The LSN difference and, where pg_waldump can read the WAL, the database's share of it. */
const walBetween = async (c: PgClientLike, oid: string, walStart: string, walEnd: string) => {
  const { rows } = await c.query<{ b: string; dir: string; v: string }>(
    `SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::text AS b,
       current_setting('data_directory') || '/pg_wal' AS dir, current_setting('server_version_num') AS v`,
    [walStart, walEnd]
  )
  const info = rows[0]
  const serverBytes = info ? Number(info.b) : undefined
  const binary = info ? `/usr/lib/postgresql/${Math.floor(Number(info.v) / 10000)}/bin/pg_waldump` : ""
  const share =
    info && existsSync(binary) && existsSync(info.dir)
      ? await waldumpShare(binary, info.dir, walStart, walEnd, oid)
      : undefined
  return { serverBytes, share }
}

/** What one phase of a single-process bench cost its database, from the WAL. */
export interface PhaseCost {
  /** WAL bytes written for the database (every database's when not exact). */
  readonly walBytes: number
  /** Commit records of the database's writing transactions; undefined when pg_waldump could not read the WAL. */
  readonly commits: number | undefined
  readonly exact: boolean
}

/** The server's WAL position now: a phase's start or end mark for `phaseCost`. */
export const walMark = async (): Promise<string> => {
  const lsn = await walLsn()
  if (lsn === undefined) throw new Error("bench: could not read the server's WAL position")
  return lsn
}

/** The cost to `database` of the WAL written between two marks (taken with `walMark`). */
export const phaseCost = (database: string, walStart: string, walEnd: string): Promise<PhaseCost> =>
  admin(async (c) => {
    const { rows } = await c.query<{ oid: string }>("SELECT oid::text AS oid FROM pg_database WHERE datname = $1", [
      database
    ])
    const { serverBytes, share } = await walBetween(c, rows[0]!.oid, walStart, walEnd)
    return share !== undefined
      ? { walBytes: share.bytes, commits: share.commits, exact: true }
      : { walBytes: serverBytes ?? 0, commits: undefined, exact: false }
  })

/**
 * The run database's counters (after its backends have exited) and, given the phase's WAL marks,
 * the WAL bytes of the phase. Call after the run process has exited and before the drop.
 */
export const runCost = (
  database: string,
  marks?: { readonly walStart?: unknown; readonly walEnd?: unknown }
): Promise<RunCost | undefined> =>
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
      `SELECT d.oid::text AS oid, s.xact_commit::text AS c, s.xact_rollback::text AS r, s.tup_inserted::text AS i,
         s.tup_updated::text AS u, s.tup_deleted::text AS d
       FROM pg_database d JOIN pg_stat_database s ON s.datid = d.oid WHERE d.datname = $1`,
      [database]
    )
    const row = rows[0]
    if (row === undefined) return undefined
    const base = {
      xactCommit: Number(row.c),
      xactRollback: Number(row.r),
      tupInserted: Number(row.i),
      tupUpdated: Number(row.u),
      tupDeleted: Number(row.d)
    }
    const { walStart, walEnd } = marks ?? {}
    if (typeof walStart !== "string" || typeof walEnd !== "string") return base
    const { serverBytes: walServerBytes, share } = await walBetween(c, row.oid!, walStart, walEnd)
    return share !== undefined
      ? { ...base, walBytes: share.bytes, walServerBytes, walExact: true }
      : { ...base, walBytes: walServerBytes, walServerBytes, walExact: false }
  })

/** Runs one phase of a single-process bench between two WAL marks: what it returned and what it cost. */
export const withPhaseCost = <A, E, R>(database: string, phase: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const start = yield* Effect.promise(walMark)
    const result = yield* phase
    const end = yield* Effect.promise(walMark)
    const cost = yield* Effect.promise(() => phaseCost(database, start, end))
    return [result, cost] as const
  })

/** A phase's commits and WAL bytes per unit (event, message, job) as two table cells. */
export const costCells = (cost: PhaseCost, units: number): string =>
  `${cost.commits === undefined ? "n/a" : (cost.commits / units).toFixed(3)} | ${Math.round(cost.walBytes / units)}${cost.exact ? "" : " (server)"}`

/** A phase's commits and WAL bytes per unit (null commits when the WAL could not be read). */
export const perUnit = (cost: PhaseCost, units: number) => ({
  commits: cost.commits === undefined ? null : Number((cost.commits / units).toFixed(3)),
  walBytes: Math.round(cost.walBytes / units)
})
