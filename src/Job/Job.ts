/**
 * Job definitions: a name, a Schema for the payload, a queue, a retry policy, a timeout and a
 * handler. `Job.make` checks the options where the job is defined.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, type Schema } from "effect"
import * as QueueName from "../Queue/QueueName.ts"
import { checkLimit, type LimitOptions, type LimitSpec, limitSpec } from "./ConcurrencyLimit.ts"
import { checkDebounce, type DebounceOptions, type DebounceSpec, debounceSpec } from "./Debounce.ts"
import { type AwaitOptions, type EnqueueOptions, JobClient } from "./JobClient.ts"
import { type EnqueueError, InvalidJobDefinition, JobSnoozed, type ResultError } from "./JobError.ts"
import type { JobRef } from "./JobRef.ts"
import { checkRate, type RateOptions, type RateSpec, rateSpec } from "./RateLimit.ts"
import { checkPolicy, type RetryPolicy } from "./Retry.ts"
import { checkUnique, type UniqueOptions, type UniqueSpec, uniqueSpec } from "./Uniqueness.ts"

export { type JobRef, jobRef } from "./JobRef.ts"

/**
 * What a running job knows about itself; provided to every handler.
 *
 * @category services
 */
export class JobContext extends Context.Service<
  JobContext,
  {
    readonly job: string
    readonly queue: string
    readonly msgId: bigint
    /** Delivery number, 1 for the first. */
    readonly attempt: number
    readonly enqueuedAt: Date
    readonly headers: Readonly<Record<string, unknown>>
  }
>()("effect-pgbus/JobContext") {}

/** The options of `Job.make`. */
export interface JobOptions<P, A = unknown> {
  /** Schema of the payload: it is encoded at enqueue and decoded before the handler runs. */
  readonly payload: Schema.ConstraintCodec<P, unknown>
  /**
   * Schema of the handler's output: given, the output is encoded and kept with the archived
   * message (at most `maxPayloadSize`), for `awaitResult`.
   */
  readonly success?: Schema.ConstraintCodec<A, unknown> | undefined
  /** Queue (default: the config's `defaultQueue`). */
  readonly queue?: string | undefined
  /** Priority sub-queue, 0 highest (used when the config sets `priorityLevels`). */
  readonly priority?: number | undefined
  /** Overrides of the config's retry policy. */
  readonly retry?: RetryPolicy | undefined
  /** Longest run of one attempt; a longer one fails with `JobTimeout`. */
  readonly timeout?: Duration.Input | undefined
  /** At most one job per key (see docs/jobs.md, "Uniqueness"). */
  readonly unique?: UniqueOptions<P> | undefined
  /** At most `to` jobs of one key running at once, across all processes (see docs/jobs.md, "Concurrency limits"). */
  readonly limit?: LimitOptions<P> | undefined
  /** At most `limit` jobs started per `period`, per queue and key, across all processes (see docs/jobs.md, "Rate limits"). */
  readonly rate?: RateOptions<P> | undefined
  /** Of a burst of enqueues of one key, only the last runs, once the key is quiet (see docs/jobs.md, "Debounce"). */
  readonly debounce?: DebounceOptions<P> | undefined
  /**
   * Typed errors (by `_tag`) that end the job without a retry or a dead letter: the message is
   * archived with a `discarded` mark (the failure), and awaiters get `JobDiscarded`.
   */
  readonly discardOn?: ReadonlyArray<string> | undefined
  /** Typed errors (by `_tag`) that are not retried: the first one dead-letters the job. */
  readonly deadLetterOn?: ReadonlyArray<string> | undefined
  /**
   * Per-key FIFO: the ordering key of a job (e.g. its account id). Jobs of one key run one at a
   * time in enqueue order; other keys run in parallel. `undefined`: the job is unordered. An
   * enqueue's `orderKey` option overrides it.
   */
  readonly orderKey?: ((payload: P) => string | undefined) | undefined
  /**
   * With `orderKey`: what a key does when its head is dead-lettered: `continue` (default) runs
   * its next job; `block` keeps the key blocked until an operator releases it
   * (`Operations.releaseKey`), so no later job of the key overtakes the dead one.
   */
  readonly onDeadLetter?: "continue" | "block" | undefined
}

const TypeId = "~effect-pgbus/Job"

