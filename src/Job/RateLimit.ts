/**
 * Rate limits: at most `limit` jobs per `period` started, per queue and key, across every
 * process and host. A token bucket per queue and key (capacity `limit`, refilled continuously)
 * is taken by the queue store's limited claim in the claim statement itself, for the whole
 * claim: no round trip per job. Jobs beyond the rate stay visible and waiting. A job's rate can
 * be changed at run time (`QueueStore.setRate`, through the operations service).
 *
 * @since 0.1.0
 */
import { Duration, Effect, Result } from "effect"
import type { Message } from "../Queue/Message.ts"
import { controlKey } from "./ConcurrencyLimit.ts"
import type { InvalidLimitKey } from "./JobError.ts"

/** The envelope field carrying a rate-limited job's bucket key. */
export const RATE_KEY_FIELD = "pgbus_rate_key"

/**
 * The `rate` option of `Job.make`.
 *
 * @category models
 */
export interface RateOptions<P> {
  /** Most jobs started per period (an integer of at least 1); also the burst a full bucket allows. */
  readonly limit: number
  /** The period, e.g. `"1 minute"`. */
  readonly period: Duration.Input
  /** A bucket per key from the payload (default: one bucket for the job, per queue). At most 255 characters. */
  readonly key?: ((payload: P) => string) | undefined
}

/** A job's rate as checked at definition. */
export interface RateSpec {
  readonly limit: number
  readonly periodMs: number
  readonly key: ((payload: never) => string) | undefined
}

/** Checks the `rate` option; the reason when invalid. */
export const checkRate = (options: RateOptions<never>): string | undefined => {
  if (typeof options !== "object" || options === null) return "rate must be an object"
  for (const k of Object.keys(options)) {
    if (!["limit", "period", "key"].includes(k)) return `unknown rate option ${k}`
  }
  if (!Number.isInteger(options.limit) || options.limit < 1 || options.limit > 1_000_000_000) {
    return "rate.limit must be a positive integer"
  }
  const d = Duration.fromInput(options.period)
  if (d._tag === "None" || !Duration.isFinite(d.value) || Duration.toMillis(d.value) < 1) {
    return "rate.period must be a finite duration of at least 1 millisecond"
  }
  if (options.key !== undefined && typeof options.key !== "function") return "rate.key must be a function"
  return undefined
}

/** The checked spec of a valid `rate` option. */
export const rateSpec = (options: RateOptions<never> | undefined): RateSpec | undefined =>
  options === undefined
    ? undefined
    : {
        limit: options.limit,
        periodMs: Duration.toMillis(Duration.fromInputUnsafe(options.period)),
        key: options.key
      }

/** The fields a rate-limited job's message carries. */
export interface RateFields {
  readonly pgbus_rate_key: string
  readonly pgbus_rate_limit: number
  readonly pgbus_rate_period_ms: number
}

/**
 * The fields a rate-limited job's message carries, as a Result: no Effect per payload (an
 * `enqueueMany` of 20,000 jobs computes them 20,000 times); the key function may throw.
 */
export const rateFieldsResult = (
  job: string,
  spec: RateSpec,
  payload: unknown
): Result.Result<RateFields, InvalidLimitKey> => {
  const fields = (key: string): RateFields => ({
    [RATE_KEY_FIELD]: key,
    pgbus_rate_limit: spec.limit,
    pgbus_rate_period_ms: spec.periodMs
  })
  const fn = spec.key as ((payload: unknown) => unknown) | undefined
  return fn === undefined
    ? Result.succeed(fields(job))
    : Result.map(controlKey(job, fn, payload, "rate key"), (key) => fields(`${job}:${key}`))
}

/** The fields a rate-limited job's message carries; the key function may throw. */
export const rateFields = (job: string, spec: RateSpec, payload: unknown): Effect.Effect<RateFields, InvalidLimitKey> =>
  Effect.fromResult(rateFieldsResult(job, spec, payload))

/** Whether a stored message carries a rate limit. */
export const isRated = (m: Pick<Message, "message">): boolean => {
  const envelope = m.message
  return typeof envelope === "object" && envelope !== null && RATE_KEY_FIELD in envelope
}
