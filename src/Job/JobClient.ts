/**
 * Enqueueing jobs: encode the payload with the job's Schema, wrap it in the envelope, carry the
 * current trace context in the headers, route to the job's (priority) queue, send. Joins the
 * caller's SQL transaction.
 *
 * @since 0.1.0
 */
import { Context, Effect, Exit, Layer, Option, Schema, Tracer } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig, type PgBusConfigShape } from "../Config.ts"
import { isPassingFailure, retryTransient } from "../Database.ts"
import { type FairTag, fairFields, resolveFairShare } from "../Queue/FairShare.ts"
import { type LocalSlot, Notifier } from "../Queue/Notifier.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import * as QueueName from "../Queue/QueueName.ts"
import type { BatchEntry, CreateOptions, SendOptions } from "../Queue/QueueStore.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import { CurrentBatch } from "./BatchMembership.ts"
import type { AnyJob, Job } from "./Job.ts"
import { type EnqueueError, type InvalidFairShare, InvalidPayload, type ResultError } from "./JobError.ts"
import { type JobRef, jobRef } from "./JobRef.ts"
import { type AwaitOptions, makeResultAwaiter } from "./JobResult.ts"
import { CONTEXT_HEADER, CurrentAttributes } from "./RequestContext.ts"

export type { AwaitOptions } from "./JobResult.ts"

/** The envelope stored as a job message. */
export const Envelope = Schema.Struct({ job: Schema.String, payload: Schema.Unknown })
export type Envelope = typeof Envelope.Type

/** An envelope as written: with the fair-share tag beside it when a resolver gave one. */
export type TaggedEnvelope = Envelope & {
  readonly pgbus_fair_key?: string
  readonly pgbus_fair_weight?: number
  readonly pgbus_order_key?: string
}

/** An envelope with its ordering key beside it (unchanged without one). */
const withOrderKey = (envelope: TaggedEnvelope, key: string | undefined): TaggedEnvelope =>
  key === undefined ? envelope : { ...envelope, [ORDER_KEY_FIELD]: key }

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

const traceHeaders: Effect.Effect<Record<string, string>> = Effect.map(Effect.option(Effect.currentSpan), (span) =>
  Option.match(span, {
    onNone: () => ({}),
    onSome: (s) => ({ [TRACEPARENT]: `00-${s.traceId}-${s.spanId}-${s.sampled ? "01" : "00"}` })
  })
)

// The request context travels in a header of its own (none when it is empty).
const contextHeaders: Effect.Effect<Record<string, unknown>> = Effect.map(CurrentAttributes, (attributes) =>
  Object.keys(attributes).length === 0 ? {} : { [CONTEXT_HEADER]: attributes }
)

// The last header read and its span: the jobs of one enqueueMany share one traceparent.
let lastTraceparent: string | undefined
let lastLinked: Tracer.ExternalSpan | undefined

/** Reads a `traceparent` header back into a span to link to. */
export const linkedSpan = (headers: Readonly<Record<string, unknown>>): Tracer.ExternalSpan | undefined => {
  const value = headers[TRACEPARENT]
  if (typeof value !== "string") return undefined
  if (value === lastTraceparent) return lastLinked
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(value)
  const span = match
    ? Tracer.externalSpan({ traceId: match[1]!, spanId: match[2]!, sampled: match[3] === "01" })
    : undefined
  lastTraceparent = value
  lastLinked = span
  return span
}

/** What the job client's layer needs (the notifier: local dispatch to this process's workers). */
type JobClientDeps = PgBusConfig | QueueStore | SqlClient.SqlClient | Notifier

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
    /**
     * Makes sure a queue (and its DLQ) exists; cached per process. A new queue gets the fair
     * index when `fairIndex` says so (default: when the config's `fairShare` is set).
     */
    readonly ensureQueue: (queue: string, options?: CreateOptions) => Effect.Effect<void, QueueError>
    /**
     * Waits for a job's outcome: its output decoded with the job's `success` Schema, or
     * `JobDeadLettered`, `JobDiscarded`, `JobResultTimeout` (with `timeout`),
     * `JobResultUnavailable`. Woken by the NOTIFY its outcome sends, from any process.
     */
    readonly result: <P, A>(
      job: Job<string, P, A, unknown, unknown>,
      ref: JobRef,
      options?: AwaitOptions
    ) => Effect.Effect<A, ResultError>
  }
