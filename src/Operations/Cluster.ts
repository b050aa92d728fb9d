/**
 * The cluster as a whole: every process with its status in words, and one health verdict
 * across all of them.
 *
 * The verdict:
 * - `ERROR`: the database cannot be reached.
 * - `STALLED`: processes beat, yet a queue that a live worker serves has had claimable work
 *   waiting longer than `stallThreshold` (a silent wedge). Readiness fails on it.
 * - `DEGRADED`: a process is late or stale (not yet reaped), claimable work waits on a queue no
 *   live worker serves, or work is due and no process runs. Readiness stays up.
 * - `OK`: none of that.
 * Paused queues are left out: their work waits on purpose.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect } from "effect"
import { toDatabaseError } from "../Database.ts"
import type { ProcessRow } from "../Supervisor/ProcessSql.ts"
import { count, type Deps, inWords, iso } from "./Deps.ts"
import type { DatabaseHealth, ProcessSummary, Verdict } from "./Model.ts"
import type { OperationsError } from "./OperationsError.ts"
import type { makeQueues } from "./Queues.ts"

interface CapsuleInfo {
  readonly name: string
  readonly queues: ReadonlyArray<string>
  readonly concurrency: number
  readonly consumerPriority?: number
  readonly singleActiveConsumer?: boolean
}

const capsulesOf = (row: ProcessRow): ReadonlyArray<CapsuleInfo> =>
  Array.isArray(row.capsules)
    ? (row.capsules as ReadonlyArray<unknown>).flatMap((c) =>
        typeof c === "object" && c !== null && typeof (c as CapsuleInfo).name === "string"
          ? [
              {
                name: (c as CapsuleInfo).name,
                queues: Array.isArray((c as CapsuleInfo).queues) ? (c as CapsuleInfo).queues : [],
                concurrency: Number((c as CapsuleInfo).concurrency ?? 0),
                ...(typeof (c as CapsuleInfo).consumerPriority === "number"
                  ? { consumerPriority: (c as CapsuleInfo).consumerPriority! }
                  : {}),
                ...((c as CapsuleInfo).singleActiveConsumer === true ? { singleActiveConsumer: true } : {})
              }
            ]
          : []
      )
    : []

/** The application name effect-pgbus's pools connect with (see `Database.clientOptions`). */
const APPLICATION_NAME = "effect-pgbus"

/** How long the verdict waits for the database before it says ERROR. */
const VERDICT_TIMEOUT = Duration.seconds(5)

/** Whether a process's capsules read a queue (a priority sub-queue counts as its queue). */
export const serves = (process: Pick<ProcessSummary, "capsules" | "roles">, queue: string): boolean =>
  process.roles.includes("workers") &&
  process.capsules.some((c) => c.queues.some((q) => q === queue || new RegExp(`^${q}_p\\d+$`).test(queue)))

