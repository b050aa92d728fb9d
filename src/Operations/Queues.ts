/**
 * Queues and jobs for operators: each queue's figures and state in words, pause / resume /
 * purge, and jobs listed by state. A queue name is the app's; with priorities on, a verb on
 * `mailers` acts on each of its sub-queues (`mailers_p0`, ...).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { SqlError } from "effect/sql/SqlError"
import { type DatabaseError, serverError, statementNow, toDatabaseError } from "../Database.ts"
import type { FailureRecord } from "../Queue/Message.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import type { JobRow, QueueFiguresRow } from "../Queue/QueueQuerySql.ts"
import type { QueueState } from "../Queue/QueueStates.ts"
import type { QueueInfo } from "../Queue/QueueStore.ts"
import {
  type Change,
  count,
  DEFAULT_LIMIT,
  type Deps,
  decodeCursor,
  encodeCursor,
  inWords,
  iso,
  isoOrNull,
  messageId,
  pageSize,
  type View
} from "./Deps.ts"
import type { ErrorView, JobDetail, JobPage, JobState, JobSummary, QueueSummary } from "./Model.ts"
import { InvalidRequest, NotFound, type OperationsError } from "./OperationsError.ts"
import { payloadView, textView } from "./Redact.ts"

/** A queue error as the operations service reports it. */
export const fromQueueError =
  (queue: string) =>
  (error: QueueError): NotFound | InvalidRequest | DatabaseError => {
    switch (error._tag) {
      case "QueueNotFound":
        return new NotFound({ kind: "queue", id: queue })
      case "DatabaseError":
        return error
      default:
        return new InvalidRequest({ reason: error.message })
    }
  }

/** A statement's error on a queue table: a missing table is an unknown queue. */
const fromSql =
  (queue: string, operation: string) =>
  (error: SqlError): NotFound | DatabaseError =>
    serverError(error).code === "42P01"
      ? new NotFound({ kind: "queue", id: queue })
      : toDatabaseError(`${operation} ${queue}`)(error)

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

/** What a queue is doing, in words. */
const describeQueue = (f: QueueFiguresRow, paused: QueueState | undefined, deadLetters: number): string => {
  const parts: Array<string> = []
  if (paused?.paused) {
    parts.push(`paused by ${paused.actor}${paused.reason ? ` (${paused.reason})` : ""}: nothing is claimed`)
  }
  const depth = count(f.depth)
  if (depth === 0) parts.push("empty")
  else {
    const ready = count(f.ready)
    if (ready > 0) parts.push(`${ready} ready, the oldest claimable for ${inWords(f.claimable_latency_ms ?? 0)}`)
    if (count(f.running) > 0) parts.push(`${count(f.running)} running`)
    if (count(f.retrying) > 0) parts.push(`${count(f.retrying)} retrying`)
    if (count(f.scheduled) > 0) parts.push(`${count(f.scheduled)} scheduled`)
  }
  if (deadLetters > 0) parts.push(`${deadLetters} dead-lettered`)
  return parts.join("; ")
}

