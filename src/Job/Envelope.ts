/**
 * A job's message and where it goes: the envelope and the fields written beside it, the options
 * of an enqueue and their checks, the ordering key, the (priority) queue, the fair-share tag.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import type { PgBusConfigShape } from "../Config.ts"
import * as Input from "../Input.ts"
import { type FairTag, resolveFairShare } from "../Queue/FairShare.ts"
import { InvalidMessage, InvalidQueueName } from "../Queue/QueueError.ts"
import * as QueueName from "../Queue/QueueName.ts"
import type { SendOptions } from "../Queue/QueueStore.ts"
import type { AnyJob, Job } from "./Job.ts"
import { type InvalidFairShare, InvalidPayload } from "./JobError.ts"

/** The envelope stored as a job message. */
export const Envelope = Schema.Struct({ job: Schema.String, payload: Schema.Unknown })
export type Envelope = typeof Envelope.Type

/** An envelope as written: with the fair-share tag beside it when a resolver gave one. */
export type TaggedEnvelope = Envelope & {
  readonly pgbus_fair_key?: string
  readonly pgbus_fair_weight?: number
  readonly pgbus_unique_key?: string
  readonly pgbus_limit_key?: string
  readonly pgbus_limit_to?: number
  readonly pgbus_limit_lease_ms?: number
  readonly pgbus_rate_key?: string
  readonly pgbus_rate_limit?: number
  readonly pgbus_rate_period_ms?: number
  readonly pgbus_order_key?: string
}

/** An envelope with its ordering key beside it (unchanged without one). */
export const withOrderKey = (envelope: TaggedEnvelope, key: string | undefined): TaggedEnvelope =>
  key === undefined ? envelope : { ...envelope, [ORDER_KEY_FIELD]: key }

/** A job's name for spans, whatever was given as the job. */
export const jobName = (job: unknown): string => (Input.isPlainObject(job) ? String(job.name) : String(job))

const ENQUEUE_OPTIONS = ["delay", "at", "headers", "queue", "priority", "uniqueKey", "orderKey"] as const

/**
 * Checks a job and the options of an enqueue before anything is written (a queue created
 * for a call that fails would be a write): a job definition, known option keys, headers a
 * JSON object of storable values, a finite non-negative delay, a valid `at`, a priority in
 * range, a queue that is not a dead-letter queue.
 */
export const checkEnqueue = (
  job: unknown,
  options: unknown
): InvalidPayload | InvalidMessage | InvalidQueueName | undefined => {
  if (!Input.isPlainObject(job) || typeof job.name !== "string" || !Schema.isSchema(job.payload)) {
    return new InvalidPayload({ job: String(job), issue: "not a job definition (Job.make)" })
  }
  const queue = Input.isPlainObject(options) && typeof options.queue === "string" ? options.queue : String(job.queue)
  const invalid = (reason: string) => new InvalidMessage({ queue, reason })
  const problem = Input.optionsProblem(options, ENQUEUE_OPTIONS, "enqueue options")
  if (problem !== undefined || options === undefined) return problem === undefined ? undefined : invalid(problem)
  const o = options as EnqueueOptions
  if (o.headers !== undefined) {
    const headers = Input.headersProblem(o.headers)
    if (headers !== undefined) return invalid(headers)
  }
  if (o.delay !== undefined && Input.durationMillis(o.delay) === undefined) {
    return invalid("delay must be a finite, non-negative duration")
  }
  if (o.at !== undefined && !Input.isValidDate(o.at)) return invalid("at must be a valid Date")
  if (o.priority !== undefined) {
    const priority = Input.intProblem(o.priority, 0, Input.INT4_MAX, "priority")
    if (priority !== undefined) return invalid(priority)
  }
  if (o.queue !== undefined) {
    if (typeof o.queue !== "string") return new InvalidQueueName({ name: String(o.queue), rule: "must be a string" })
    if (o.queue.endsWith(QueueName.DEAD_LETTER_SUFFIX)) {
      return new InvalidQueueName({ name: o.queue, rule: "a job cannot be sent to a dead-letter queue" })
    }
  }
  return undefined
}