/** The cluster operations: processes and the verdict. */
export const makeCluster = (deps: Deps, queues: ReturnType<typeof makeQueues>) => {
  const { config, processes, catalog } = deps
  const beatMs = Duration.toMillis(config.processHeartbeatInterval)
  const staleMs = Duration.toMillis(config.staleProcessThreshold)
  const stallMs = Duration.toMillis(config.stallThreshold)
  // a beat may be a little late under load: two intervals and a second of slack is still healthy
  const lateMs = Math.min(staleMs, 2 * beatMs + 1000)

  const summaryOf = (row: ProcessRow, now: Date): ProcessSummary => {
    const age = Math.max(0, now.getTime() - row.last_beat_at.getTime())
    const status = age >= staleMs ? "stale" : age > lateMs ? "late" : "healthy"
    const statusText =
      status === "healthy"
        ? `healthy: beat ${inWords(age)} ago (every ${inWords(beatMs)})`
        : status === "late"
          ? `late: last beat ${inWords(age)} ago (every ${inWords(beatMs)}); taken for dead after ${inWords(staleMs)} without one`
          : `stale: no beat for ${inWords(age)} (limit ${inWords(staleMs)}); a dispatcher releases its claims and removes it`
    return {
      id: row.id,
      pid: row.pid,
      host: row.host,
      roles: row.roles,
      leads: row.leads ?? [],
      capsules: capsulesOf(row),
      busy: row.busy,
      capacity: row.capacity,
      utilization: row.capacity > 0 ? row.busy / row.capacity : 0,
      succeeded: count(row.succeeded),
      failed: count(row.failed),
      jobsPerSecond: row.jobs_per_second,
      version: row.version,
      appRevision: row.app_revision,
      startedAt: iso(row.started_at),
      lastBeatAt: iso(row.last_beat_at),
      lastBeatAgeMs: age,
      status,
      statusText
    }
  }

  const serverNow = catalog.serverInfo().pipe(
    Effect.map((rows) => rows[0]!.now),
    Effect.mapError(toDatabaseError("read the server's clock"))
  )

  /** Every registered process, oldest first, with its status in words. */
  const processList: Effect.Effect<ReadonlyArray<ProcessSummary>, OperationsError> = Effect.gen(function* () {
    const now = yield* serverNow
    const rows = yield* processes.list
    return rows.map((r) => summaryOf(r, now))
  })

  /** The cluster verdict; a database that cannot be reached gives `ERROR`, never a failure. */
  const verdict: Effect.Effect<Verdict> = Effect.gen(function* () {
    const list = yield* processList
    const summaries = yield* queues.queues
    const reasons: Array<string> = []
    const healthy = list.filter((p) => p.status === "healthy")
    const late = list.filter((p) => p.status === "late")
    const stale = list.filter((p) => p.status === "stale")
    const stalledQueues: Array<string> = []
    let degraded = false
    for (const p of stale) {
      degraded = true
      reasons.push(`process ${p.host}:${p.pid} is stale (${p.statusText})`)
    }
    for (const p of late) {
      degraded = true
      reasons.push(`process ${p.host}:${p.pid} is late (${p.statusText})`)
    }
    for (const q of summaries) {
      if (q.paused || q.ready === 0) continue
      const servedBy = healthy.filter((p) => serves(p, q.name))
      if (servedBy.length === 0) {
        if (q.claimableLatencyMs > stallMs || healthy.length === 0) {
          degraded = true
          reasons.push(
            `queue ${q.name}: ${q.ready} claimable job(s) waiting ${inWords(q.claimableLatencyMs)} and no live worker serves it`
          )
        }
      } else if (q.claimableLatencyMs > stallMs) {
        stalledQueues.push(q.name)
        reasons.push(
          `queue ${q.name}: ${q.ready} claimable job(s), the oldest waiting ${inWords(q.claimableLatencyMs)} (limit ${inWords(stallMs)}), while ${servedBy.length} live process(es) serving it beat`
        )
      }
    }
    const status = stalledQueues.length > 0 ? "STALLED" : degraded ? "DEGRADED" : "OK"
    return {
      status,
      reasons,
      checkedAt: iso(new Date(yield* Clock.currentTimeMillis)),
      processes: { healthy: healthy.length, late: late.length, stale: stale.length },
      stalledQueues
    } satisfies Verdict
  }).pipe(
    Effect.timeoutOrElse({
      duration: VERDICT_TIMEOUT,
      orElse: () => Effect.fail({ message: `no answer within ${Duration.format(VERDICT_TIMEOUT)}` })
    }),
    Effect.catch((error) =>
      Effect.map(Clock.currentTimeMillis, (at) => ({
        status: "ERROR" as const,
        reasons: [`database unreachable: ${error.message}`],
        checkedAt: iso(new Date(at)),
        processes: { healthy: 0, late: 0, stale: 0 },
        stalledQueues: []
      }))
    )
  )

  /** Table health, the oldest open transaction, effect-pgbus's connections, autovacuum settings. */
  const database: Effect.Effect<DatabaseHealth, OperationsError> = Effect.gen(function* () {
    const fail = toDatabaseError("read database statistics")
    const tables = yield* catalog.tableHealth().pipe(Effect.mapError(fail))
    const [oldest] = yield* catalog.oldestTransaction().pipe(Effect.mapError(fail))
    const [connections] = yield* catalog.clientConnections(APPLICATION_NAME).pipe(Effect.mapError(fail))
    const settings = yield* catalog.autovacuumSettings().pipe(Effect.mapError(fail))
    return {
      tables: tables.map((t) => {
        const live = count(t.live_tuples)
        const dead = count(t.dead_tuples)
        return {
          table: t.table,
          liveTuples: live,
          deadTuples: dead,
          bloatRatio: live + dead === 0 ? 0 : dead / (live + dead),
          lastVacuumAgeSeconds: t.last_vacuum_age_s,
          lastAutovacuumAgeSeconds: t.last_autovacuum_age_s,
          options: t.options ?? []
        }
      }),
      oldestTransactionAgeMs: oldest?.age_ms ?? null,
      connections: { open: count(connections?.open), idle: count(connections?.idle) },
      settings: Object.fromEntries(settings.map((s) => [s.name, s.setting]))
    }
  })

  return { processes: processList, verdict, summaryOf, database }
}
