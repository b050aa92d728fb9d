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
 */
import { spawn } from "node:child_process"
import { existsSync } from "node:fs"
import { createInterface } from "node:readline"
import { monitorClient, now, type PgClientLike, serverUrl, sleep } from "./peers/common.ts"

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

const RECORD = /len \(rec\/tot\):\s*\d+\/\s*(\d+), tx:\s*(\d+),/
const REL = /rel \d+\/(\d+)\//g

/**
 * Sums the WAL records between two LSNs that belong to database `oid` (a relation of it in a
 * block reference or description, or the commit/abort of a transaction that wrote one).
 */
const waldumpBytes = (binary: string, walDir: string, start: string, end: string, oid: string) =>
  new Promise<number | undefined>((done) => {
    const child = spawn(binary, ["-p", walDir, "-s", start, "-e", end], { stdio: ["ignore", "pipe", "ignore"] })
    const txs = new Set<string>()
    let bytes = 0
    let lines = 0
    const rl = createInterface({ input: child.stdout })
    rl.on("line", (line) => {
      const m = RECORD.exec(line)
      if (m === null) return
      lines++
      const tx = m[2]!
      let ours = false
      for (const r of line.matchAll(REL)) {
        if (r[1] === oid) {
          ours = true
          break
        }
      }
      if (!ours && tx !== "0" && txs.has(tx)) ours = true
      if (ours) {
        bytes += Number(m[1])
        if (tx !== "0") txs.add(tx)
      }
    })
    child.on("error", () => done(undefined))
    child.on("close", (code) => done(code === 0 || lines > 0 ? bytes : undefined))
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
    const diff = await c.query<{ b: string; dir: string; v: string }>(
      `SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::text AS b,
         current_setting('data_directory') || '/pg_wal' AS dir, current_setting('server_version_num') AS v`,
      [walStart, walEnd]
    )
    const info = diff.rows[0]
    const walServerBytes = info ? Number(info.b) : undefined
    const binary = info ? `/usr/lib/postgresql/${Math.floor(Number(info.v) / 10000)}/bin/pg_waldump` : ""
    const exact =
      info && existsSync(binary) && existsSync(info.dir)
        ? await waldumpBytes(binary, info.dir, walStart, walEnd, row.oid!)
        : undefined
    return exact !== undefined
      ? { ...base, walBytes: exact, walServerBytes, walExact: true }
      : { ...base, walBytes: walServerBytes, walServerBytes, walExact: false }
  })
