/**
 * Job rates on the operations surface: each rate-limited job's rate as defined and as set at
 * run time, and the change of a rate (every limited claim of every process uses it from its
 * next claim on), kept with who and why on its row and logged.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option } from "effect"
import type { Change, Deps } from "./Deps.ts"
import type { JobRateView } from "./Model.ts"
import { InvalidRequest, type OperationsError } from "./OperationsError.ts"
import { fromQueueError } from "./Queues.ts"

/** A job's rate: its definition's, the one set at run time, and the one in force. */
export interface JobRate {
  readonly job: string
  readonly defined: { readonly limit: number; readonly periodMs: number } | undefined
  readonly override:
    | {
        readonly limit: number
        readonly periodMs: number
        readonly actor: string
        readonly reason: string | undefined
        readonly updatedAt: Date
      }
    | undefined
  readonly effective: { readonly limit: number; readonly periodMs: number } | undefined
}

/** A job's rate as the JSON API and MCP answer it (times ISO 8601, absent values null). */
export const jobRateView = (r: JobRate): JobRateView => ({
  job: r.job,
  defined: r.defined ?? null,
  override:
    r.override === undefined
      ? null
      : { ...r.override, reason: r.override.reason ?? null, updatedAt: r.override.updatedAt.toISOString() },
  effective: r.effective ?? null
})

/** Builds the rates operations. */
export const makeRates = (deps: Deps) => {
  const { store, registry } = deps

  /** Every job with a rate (registered here, or set at run time). */
  const jobRates: Effect.Effect<ReadonlyArray<JobRate>, OperationsError> = Effect.gen(function* () {
    const overrides = yield* store.rateOverrides.pipe(Effect.mapError(fromQueueError("*")))
    const byJob = new Map<string, JobRate>()
    for (const registered of Option.match(registry, { onNone: () => [], onSome: (r) => [...r.jobs.values()] })) {
      const rate = registered.job.rate
      if (rate === undefined) continue
      const defined = { limit: rate.limit, periodMs: rate.periodMs }
      byJob.set(registered.job.name, { job: registered.job.name, defined, override: undefined, effective: defined })
    }
    for (const o of overrides) {
      const override = {
        limit: o.limit,
        periodMs: o.periodMs,
        actor: o.actor,
        reason: o.reason,
        updatedAt: o.updatedAt
      }
      const defined = byJob.get(o.job)?.defined
      byJob.set(o.job, { job: o.job, defined, override, effective: { limit: o.limit, periodMs: o.periodMs } })
    }
    return [...byJob.values()].sort((a, b) => (a.job < b.job ? -1 : a.job > b.job ? 1 : 0))
  })

  /**
   * Sets a job's rate at run time (`limit` per `period`), or clears it (`undefined`: back to the
   * definition's). Takes effect at every process's next claim of the job's queue.
   */
  const setJobRate = (
    job: string,
    rate: { readonly limit: number; readonly period: Duration.Input } | undefined,
    change: Change
  ) =>
    Effect.gen(function* () {
      if (job.length === 0 || job.length > 128) return yield* new InvalidRequest({ reason: "a job name is required" })
      let periodMs: number | undefined
      if (rate !== undefined) {
        const d = Duration.fromInput(rate.period)
        if (d._tag === "None" || !Duration.isFinite(d.value) || Duration.toMillis(d.value) < 1) {
          return yield* new InvalidRequest({ reason: "the period must be a finite duration of at least 1 millisecond" })
        }
        if (!Number.isInteger(rate.limit) || rate.limit < 1) {
          return yield* new InvalidRequest({ reason: "the limit must be a positive integer" })
        }
        periodMs = Duration.toMillis(d.value)
      }
      yield* store
        .setRate(job, rate === undefined ? undefined : { limit: rate.limit, periodMs: periodMs! }, change)
        .pipe(
          Effect.mapError((error) =>
            error._tag === "InvalidMessage" ? new InvalidRequest({ reason: error.reason }) : fromQueueError(job)(error)
          )
        )
      yield* Effect.logWarning(
        `pgbus: rate of job ${job} ${rate === undefined ? "reset to its definition's" : `set to ${rate.limit} per ${periodMs} ms`} by ${change.actor}${change.reason ? ` (${change.reason})` : ""}`
      )
      const rates = yield* jobRates
      return rates.find((r) => r.job === job)
    })

  return { jobRates, setJobRate }
}