/** When a job runs and what extra headers it carries. */
export interface EnqueueOptions {
  readonly delay?: SendOptions["delay"]
  readonly at?: SendOptions["at"]
  readonly headers?: SendOptions["headers"]
  /** Another queue than the job's own. */
  readonly queue?: string | undefined
  /** Another priority than the job's own. */
  readonly priority?: number | undefined
  /** The uniqueness key (instead of the job's `unique.key`); a job without `unique` is then unique with the defaults. */
  readonly uniqueKey?: string | undefined
  /** The ordering key, instead of the one the job's `orderKey` gives (the job must be ordered). */
  readonly orderKey?: string | undefined
}

/** Field of a job message holding its ordering key (beside the envelope, as the fair-share key). */
export const ORDER_KEY_FIELD = "pgbus_order_key"

/**
 * The ordering key of a job: the enqueue's, else its `orderKey`'s answer. Fails with
 * `InvalidPayload` for a key that is not a non-empty string of at most 255 characters, a
 * resolver that throws, or a key given for a job that is not ordered (its queue's workers would
 * not read it in order).
 */
export const jobOrderKey = <P>(
  job: Pick<Job<string, P, unknown, unknown, unknown>, "name" | "orderKey">,
  payload: P,
  options: Pick<EnqueueOptions, "orderKey"> | undefined
): Effect.Effect<string | undefined, InvalidPayload> => {
  const invalid = (issue: string) => Effect.fail(new InvalidPayload({ job: job.name, issue }))
  if (job.orderKey === undefined) {
    return options?.orderKey === undefined
      ? Effect.succeed(undefined)
      : invalid("orderKey is given, but the job is not ordered (define it with orderKey)")
  }
  let key: unknown = options?.orderKey
  if (key === undefined) {
    try {
      key = job.orderKey(payload)
    } catch (error) {
      return invalid(`its orderKey threw: ${String(error)}`)
    }
  }
  if (key === undefined) return Effect.succeed(undefined)
  if (typeof key !== "string" || key.length === 0 || key.length > 255) {
    return invalid("an ordering key must be a non-empty string of at most 255 characters")
  }
  return Effect.succeed(key)
}

/** The queue a job goes to before any priority sub-queue: the enqueue's, its own, or the default. */
export const logicalQueueOf = (
  config: PgBusConfigShape,
  job: Pick<AnyJob, "queue">,
  options?: Pick<EnqueueOptions, "queue">
): string => options?.queue ?? job.queue ?? config.defaultQueue

/** The queue a job's message goes to: its own or the default, and its priority sub-queue. */
export const physicalQueueOf = (
  config: PgBusConfigShape,
  job: Pick<AnyJob, "queue" | "priority">,
  options?: Pick<EnqueueOptions, "queue" | "priority">
): string => {
  const queue = logicalQueueOf(config, job, options)
  if (config.priorityLevels === undefined) return queue
  const priority = Math.min(
    config.priorityLevels - 1,
    Math.max(0, options?.priority ?? job.priority ?? config.defaultPriority)
  )
  return `${queue}_p${priority}`
}

/** The queues a worker reads for a queue it serves: the queue, or its sub-queues highest first. */
export const servedQueues = (config: PgBusConfigShape, queue: string): ReadonlyArray<string> =>
  config.priorityLevels === undefined
    ? [queue]
    : Array.from({ length: config.priorityLevels }, (_, i) => `${queue}_p${i}`)

/**
 * The fair-share tag of a job, from the config's `fairShare` resolver (none when it is unset).
 * `queue` is the queue before any priority sub-queue. A bad answer fails with `InvalidFairShare`.
 */
export const jobFairShare = (
  config: PgBusConfigShape,
  job: { readonly name: string },
  payload: unknown,
  queue: string,
  headers: Readonly<Record<string, unknown>> | undefined
): Effect.Effect<FairTag | undefined, InvalidFairShare> => {
  const resolver = config.fairShare
  if (resolver === undefined) return Effect.succeed(undefined)
  return resolveFairShare(`job ${job.name}`, () => resolver({ name: job.name, payload, queue, headers: headers ?? {} }))
}
