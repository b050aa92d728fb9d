/**
 * Enqueueing jobs: encode the payload with the job's Schema, wrap it in the envelope, carry the
 * current trace context in the headers, route to the job's (priority) queue, send. Joins the
 * caller's SQL transaction. The parts: `Envelope` (the message, the options and their checks,
 * the queue it goes to), `PayloadEncoding`, `TraceContext` (the headers), `Send` (plain, unique,
 * debounced), `Enqueue` (one job or many), `JobResult` (awaiting an outcome).
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../Config.ts"
import { Notifier } from "../Queue/Notifier.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import type { CreateOptions } from "../Queue/QueueStore.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import { makeDebouncer } from "./Debounce.ts"
import { makeEnqueue, makeEnqueueMany } from "./Enqueue.ts"
import type { EnqueueOptions } from "./Envelope.ts"
import type { AnyJob, Job } from "./Job.ts"
import type { EnqueueError, ResultError } from "./JobError.ts"
import type { JobRef } from "./JobRef.ts"
import { type AwaitOptions, makeResultAwaiter } from "./JobResult.ts"
import { makeDebouncedSend, makeJobQueues, makePlainSend, makeUniqueSend } from "./Send.ts"
import { makeUniqueKeys } from "./Uniqueness.ts"

export {
  checkEnqueue,
  type EnqueueOptions,
  Envelope,
  jobFairShare,
  jobOrderKey,
  logicalQueueOf,
  ORDER_KEY_FIELD,
  physicalQueueOf,
  servedQueues,
  type TaggedEnvelope
} from "./Envelope.ts"
export type { AwaitOptions } from "./JobResult.ts"
export { linkedSpan, TRACEPARENT } from "./TraceContext.ts"

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
      const services = { config, store, sql, notifier }
      const results = makeResultAwaiter({
        store,
        notifier,
        scope: yield* Effect.scope,
        pollingInterval: config.pollingInterval
      })
      const { ensureQueue, ensureJobQueue } = makeJobQueues(services)
      const uniqueKeys = makeUniqueKeys(sql, config.schema, store)
      const debouncer = makeDebouncer(sql, config.schema, store)
      const deps = {
        ...services,
        ensureJobQueue,
        ...makePlainSend(services),
        ...makeUniqueSend({ config, uniqueKeys, ensureQueue }),
        ...makeDebouncedSend({ config, debouncer, ensureQueue })
      }
      const { enqueue } = makeEnqueue(deps)
      const { enqueueMany } = makeEnqueueMany(deps, enqueue)

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