/** A job's settings that do not depend on its payload's type (shared by `Job` and `AnyJob`). */
export interface JobSettings {
  readonly queue: string | undefined
  readonly priority: number | undefined
  readonly retry: RetryPolicy | undefined
  readonly timeout: Duration.Duration | undefined
  readonly unique: UniqueSpec | undefined
  readonly limit: LimitSpec | undefined
  readonly rate: RateSpec | undefined
  readonly debounce: DebounceSpec | undefined
  readonly discardOn: ReadonlyArray<string> | undefined
  readonly deadLetterOn: ReadonlyArray<string> | undefined
  readonly onDeadLetter: "continue" | "block" | undefined
}

/**
 * A job definition.
 *
 * @category models
 */
export interface Job<out Name extends string, in out P, out A = unknown, out E = unknown, out R = never>
  extends JobSettings {
  readonly [TypeId]: typeof TypeId
  readonly name: Name
  readonly payload: Schema.ConstraintCodec<P, unknown>
  readonly success: Schema.ConstraintCodec<A, unknown> | undefined
  readonly orderKey: ((payload: P) => string | undefined) | undefined
  readonly handler: (payload: P, context: JobContext["Service"]) => Effect.Effect<A, E, R>
  /** Enqueues one job (joins the caller's transaction); returns where it is. */
  readonly enqueue: (payload: P, options?: EnqueueOptions) => Effect.Effect<JobRef, EnqueueError, JobClient>
  /** Enqueues many jobs in one statement; returns where they are, in order. */
  readonly enqueueMany: (
    payloads: Iterable<P>,
    options?: EnqueueOptions
  ) => Effect.Effect<ReadonlyArray<JobRef>, EnqueueError, JobClient>
  /**
   * Waits for a job's outcome: its output (decoded with `success`), or `JobDeadLettered`,
   * `JobDiscarded`, `JobResultTimeout`, `JobResultUnavailable`. Woken by NOTIFY.
   */
  readonly awaitResult: (ref: JobRef, options?: AwaitOptions) => Effect.Effect<A, ResultError, JobClient>
}

/** Any job, for registries and lists. */
export interface AnyJob extends JobSettings {
  readonly [TypeId]: typeof TypeId
  readonly name: string
  readonly payload: Schema.ConstraintCodec<unknown, unknown>
  readonly success: Schema.ConstraintCodec<unknown, unknown> | undefined
  readonly orderKey: ((payload: never) => string | undefined) | undefined
  readonly handler: (payload: never, context: JobContext["Service"]) => Effect.Effect<unknown, unknown, unknown>
}

/** The services a job's handler needs. */
export type Requirements<J> = J extends Job<string, infer _P, infer _A, infer _E, infer R> ? R : never

/** Whether a value is a job definition. */
export const isJob = (u: unknown): u is AnyJob => typeof u === "object" && u !== null && TypeId in u

const JOB_NAME = /^[A-Za-z][A-Za-z0-9_.:-]{0,127}$/

/** Checks a definition's options; the reason when invalid. */
export const validateDefinition = (name: string, options: JobOptions<unknown>): string | undefined => {
  if (!JOB_NAME.test(name)) return "the name must start with a letter and use letters, digits, _ . : - (at most 128)"
  if (options.queue !== undefined && !/^[a-z][a-z0-9_]*$/.test(options.queue)) {
    return `queue ${JSON.stringify(options.queue)} must use lowercase letters, digits and underscores`
  }
  if (options.queue?.endsWith(QueueName.DEAD_LETTER_SUFFIX)) {
    return "a job cannot run on a dead-letter queue"
  }
  if (options.priority !== undefined && (!Number.isInteger(options.priority) || options.priority < 0)) {
    return "priority must be an integer of at least 0 (0 is the highest)"
  }
  if (options.timeout !== undefined) {
    const d = Duration.fromInput(options.timeout)
    if (d._tag === "None" || !Duration.isPositive(d.value)) return "timeout must be a positive duration"
  }
  const allowed = new Set([
    "payload",
    "success",
    "queue",
    "priority",
    "retry",
    "timeout",
    "unique",
    "limit",
    "rate",
    "debounce",
    "discardOn",
    "deadLetterOn",
    "orderKey",
    "onDeadLetter"
  ])
  for (const key of Object.keys(options)) if (!allowed.has(key)) return `unknown option ${key}`
  const tags = checkErrorTags(options.discardOn, options.deadLetterOn)
  if (tags !== undefined) return tags
  if (options.orderKey !== undefined && typeof options.orderKey !== "function") {
    return "orderKey must be a function of the payload"
  }
  if (options.onDeadLetter !== undefined) {
    if (options.onDeadLetter !== "continue" && options.onDeadLetter !== "block") {
      return 'onDeadLetter must be "continue" or "block"'
    }
    if (options.orderKey === undefined) return "onDeadLetter applies to ordered jobs only (give orderKey)"
  }
  // an ordered queue is read by the ordered claim, a limited or rate-limited one by the limited
  // claim: one statement cannot do both yet, and a debounced job's superseded deliveries would
  // hold its key's turn
  if (options.orderKey !== undefined) {
    for (const control of ["limit", "rate", "debounce"] as const) {
      if (options[control] !== undefined) return `orderKey and ${control} cannot be combined (not supported yet)`
    }
  }
  if (options.unique !== undefined) {
    const invalid = checkUnique(options.unique as UniqueOptions<never>)
    if (invalid !== undefined) return invalid
  }
  if (options.limit !== undefined) {
    const invalid = checkLimit(options.limit as LimitOptions<never>)
    if (invalid !== undefined) return invalid
  }
  if (options.rate !== undefined) {
    const invalid = checkRate(options.rate as RateOptions<never>)
    if (invalid !== undefined) return invalid
  }
  if (options.debounce !== undefined) {
    if (options.unique !== undefined)
      return "debounce and unique cannot be combined (debounce already keeps one job per key)"
    const invalid = checkDebounce(options.debounce as DebounceOptions<never>)
    if (invalid !== undefined) return invalid
  }
  return options.retry === undefined ? undefined : checkPolicy(options.retry)
}

