/**
 * Job statistics over a window (the dashboard's throughput and latency charts): the `job_stats`
 * rows the workers write, summed into buckets (every queue together, and each queue), with
 * run-time and pickup-latency percentiles read off the summed histograms.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { statementNow, toDatabaseError } from "../Database.ts"
import { HISTOGRAM_SIZE, percentileOf } from "../Job/JobStats.ts"
import type { Deps } from "./Deps.ts"
import type { JobStatsBucket, JobStatsView } from "./Model.ts"
import { InvalidRequest, type OperationsError } from "./OperationsError.ts"

/** The bucket width of a window when none is given: 5 min for 1 h, 1 h for 24 h, 6 h for 7 d, 1 d beyond. */
export const defaultBucketMs = (windowMs: number): number =>
  windowMs <= 3_600_000
    ? 300_000
    : windowMs <= 86_400_000
      ? 3_600_000
      : windowMs <= 7 * 86_400_000
        ? 21_600_000
        : 86_400_000

interface Acc {
  completed: number
  retried: number
  deadLettered: number
  readonly duration: Array<number>
  readonly latency: Array<number>
}

const emptyAcc = (): Acc => ({
  completed: 0,
  retried: 0,
  deadLettered: 0,
  duration: new Array<number>(HISTOGRAM_SIZE).fill(0),
  latency: new Array<number>(HISTOGRAM_SIZE).fill(0)
})

const bucketOf = (at: number, a: Acc): JobStatsBucket => ({
  at: new Date(at).toISOString(),
  completed: a.completed,
  failed: a.retried + a.deadLettered,
  retried: a.retried,
  deadLettered: a.deadLettered,
  durationP50Ms: percentileOf(a.duration, 0.5),
  durationP95Ms: percentileOf(a.duration, 0.95),
  durationP99Ms: percentileOf(a.duration, 0.99),
  latencyP50Ms: percentileOf(a.latency, 0.5),
  latencyP95Ms: percentileOf(a.latency, 0.95)
})

/** The operators' statistics reads. */
export const makeStats = (deps: Deps) => {
  const { jobStatsSql, catalog } = deps

  /** Statistics over the last `windowMs` (default 24 h), in buckets of `bucketMs`, optionally of one queue. */
  const jobStats = (
    options: {
      readonly windowMs?: number | undefined
      readonly bucketMs?: number | undefined
      readonly queue?: string | undefined
    } = {}
  ): Effect.Effect<JobStatsView, OperationsError> =>
    Effect.gen(function* () {
      const windowMs = options.windowMs ?? 86_400_000
      const bucketMs = options.bucketMs ?? defaultBucketMs(windowMs)
      if (!(windowMs > 0 && bucketMs >= 60_000 && windowMs / bucketMs <= 2_000)) {
        return yield* new InvalidRequest({
          reason: "window and bucket must be positive, a bucket at least a minute, at most 2000 buckets"
        })
      }
      const now = yield* statementNow
      const fail = toDatabaseError("read job statistics")
      const queue = options.queue ?? null
      const rows = yield* jobStatsSql.jobStatsSeries(windowMs, bucketMs / 1000, queue, now).pipe(Effect.mapError(fail))
      const hists = yield* jobStatsSql
        .jobStatsHistograms(windowMs, bucketMs / 1000, queue, now)
        .pipe(Effect.mapError(fail))
      const serverNow = now?.getTime() ?? (yield* catalog.serverInfo().pipe(Effect.mapError(fail)))[0]!.now.getTime()
      const first = Math.floor((serverNow - windowMs) / bucketMs) * bucketMs
      const starts: Array<number> = []
      for (let t = first; t <= serverNow; t += bucketMs) starts.push(t)
      const perQueue = new Map<string, Map<number, Acc>>()
      const accOf = (q: string, at: number) => {
        let m = perQueue.get(q)
        if (m === undefined) {
          m = new Map()
          perQueue.set(q, m)
        }
        let a = m.get(at)
        if (a === undefined) {
          a = emptyAcc()
          m.set(at, a)
        }
        return a
      }
      for (const r of rows) {
        const a = accOf(r.queue, r.at.getTime())
        a.completed += r.completed
        a.retried += r.retried
        a.deadLettered += r.dead_lettered
      }
      for (const h of hists) {
        const a = accOf(h.queue, h.at.getTime())
        const target = h.kind === "duration" ? a.duration : a.latency
        if (h.i >= 1 && h.i <= HISTOGRAM_SIZE) target[h.i - 1]! += h.v
      }
      const series = (m: Map<number, Acc> | undefined) => starts.map((at) => bucketOf(at, m?.get(at) ?? emptyAcc()))
      const total = new Map<number, Acc>()
      for (const m of perQueue.values()) {
        for (const [at, a] of m) {
          const t = total.get(at) ?? emptyAcc()
          t.completed += a.completed
          t.retried += a.retried
          t.deadLettered += a.deadLettered
          a.duration.forEach((v, i) => {
            t.duration[i]! += v
          })
          a.latency.forEach((v, i) => {
            t.latency[i]! += v
          })
          total.set(at, t)
        }
      }
      return {
        windowMs,
        bucketMs,
        total: series(total),
        queues: [...perQueue.keys()].sort().map((q) => ({ queue: q, buckets: series(perQueue.get(q)) }))
      }
    })

  return { jobStats }
}
