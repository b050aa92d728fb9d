/**
 * Enqueueing jobs: encode the payload with the job's Schema, wrap it in the envelope, carry the
 * current trace context in the headers, route to the job's (priority) queue, send. Joins the
 * caller's SQL transaction.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Exit, Layer, Option, Schema, Tracer } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig, type PgBusConfigShape } from "../Config.ts"
import { isPassingFailure, retryTransient, toDatabaseError } from "../Database.ts"
import * as Input from "../Input.ts"
import { jsonMismatch } from "../internal/jsonSafe.ts"
import { type FairTag, fairFields, resolveFairShare } from "../Queue/FairShare.ts"
import { type LocalSlot, Notifier } from "../Queue/Notifier.ts"
import { InvalidMessage, InvalidQueueName, PayloadTooLarge, type QueueError } from "../Queue/QueueError.ts"
import * as QueueName from "../Queue/QueueName.ts"
import type { BatchEntry, CreateOptions, SendOptions } from "../Queue/QueueStore.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import { CurrentBatch } from "./BatchMembership.ts"
import { limitFields } from "./ConcurrencyLimit.ts"
import { DEBOUNCE_KEY_FIELD, debounceKeyOf, makeDebouncer } from "./Debounce.ts"
import type { AnyJob, Job } from "./Job.ts"
import {
  ConcurrencyLimitExceeded,
  type EnqueueError,
  InvalidDebounceKey,
  type InvalidFairShare,
  InvalidPayload,
  InvalidUniqueKey,
  type ResultError
} from "./JobError.ts"
import { type JobRef, jobRef } from "./JobRef.ts"
import { type AwaitOptions, makeResultAwaiter } from "./JobResult.ts"
import { rateFields } from "./RateLimit.ts"
import { CONTEXT_HEADER, CurrentAttributes } from "./RequestContext.ts"
import { duplicateError, keyOf, makeUniqueKeys, specFor, UNIQUE_KEY_FIELD, type UniqueSpec } from "./Uniqueness.ts"

export type { AwaitOptions } from "./JobResult.ts"

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
const withOrderKey = (envelope: TaggedEnvelope, key: string | undefined): TaggedEnvelope =>
  key === undefined ? envelope : { ...envelope, [ORDER_KEY_FIELD]: key }

/** A job's name for spans, whatever was given as the job. */
const jobName = (job: unknown): string => (Input.isPlainObject(job) ? String(job.name) : String(job))

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
      const uniqueKeys = makeUniqueKeys(sql, config.schema, store)
      const debouncer = makeDebouncer(sql, config.schema, store)
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
      /** An ordered job's queue: created with the order index (the ordered claim probes it). */
      const ensureJobQueue = (job: Pick<AnyJob, "orderKey">, queue: string) =>
        ensureQueue(queue, job.orderKey === undefined ? undefined : { ...jobsFair, orderIndex: true })

      // the worker decodes what JSON gives back: an encoded payload JSON changes (a Date, a
      // bigint) would fail there, on every attempt, so it fails here
      const notJson = (job: { readonly name: string }, encoded: unknown) => {
        const mismatch = jsonMismatch(encoded, "payload")
        return mismatch === undefined
          ? undefined
          : new InvalidPayload({
              job: job.name,
              issue: `the encoded ${mismatch}: the payload Schema must encode to JSON (Schema.DateFromString, not Schema.Date; Schema.BigIntFromString, not Schema.BigInt)`
            })
      }

      const encode = <P>(job: Job<string, P, unknown, unknown, unknown>, payload: P) =>
        Schema.encodeEffect(job.payload)(payload).pipe(
          Effect.mapError((error) => new InvalidPayload({ job: job.name, issue: error.message })),
          Effect.flatMap((encoded) => {
            const invalid = notJson(job, encoded)
            return invalid === undefined ? Effect.succeed(encoded) : Effect.fail(invalid)
          })
        )

      // Synchronously when it succeeds (an Exit is an Effect); otherwise as `encode` reports it.
      const encodeOne = <P>(job: Job<string, P, unknown, unknown, unknown>, payload: P) => {
        const exit = Schema.encodeExit(job.payload)(payload)
        return Exit.isSuccess(exit) && notJson(job, exit.value) === undefined
          ? Exit.succeed(exit.value)
          : encode(job, payload)
      }

      // Synchronously, without an Effect per payload; anything but success for all (a failure,
      // an asynchronous schema) takes the Effect path above, which reports it as before.
      const encodeAll = <P>(job: Job<string, P, unknown, unknown, unknown>, payloads: ReadonlyArray<P>) => {
        const encodeExit = Schema.encodeExit(job.payload)
        const out: Array<unknown> = new Array(payloads.length)
        for (let i = 0; i < payloads.length; i++) {
          const exit = encodeExit(payloads[i]!)
          if (!Exit.isSuccess(exit) || notJson(job, exit.value) !== undefined) {
            return Effect.forEach(payloads, (p) => encode(job, p))
          }
          out[i] = exit.value
        }
        return Effect.succeed(out)
      }

      // Unique jobs: the keys are taken and the messages sent in one statement (UniqueKeySql).
      // Keys repeated inside one call resolve to their first position; a holder that ended
      // between the conflict and its look-up is tried again (three rounds at most).
      const sendUnique = <P>(
        job: Job<string, P, unknown, unknown, unknown>,
        spec: UniqueSpec,
        queue: string,
        given: ReadonlyArray<P>,
        envelopes: ReadonlyArray<TaggedEnvelope>,
        headers: Readonly<Record<string, unknown>>,
        options: EnqueueOptions | undefined
      ) =>
        Effect.gen(function* () {
          if ((yield* CurrentBatch) !== undefined) {
            return yield* new InvalidUniqueKey({ job: job.name, reason: "a unique job cannot join a batch" })
          }
          const keys = yield* Effect.forEach(given, (p) => keyOf(job.name, spec, p, options?.uniqueKey))
          const first = new Map<string, number>()
          keys.forEach((k, i) => {
            if (!first.has(k)) first.set(k, i)
          })
          const texts = new Map<string, string>()
          for (const [key, i] of first) {
            const text = JSON.stringify({ ...envelopes[i], [UNIQUE_KEY_FIELD]: key })
            if (text.length * 3 > config.maxPayloadSize && Buffer.byteLength(text, "utf8") > config.maxPayloadSize) {
              const size = Buffer.byteLength(text, "utf8")
              return yield* new PayloadTooLarge({ queue, size, limit: config.maxPayloadSize })
            }
            texts.set(key, text)
          }
          const schedule = yield* scheduleOf(queue, options)
          const headersText = Object.keys(headers).length > 0 ? JSON.stringify(headers) : null
          yield* ensureQueue(queue)
          const outcome = new Map<string, { ref: JobRef; sent: boolean }>()
          let pending = [...first.keys()]
          for (let round = 0; round < 3 && pending.length > 0; round++) {
            const results = yield* uniqueKeys.send({
              job: job.name,
              queue,
              physical: QueueName.physicalOf(config.queuePrefix, queue),
              keys: pending,
              messages: pending.map((k) => texts.get(k)!),
              headers: headersText,
              delayMs: schedule.delayMs,
              at: schedule.at,
              forMs: spec.forMs
            })
            const next: Array<string> = []
            results.forEach((r, i) => {
              const key = pending[i]!
              if (r._tag === "Sent") outcome.set(key, { ref: r.ref, sent: true })
              else if (r.holder !== undefined) outcome.set(key, { ref: r.holder, sent: false })
              else next.push(key)
            })
            pending = next
          }
          const refs: Array<JobRef> = []
          for (let i = 0; i < keys.length; i++) {
            const key = keys[i]!
            const got = outcome.get(key)
            const duplicate = got === undefined || !got.sent || first.get(key) !== i
            if (duplicate && spec.onConflict === "reject") return yield* duplicateError(job.name, key, got?.ref)
            if (got === undefined) return yield* duplicateError(job.name, key, undefined)
            if (duplicate && spec.onConflict === "log") {
              yield* Effect.logWarning(`pgbus: duplicate job ${job.name} not enqueued; held by ${got.ref.id}`).pipe(
                Effect.annotateLogs({ job: job.name, unique_key: key })
              )
            }
            refs.push(got.ref)
          }
          return refs as ReadonlyArray<JobRef>
        })

      // Debounce: the message is due `period` from now and becomes its key's last (DebounceSql).
      const sendDebounced = <P>(
        job: Job<string, P, unknown, unknown, unknown>,
        queue: string,
        payload: P,
        message: TaggedEnvelope,
        headers: Readonly<Record<string, unknown>>,
        options: EnqueueOptions | undefined
      ) =>
        Effect.gen(function* () {
          const spec = job.debounce!
          if (options?.delay !== undefined || options?.at !== undefined) {
            return yield* new InvalidDebounceKey({
              job: job.name,
              reason: "debounce decides when it runs: no delay or at"
            })
          }
          if ((yield* CurrentBatch) !== undefined) {
            return yield* new InvalidDebounceKey({ job: job.name, reason: "a debounced job cannot join a batch" })
          }
          const key = yield* debounceKeyOf(job.name, spec, payload)
          const text = JSON.stringify({ ...message, [DEBOUNCE_KEY_FIELD]: key })
          if (text.length * 3 > config.maxPayloadSize && Buffer.byteLength(text, "utf8") > config.maxPayloadSize) {
            return yield* new PayloadTooLarge({
              queue,
              size: Buffer.byteLength(text, "utf8"),
              limit: config.maxPayloadSize
            })
          }
          yield* ensureQueue(queue)
          const msgId = yield* debouncer.send({
            job: job.name,
            key,
            queue,
            physical: QueueName.physicalOf(config.queuePrefix, queue),
            message: text,
            headers: Object.keys(headers).length > 0 ? JSON.stringify(headers) : null,
            spec
          })
          return jobRef(queue, msgId)
        })

      /** The schedule of a unique send, checked as the queue store checks a send's. */
      const scheduleOf = (queue: string, options: EnqueueOptions | undefined) => {
        if (options?.delay !== undefined && options.at !== undefined) {
          return Effect.fail(new InvalidMessage({ queue, reason: "give either delay or at, not both" }))
        }
        if (options?.at !== undefined) {
          return options.at instanceof Date && !Number.isNaN(options.at.getTime())
            ? Effect.succeed({ delayMs: 0, at: options.at as Date | null })
            : Effect.fail(new InvalidMessage({ queue, reason: "at must be a valid Date" }))
        }
        if (options?.delay === undefined) return Effect.succeed({ delayMs: 0, at: null as Date | null })
        const d = Duration.fromInput(options.delay)
        return Option.isNone(d) || !Duration.isFinite(d.value) || Duration.isNegative(d.value)
          ? Effect.fail(new InvalidMessage({ queue, reason: "delay must be a finite, non-negative duration" }))
          : Effect.succeed({ delayMs: Duration.toMillis(d.value), at: null as Date | null })
      }

      /** The concurrency and rate fields of a limited or rate-limited job's message. */
      const controlFields = <P>(job: Job<string, P, unknown, unknown, unknown>, payload: P) =>
        Effect.gen(function* () {
          const limit = job.limit === undefined ? {} : yield* limitFields(job.name, job.limit, payload)
          const rate = job.rate === undefined ? {} : yield* rateFields(job.name, job.rate, payload)
          return { ...limit, ...rate }
        })

      const enqueueMany = <P>(
        job: Job<string, P, unknown, unknown, unknown>,
        payloads: Iterable<P>,
        options?: EnqueueOptions
      ) =>
        Effect.gen(function* () {
          const refused = checkEnqueue(job, options)
          if (refused !== undefined) return yield* refused
          if (payloads === null || typeof payloads !== "object" || !(Symbol.iterator in payloads)) {
            return yield* new InvalidPayload({ job: job.name, issue: "the payloads must be an iterable (an array)" })
          }
          if (job.debounce !== undefined || (job.limit !== undefined && job.limit.onConflict !== "block")) {
            // one at a time, in order, in one transaction: each key's last payload wins (debounce),
            // each is checked against the jobs before it (a limit's discard / raise)
            const all = Array.isArray(payloads) ? (payloads as ReadonlyArray<P>) : Array.from(payloads)
            return yield* sql
              .withTransaction(Effect.forEach(all, (p) => enqueue(job, p, options)))
              .pipe(
                Effect.catchTag("SqlError", (error) => Effect.fail(toDatabaseError(`enqueue jobs ${job.name}`)(error)))
              )
          }
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
          const limits =
            job.limit === undefined && job.rate === undefined
              ? undefined
              : yield* Effect.forEach(given, (p) => controlFields(job, p))
          const orderKeys =
            job.orderKey === undefined && options?.orderKey === undefined
              ? undefined
              : yield* Effect.forEach(given, (p) => jobOrderKey(job, p, options))
          yield* ensureJobQueue(job, queue)
          const spec = specFor(job.unique, options?.uniqueKey)
          if (spec !== undefined && spec.strategy === "untilExecuted") {
            const envelopes = encoded.map(
              (payload, i): TaggedEnvelope =>
                withOrderKey({ job: job.name, payload, ...fairFields(tags?.[i]), ...limits?.[i] }, orderKeys?.[i])
            )
            // one call, one outcome: a rejected duplicate takes back the jobs sent before it
            return yield* sql
              .withTransaction(sendUnique(job, spec, queue, given, envelopes, headers, options))
              .pipe(
                Effect.catchTag("SqlError", (error) => Effect.fail(toDatabaseError(`enqueue jobs ${job.name}`)(error)))
              )
          }
          // whileExecuting: each key rides in its message and is taken by each run
          const runKeys =
            spec === undefined
              ? undefined
              : yield* Effect.forEach(given, (p) => keyOf(job.name, spec, p, options?.uniqueKey))
          const entries: Array<BatchEntry> = encoded.map((payload, i) => ({
            message: withOrderKey(
              runKeys !== undefined || limits !== undefined
                ? ({
                    job: job.name,
                    payload,
                    ...fairFields(tags?.[i]),
                    ...limits?.[i],
                    ...(runKeys === undefined ? {} : { [UNIQUE_KEY_FIELD]: runKeys[i]! })
                  } satisfies TaggedEnvelope)
                : tags === undefined
                  ? ({ job: job.name, payload } satisfies Envelope)
                  : ({ job: job.name, payload, ...fairFields(tags[i]) } satisfies TaggedEnvelope),
              orderKeys?.[i]
            ),
            ...(hasHeaders ? { headers } : {}),
            ...(options?.delay !== undefined ? { delay: options.delay } : {}),
            ...(options?.at !== undefined ? { at: options.at } : {})
          }))
          // inside batch.enqueue the jobs join that batch (its guard runs before the send)
          const batch = yield* CurrentBatch
          const ids = yield* batch === undefined ? store.sendBatch(queue, entries) : batch.send(queue, entries)
          return ids.map((id) => jobRef(queue, id))
        }).pipe(
          Effect.withSpan("pgbus.job.enqueue", { attributes: { job: jobName(job) } }, { captureStackTrace: false })
        )

      // Local dispatch: a job due now, sent outside a transaction from a process whose worker of
      // its queue is idle (its queues drained, a slot free), is inserted claimed for that worker
      // and handed over after the commit: no NOTIFY, no read. Not inside a caller's transaction
      // (its commit is not ours to wait for) nor for fair-share queues (the worker offers none).
      const reserveLocal = (job: string, queue: string, options: EnqueueOptions | undefined, limited: boolean) =>
        Effect.gen(function* () {
          if (!config.localDispatch || options?.delay !== undefined || options?.at !== undefined) return undefined
          // a limited job is claimed only by the limited claim, which counts its key's runs
          if (limited) return undefined
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
          const refused = checkEnqueue(job, options)
          if (refused !== undefined) return yield* refused
          const queue = physicalQueueOf(config, job, options)
          const encoded = yield* encodeOne(job, payload)
          const tag =
            config.fairShare === undefined
              ? undefined
              : yield* jobFairShare(config, job, payload, logicalQueueOf(config, job, options), options?.headers)
          const trace = yield* traceHeaders
          const headers = { ...options?.headers, ...trace, ...(yield* contextHeaders) }
          yield* ensureJobQueue(job, queue)
          const limit =
            job.limit === undefined && job.rate === undefined ? undefined : yield* controlFields(job, payload)
          const orderKey = yield* jobOrderKey(job, payload, options)
          const message: TaggedEnvelope = withOrderKey(
            tag === undefined && limit === undefined
              ? { job: job.name, payload: encoded }
              : { job: job.name, payload: encoded, ...fairFields(tag), ...limit },
            orderKey
          )
          const send = Effect.gen(function* () {
            if (job.debounce !== undefined) return yield* sendDebounced(job, queue, payload, message, headers, options)
            const spec = specFor(job.unique, options?.uniqueKey)
            if (spec !== undefined) {
              if (spec.strategy === "untilExecuted") {
                return (yield* sendUnique(job, spec, queue, [payload], [message], headers, options))[0]!
              }
              // whileExecuting: the key rides in the message and is taken by each run
              const key = yield* keyOf(job.name, spec, payload, options?.uniqueKey)
              return yield* sendPlain(job.name, queue, { ...message, [UNIQUE_KEY_FIELD]: key }, headers, options)
            }
            return yield* sendPlain(job.name, queue, message, headers, options)
          })
          const limitKey = message.pgbus_limit_key
          if (job.limit === undefined || job.limit.onConflict === "block" || limitKey === undefined) return yield* send
          // discard / raise: the key's unfinished jobs are counted and the send made under the
          // queue's limits lock (the claims' lock), so two enqueues cannot both take the last place
          const { to, onConflict } = job.limit
          return yield* store.withLimitLock(
            queue,
            Effect.gen(function* () {
              const found = (yield* store.limitCounts(queue, [limitKey])).get(limitKey)
              if (found === undefined || found.n < to) return yield* send
              if (onConflict === "raise") {
                return yield* new ConcurrencyLimitExceeded({ job: job.name, key: limitKey, limit: to })
              }
              return jobRef(queue, found.first)
            })
          )
        }).pipe(
          Effect.withSpan("pgbus.job.enqueue", { attributes: { job: jobName(job) } }, { captureStackTrace: false })
        )

      const sendPlain = (
        jobName: string,
        queue: string,
        message: TaggedEnvelope,
        headers: Readonly<Record<string, unknown>>,
        options: EnqueueOptions | undefined
      ) =>
        Effect.gen(function* () {
          const sendOptions = {
            ...(Object.keys(headers).length > 0 ? { headers } : {}),
            ...(options?.delay !== undefined ? { delay: options.delay } : {}),
            ...(options?.at !== undefined ? { at: options.at } : {})
          }
          const batch = yield* CurrentBatch
          if (batch !== undefined) return jobRef(queue, (yield* batch.send(queue, [{ ...sendOptions, message }]))[0]!)
          // a limited job is claimed only by the limited claim, an ordered one waits for its key's turn
          const slot = yield* reserveLocal(
            jobName,
            queue,
            options,
            message.pgbus_limit_key !== undefined ||
              message.pgbus_rate_key !== undefined ||
              message.pgbus_order_key !== undefined
          )
          if (slot === undefined) return jobRef(queue, yield* store.send(queue, message, sendOptions))
          return jobRef(queue, yield* sendLocal(queue, message, sendOptions.headers, slot))
        })

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
