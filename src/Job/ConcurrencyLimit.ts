/**
 * Concurrency limits (seed 002 "Concurrency limits"): at most `to` jobs of one key run at once,
 * across every process. The key and the limit ride in the message (`pgbus_limit_key`,
 * `pgbus_limit_to`); the queue store's limited claim counts the running messages of each key and
 * passes over keys at their limit, so no worker takes a job it may not run, and a parked job is
 * claimed by the first claim after a slot frees (the end of a limited run wakes the readers).
 * A slot is the running message's claim: its lease is the message's visibility, renewed by the
 * worker's heartbeat, and given back by fast recovery when its process dies.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { Message } from "../Queue/Message.ts"
import { InvalidLimitKey } from "./JobError.ts"

/** The envelope field carrying a limited job's key. */
export const LIMIT_KEY_FIELD = "pgbus_limit_key"

/** The envelope field carrying a limited job's limit. */
export const LIMIT_TO_FIELD = "pgbus_limit_to"

/**
 * The `limit` option of `Job.make`.
 *
 * @category models
 */
export interface LimitOptions<P> {
  /** Most jobs of one key running at once, across all processes (an integer of at least 1). */
  readonly to: number
  /** The key from the payload (default: the job's name, one limit for all its jobs). At most 255 characters. */
  readonly key?: ((payload: P) => string) | undefined
  /**
   * What an enqueue finds when the key already has `to` unfinished jobs: `block` (default) parks
   * the new one until a slot frees; `discard` drops it and returns the oldest unfinished job's
   * ref; `raise` fails with `ConcurrencyLimitExceeded`.
   */
  readonly onConflict?: "block" | "discard" | "raise" | undefined
}

/** A job's limit as checked at definition. */
export interface LimitSpec {
  readonly to: number
  readonly key: ((payload: never) => string) | undefined
  readonly onConflict: "block" | "discard" | "raise"
}

/** Checks the `limit` option; the reason when invalid. */
export const checkLimit = (options: LimitOptions<never>): string | undefined => {
  if (typeof options !== "object" || options === null) return "limit must be an object"
  for (const k of Object.keys(options)) {
    if (!["to", "key", "onConflict"].includes(k)) return `unknown limit option ${k}`
  }
  if (!Number.isInteger(options.to) || options.to < 1 || options.to > 1_000_000) {
    return "limit.to must be an integer from 1 to 1,000,000"
  }
  if (options.key !== undefined && typeof options.key !== "function") return "limit.key must be a function"
  if (
    options.onConflict !== undefined &&
    options.onConflict !== "block" &&
    options.onConflict !== "discard" &&
    options.onConflict !== "raise"
  ) {
    return "limit.onConflict must be block, discard or raise"
  }
  return undefined
}

/** The checked spec of a valid `limit` option. */
export const limitSpec = (options: LimitOptions<never> | undefined): LimitSpec | undefined =>
  options === undefined ? undefined : { to: options.to, key: options.key, onConflict: options.onConflict ?? "block" }

/** The fields a limited job's message carries; the key function may throw. */
export const limitFields = (
  job: string,
  spec: LimitSpec,
  payload: unknown
): Effect.Effect<{ readonly pgbus_limit_key: string; readonly pgbus_limit_to: number }, InvalidLimitKey> => {
  const fn = spec.key as ((payload: unknown) => unknown) | undefined
  if (fn === undefined) return Effect.succeed({ [LIMIT_KEY_FIELD]: job, [LIMIT_TO_FIELD]: spec.to })
  return Effect.try({
    try: () => fn(payload),
    catch: (error) =>
      new InvalidLimitKey({
        job,
        reason: `the key function threw: ${error instanceof Error ? error.message : String(error)}`
      })
  }).pipe(
    Effect.flatMap((key) =>
      typeof key === "string" && key.length > 0 && key.length <= 255
        ? Effect.succeed({ [LIMIT_KEY_FIELD]: key, [LIMIT_TO_FIELD]: spec.to })
        : Effect.fail(
            new InvalidLimitKey({ job, reason: "a key must be a non-empty string of at most 255 characters" })
          )
    )
  )
}

/** Whether a stored message carries a concurrency limit. */
export const isLimited = (m: Pick<Message, "message">): boolean => {
  const envelope = m.message
  return typeof envelope === "object" && envelope !== null && LIMIT_KEY_FIELD in envelope
}