const checkErrorTags = (
  discardOn: ReadonlyArray<string> | undefined,
  deadLetterOn: ReadonlyArray<string> | undefined
): string | undefined => {
  for (const [name, tags] of [
    ["discardOn", discardOn],
    ["deadLetterOn", deadLetterOn]
  ] as const) {
    if (tags === undefined) continue
    if (!Array.isArray(tags) || tags.some((t) => typeof t !== "string" || t === "")) {
      return `${name} must be a list of error tags (non-empty strings)`
    }
  }
  const both = discardOn?.find((t) => deadLetterOn?.includes(t))
  return both === undefined ? undefined : `${both} is in both discardOn and deadLetterOn`
}

/**
 * Ends the running attempt and puts the job back in its queue after `delay`, without counting
 * the attempt (the next delivery has the same attempt number). Use it inside a handler:
 * `yield* Job.snooze("5 minutes")`.
 */
export const snooze = (delay: Duration.Input): Effect.Effect<never, JobSnoozed> =>
  Effect.suspend(() => {
    const d = Duration.fromInput(delay)
    const ms = d._tag === "Some" && Duration.isFinite(d.value) ? Math.max(0, Duration.toMillis(d.value)) : 0
    return Effect.fail(new JobSnoozed({ delayMs: ms }))
  })

/**
 * Defines a job. Throws `InvalidJobDefinition` at definition time for a bad name or option: a
 * mistake in code, found when the module loads rather than when the first message arrives.
 */
export const make = <const Name extends string, P, A, E, R>(
  name: Name,
  options: JobOptions<P, A>,
  handler: (payload: P, context: JobContext["Service"]) => Effect.Effect<A, E, R>
): Job<Name, P, A, E, R> => {
  const invalid = validateDefinition(name, options as JobOptions<unknown>)
  if (invalid !== undefined) throw new InvalidJobDefinition({ job: name, reason: invalid })
  const job: Job<Name, P, A, E, R> = {
    [TypeId]: TypeId,
    name,
    payload: options.payload,
    success: options.success,
    queue: options.queue,
    priority: options.priority,
    retry: options.retry,
    timeout: options.timeout === undefined ? undefined : Duration.fromInputUnsafe(options.timeout),
    unique: uniqueSpec(options.unique as UniqueOptions<never> | undefined),
    limit: limitSpec(options.limit as LimitOptions<never> | undefined),
    rate: rateSpec(options.rate as RateOptions<never> | undefined),
    debounce: debounceSpec(options.debounce as DebounceOptions<never> | undefined),
    discardOn: options.discardOn,
    deadLetterOn: options.deadLetterOn,
    orderKey: options.orderKey,
    onDeadLetter: options.onDeadLetter,
    handler,
    enqueue: (payload, enqueueOptions) => JobClient.use((client) => client.enqueue(job, payload, enqueueOptions)),
    enqueueMany: (payloads, enqueueOptions) =>
      JobClient.use((client) => client.enqueueMany(job, payloads, enqueueOptions)),
    awaitResult: (ref, awaitOptions) => JobClient.use((client) => client.result(job, ref, awaitOptions))
  }
  return job
}
