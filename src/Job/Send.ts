/**
 * Writing a job's message once it is built: its queue made sure of (cached per process), then
 * one of three sends: plain (with local dispatch to an idle worker of this process), unique (the
 * keys taken and the messages sent in one statement) or debounced (the key's last message wins).
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option } from "effect"
import type { SqlClient } from "effect/sql"
import type { PgBusConfigShape } from "../Config.ts"
import { isPassingFailure, retryTransient } from "../Database.ts"
import type { LocalSlot, Notifier } from "../Queue/Notifier.ts"
import { InvalidMessage, PayloadTooLarge } from "../Queue/QueueError.ts"
import * as QueueName from "../Queue/QueueName.ts"
import type { CreateOptions, QueueStore } from "../Queue/QueueStore.ts"
import { CurrentBatch } from "./BatchMembership.ts"
import { DEBOUNCE_KEY_FIELD, type Debouncer, debounceKeyOf } from "./Debounce.ts"
import type { EnqueueOptions, TaggedEnvelope } from "./Envelope.ts"
import type { AnyJob, Job } from "./Job.ts"
import { InvalidDebounceKey, InvalidUniqueKey } from "./JobError.ts"
import { type JobRef, jobRef } from "./JobRef.ts"
import { duplicateError, keyOf, UNIQUE_KEY_FIELD, type UniqueKeys, type UniqueSpec } from "./Uniqueness.ts"

/** The services a job's send goes through. */
export interface SendServices {
  readonly config: PgBusConfigShape
  readonly store: QueueStore["Service"]
  readonly sql: SqlClient.SqlClient
  readonly notifier: Notifier["Service"]
}

/** `ensureQueue` and `ensureJobQueue`: a queue (and its DLQ) made sure of once per process. */
export const makeJobQueues = ({ config, store, sql }: Pick<SendServices, "config" | "store" | "sql">) => {
  const known = new Set<string>()
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
  return { ensureQueue, ensureJobQueue }
}

/** The queue look-ups of `makeJobQueues`. */
export type JobQueues = ReturnType<typeof makeJobQueues>

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

/**
 * Unique jobs: the keys are taken and the messages sent in one statement (UniqueKeySql). Keys
 * repeated inside one call resolve to their first position; a holder that ended between the
 * conflict and its look-up is tried again (three rounds at most).
 */
export const makeUniqueSend = ({
  config,
  uniqueKeys,
  ensureQueue
}: Pick<SendServices, "config"> & {
  readonly uniqueKeys: UniqueKeys
  readonly ensureQueue: JobQueues["ensureQueue"]
}) => {
  /** Sends unique jobs: each payload's ref, its own or its key's holder (per the spec's `onConflict`). */
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
  return { sendUnique }
}

/** Debounce: the message is due `period` from now and becomes its key's last (DebounceSql). */
export const makeDebouncedSend = ({
  config,
  debouncer,
  ensureQueue
}: Pick<SendServices, "config"> & {
  readonly debouncer: Debouncer
  readonly ensureQueue: JobQueues["ensureQueue"]
}) => {
  /** Sends a debounced job: its ref, the message that is now its key's last. */
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
  return { sendDebounced }
}

/**
 * A plain send: into the current batch when inside `batch.enqueue`, else handed to an idle local
 * worker when local dispatch allows it, else a plain insert.
 */
export const makePlainSend = ({ config, store, sql, notifier }: SendServices) => {
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

  /** Sends one message: its ref. */
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
  return { sendPlain }
}
