/**
 * Job statistics for the dashboard (seed 002 "Stats buffering"): every delivery that ends is
 * counted in memory, per minute, queue and job, with its run time and (for a first delivery) its
 * pickup latency in fixed-boundary histograms; a flush adds the buffer to the `job_stats` rows of
 * those minutes. A worker flushes every `STATS_FLUSH_INTERVAL` (5 s), as soon as its buffer holds
 * `STATS_FLUSH_SIZE` (100) keys, and when it stops (a drain loses nothing unless its last flush
 * outruns `STATS_LAST_FLUSH_TIMEOUT`; a SIGKILL loses at most the last interval). A write is never interrupted
 * halfway by the drain: an interrupted INSERT may still commit, and its rows, kept for the next
 * flush, would then be counted twice. Recording is synchronous and costs a map lookup and a few additions a job:
 * rows are per minute, never per job, so a 28k jobs/s worker writes a handful of rows a flush.
 *
 * @since 0.1.0
 */
import { Cause, Duration, Effect, Fiber, Latch } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../Config.ts"
import { unlessUnreachable } from "../Database.ts"
import { type JobStatsDelta, makeJobStatsSql } from "./JobStatsSql.ts"

/** Histogram boundaries in milliseconds: a count per bucket `(b[i-1], b[i]]`, the last one unbounded. */
export const HISTOGRAM_BOUNDARIES_MS: ReadonlyArray<number> = [
  1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000, 300_000, 1_800_000
]

/** Buckets of a histogram (the boundaries and one past the last). */
export const HISTOGRAM_SIZE = HISTOGRAM_BOUNDARIES_MS.length + 1

/** Flush after this many buffered keys. */
export const STATS_FLUSH_SIZE = 100

/** Flush at least this often. */
export const STATS_FLUSH_INTERVAL = Duration.seconds(5)

/**
 * How long a drain waits for the flusher's last write (after the workers drained): inside the
 * 10 s a draining child process is given past `drainTimeout` before it is killed (ChildCapsule.ts).
 */
export const STATS_LAST_FLUSH_TIMEOUT = Duration.seconds(5)

/** Rows older than this are deleted by the dispatcher. */
export const STATS_RETENTION = Duration.days(30)

/** The index (0-based) of the histogram bucket of a value. */
export const bucketOf = (ms: number): number => {
  for (let i = 0; i < HISTOGRAM_BOUNDARIES_MS.length; i++) if (ms <= HISTOGRAM_BOUNDARIES_MS[i]!) return i
  return HISTOGRAM_BOUNDARIES_MS.length
}

/**
 * A percentile (0..1) of a histogram, interpolated inside its bucket; null for an empty one. The
 * unbounded last bucket answers its lower boundary.
 */
export const percentileOf = (hist: ReadonlyArray<number>, p: number): number | null => {
  const total = hist.reduce((s, v) => s + v, 0)
  if (total === 0) return null
  const rank = p * total
  let seen = 0
  for (let i = 0; i < hist.length; i++) {
    const v = hist[i] ?? 0
    if (v > 0 && seen + v >= rank) {
      const lower = i === 0 ? 0 : HISTOGRAM_BOUNDARIES_MS[i - 1]!
      const upper = HISTOGRAM_BOUNDARIES_MS[i]
      if (upper === undefined) return lower
      return lower + ((rank - seen) / v) * (upper - lower)
    }
    seen += v
  }
  return HISTOGRAM_BOUNDARIES_MS.at(-1)!
}

interface Entry {
  readonly bucket: number
  readonly queue: string
  readonly job: string
  completed: number
  retried: number
  deadLettered: number
  durationSum: number
  readonly durationHist: Array<number>
  latencyCount: number
  latencySum: number
  readonly latencyHist: Array<number>
}

/** How a delivery ended, as the statistics count it. */
export type StatsOutcome = "completed" | "retried" | "dead_lettered"

/** A process's statistics buffer. */
export interface JobStatsRecorder {
  /** Counts a delivery that ended at `nowMs` (synchronous; never fails). `latencyMs` only for a first delivery. */
  readonly record: (
    queue: string,
    job: string,
    outcome: StatsOutcome,
    durationMs: number,
    latencyMs: number | undefined,
    nowMs: number
  ) => void
  /** Adds the buffer to the table (a failure is logged; the buffer is kept for the next flush). */
  readonly flush: Effect.Effect<void>
}

/**
 * A statistics buffer whose flusher runs in the current scope; when the scope closes, the flusher
 * ends the write it is in, flushes what is left once and stops (within `STATS_LAST_FLUSH_TIMEOUT`).
 */
