/**
 * A queue's jobs for operators: listed by state, job name or payload text (paged by id), one
 * job queued or archived with its payload and headers, and the two changes to an idle job
 * (claimable now, discarded), each guarded by the read count it was seen with.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { statementNow } from "../../Database.ts"
import type { FailureRecord } from "../../Queue/Message.ts"
import type { JobRow } from "../../Queue/QueueQuerySql.ts"
import {
  type Change,
  DEFAULT_LIMIT,
  type Deps,
  decodeCursor,
  encodeCursor,
  iso,
  isoOrNull,
  messageId,
  pageSize,
  type View
} from "../Deps.ts"
import type { ErrorView, JobDetail, JobPage, JobState, JobSummary } from "../Model.ts"
import { InvalidRequest, NotFound, type OperationsError } from "../OperationsError.ts"
import { payloadView, textView } from "../Redact.ts"
import { fromQueueError, fromSql } from "./QueueErrors.ts"

/** A failure record as an error view (the message redacted without payloads). */
export const errorViewOf = (record: unknown, payloads: boolean): ErrorView | null => {
  if (typeof record !== "object" || record === null) return null
  const r = record as Partial<FailureRecord>
  if (typeof r.error_class !== "string") return null
  return { class: r.error_class, message: textView(r.error_message ?? "", payloads) ?? "" }
}

/** The job name a message carries (`job` of its envelope), if any. */
export const jobNameOf = (message: unknown): string | null =>
  typeof message === "object" && message !== null && typeof (message as { job?: unknown }).job === "string"
    ? (message as { job: string }).job
    : null

/** A job's row as the list shows it. */
const jobSummary = (queue: string, row: JobRow, payloads: boolean): JobSummary => ({
  queue,
  id: String(row.msg_id),
  job: jobNameOf(row.message),
  state: row.state,
  attempts: row.read_ct,
  enqueuedAt: iso(row.enqueued_at),
  visibleAt: iso(row.vt),
  archivedAt: isoOrNull(row.archived_at),
  lastError: errorViewOf(row.last_error, payloads)
})

/** Jobs listed and read, retried now or discarded. */
export const makeQueueJobs = (deps: Deps) => {
  const { store, queueSql } = deps

  const physicalOf = (name: string) =>
    store.validateName(name).pipe(
      Effect.map((n) => n.physical),
      Effect.mapError(fromQueueError(name))
    )

  /** Jobs of a queue in id order, optionally of one state or one job name. */
  const jobs = (
    options: {
      readonly queue: string
      readonly state?: JobState | undefined
      readonly job?: string | undefined
      /** Text the payload (its JSON) contains: only for a caller who may see payloads. */
      readonly text?: string | undefined
      readonly cursor?: string | undefined
      readonly limit?: number | undefined
    },
    view: View = {}
  ): Effect.Effect<JobPage, OperationsError> =>
    Effect.gen(function* () {
      const limit = yield* pageSize(options.limit ?? DEFAULT_LIMIT)
      if (options.text !== undefined && view.payloads !== true) {
        return yield* new InvalidRequest({ reason: "searching payloads needs access to payloads" })
      }
      const physical = yield* physicalOf(options.queue)
      const after = options.cursor === undefined ? null : yield* messageId((yield* decodeCursor(options.cursor, 1))[0]!)
      const now = yield* statementNow
      const rows = yield* queueSql
        .jobsList(physical, options.state ?? null, options.job ?? null, after, limit + 1, now, options.text ?? null)
        .pipe(Effect.mapError(fromSql(options.queue, "list jobs of")))
      const page = rows.slice(0, limit)
      return {
        jobs: page.map((r) => jobSummary(options.queue, r, view.payloads === true)),
        next: rows.length > limit ? encodeCursor(String(page.at(-1)!.msg_id)) : null
      }
    })

  /** One job, queued or archived, with its payload and headers. */
  const job = (queueName: string, id: string, view: View = {}): Effect.Effect<JobDetail, OperationsError> =>
    Effect.gen(function* () {
      const physical = yield* physicalOf(queueName)
      const msgId = yield* messageId(id)
      const now = yield* statementNow
      const [queued] = yield* queueSql.jobGet(physical, msgId, now).pipe(Effect.mapError(fromSql(queueName, "read")))
      const row =
        queued ??
        (yield* queueSql.archivedGet(physical, msgId).pipe(Effect.mapError(fromSql(queueName, "read archive of"))))[0]
      if (row === undefined) return yield* new NotFound({ kind: "job", id: `${queueName}:${id}` })
      const payloads = view.payloads === true
      return {
        ...jobSummary(queueName, row, payloads),
        claimedBy: row.claimed_by,
        payload: payloadView(row.message, payloads),
        headers: payloadView(row.headers, payloads)
      }
    })

  /** A queued job that is not running, as read now (its read count guards the change that follows). */
  const idleJob = (queueName: string, id: string, verb: string) =>
    Effect.gen(function* () {
      const physical = yield* physicalOf(queueName)
      const msgId = yield* messageId(id)
      const [row] = yield* queueSql
        .jobGet(physical, msgId, yield* statementNow)
        .pipe(Effect.mapError(fromSql(queueName, "read")))
      if (row === undefined) return yield* new NotFound({ kind: "job", id: `${queueName}:${id}` })
      if (row.state === "running") {
        return yield* new InvalidRequest({ reason: `job ${queueName}:${id} is running: it cannot be ${verb}` })
      }
      return { msgId, readCt: row.read_ct, state: row.state }
    })

  /** Makes a scheduled or retrying job claimable now (not a running one); guarded by its read count. */
  const retryJob = (queueName: string, id: string, change: Change) =>
    Effect.gen(function* () {
      const target = yield* idleJob(queueName, id, "retried")
      const moved = yield* store
        .setVisibility(queueName, [{ msgId: target.msgId, readCt: target.readCt }], 0)
        .pipe(Effect.mapError(fromQueueError(queueName)))
      if (moved === 0) return yield* new NotFound({ kind: "job", id: `${queueName}:${id}` })
      yield* Effect.logInfo(`pgbus: job ${queueName}:${id} made claimable now by ${change.actor}`)
      return { queue: queueName, id, was: target.state }
    })

  /** Deletes a job that is not running; guarded by its read count. */
  const discardJob = (queueName: string, id: string, change: Change) =>
    Effect.gen(function* () {
      const target = yield* idleJob(queueName, id, "discarded")
      const deleted = yield* store
        .delete(queueName, [{ msgId: target.msgId, readCt: target.readCt }])
        .pipe(Effect.mapError(fromQueueError(queueName)))
      if (deleted === 0) return yield* new NotFound({ kind: "job", id: `${queueName}:${id}` })
      yield* Effect.logWarning(
        `pgbus: job ${queueName}:${id} discarded by ${change.actor}${change.reason ? ` (${change.reason})` : ""}`
      )
      return { queue: queueName, id, discarded: true }
    })

  return { jobs, job, retryJob, discardJob }
}
