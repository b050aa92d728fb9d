/**
 * Enqueueing jobs: encode the payload with the job's Schema, wrap it in the envelope, carry the
 * current trace context in the headers, route to the job's (priority) queue, send. Joins the
 * caller's SQL transaction.
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, Option, Schema, Tracer } from "effect"
import { SqlClient } from "effect/sql"
import { CurrentBatch } from "../Batch/Membership.ts"
import { PgBusConfig, type PgBusConfigShape } from "../Config.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import type { BatchEntry, SendOptions } from "../Queue/QueueStore.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import type { AnyJob, Job } from "./Job.ts"
import { type EnqueueError, InvalidPayload } from "./JobError.ts"
import { type JobRef, jobRef } from "./JobRef.ts"

/** The envelope stored as a job message. */
export const Envelope = Schema.Struct({ job: Schema.String, payload: Schema.Unknown })
export type Envelope = typeof Envelope.Type

/** W3C trace context header carrying the enqueuer's span. */
export const TRACEPARENT = "traceparent"

/** When a job runs and what extra headers it carries. */
export interface EnqueueOptions {
  readonly delay?: SendOptions["delay"]
  readonly at?: SendOptions["at"]
  readonly headers?: SendOptions["headers"]
  /** Another queue than the job's own. */
  readonly queue?: string | undefined
  /** Another priority than the job's own. */
  readonly priority?: number | undefined
}

