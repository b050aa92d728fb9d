/**
 * Concurrency limits (seed 002 "Concurrency limits"): at most `to` jobs of one key run at once,
 * across every process. The key and the limit ride in the message (`pgbus_limit_key`,
 * `pgbus_limit_to`); the queue store's limited claim counts the running messages of each key and
 * passes over keys at their limit, so no worker takes a job it may not run, and a parked job is
 * claimed by the first claim after a slot frees (the end of a limited run wakes the readers).
 * A slot is the running message's claim: its lease is the message's visibility (`duration`, or
 * the visibility timeout), renewed by the worker's heartbeat, and given back by fast recovery
 * when its process is found dead, or once the lease lapses unrenewed.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Exit, Result, Schema, SchemaIssue } from "effect"
import { durationMillis } from "../Input.ts"
import type { Message } from "../Queue/Message.ts"
import { LIMIT_LEASE_FIELD } from "../Queue/SlotLease.ts"
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
  /**
   * The slot's lease (default: the visibility timeout): how long a holder that stopped
   * heartbeating (its process gone unnoticed, its heartbeat stuck) keeps its slot, and its job
   * stays invisible. A running job's heartbeat renews it, so it bounds silence, not run time.
   * Raised to twice the visibility heartbeat's interval when shorter, so that a lease never
   * lapses before a beat renews it.
   */
  readonly duration?: Duration.Input | undefined
}

/** A job's limit as checked at definition. */
export interface LimitSpec {
  readonly to: number
  readonly key: ((payload: never) => string) | undefined
  readonly onConflict: "block" | "discard" | "raise"
  /** `duration` in milliseconds, as given (the floor is applied where the heartbeat is known). */
  readonly leaseMs: number | undefined
}

const rule = <T>(ok: (u: unknown) => u is T, message: string) =>
  Schema.Unknown.check(Schema.makeFilter((u: unknown) => ok(u) || message))

// The `limit` option's schema (its keys are checked first: unknown ones are named).
const LimitOptionsSchema = Schema.Struct({
  to: rule(
    (u): u is number => typeof u === "number" && Number.isInteger(u) && u >= 1 && u <= 1_000_000,
    "must be an integer from 1 to 1,000,000"
  ),
  key: Schema.optionalKey(
    rule(
      (u): u is ((payload: never) => string) | undefined => u === undefined || typeof u === "function",
      "must be a function"
    )
  ),
  onConflict: Schema.optionalKey(
    rule(
      (u): u is "block" | "discard" | "raise" | undefined =>
        u === undefined || u === "block" || u === "discard" || u === "raise",
      "must be block, discard or raise"
    )
  ),
  duration: Schema.optionalKey(
    rule((u): u is Duration.Input | undefined => {
      if (u === undefined) return true
      const ms = durationMillis(u)
      return ms !== undefined && ms >= 1
    }, "must be a finite duration of at least 1 millisecond")
  )
})
const decodeLimitOptions = Schema.decodeUnknownExit(LimitOptionsSchema)
const formatIssue = SchemaIssue.makeFormatterStandardSchemaV1()
const LIMIT_KEYS = ["to", "key", "onConflict", "duration"]

/** Checks the `limit` option (decoded with its Schema); the reason when invalid. */
export const checkLimit = (options: LimitOptions<never>): string | undefined => {
  if (typeof options !== "object" || options === null || Array.isArray(options)) return "limit must be an object"
  for (const k of Object.keys(options)) {
    if (!LIMIT_KEYS.includes(k)) return `unknown limit option ${k}`
  }
  const decoded = decodeLimitOptions(options)
  if (Exit.isSuccess(decoded)) return undefined
  const error = Exit.findErrorOption(decoded)
  if (error._tag === "None") return "limit is invalid"
  const [first] = formatIssue(error.value.issue).issues
  if (first === undefined) return "limit is invalid"
  const path = first.path?.map(String).join(".")
  return `limit${path === undefined || path === "" ? "" : `.${path}`} ${first.message}`
}

/** The checked spec of a valid `limit` option. */
export const limitSpec = (options: LimitOptions<never> | undefined): LimitSpec | undefined =>
  options === undefined
    ? undefined
    : {
        to: options.to,
        key: options.key,
        onConflict: options.onConflict ?? "block",
        leaseMs:
          options.duration === undefined ? undefined : Duration.toMillis(Duration.fromInputUnsafe(options.duration))
      }

/** The fields a limited job's message carries. */
export interface LimitFields {
  readonly pgbus_limit_key: string
  readonly pgbus_limit_to: number
  readonly pgbus_limit_lease_ms?: number
}

/**
 * A flow-control key from the job's key function (concurrency limit or rate): the function may
 * throw or return something that is not a key; either is an `InvalidLimitKey` naming `what`.
 */
export const controlKey = (
  job: string,
  fn: (payload: unknown) => unknown,
  payload: unknown,
  what: string
): Result.Result<string, InvalidLimitKey> => {
  let key: unknown
  try {
    key = fn(payload)
  } catch (error) {
    return Result.fail(
      new InvalidLimitKey({
        job,
        reason: `the ${what} function threw: ${error instanceof Error ? error.message : String(error)}`
      })
    )
  }
  return typeof key === "string" && key.length > 0 && key.length <= 255
    ? Result.succeed(key)
    : Result.fail(new InvalidLimitKey({ job, reason: "a key must be a non-empty string of at most 255 characters" }))
}

/**
 * The fields a limited job's message carries, as a Result: no Effect per payload (an
 * `enqueueMany` of 20,000 jobs computes them 20,000 times); the key function may throw.
 */
export const limitFieldsResult = (
  job: string,
  spec: LimitSpec,
  payload: unknown
): Result.Result<LimitFields, InvalidLimitKey> => {
  const fields = (key: string): LimitFields =>
    spec.leaseMs === undefined
      ? { [LIMIT_KEY_FIELD]: key, [LIMIT_TO_FIELD]: spec.to }
      : { [LIMIT_KEY_FIELD]: key, [LIMIT_TO_FIELD]: spec.to, [LIMIT_LEASE_FIELD]: spec.leaseMs }
  const fn = spec.key as ((payload: unknown) => unknown) | undefined
  return fn === undefined ? Result.succeed(fields(job)) : Result.map(controlKey(job, fn, payload, "key"), fields)
}

/** The fields a limited job's message carries; the key function may throw. */
export const limitFields = (
  job: string,
  spec: LimitSpec,
  payload: unknown
): Effect.Effect<LimitFields, InvalidLimitKey> => Effect.fromResult(limitFieldsResult(job, spec, payload))

/** Whether a stored message carries a concurrency limit. */
export const isLimited = (m: Pick<Message, "message">): boolean => {
  const envelope = m.message
  return typeof envelope === "object" && envelope !== null && LIMIT_KEY_FIELD in envelope
}