export const make = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const config = yield* PgBusConfig
  const statements = makeJobStatsSql(sql, config.schema)
  let buffer = new Map<string, Entry>()
  const full = Latch.makeUnsafe(false)

  /** The buffer's entry of a minute, queue and job (created empty). */
  const entryOf = (bucket: number, queue: string, job: string): Entry => {
    const key = `${bucket}\u0000${queue}\u0000${job}`
    let e = buffer.get(key)
    if (e === undefined) {
      e = {
        bucket,
        queue,
        job,
        completed: 0,
        retried: 0,
        deadLettered: 0,
        durationSum: 0,
        durationHist: new Array<number>(HISTOGRAM_SIZE).fill(0),
        latencyCount: 0,
        latencySum: 0,
        latencyHist: new Array<number>(HISTOGRAM_SIZE).fill(0)
      }
      buffer.set(key, e)
      if (buffer.size >= STATS_FLUSH_SIZE) full.openUnsafe()
    }
    return e
  }

  // the entry of the previous call: a worker's deliveries mostly repeat it (no key string per job)
  let last: Entry | undefined
  let lastOf: Map<string, Entry> | undefined

  const record: JobStatsRecorder["record"] = (queue, job, outcome, durationMs, latencyMs, nowMs) => {
    const bucket = nowMs - (nowMs % 60_000)
    let e = last
    if (e === undefined || lastOf !== buffer || e.bucket !== bucket || e.queue !== queue || e.job !== job) {
      e = entryOf(bucket, queue, job)
      last = e
      lastOf = buffer
    }
    if (outcome === "completed") e.completed++
    else if (outcome === "retried") e.retried++
    else e.deadLettered++
    e.durationSum += durationMs
    e.durationHist[bucketOf(durationMs)]!++
    if (latencyMs !== undefined) {
      const latency = Math.max(0, latencyMs)
      e.latencyCount++
      e.latencySum += latency
      e.latencyHist[bucketOf(latency)]!++
    }
  }

  const toDelta = (e: Entry): JobStatsDelta => ({
    bucket: new Date(e.bucket).toISOString(),
    queue: e.queue,
    job: e.job,
    completed: e.completed,
    retried: e.retried,
    dead_lettered: e.deadLettered,
    duration_ms_sum: e.durationSum,
    duration_hist: e.durationHist,
    latency_count: e.latencyCount,
    latency_ms_sum: e.latencySum,
    latency_hist: e.latencyHist
  })

  const merge = (into: Map<string, Entry>, from: Map<string, Entry>) => {
    for (const [key, e] of from) {
      const other = into.get(key)
      if (other === undefined) into.set(key, e)
      else {
        other.completed += e.completed
        other.retried += e.retried
        other.deadLettered += e.deadLettered
        other.durationSum += e.durationSum
        other.latencyCount += e.latencyCount
        other.latencySum += e.latencySum
        e.durationHist.forEach((v, i) => {
          other.durationHist[i]! += v
        })
        e.latencyHist.forEach((v, i) => {
          other.latencyHist[i]! += v
        })
      }
    }
  }

  const flush: Effect.Effect<void> = Effect.suspend(() => {
    full.closeUnsafe()
    if (buffer.size === 0) return Effect.void
    const taken = buffer
    buffer = new Map()
    return statements.jobStatsAdd([...taken.values()].map(toDelta)).pipe(
      Effect.asVoid,
      Effect.catchCause((cause) =>
        // interrupted past the drain's deadline: given up, quietly (the write may have committed)
        Cause.hasInterruptsOnly(cause)
          ? Effect.void
          : Effect.sync(() => {
              // kept for the next flush (the stats are advisory: a lasting failure only logs)
              merge(buffer, taken)
            }).pipe(
              Effect.andThen(
                unlessUnreachable(config, Effect.logWarning("pgbus: could not write job statistics", cause))
              )
            )
      )
    )
  })

  // the drain asks the flusher to stop rather than interrupting it, so a write it is in ends
  const stopping = Latch.makeUnsafe(false)
  const flusher = Effect.gen(function* () {
    while (!Latch.isOpen(stopping)) {
      yield* Effect.raceAll([full.await, stopping.await, Effect.sleep(STATS_FLUSH_INTERVAL)])
      yield* flush
    }
  })
  const fiber = yield* Effect.forkScoped(flusher)
  // added after the fork, so it runs before the fiber is interrupted: only one past the deadline is
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => stopping.openUnsafe()).pipe(
      Effect.andThen(Fiber.await(fiber)),
      Effect.timeoutOption(STATS_LAST_FLUSH_TIMEOUT),
      Effect.asVoid
    )
  )
  return { record, flush } satisfies JobStatsRecorder
})
