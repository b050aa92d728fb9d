/**
 * Batches: a group of jobs, and callbacks (jobs themselves) enqueued when the whole group is
 * done. `Batch.make` creates the batch; `batch.enqueue(effect)` runs `effect`, and every job
 * it enqueues joins the batch. A member's archive or dead-letter ends it; the batch finishes
 * when every member has ended, and its callbacks are sent once. `BatchSweep.runOnce` repairs
 * what a crash can leave behind.
 *
 * @since 0.1.0
 */
import { Context, type Duration, Effect, Layer, Option, Schema } from "effect"
import type { SqlClient } from "effect/sql"
import type { PgBusConfig } from "../Config.ts"
import type { DatabaseError } from "../Database.ts"
import { type MemberOutcome, memberOf } from "../Job/BatchMembership.ts"
import { type Job, JobContext } from "../Job/Job.ts"
import type { JobClient } from "../Job/JobClient.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import { makeBatchCallbacks } from "./BatchCallbacks.ts"
import { makeBatchContext } from "./BatchContext.ts"
import { makeBatchCreation } from "./BatchCreate.ts"
import type { BatchJoinError, BatchNotFound, InvalidBatchOptions } from "./BatchError.ts"
import { makeBatchJoin } from "./BatchJoin.ts"
import { makeBatchOutcomes } from "./BatchOutcomes.ts"
import { makeBatchSweepOnce } from "./BatchSweepOnce.ts"

export { CurrentBatch, type MemberOutcome } from "../Job/BatchMembership.ts"
export { AlreadyFinished, BatchNotFound, InvalidBatchOptions } from "./BatchError.ts"

/**
 * What a callback job receives: the batch as it finished, and which callback this is.
 *
 * @category models
 */
export const Finished = Schema.Struct({
  batchId: Schema.String,
  callback: Schema.Literals(["onFinish", "onSuccess", "onFailure"]),
  /** No member was dead-lettered. */
  succeeded: Schema.Boolean,
  description: Schema.NullOr(Schema.String),
  properties: Schema.Record(Schema.String, Schema.Unknown),
  totalJobs: Schema.Number,
  completedJobs: Schema.Number,
  failedJobs: Schema.Number,
  /** ISO 8601. */
  finishedAt: Schema.String
})
export type Finished = typeof Finished.Type

/** A job that can be a batch callback: its payload is `Batch.Finished`. */
export type CallbackJob = Job<string, Finished, unknown, unknown, unknown>

/**
 * A callback: a job, or a job with the queue, priority and delay its message is sent with.
 *
 * @category models
 */
export type Callback =
  | CallbackJob
  | {
      readonly job: CallbackJob
      /** Another queue than the job's own. */
      readonly queue?: string | undefined
      /** Another priority than the job's own (with priority levels on). */
      readonly priority?: number | undefined
      /** How long after the batch finishes the callback becomes visible. */
      readonly delay?: Duration.Input | undefined
    }

/** The options of `Batch.make`. */
export interface BatchOptions {
  /** Sent when the batch finishes, whatever its members' outcomes. */
  readonly onFinish?: Callback | undefined
  /** Sent when the batch finishes with no dead-lettered member. */
  readonly onSuccess?: Callback | undefined
  /** Sent when the batch finishes with at least one dead-lettered member. */
  readonly onFailure?: Callback | undefined
  /** Free text for people (at most 1,000 characters). */
  readonly description?: string | undefined
  /** A JSON object kept with the batch and handed to its callbacks. */
  readonly properties?: Readonly<Record<string, unknown>> | undefined
}

/**
 * A batch as last read.
 *
 * @category models
 */
export interface BatchInfo {
  readonly id: string
  readonly description: string | undefined
  readonly properties: Readonly<Record<string, unknown>>
  readonly status: "pending" | "finished"
  /** Members that joined. */
  readonly totalJobs: number
  /** Members archived (their handler succeeded). */
  readonly completedJobs: number
  /** Members dead-lettered. */
  readonly failedJobs: number
  /** Members not yet archived or dead-lettered. */
  readonly pendingJobs: number
  /** Ended members over all members, 0 to 100 (100 for a finished empty batch). */
  readonly progressPercentage: number
  readonly finished: boolean
  readonly createdAt: Date
  readonly finishedAt: Date | undefined
}

/**
 * A handle on a batch: what it was when read, and `enqueue` to add members.
 *
 * @category models
 */
export interface Batch extends BatchInfo {
  /**
   * Runs `effect`; every job it enqueues (through `Job.enqueue`, `enqueueMany` or `JobClient`)
   * joins this batch. Fails with `AlreadyFinished` before running `effect` when the batch has
   * finished, even if this handle says pending. The batch cannot finish while `effect` runs.
   */
  readonly enqueue: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | BatchJoinError | DatabaseError, R>
}

