/**
 * Retry backoff: `base * 2^(attempt-1)`, capped, spread by ±jitter, as seed 002 gives it.
 *
 * @since 0.1.0
 */
import { Duration } from "effect"
import type { PgBusConfigShape } from "../Config.ts"
import * as Input from "../Input.ts"

/** How a job retries: each key left out takes the config's value. */
export interface RetryPolicy {
  /** Deliveries before the dead-letter queue (`maxRetries` of the config). */
  readonly maxRetries?: number | undefined
  /** Base delay (default 5 s). */
  readonly backoff?: Duration.Input | undefined
  /** Cap of the delay (default 300 s). */
  readonly backoffMax?: Duration.Input | undefined
  /** Spread, 0 to 1: the delay is multiplied by a random factor in [1 - jitter, 1 + jitter]. */
  readonly jitter?: number | undefined
}

/** A retry policy with every value set. */
export interface ResolvedRetryPolicy {
  readonly maxRetries: number
  readonly backoffMs: number
  readonly backoffMaxMs: number
  readonly jitter: number
  /** Typed errors (by `_tag`) that discard the job. */
  readonly discardOn?: ReadonlySet<string> | undefined
  /** Typed errors (by `_tag`) that dead-letter the job at once. */
  readonly deadLetterOn?: ReadonlySet<string> | undefined
}

/** A policy with a job's per-error rules added (none given: the policy as it is). */
export const withErrorRules = (
  policy: ResolvedRetryPolicy,
  rules: {
    readonly discardOn?: ReadonlyArray<string> | undefined
    readonly deadLetterOn?: ReadonlyArray<string> | undefined
  }
): ResolvedRetryPolicy => ({
  ...policy,
  ...(rules.discardOn?.length ? { discardOn: new Set(rules.discardOn) } : {}),
  ...(rules.deadLetterOn?.length ? { deadLetterOn: new Set(rules.deadLetterOn) } : {})
})

/** The config's policy with a job's overrides on top. */
export const resolvePolicy = (config: PgBusConfigShape, policy: RetryPolicy | undefined): ResolvedRetryPolicy => ({
  maxRetries: policy?.maxRetries ?? config.maxRetries,
  backoffMs: Duration.toMillis(policy?.backoff ?? config.retryBackoff),
  backoffMaxMs: Duration.toMillis(policy?.backoffMax ?? config.retryBackoffMax),
  jitter: policy?.jitter ?? config.retryBackoffJitter
})

const RETRY_POLICY_KEYS = ["maxRetries", "backoff", "backoffMax", "jitter"] as const

/** Checks a policy (no key but its four); a message when it is invalid. */
export const checkPolicy = (policy: RetryPolicy): string | undefined => {
  const keys = Input.optionsProblem(policy, RETRY_POLICY_KEYS, "retry")
  if (keys !== undefined) return keys
  // it counts deliveries: 0 would send every message to the DLQ unrun; a read count is an int4
  if (
    policy.maxRetries !== undefined &&
    (!Number.isInteger(policy.maxRetries) || policy.maxRetries < 1 || policy.maxRetries >= Input.INT4_MAX)
  ) {
    return `retry.maxRetries must be an integer from 1 to ${Input.INT4_MAX - 1} (it counts deliveries)`
  }
  for (const key of ["backoff", "backoffMax"] as const) {
    const value = policy[key]
    if (value !== undefined) {
      const d = Duration.fromInput(value)
      if (d._tag === "None" || !Duration.isFinite(d.value) || !Duration.isPositive(d.value)) {
        return `retry.${key} must be a positive duration`
      }
    }
  }
  if (policy.jitter !== undefined && !(policy.jitter >= 0 && policy.jitter <= 1)) {
    return "retry.jitter must be between 0 and 1"
  }
  return undefined
}

/**
 * The delay before the next delivery after the failure of `attempt` (1 for the first).
 * `random` is a number in [0, 1) (Effect's `Random` in production, fixed in tests).
 */
export const backoffDelayMs = (policy: ResolvedRetryPolicy, attempt: number, random: number): number => {
  const exponential = policy.backoffMs * 2 ** Math.max(0, attempt - 1)
  const capped = Math.min(exponential, policy.backoffMaxMs)
  return Math.max(0, Math.round(capped * (1 + policy.jitter * (2 * random - 1))))
}

/** Whether the delivery numbered `readCt` is past the policy (it goes to the dead-letter queue unrun). */
export const isExhausted = (policy: ResolvedRetryPolicy, readCt: number): boolean => readCt > policy.maxRetries

/** Whether a failure of delivery `readCt` was the last allowed one. */
export const isLastAttempt = (policy: ResolvedRetryPolicy, readCt: number): boolean => readCt >= policy.maxRetries
