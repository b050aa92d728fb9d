/**
 * Enqueueing, one job or many of one kind: check the call, encode the payloads with the job's
 * Schema, carry the trace and request context in the headers, resolve the fair-share tag, the
 * limit and rate fields and the ordering key, route to the job's (priority) queue, then send
 * (plain, unique or debounced; under the queue's limits lock for a limit that discards or raises).
 *
 * @since 0.1.0
 */
import { Effect, Result } from "effect"
import type { SqlClient } from "effect/sql"
import type { PgBusConfigShape } from "../Config.ts"
import { toDatabaseError } from "../Database.ts"
import { fairFields } from "../Queue/FairShare.ts"
import type { BatchEntry, QueueStore } from "../Queue/QueueStore.ts"
import { CurrentBatch } from "./BatchMembership.ts"
import { limitFields, limitFieldsResult } from "./ConcurrencyLimit.ts"
import {
  checkEnqueue,
  type EnqueueOptions,
  type Envelope,
  jobFairShare,
  jobName,
  jobOrderKey,
  logicalQueueOf,
  physicalQueueOf,
  type TaggedEnvelope,
  withOrderKey
} from "./Envelope.ts"
import type { Job } from "./Job.ts"
import { ConcurrencyLimitExceeded, type InvalidLimitKey, InvalidPayload } from "./JobError.ts"
import { type JobRef, jobRef } from "./JobRef.ts"
import { encodeAll, encodeOne } from "./PayloadEncoding.ts"
import { rateFields, rateFieldsResult } from "./RateLimit.ts"
import type { JobQueues, makeDebouncedSend, makePlainSend, makeUniqueSend } from "./Send.ts"
import { contextHeaders, traceHeaders } from "./TraceContext.ts"
import { keyOf, specFor, UNIQUE_KEY_FIELD } from "./Uniqueness.ts"

/** What the enqueue functions use: the config, the services, the queues and the three sends. */
export interface EnqueueDeps {
  readonly config: PgBusConfigShape
  readonly store: QueueStore["Service"]
  readonly sql: SqlClient.SqlClient
  readonly ensureJobQueue: JobQueues["ensureJobQueue"]
  readonly sendPlain: ReturnType<typeof makePlainSend>["sendPlain"]
  readonly sendUnique: ReturnType<typeof makeUniqueSend>["sendUnique"]
  readonly sendDebounced: ReturnType<typeof makeDebouncedSend>["sendDebounced"]
}

/** The concurrency and rate fields of a limited or rate-limited job's message. */
const controlFields = <P>(job: Job<string, P, unknown, unknown, unknown>, payload: P) =>
  Effect.gen(function* () {
    const limit = job.limit === undefined ? {} : yield* limitFields(job.name, job.limit, payload)
    const rate = job.rate === undefined ? {} : yield* rateFields(job.name, job.rate, payload)
    return { ...limit, ...rate }
  })

/**
 * The control fields of many payloads in one loop (no Effect per payload), computed once when
 * the job has no key function; the first key function failure fails the call.
 */
const controlFieldsMany = <P>(
  job: Job<string, P, unknown, unknown, unknown>,
  payloads: ReadonlyArray<P>
): Effect.Effect<ReadonlyArray<object>, InvalidLimitKey> => {
  const limit = job.limit
  const rate = job.rate
  const one = (payload: P): Result.Result<object, InvalidLimitKey> => {
    const l = limit === undefined ? Result.succeed({}) : limitFieldsResult(job.name, limit, payload)
    if (Result.isFailure(l)) return l
    const r = rate === undefined ? Result.succeed({}) : rateFieldsResult(job.name, rate, payload)
    return Result.isFailure(r) ? r : Result.succeed({ ...l.success, ...r.success })
  }
  if (limit?.key === undefined && rate?.key === undefined) {
    const shared = one(payloads[0]!)
    return Result.isFailure(shared) ? Effect.fail(shared.failure) : Effect.succeed(payloads.map(() => shared.success))
  }
  const out: Array<object> = []
  for (const payload of payloads) {
    const fields = one(payload)
    if (Result.isFailure(fields)) return Effect.fail(fields.failure)
    out.push(fields.success)
  }
  return Effect.succeed(out)
}

/** `enqueue`: one job. */
export const makeEnqueue = ({ config, store, ensureJobQueue, sendPlain, sendUnique, sendDebounced }: EnqueueDeps) => {
  /** Enqueues one job; its ref (for a duplicate or a limit's discard, the job that holds the place). */
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
      const limit = job.limit === undefined && job.rate === undefined ? undefined : yield* controlFields(job, payload)
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
    }).pipe(Effect.withSpan("pgbus.job.enqueue", { attributes: { job: jobName(job) } }, { captureStackTrace: false }))
  return { enqueue }
}

/** `enqueueMany`: many jobs of one kind, one statement per queue where nothing asks for one at a time. */
export const makeEnqueueMany = (
  { config, store, sql, ensureJobQueue, sendUnique }: EnqueueDeps,
  enqueue: ReturnType<typeof makeEnqueue>["enqueue"]
) => {
  /** Enqueues many jobs of one kind; their refs in order. */
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
          .pipe(Effect.catchTag("SqlError", (error) => Effect.fail(toDatabaseError(`enqueue jobs ${job.name}`)(error))))
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
        job.limit === undefined && job.rate === undefined ? undefined : yield* controlFieldsMany(job, given)
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
          .pipe(Effect.catchTag("SqlError", (error) => Effect.fail(toDatabaseError(`enqueue jobs ${job.name}`)(error))))
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
    }).pipe(Effect.withSpan("pgbus.job.enqueue", { attributes: { job: jobName(job) } }, { captureStackTrace: false }))
  return { enqueueMany }
}