/** What one batch sweep repaired. */
export interface BatchSweepReport {
  /** Members found archived or dead-lettered whose end was not recorded (their worker died). */
  readonly recovered: number
  /** Members whose message is nowhere (deleted by hand, purged) past the stall threshold: un-counted. */
  readonly uncounted: number
  /** Stalled batches repaired (enqueue blocks that never closed, batches made and never entered). */
  readonly unstuck: number
  /** Batches the sweep finished (by the repairs above). */
  readonly finished: number
  /** Finished batches whose callbacks the sweep sent (their finisher died first). */
  readonly callbacksSent: number
  /** Finished batches deleted after the retention. */
  readonly deleted: number
}

/**
 * The batch service: make and find batches, and record members' ends (the worker calls it
 * after an archive or a dead-letter).
 *
 * @category services
 */
export class Batches extends Context.Service<
  Batches,
  {
    /** Creates a batch (joins the caller's transaction). */
    readonly make: (options?: BatchOptions) => Effect.Effect<Batch, InvalidBatchOptions | DatabaseError>
    /** The batch with this id, as it is now. */
    readonly find: (id: string) => Effect.Effect<Batch, BatchNotFound | DatabaseError>
    /** Records members' ends; finishes batches and sends their callbacks. Never fails: the sweep repairs. */
    readonly recordOutcomes: (outcomes: ReadonlyArray<MemberOutcome>) => Effect.Effect<void>
    /**
     * Ends every outstanding member of a batch without running it (test helpers, operators):
     * `completed` archives their messages, `failed` moves them to their DLQ; the batch then
     * finishes and sends its callbacks. How many ended, and whether this finished the batch.
     */
    readonly endMembers: (
      id: string,
      outcome: MemberOutcome["outcome"]
    ) => Effect.Effect<
      { readonly ended: number; readonly finished: boolean },
      BatchNotFound | DatabaseError | QueueError
    >
  }
>()("effect-pgbus/Batches") {}

/**
 * The batch sweep: repairs what crashes leave (ends not recorded, unsent members, blocks
 * never closed, callbacks not sent) and deletes old finished batches. Idempotent and safe
 * with several supervisors running it at once (every repair is a guarded statement).
 *
 * @category services
 */
export class BatchSweep extends Context.Service<
  BatchSweep,
  { readonly runOnce: Effect.Effect<BatchSweepReport, DatabaseError | QueueError> }
>()("effect-pgbus/BatchSweep") {}

const makeServices = Effect.gen(function* () {
  const context = yield* makeBatchContext
  const callbacks = makeBatchCallbacks(context)
  const join = makeBatchJoin(context, callbacks)
  const creation = makeBatchCreation(context, callbacks, join)
  const outcomes = makeBatchOutcomes(context, callbacks, creation)
  return {
    batches: Batches.of({
      make: creation.makeBatch,
      find: creation.find,
      recordOutcomes: outcomes.recordOutcomes,
      endMembers: outcomes.endMembers
    }),
    sweep: BatchSweep.of({ runOnce: makeBatchSweepOnce(context, callbacks, outcomes) })
  }
})

/**
 * The batch service and its sweep, on the queue store and the job client.
 *
 * @category layers
 */
export const layer: Layer.Layer<
  Batches | BatchSweep,
  never,
  PgBusConfig | SqlClient.SqlClient | QueueStore | JobClient
> = Layer.effectContext(
  Effect.map(makeServices, ({ batches, sweep }) => Context.make(Batches, batches).pipe(Context.add(BatchSweep, sweep)))
)

// ---- the API ---------------------------------------------------------------------------------

/**
 * Creates a batch (in the caller's transaction when one is open). Add members with
 * `batch.enqueue(effect)`.
 *
 * @category constructors
 */
export const make = (options?: BatchOptions): Effect.Effect<Batch, InvalidBatchOptions | DatabaseError, Batches> =>
  Batches.use((b) => b.make(options))

/** The batch with this id, as it is now (a handle: `enqueue` adds members). */
export const find = (id: string): Effect.Effect<Batch, BatchNotFound | DatabaseError, Batches> =>
  Batches.use((b) => b.find(id))

/**
 * Inside a job's handler: the batch the running job is a member of (to add siblings with its
 * `enqueue`); none outside a handler or for a job of no batch.
 */
export const current: Effect.Effect<Option.Option<Batch>, BatchNotFound | DatabaseError, Batches> = Effect.gen(
  function* () {
    const context = yield* Effect.serviceOption(JobContext)
    const member = Option.isSome(context) ? memberOf(context.value.headers) : undefined
    if (member === undefined) return Option.none()
    return Option.some(yield* find(member.batchId))
  }
)

/** Runs one batch sweep (tests, tools; the supervisor's dispatcher repeats it). */
export const sweepOnce: Effect.Effect<BatchSweepReport, DatabaseError | QueueError, BatchSweep> = BatchSweep.use(
  (s) => s.runOnce
)
