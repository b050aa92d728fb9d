/**
 * Batches: a group of jobs, and callbacks (jobs themselves) enqueued when the whole group is
 * done. `Batch.make` creates the batch; `batch.enqueue(effect)` runs `effect`, and every job
 * it enqueues joins the batch. A member's archive or dead-letter ends it; the batch finishes
 * when every member has ended, and its callbacks are sent once. `BatchSweep.runOnce` repairs
 * what a crash can leave behind.
 *
 * @since 0.1.0
 */
import { Cause, Context, Duration, Effect, Exit, Layer, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { PgBusConfig } from "../Config.ts"
import { type DatabaseError, statementNow, toDatabaseError, withTransaction } from "../Database.ts"
import * as Input from "../Input.ts"
import {
  BATCH_EXECUTION_HEADER,
  BATCH_ID_HEADER,
  type BatchMembership,
  CurrentBatch,
  type MemberOutcome,
  memberOf
} from "../Job/BatchMembership.ts"
import { isJob, type Job, JobContext } from "../Job/Job.ts"
import { JobClient, physicalQueueOf } from "../Job/JobClient.ts"
import { CONTEXT_HEADER, CurrentAttributes } from "../Job/RequestContext.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import * as QueueName from "../Queue/QueueName.ts"
import { type BatchEntry, type MessagePlace, QueueStore } from "../Queue/QueueStore.ts"
import { AlreadyFinished, type BatchJoinError, BatchNotFound, InvalidBatchOptions } from "./BatchError.ts"
import { type BatchRow, type ExecutionOutcome, makeBatchSql } from "./BatchSql.ts"

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

/** A stored callback: the job's name, its (priority) queue, its delay. */
const CallbackSpec = Schema.Struct({
  job: Schema.String,
  queue: Schema.String,
  delay_ms: Schema.Number,
  /** The request context where the batch was made, carried to the callback's message. */
  context: Schema.optionalKey(Schema.Record(Schema.String, Schema.Unknown))
})
type CallbackSpec = typeof CallbackSpec.Type
const decodeSpec = Schema.decodeUnknownOption(CallbackSpec)

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

const isPlainObject = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u) && Object.getPrototypeOf(u) === Object.prototype

const OPTION_KEYS = new Set(["onFinish", "onSuccess", "onFailure", "description", "properties"])
const SWEEP_PAGE = 1_000

/** A row's figures as the API gives them. */
const infoOf = (row: BatchRow): BatchInfo => {
  const total = Number(row.total_jobs)
  const completed = Number(row.completed_jobs)
  const failed = Number(row.failed_jobs)
  const finished = row.status === "finished"
  return {
    id: row.id,
    description: row.description ?? undefined,
    properties: isPlainObject(row.properties) ? row.properties : {},
    status: row.status,
    totalJobs: total,
    completedJobs: completed,
    failedJobs: failed,
    pendingJobs: total - completed - failed,
    progressPercentage: total === 0 ? (finished ? 100 : 0) : Math.round(((completed + failed) / total) * 10_000) / 100,
    finished,
    createdAt: row.created_at,
    finishedAt: row.finished_at ?? undefined
  }
}