/** The queue a job's message goes to: its own or the default, and its priority sub-queue. */
export const physicalQueueOf = (
  config: PgBusConfigShape,
  job: Pick<AnyJob, "queue" | "priority">,
  options?: Pick<EnqueueOptions, "queue" | "priority">
): string => {
  const queue = options?.queue ?? job.queue ?? config.defaultQueue
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

const traceHeaders: Effect.Effect<Record<string, string>> = Effect.map(Effect.option(Effect.currentSpan), (span) =>
  Option.match(span, {
    onNone: () => ({}),
    onSome: (s) => ({ [TRACEPARENT]: `00-${s.traceId}-${s.spanId}-${s.sampled ? "01" : "00"}` })
  })
)

/** Reads a `traceparent` header back into a span to link to. */
export const linkedSpan = (headers: Readonly<Record<string, unknown>>): Tracer.ExternalSpan | undefined => {
  const value = headers[TRACEPARENT]
  if (typeof value !== "string") return undefined
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(value)
  if (!match) return undefined
  return Tracer.externalSpan({ traceId: match[1]!, spanId: match[2]!, sampled: match[3] === "01" })
}

/**
 * The job client: enqueue from any Effect.
 *
 * @category services
 */
export class JobClient extends Context.Service<
  JobClient,
  {
    /** Enqueues one job; returns where it is. */
    readonly enqueue: <P>(
      job: Job<string, P, unknown, unknown, never> | Job<string, P, unknown, unknown, unknown>,
      payload: P,
      options?: EnqueueOptions
    ) => Effect.Effect<JobRef, EnqueueError>
    /** Enqueues many jobs of one kind in one statement per queue; returns their refs in order. */
    readonly enqueueMany: <P>(
      job: Job<string, P, unknown, unknown, never> | Job<string, P, unknown, unknown, unknown>,
      payloads: Iterable<P>,
      options?: EnqueueOptions
    ) => Effect.Effect<ReadonlyArray<JobRef>, EnqueueError>
    /** Makes sure a queue (and its DLQ) exists; cached per process. */
    readonly ensureQueue: (queue: string) => Effect.Effect<void, QueueError>
  }
>()("effect-pgbus/JobClient") {
  /** The job client on the queue store. */
  static readonly layer: Layer.Layer<JobClient, never, PgBusConfig | QueueStore | SqlClient.SqlClient> = Layer.effect(
    JobClient,
    Effect.gen(function* () {
      const config = yield* PgBusConfig
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const known = new Set<string>()

      // A queue created inside the caller's transaction exists only once it commits, so it is
      // remembered after commit (afterCommit runs at once outside a transaction).
      const ensureQueue = (queue: string) =>
        known.has(queue)
          ? Effect.void
          : store.create(queue).pipe(Effect.andThen(sql.afterCommit(Effect.sync(() => known.add(queue)))))

      const encode = <P>(job: Job<string, P, unknown, unknown, unknown>, payload: P) =>
        Schema.encodeEffect(job.payload)(payload).pipe(
          Effect.mapError((error) => new InvalidPayload({ job: job.name, issue: error.message }))
        )

      const enqueueMany = <P>(
        job: Job<string, P, unknown, unknown, unknown>,
        payloads: Iterable<P>,
        options?: EnqueueOptions
      ) =>
        Effect.gen(function* () {
          const queue = physicalQueueOf(config, job, options)
          const encoded = yield* Effect.forEach(payloads, (p) => encode(job, p))
          if (encoded.length === 0) return [] as ReadonlyArray<JobRef>
          const trace = yield* traceHeaders
          const headers = { ...options?.headers, ...trace }
          const hasHeaders = Object.keys(headers).length > 0
          const entries: Array<BatchEntry> = encoded.map((payload) => ({
            message: { job: job.name, payload } satisfies Envelope,
            ...(hasHeaders ? { headers } : {}),
            ...(options?.delay !== undefined ? { delay: options.delay } : {}),
            ...(options?.at !== undefined ? { at: options.at } : {})
          }))
          yield* ensureQueue(queue)
          // inside batch.enqueue the jobs join that batch (its guard runs before the send)
          const batch = yield* CurrentBatch
          const ids = yield* batch === undefined ? store.sendBatch(queue, entries) : batch.send(queue, entries)
          return ids.map((id) => jobRef(queue, id))
        }).pipe(Effect.withSpan("pgbus.job.enqueue", { attributes: { job: job.name } }, { captureStackTrace: false }))

      const enqueue = <P>(job: Job<string, P, unknown, unknown, unknown>, payload: P, options?: EnqueueOptions) =>
        Effect.gen(function* () {
          const queue = physicalQueueOf(config, job, options)
          const encoded = yield* encode(job, payload)
          const trace = yield* traceHeaders
          const headers = { ...options?.headers, ...trace }
          yield* ensureQueue(queue)
          const message = { job: job.name, payload: encoded } satisfies Envelope
          const sendOptions = {
            ...(Object.keys(headers).length > 0 ? { headers } : {}),
            ...(options?.delay !== undefined ? { delay: options.delay } : {}),
            ...(options?.at !== undefined ? { at: options.at } : {})
          }
          const batch = yield* CurrentBatch
          const id =
            batch === undefined
              ? yield* store.send(queue, message, sendOptions)
              : (yield* batch.send(queue, [{ ...sendOptions, message }]))[0]!
          return jobRef(queue, id)
        }).pipe(Effect.withSpan("pgbus.job.enqueue", { attributes: { job: job.name } }, { captureStackTrace: false }))

      return JobClient.of({
        enqueue: enqueue as JobClient["Service"]["enqueue"],
        enqueueMany: enqueueMany as JobClient["Service"]["enqueueMany"],
        ensureQueue
      })
    })
  )
}

/** Enqueues one job from any Effect (needs `JobClient`, provided by `PgBus.layer`). */
export const enqueue = <P>(
  job: Job<string, P, unknown, unknown, unknown>,
  payload: P,
  options?: EnqueueOptions
): Effect.Effect<JobRef, EnqueueError, JobClient> => JobClient.use((client) => client.enqueue(job, payload, options))

/** Enqueues many jobs of one kind in one statement. */
export const enqueueMany = <P>(
  job: Job<string, P, unknown, unknown, unknown>,
  payloads: Iterable<P>,
  options?: EnqueueOptions
): Effect.Effect<ReadonlyArray<JobRef>, EnqueueError, JobClient> =>
  JobClient.use((client) => client.enqueueMany(job, payloads, options))