/** The operators' queue operations. */
export const makeQueues = (deps: Deps) => {
  const { store, states, queueSql } = deps

  const figuresOf = (q: QueueInfo) =>
    Effect.flatMap(statementNow, (now) => queueSql.queueFigures(q.physical, now)).pipe(
      Effect.map((rows) => rows[0]!),
      Effect.mapError(fromSql(q.name, "read figures of"))
    )

  const registered = store.list.pipe(Effect.mapError(fromQueueError("(registry)")))

  const summaryOf = (
    q: QueueInfo,
    all: ReadonlyArray<QueueInfo>,
    stateOf: ReadonlyMap<string, QueueState>
  ): Effect.Effect<QueueSummary, OperationsError> =>
    Effect.gen(function* () {
      const f = yield* figuresOf(q)
      const dlq = all.find((d) => d.deadLetterOf === q.physical || d.name === `${q.name}_dlq`)
      const deadLetters = dlq === undefined ? 0 : count((yield* figuresOf(dlq)).depth)
      const state = stateOf.get(q.name)
      const paused = state?.paused === true
      return {
        name: q.name,
        deadLetterQueue: dlq?.name ?? null,
        depth: count(f.depth),
        ready: count(f.ready),
        scheduled: count(f.scheduled),
        running: count(f.running),
        retrying: count(f.retrying),
        oldestAgeMs: f.oldest_age_ms,
        claimableLatencyMs: f.claimable_latency_ms ?? 0,
        deadLetters,
        archived: count(f.archived),
        paused,
        pause:
          paused && state !== undefined
            ? {
                at: isoOrNull(state.pausedAt) ?? iso(state.updatedAt),
                until: isoOrNull(state.pausedUntil),
                reason: state.reason ?? null,
                actor: state.actor
              }
            : null,
        status: describeQueue(f, state, deadLetters)
      }
    })

  const stateMap = Effect.map(states.list.pipe(Effect.mapError(fromQueueError("(states)"))), (list) => {
    const map = new Map<string, QueueState>()
    for (const s of list) map.set(s.queue, s)
    return map as ReadonlyMap<string, QueueState>
  })

  /** Every queue but the dead-letter queues (counted on the queue they serve), by name. */
  const queues: Effect.Effect<ReadonlyArray<QueueSummary>, OperationsError> = Effect.gen(function* () {
    const all = yield* registered
    const stateOf = yield* stateMap
    const live = all.filter((q) => q.deadLetterOf === undefined)
    return yield* Effect.forEach(live, (q) => summaryOf(q, all, stateOf))
  })

  /** The registered queues a name stands for: itself and its priority sub-queues. */
  const targetsOf = (name: string) =>
    Effect.gen(function* () {
      const all = yield* registered
      const sub = new RegExp(`^${name.replace(/[^a-z0-9_]/g, "")}_p\\d+$`)
      const targets = all.filter((q) => q.deadLetterOf === undefined && (q.name === name || sub.test(q.name)))
      if (targets.length === 0) return yield* new NotFound({ kind: "queue", id: name })
      return { all, targets }
    })

  /** One queue (its first sub-queue when it has only sub-queues). */
  const queue = (name: string): Effect.Effect<QueueSummary, OperationsError> =>
    Effect.gen(function* () {
      const { all, targets } = yield* targetsOf(name)
      return yield* summaryOf(targets.find((q) => q.name === name) ?? targets[0]!, all, yield* stateMap)
    })

  /** Pauses a queue: no worker of any process claims from it within a second; what runs, runs on. */
  const pauseQueue = (name: string, change: Change & { readonly until?: Date | undefined }) =>
    Effect.gen(function* () {
      const { targets } = yield* targetsOf(name)
      yield* Effect.forEach(targets, (q) => states.pause(q.name, change).pipe(Effect.mapError(fromQueueError(q.name))))
      return yield* queue(name)
    })

  /** Resumes a paused queue and wakes its workers. */
  const resumeQueue = (name: string, change: Change) =>
    Effect.gen(function* () {
      const { targets } = yield* targetsOf(name)
      yield* Effect.forEach(targets, (q) => states.resume(q.name, change).pipe(Effect.mapError(fromQueueError(q.name))))
      return yield* queue(name)
    })

  /** Deletes every message of a queue (not its archive, not its dead letters); how many. */
  const purgeQueue = (name: string, change: Change) =>
    Effect.gen(function* () {
      const { targets } = yield* targetsOf(name)
      const purged = yield* Effect.forEach(targets, (q) =>
        store.purge(q.name).pipe(Effect.mapError(fromQueueError(q.name)))
      )
      const total = purged.reduce((n, p) => n + p, 0)
      yield* Effect.logWarning(
        `pgbus: queue ${name} purged by ${change.actor}: ${total} message(s) deleted${change.reason ? ` (${change.reason})` : ""}`
      )
      return { queue: name, purged: total }
    })

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

  /** The ordering keys of a queue kept blocked after their head was dead-lettered (`onDeadLetter: "block"`). */
  const blockedKeys = (queueName: string) =>
    store.outcomes.blockedKeys(queueName).pipe(
      Effect.map((keys) =>
        keys.map((k) => ({
          key: k.key,
          id: String(k.msgId),
          deadLetterId: k.deadLetterId === undefined ? null : String(k.deadLetterId),
          blockedAt: k.blockedAt
        }))
      ),
      Effect.mapError(fromQueueError(queueName))
    )

  /** Releases a blocked ordering key: its next job becomes the head. NotFound when it is not blocked. */
  const releaseKey = (queueName: string, key: string, change: Change) =>
    Effect.gen(function* () {
      const released = yield* store.outcomes.releaseKey(queueName, key).pipe(Effect.mapError(fromQueueError(queueName)))
      if (!released) return yield* new NotFound({ kind: "blocked key", id: `${queueName}:${key}` })
      yield* Effect.logInfo(
        `pgbus: ordering key ${key} of ${queueName} released by ${change.actor}${change.reason ? ` (${change.reason})` : ""}`
      )
      return { queue: queueName, key, released: true }
    })

  return {
    queues,
    queue,
    pauseQueue,
    resumeQueue,
    purgeQueue,
    jobs,
    job,
    retryJob,
    discardJob,
    blockedKeys,
    releaseKey,
    figuresOf,
    registered
  }
}