const makeServices = Effect.gen(function* () {
  const config = yield* PgBusConfig
  const sql = yield* SqlClient.SqlClient
  const store = yield* QueueStore
  const client = yield* JobClient
  const statements = makeBatchSql(sql, config.schema)
  const db =
    (operation: string) =>
    <A, R>(effect: Effect.Effect<A, SqlError, R>) =>
      Effect.mapError(effect, toDatabaseError(operation))

  // All or nothing: a transaction, or a savepoint inside the caller's (which may carry on
  // after a failure here without committing half of it).
  const transactional = <A, E, R>(operation: string, effect: Effect.Effect<A, E, R>) =>
    withTransaction(sql, effect).pipe(
      Effect.catchIf(
        (e): e is SqlError => typeof e === "object" && e !== null && "_tag" in e && e._tag === "SqlError",
        (e) => Effect.fail(toDatabaseError(operation)(e))
      )
    )

  /** Why a guarded statement found no pending batch. */
  const notJoinable = (id: string) =>
    Effect.flatMap(statements.batchGet(id).pipe(db("find batch")), (rows) =>
      Effect.fail(rows.length === 0 ? new BatchNotFound({ batchId: id }) : new AlreadyFinished({ batchId: id }))
    )

  // ---- callbacks ---------------------------------------------------------------------------

  const callbackSpec = (option: string, callback: Callback | undefined) =>
    Effect.gen(function* () {
      if (callback === undefined) return null
      const invalid = (reason: string) => Effect.fail(new InvalidBatchOptions({ option, reason }))
      const given = isJob(callback) ? { job: callback } : callback
      if (typeof given !== "object" || given === null || !isJob(given.job)) {
        return yield* invalid("must be a job (Job.make) or { job, queue?, priority?, delay? }")
      }
      for (const key of Object.keys(given)) {
        if (!["job", "queue", "priority", "delay"].includes(key)) return yield* invalid(`unknown key ${key}`)
      }
      let delayMs = 0
      if ("delay" in given && given.delay !== undefined) {
        const d = Duration.fromInput(given.delay)
        if (Option.isNone(d) || !Duration.isFinite(d.value) || Duration.isNegative(d.value)) {
          return yield* invalid("delay must be a finite, non-negative duration")
        }
        delayMs = Duration.toMillis(d.value)
      }
      const queue = "queue" in given ? given.queue : undefined
      const priority = "priority" in given ? given.priority : undefined
      if (queue !== undefined && typeof queue !== "string") return yield* invalid("queue must be a string")
      if (priority !== undefined && (!Number.isInteger(priority) || priority < 0)) {
        return yield* invalid("priority must be an integer of at least 0")
      }
      const physical = physicalQueueOf(config, given.job, { queue, priority })
      const name = yield* store
        .validateName(physical)
        .pipe(Effect.mapError((e) => new InvalidBatchOptions({ option, reason: e.message })))
      if (QueueName.isDeadLetter(name)) return yield* invalid("a callback cannot run on a dead-letter queue")
      yield* client
        .ensureQueue(physical)
        .pipe(
          Effect.mapError((e) =>
            e._tag === "DatabaseError" ? e : new InvalidBatchOptions({ option, reason: e.message })
          )
        )
      const context = yield* CurrentAttributes
      return JSON.stringify({
        job: given.job.name,
        queue: physical,
        delay_ms: delayMs,
        ...(Object.keys(context).length > 0 ? { context } : {})
      } satisfies CallbackSpec)
    })

  /** The callbacks a finished batch fires: onFinish, then onSuccess or onFailure. */
  const callbacksOf = (row: BatchRow) => {
    const succeeded = row.failed_jobs === 0n
    const out: Array<{ readonly callback: Finished["callback"]; readonly spec: unknown }> = [
      { callback: "onFinish", spec: row.on_finish },
      succeeded ? { callback: "onSuccess", spec: row.on_success } : { callback: "onFailure", spec: row.on_failure }
    ]
    return out.filter((c) => c.spec !== null && c.spec !== undefined)
  }

  /**
   * Sends a finished batch's callbacks, once: the claim (a guarded update) and the sends
   * commit together. Their messages carry no batch header: a callback is never a member.
   */
  const sendCallbacks = (id: string) =>
    transactional(
      "send batch callbacks",
      Effect.gen(function* () {
        const now = yield* statementNow
        const [row] = yield* statements.batchClaimCallbacks(id, now).pipe(db("claim batch callbacks"))
        if (row === undefined) return false
        const info = infoOf(row)
        for (const { callback, spec } of callbacksOf(row)) {
          const decoded = decodeSpec(spec)
          if (Option.isNone(decoded)) {
            yield* Effect.logError(`pgbus: batch ${id}: ${callback} is not a stored callback, skipped`)
            continue
          }
          const { job, queue, delay_ms, context } = decoded.value
          const payload: Finished = {
            batchId: id,
            callback,
            succeeded: info.failedJobs === 0,
            description: info.description ?? null,
            properties: info.properties,
            totalJobs: info.totalJobs,
            completedJobs: info.completedJobs,
            failedJobs: info.failedJobs,
            finishedAt: (info.finishedAt ?? new Date(0)).toISOString()
          }
          yield* client.ensureQueue(queue)
          yield* store.send(
            queue,
            { job, payload },
            {
              ...(delay_ms > 0 ? { delay: Duration.millis(delay_ms) } : {}),
              ...(context === undefined ? {} : { headers: { [CONTEXT_HEADER]: context } })
            }
          )
        }
        return true
      })
    ).pipe(Effect.withSpan("pgbus.batch.callbacks", { attributes: { batch_id: id } }, { captureStackTrace: false }))

  // ---- members -----------------------------------------------------------------------------

  // The guard, the messages and their rows commit together (see `transactional`).
  const membership = (id: string): BatchMembership => ({
    batchId: id,
    send: (queue: string, entries: ReadonlyArray<BatchEntry>) =>
      transactional(
        "join batch",
        Effect.gen(function* () {
          if (entries.length === 0) return [] as ReadonlyArray<bigint>
          const now = yield* statementNow
          // counted before the messages exist: a finished batch refuses before any send
          const joined = yield* statements.batchJoin(id, entries.length, now).pipe(db("join batch"))
          if (joined.length < entries.length) return yield* notJoinable(id)
          const executions = joined.map((r) => r.id)
          const ids = yield* store.sendBatch(
            queue,
            entries.map((entry, i) => ({
              ...entry,
              headers: { ...entry.headers, [BATCH_ID_HEADER]: id, [BATCH_EXECUTION_HEADER]: String(executions[i]) }
            }))
          )
          yield* statements.batchExecutionsInsert(id, queue, executions, ids, now).pipe(db("record batch members"))
          return ids
        })
      )
  })

  const closeBlock = (id: string) =>
    Effect.gen(function* () {
      const now = yield* statementNow
      const [row] = yield* statements.batchCloseBlock(id, now).pipe(db("close batch block"))
      if (row?.status !== "finished") return
      // the batch has finished either way: callbacks that fail to send now are sent by the sweep
      yield* sendCallbacks(id).pipe(
        Effect.catchCause((cause) =>
          Effect.logWarning(`pgbus: sending the callbacks of batch ${id} failed; the sweep will`, Cause.pretty(cause))
        )
      )
    })

  const enqueueIn =
    (id: string) =>
    <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | BatchJoinError | DatabaseError, R> =>
      Effect.uninterruptibleMask((restore) =>
        Effect.gen(function* () {
          const now = yield* statementNow
          const opened = yield* statements.batchOpenBlock(id, now).pipe(db("open batch block"))
          if (opened.length === 0) return yield* notJoinable(id)
          const exit = yield* Effect.exit(restore(Effect.provideService(effect, CurrentBatch, membership(id))))
          // closed whatever the effect did: an open block would hold the batch until the sweep
          const closed = yield* Effect.exit(closeBlock(id))
          if (Exit.isFailure(exit)) {
            if (Exit.isFailure(closed)) {
              yield* Effect.logWarning(`pgbus: closing a block of batch ${id} failed`, Cause.pretty(closed.cause))
            }
            return yield* Effect.failCause(exit.cause)
          }
          if (Exit.isFailure(closed)) return yield* Effect.failCause(closed.cause)
          return exit.value
        })
      ).pipe(Effect.withSpan("pgbus.batch.enqueue", { attributes: { batch_id: id } }, { captureStackTrace: false }))

  const handleOf = (row: BatchRow): Batch => ({ ...infoOf(row), enqueue: enqueueIn(row.id) })

  // ---- make, find --------------------------------------------------------------------------

  const makeBatch = (options: BatchOptions = {}) =>
    Effect.gen(function* () {
      const invalid = (option: string, reason: string) => Effect.fail(new InvalidBatchOptions({ option, reason }))
      if (typeof options !== "object" || options === null) return yield* invalid("options", "must be an object")
      for (const key of Object.keys(options)) if (!OPTION_KEYS.has(key)) return yield* invalid(key, "unknown option")
      const { description, properties = {} } = options
      if (description !== undefined && (typeof description !== "string" || description.length > 1_000)) {
        return yield* invalid("description", "must be a string of at most 1,000 characters")
      }
      const descriptionProblem = description === undefined ? undefined : Input.textProblem(description)
      if (descriptionProblem !== undefined) return yield* invalid("description", descriptionProblem)
      if (!isPlainObject(properties)) return yield* invalid("properties", "must be a plain object")
      const json = Input.storableJson(properties)
      if (json.problem !== undefined) return yield* invalid("properties", `must be storable JSON: ${json.problem}`)
      const propertiesJson = json.text
      // stored once, and copied into each callback job's payload: bounded like one
      if (propertiesJson.length * 3 > config.maxPayloadSize) {
        const size = Buffer.byteLength(propertiesJson, "utf8")
        if (size > config.maxPayloadSize) {
          return yield* invalid("properties", `${size} bytes, over maxPayloadSize (${config.maxPayloadSize})`)
        }
      }
      const callbacks = {
        onFinish: yield* callbackSpec("onFinish", options.onFinish),
        onSuccess: yield* callbackSpec("onSuccess", options.onSuccess),
        onFailure: yield* callbackSpec("onFailure", options.onFailure)
      }
      const now = yield* statementNow
      const [row] = yield* statements
        .batchInsert({
          id: crypto.randomUUID(),
          description: description ?? null,
          properties: propertiesJson,
          callbacks,
          now
        })
        .pipe(db("create batch"))
      return handleOf(row!)
    }).pipe(Effect.withSpan("pgbus.batch.make", {}, { captureStackTrace: false }))

  const find = (id: string) =>
    Effect.gen(function* () {
      if (typeof id !== "string" || !UUID.test(id)) return yield* new BatchNotFound({ batchId: String(id) })
      const [row] = yield* statements.batchGet(id).pipe(db("find batch"))
      if (row === undefined) return yield* new BatchNotFound({ batchId: id })
      return handleOf(row)
    })

  // ---- ends of members ---------------------------------------------------------------------

  /** Records ends of one batch's members; true when this call finished the batch. */
  const recordBatch = (batchId: string, ends: ReadonlyArray<{ execution: bigint; outcome: ExecutionOutcome }>) =>
    Effect.gen(function* () {
      const now = yield* statementNow
      const [row] = yield* statements
        .batchRecordOutcomes(
          batchId,
          ends.map((e) => e.execution),
          ends.map((e) => e.outcome),
          now
        )
        .pipe(db("record batch outcomes"))
      if (row?.status !== "finished") return false
      yield* sendCallbacks(batchId)
      return true
    })

  const byBatch = <T extends { readonly batchId: string }>(items: ReadonlyArray<T>): Array<[string, Array<T>]> => {
    const groups = new Map<string, Array<T>>()
    for (const item of items) {
      const list = groups.get(item.batchId)
      if (list) list.push(item)
      else groups.set(item.batchId, [item])
    }
    // one batch row at a time, in id order: two workers never lock two batches in opposite orders
    return [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  }

  const recordOutcomes = (outcomes: ReadonlyArray<MemberOutcome>) =>
    Effect.forEach(
      byBatch(outcomes),
      ([batchId, ends]) =>
        recordBatch(batchId, ends).pipe(
          Effect.catchCause((cause) =>
            Effect.logWarning(
              `pgbus: recording the end of ${ends.length} member(s) of batch ${batchId} failed; the batch sweep will repair it`,
              Cause.pretty(cause)
            )
          )
        ),
      { discard: true }
    ).pipe(Effect.withSpan("pgbus.batch.record", {}, { captureStackTrace: false }))

  const endMembers = (id: string, outcome: MemberOutcome["outcome"]) =>
    Effect.gen(function* () {
      yield* find(id)
      let ended = 0
      let finished = false
      let after = 0n
      while (true) {
        const rows = yield* statements.batchExecutionsOf(id, after, SWEEP_PAGE).pipe(db("read batch members"))
        if (rows.length === 0) break
        after = rows[rows.length - 1]!.id
        if (outcome === "completed") {
          const byQueue = new Map<string, Array<bigint>>()
          for (const row of rows) byQueue.set(row.queue, [...(byQueue.get(row.queue) ?? []), row.msg_id])
          for (const [queue, ids] of byQueue) yield* store.archive(queue, ids)
        } else {
          for (const row of rows) {
            yield* store.moveToDeadLetter(row.queue, row.msg_id, { source: "operator", reason: "manual" })
          }
        }
        ended += rows.length
        const done = yield* recordBatch(
          id,
          rows.map((r) => ({ execution: r.id, outcome }))
        )
        finished ||= done
      }
      return { ended, finished }
    }).pipe(Effect.withSpan("pgbus.batch.endMembers", { attributes: { batch_id: id } }, { captureStackTrace: false }))

  // ---- the sweep ---------------------------------------------------------------------------

  const placeOutcome = (place: MessagePlace, stale: boolean): ExecutionOutcome | undefined => {
    switch (place) {
      case "archived":
        return "completed"
      case "dead":
        return "failed"
      case "missing":
        // a row commits with its message, so this one was deleted (by hand, a purge); as the
        // seed does for an unsent row, it is only given up after the stall threshold
        return stale ? "uncounted" : undefined
      case "queued":
        return undefined
    }
  }

  const runOnce: Effect.Effect<BatchSweepReport, DatabaseError | QueueError> = Effect.gen(function* () {
    const stallMs = Duration.toMillis(config.batchStallThreshold)
    let recovered = 0
    let uncounted = 0
    let finished = 0
    let callbacksSent = 0

    // 1. members whose message ended (or never was) without their end being recorded
    let after = 0n
    while (true) {
      const now = yield* statementNow
      const rows = yield* statements
        .batchExecutionsPending(after, SWEEP_PAGE, stallMs, now)
        .pipe(db("read batch members"))
      if (rows.length === 0) break
      after = rows[rows.length - 1]!.id
      const ends: Array<{ batchId: string; execution: bigint; outcome: ExecutionOutcome }> = []
      const byQueue = new Map<string, Array<(typeof rows)[number]>>()
      for (const row of rows) {
        const list = byQueue.get(row.queue)
        if (list) list.push(row)
        else byQueue.set(row.queue, [row])
      }
      for (const [queue, members] of byQueue) {
        const places = yield* store
          .locate(
            queue,
            members.map((m) => ({ msgId: m.msg_id, marker: String(m.id) })),
            BATCH_EXECUTION_HEADER
          )
          .pipe(
            Effect.catchTag("QueueNotFound", () => Effect.succeed(members.map((): MessagePlace => "missing"))),
            Effect.catchTag("InvalidQueueName", () => Effect.succeed(members.map((): MessagePlace => "missing")))
          )
        members.forEach((m, i) => {
          const outcome = placeOutcome(places[i]!, m.stale)
          if (outcome !== undefined) ends.push({ batchId: m.batch_id, execution: m.id, outcome })
        })
      }
      for (const [batchId, list] of byBatch(ends)) {
        if (yield* recordBatch(batchId, list)) finished++
        for (const e of list) if (e.outcome === "uncounted") uncounted++
        recovered += list.filter((e) => e.outcome !== "uncounted").length
      }
      if (rows.length < SWEEP_PAGE) break
    }

    // 2. batches with no new member for the stall threshold: blocks that never closed
    const now = yield* statementNow
    const stalled = yield* statements.batchesRepairStalled(stallMs, SWEEP_PAGE, now).pipe(db("repair stalled batches"))
    for (const b of stalled) {
      if (b.status !== "finished") continue
      finished++
      yield* sendCallbacks(b.id)
    }

    // 3. finished batches whose callbacks were never sent (the finisher died in between)
    for (const { id } of yield* statements.batchesCallbacksDue(SWEEP_PAGE).pipe(db("find due callbacks"))) {
      if (yield* sendCallbacks(id)) callbacksSent++
    }

    // 4. retention
    let deleted = 0
    if (config.batchRetention !== undefined) {
      const retentionMs = Duration.toMillis(config.batchRetention)
      while (true) {
        const [row] = yield* statements
          .batchesDeleteFinished(retentionMs, SWEEP_PAGE, yield* statementNow)
          .pipe(db("delete old batches"))
        const n = Number(row?.n ?? 0n)
        deleted += n
        if (n < SWEEP_PAGE) break
      }
    }
    return {
      recovered,
      uncounted,
      unstuck: stalled.length,
      finished,
      callbacksSent,
      deleted
    } satisfies BatchSweepReport
  }).pipe(Effect.withSpan("pgbus.batch.sweep", {}, { captureStackTrace: false }))

  return {
    batches: Batches.of({ make: makeBatch, find, recordOutcomes, endMembers }),
    sweep: BatchSweep.of({ runOnce })
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
