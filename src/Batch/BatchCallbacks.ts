/**
 * A batch's callbacks: checking them when the batch is made (into the stored spec), and
 * sending a finished batch's callbacks exactly once.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option, Schema } from "effect"
import { statementNow } from "../Database.ts"
import { isJob } from "../Job/Job.ts"
import { physicalQueueOf } from "../Job/JobClient.ts"
import { CONTEXT_HEADER, CurrentAttributes } from "../Job/RequestContext.ts"
import * as QueueName from "../Queue/QueueName.ts"
import type { Callback, Finished } from "./Batch.ts"
import { type BatchContext, infoOf } from "./BatchContext.ts"
import { InvalidBatchOptions } from "./BatchError.ts"
import type { BatchRow } from "./BatchSql.ts"

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

/** The callbacks a finished batch fires: onFinish, then onSuccess or onFailure. */
const callbacksOf = (row: BatchRow) => {
  const succeeded = row.failed_jobs === 0n
  const out: Array<{ readonly callback: Finished["callback"]; readonly spec: unknown }> = [
    { callback: "onFinish", spec: row.on_finish },
    succeeded ? { callback: "onSuccess", spec: row.on_success } : { callback: "onFailure", spec: row.on_failure }
  ]
  return out.filter((c) => c.spec !== null && c.spec !== undefined)
}

/** Builds the callback checks and the callback sender over the batch context. */
export const makeBatchCallbacks = ({ config, store, client, statements, db, transactional }: BatchContext) => {
  /** Checks one callback option; the JSON stored for it (null when not given). */
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

  return { callbackSpec, sendCallbacks }
}

/** The callbacks of the batch service. */
export type BatchCallbacks = ReturnType<typeof makeBatchCallbacks>