>()("effect-pgbus/JobClient") {
  /** The job client on the queue store. */
  static readonly layer: Layer.Layer<JobClient, never, JobClientDeps> = Layer.effect(
    JobClient,
    Effect.gen(function* () {
      const config = yield* PgBusConfig
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const notifier = yield* Notifier
      const known = new Set<string>()
      const results = makeResultAwaiter({
        store,
        notifier,
        scope: yield* Effect.scope,
        pollingInterval: config.pollingInterval
      })

      // A queue created inside the caller's transaction exists only once it commits, so it is
      // remembered after commit (afterCommit runs at once outside a transaction).
      const jobsFair = { fairIndex: config.fairShare !== undefined }
      const ensureQueue = (queue: string, options?: CreateOptions) =>
        known.has(queue)
          ? Effect.void
          : store
              .create(queue, options ?? jobsFair)
              .pipe(Effect.andThen(sql.afterCommit(Effect.sync(() => known.add(queue)))))

      const encode = <P>(job: Job<string, P, unknown, unknown, unknown>, payload: P) =>
        Schema.encodeEffect(job.payload)(payload).pipe(
          Effect.mapError((error) => new InvalidPayload({ job: job.name, issue: error.message }))
        )

      // Synchronously when it succeeds (an Exit is an Effect); otherwise as `encode` reports it.
      const encodeOne = <P>(job: Job<string, P, unknown, unknown, unknown>, payload: P) => {
        const exit = Schema.encodeExit(job.payload)(payload)
        return Exit.isSuccess(exit) ? Exit.succeed(exit.value) : encode(job, payload)
      }

      // Synchronously, without an Effect per payload; anything but success for all (a failure,
      // an asynchronous schema) takes the Effect path above, which reports it as before.
      const encodeAll = <P>(job: Job<string, P, unknown, unknown, unknown>, payloads: ReadonlyArray<P>) => {
        const encodeExit = Schema.encodeExit(job.payload)
        const out: Array<unknown> = new Array(payloads.length)
        for (let i = 0; i < payloads.length; i++) {
          const exit = encodeExit(payloads[i]!)
          if (!Exit.isSuccess(exit)) return Effect.forEach(payloads, (p) => encode(job, p))
          out[i] = exit.value
        }
        return Effect.succeed(out)
      }

      const enqueueMany = <P>(
        job: Job<string, P, unknown, unknown, unknown>,
        payloads: Iterable<P>,
        options?: EnqueueOptions
      ) =>
        Effect.gen(function* () {
          const queue = physicalQueueOf(config, job, options)
          // read once: an iterable may be a one-shot generator
          const given = Array.isArray(payloads) ? (payloads as ReadonlyArray<P>) : Array.from(payloads)
          const encoded = yield* encodeAll(job, given)
          if (encoded.length === 0) return [] as ReadonlyArray<JobRef>
          const trace = yield* traceHeaders
          const headers = { ...options?.headers, ...trace, ...(yield* contextHeaders) }
          const hasHeaders = Object.keys(headers).length > 0
          // resolved before anything is sent: one bad answer fails the whole call
          const tags =
            config.fairShare === undefined
              ? undefined
              : yield* Effect.forEach(given, (p) =>
                  jobFairShare(config, job, p, logicalQueueOf(config, job, options), options?.headers)
                )
          const orderKeys =
            job.orderKey === undefined && options?.orderKey === undefined
              ? undefined
              : yield* Effect.forEach(given, (p) => jobOrderKey(job, p, options))
          const entries: Array<BatchEntry> = encoded.map((payload, i) => ({
            message: withOrderKey(
              tags === undefined
                ? ({ job: job.name, payload } satisfies Envelope)
                : ({ job: job.name, payload, ...fairFields(tags[i]) } satisfies TaggedEnvelope),
              orderKeys?.[i]
            ),
            ...(hasHeaders ? { headers } : {}),
            ...(options?.delay !== undefined ? { delay: options.delay } : {}),
            ...(options?.at !== undefined ? { at: options.at } : {})
          }))
          yield* ensureQueue(queue, job.orderKey === undefined ? undefined : { ...jobsFair, orderIndex: true })
          // inside batch.enqueue the jobs join that batch (its guard runs before the send)
          const batch = yield* CurrentBatch
          const ids = yield* batch === undefined ? store.sendBatch(queue, entries) : batch.send(queue, entries)
          return ids.map((id) => jobRef(queue, id))
        }).pipe(Effect.withSpan("pgbus.job.enqueue", { attributes: { job: job.name } }, { captureStackTrace: false }))

      // Local dispatch: a job due now, sent outside a transaction from a process whose worker of
      // its queue is idle (its queues drained, a slot free), is inserted claimed for that worker
      // and handed over after the commit: no NOTIFY, no read. Not inside a caller's transaction
      // (its commit is not ours to wait for) nor for fair-share queues (the worker offers none).
      const reserveLocal = (job: string, queue: string, options: EnqueueOptions | undefined) =>
        Effect.gen(function* () {
          if (!config.localDispatch || options?.delay !== undefined || options?.at !== undefined) return undefined
          if (Option.isSome(yield* Effect.serviceOption(sql.transactionService))) return undefined
          return notifier.reserveLocal(QueueName.physicalOf(config.queuePrefix, queue), {
            inOrder: true,
            runs: { job }
          })
        })

      // The insert and the hand-over are one uninterruptible unit: a claimed message left
      // between them would wait for its visibility timeout. A failed insert gives the slot back;
      // one that failed with its connection may have committed with its reply lost: its message,
      // claimed for a worker that will never get it, is released by the slot's mark to be read
      // as usual (the caller still gets the error: an enqueue whose reply is lost is ambiguous).
      const sendLocal = (
        queue: string,
        message: unknown,
        headers: Readonly<Record<string, unknown>> | undefined,
        slot: LocalSlot
      ) =>
        Effect.uninterruptible(
          store.sendClaimed(queue, message, headers, slot).pipe(
            Effect.onError(() => Effect.sync(() => slot.cancel())),
            Effect.tapError((error) =>
              isPassingFailure(error)
                ? retryTransient(store.releaseClaim(queue, slot.claimedBy)).pipe(Effect.ignore)
                : Effect.void
            ),
            Effect.tap((m) => slot.deliver(m)),
            Effect.map((m) => m.msgId)
          )
        )

      const enqueue = <P>(job: Job<string, P, unknown, unknown, unknown>, payload: P, options?: EnqueueOptions) =>
        Effect.gen(function* () {
          const queue = physicalQueueOf(config, job, options)
          const encoded = yield* encodeOne(job, payload)
          const tag =
            config.fairShare === undefined
              ? undefined
              : yield* jobFairShare(config, job, payload, logicalQueueOf(config, job, options), options?.headers)
          const trace = yield* traceHeaders
          const headers = { ...options?.headers, ...trace, ...(yield* contextHeaders) }
          yield* ensureQueue(queue, job.orderKey === undefined ? undefined : { ...jobsFair, orderIndex: true })
          const orderKey = yield* jobOrderKey(job, payload, options)
          const message = withOrderKey(
            tag === undefined
              ? { job: job.name, payload: encoded }
              : { job: job.name, payload: encoded, ...fairFields(tag) },
            orderKey
          )
          const sendOptions = {
            ...(Object.keys(headers).length > 0 ? { headers } : {}),
            ...(options?.delay !== undefined ? { delay: options.delay } : {}),
            ...(options?.at !== undefined ? { at: options.at } : {})
          }
          const batch = yield* CurrentBatch
          if (batch !== undefined) return jobRef(queue, (yield* batch.send(queue, [{ ...sendOptions, message }]))[0]!)
          // an ordered job waits for its key's turn: never handed over locally
          const slot = orderKey === undefined ? yield* reserveLocal(job.name, queue, options) : undefined
          if (slot === undefined) return jobRef(queue, yield* store.send(queue, message, sendOptions))
          return jobRef(queue, yield* sendLocal(queue, message, sendOptions.headers, slot))
        }).pipe(Effect.withSpan("pgbus.job.enqueue", { attributes: { job: job.name } }, { captureStackTrace: false }))

      return JobClient.of({
        enqueue: enqueue as JobClient["Service"]["enqueue"],
        enqueueMany: enqueueMany as JobClient["Service"]["enqueueMany"],
        ensureQueue,
        result: (job, ref, options) => results.awaitResult(job as AnyJob, ref, options)
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
