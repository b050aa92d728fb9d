/**
 * The workflow engine: the client (start, queries, outside verbs) and the runner that executes a
 * step's message by replaying the body. Every transition goes through the table in
 * `States.ts` and a guarded statement in `WorkflowSql.ts`.
 *
 * @since 0.1.0
 */

import { createHash } from "node:crypto"
import os from "node:os"
import { Cause, Clock, Context, Duration, Effect, Exit, Layer, Metric, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import {
  Batches,
  type Finished as BatchFinished,
  Finished as BatchFinishedSchema,
  type BatchInfo,
  BatchNotFound
} from "../Batch/Batch.ts"
import { PgBusConfig, type PgBusConfigShape } from "../Config.ts"
import { isPassingFailure, retryTransient, statementNow, toDatabaseError, withTransaction } from "../Database.ts"
import { makeBatcher, makeBatchGroup } from "../internal/Batcher.ts"
import { jsonMismatch } from "../internal/jsonSafe.ts"
import { boundedMemo } from "../internal/memo.ts"
import { runSpan, stepSpan } from "../internal/span.ts"
import { isStorableJson, isStorableText, storableText } from "../internal/storable.ts"
import * as Job from "../Job/Job.ts"
import { JobClient, physicalQueueOf } from "../Job/JobClient.ts"
import type { Message } from "../Queue/Message.ts"
import { type LocalSlot, Notifier } from "../Queue/Notifier.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import * as QueueName from "../Queue/QueueName.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import type {
  AuditEvent,
  ListOptions,
  RunHandle,
  RunInfo,
  RunPage,
  RunProgress,
  SignalOptions,
  SignalReceipt,
  StartOptions,
  StepAttempt,
  VerbOptions,
  WorkflowClientShape,
  WorkflowRef
} from "./Client.ts"
import { WorkflowClient } from "./Client.ts"
import { resolve as resolvePolicy } from "./Policies.ts"
import {
  type ControlVerb,
  type FanOutMember,
  type FanOutOptions,
  type FanOutResult,
  isSignalMatcher,
  type ReceivedSignal,
  type RunContext,
  type SignalDeclarations,
  type SignalMatcher,
  SignalReaders,
  StepContext,
  type StepOptions,
  WorkflowRuntime
} from "./Runtime.ts"
import * as States from "./States.ts"
import type { AnyWorkflow } from "./Workflow.ts"
import { checkStep } from "./Workflow.ts"
import {
  AlreadyRunning,
  type DatabaseError,
  FanOutFailed,
  InvalidSignal,
  InvalidTransition,
  InvalidWorkflowDefinition,
  InvalidWorkflowPayload,
  NotOngoing,
  NotPaused,
  OutputNotJson,
  OutputNotStorable,
  OutputTooLarge,
  ReplayDivergence,
  RunNotFound,
  type SignalError,
  StepInterrupted,
  StepStalled,
  StepTimeout,
  UnknownStep,
  WaitTimedOut,
  WorkflowNotRegistered
} from "./WorkflowError.ts"
import {
  type ClaimFirstEntry,
  type ClaimRow,
  type EventRow,
  FAN_OUT_JOB,
  FAN_OUT_WAIT,
  type FinishManyEntry,
  type FinishRow,
  type HistoryEntry,
  makeWorkflowSql,
  type NextAction,
  POLL_WAIT,
  type RunRow,
  type SignalRow,
  type StartEntry,
  type StepRow,
  type WorkflowSql
} from "./WorkflowSql.ts"

/** Replay rules' version, recorded on every run (bumped if replay ever changes). */
export const ENGINE_VERSION = 1

// ---------------------------------------------------------------------------------------------
// Error reporting and metrics

/**
 * Where step errors are reported (per the policies' `report`). The default logs them.
 *
 * @category services
 */
export const ErrorReporter = Context.Reference<{
  readonly report: (
    error: unknown,
    context: {
      readonly workflow: string
      readonly workflowId: string
      readonly step: string
      readonly attempt: number
      readonly outcome: string
    }
  ) => Effect.Effect<void>
}>("effect-pgbus/Workflow/ErrorReporter", {
  defaultValue: () => ({
    report: (error, context) =>
      Effect.logError(
        `pgbus: workflow ${context.workflow} step ${context.step} failed (${context.outcome})`,
        error
      ).pipe(Effect.annotateLogs({ workflow_id: context.workflowId, attempt: context.attempt }))
  })
})

const stepsTotal = Metric.counter("pgbus_workflow_steps_total", { description: "workflow step attempts by outcome" })
const stepDuration = Metric.histogram("pgbus_workflow_step_duration_seconds", {
  description: "run time of workflow step attempts",
  boundaries: Metric.exponentialBoundaries({ start: 0.001, factor: 4, count: 10 })
})
const finishedTotal = Metric.counter("pgbus_workflows_finished_total", { description: "runs finished" })
const pausedTotal = Metric.counter("pgbus_workflows_paused_total", { description: "runs paused by a step" })
const cancelledTotal = Metric.counter("pgbus_workflows_cancelled_total", { description: "runs cancelled" })
const stallsTotal = Metric.counter("pgbus_workflow_stalls_total", { description: "steps found stalled" })
const waitOverdueTotal = Metric.counter("pgbus_workflow_wait_overdue_total", {
  description: "late notices of notify waits (one per deadline, or one for a sweep that missed several)"
})
const waitingOverdueGauge = Metric.gauge("pgbus_workflow_waiting_overdue", {
  description: "runs waiting longer than workflowWaitingVisibilityThreshold, as of the last sweep"
})

/** The workflow metrics (read them with `Metric.value`, export them with your metrics layer). */
export const WorkflowMetrics = {
  stepsTotal,
  stepDuration,
  finishedTotal,
  pausedTotal,
  cancelledTotal,
  stallsTotal,
  waitOverdueTotal,
  waitingOverdue: waitingOverdueGauge
} as const

// ---------------------------------------------------------------------------------------------
// Encoding helpers

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

const isSqlError = (u: unknown): u is SqlError => isObject(u) && u._tag === "SqlError"

const isTagged = (u: unknown): boolean =>
  isObject(u) &&
  typeof u._tag === "string" &&
  ["RunNotFound", "NotOngoing", "InvalidTransition", "DatabaseError"].includes(u._tag)

/** An error as a step row records it: tag, message, cause chain, capped stack, worker, revision. */
export const encodeError = (error: unknown, backtraceLines: number, worker: string, revision: string | undefined) => {
  // an error is only recorded: what PostgreSQL cannot store (a NUL, a lone surrogate) is replaced
  const describe = (e: unknown) =>
    isObject(e)
      ? {
          tag: storableText(typeof e._tag === "string" ? e._tag : typeof e.name === "string" ? e.name : "Error"),
          message: storableText(typeof e.message === "string" ? e.message : String(e))
        }
      : { tag: typeof e, message: storableText(String(e)) }
  const causes: Array<{ tag: string; message: string }> = []
  let cause = isObject(error) ? error.cause : undefined
  while (cause !== undefined && causes.length < 5) {
    causes.push(describe(cause))
    cause = isObject(cause) ? cause.cause : undefined
  }
  const stack =
    isObject(error) && typeof error.stack === "string"
      ? storableText(error.stack.split("\n").slice(0, backtraceLines).join("\n"))
      : undefined
  return {
    ...describe(error),
    ...(causes.length > 0 ? { causes } : {}),
    ...(stack ? { stack } : {}),
    worker,
    ...(revision ? { app_revision: revision } : {})
  }
}

/** An error's message, as an event's reason records it (what PostgreSQL cannot store replaced). */
const messageOf = (error: unknown): string =>
  storableText(isObject(error) && typeof error.message === "string" ? error.message : String(error))

/** A reason given to a flow-control verb, as an event records it. */
const textOf = (reason: string | undefined): string | null => (reason === undefined ? null : storableText(reason))

/** What `matchSignal` gives when the signal does not match. */
const NO_MATCH: unique symbol = Symbol("pgbus/no-match")

/** Whether a declared signal has a predicate (only code that loads the workflow can evaluate it). */
const declaredMatcher = (workflow: { readonly signals: SignalDeclarations }, name: string): boolean => {
  const declared = workflow.signals[name]
  return isSignalMatcher(declared) && declared.matches !== undefined
}

/**
 * Matches a stored signal payload against a wait: decodes it with the declared (or the
 * matcher's) Schema and applies the predicate. Gives the decoded payload, or NO_MATCH. A Schema
 * or a predicate that fails is an error of the step (the exception policies decide).
 */
/** A step's options plus the runner's own: a poll takes a held signal as its fast-forwarded result. */
type RunnerStepOptions<A> = StepOptions<A> & { readonly takesHeldSignal?: boolean | undefined }

const matchSignal = (
  workflow: { readonly signals: SignalDeclarations },
  waitFor: string | SignalMatcher,
  payload: unknown,
  options: { readonly decodeOnly?: boolean } = {}
): Effect.Effect<unknown, unknown> =>
  Effect.gen(function* () {
    const name = typeof waitFor === "string" ? waitFor : waitFor.name
    const declared = workflow.signals[name]
    const matcher: SignalMatcher | undefined =
      typeof waitFor !== "string" ? waitFor : isSignalMatcher(declared) ? declared : undefined
    const schema = matcher?.schema ?? (declared !== undefined && !isSignalMatcher(declared) ? declared : undefined)
    const decoded = schema === undefined ? payload : yield* Schema.decodeUnknownEffect(schema)(payload)
    // a held signal was matched when it was claimed: later attempts only decode it
    if (matcher?.matches === undefined || options.decodeOnly === true) return decoded
    const matches = matcher.matches
    return yield* Effect.try({ try: () => matches(decoded), catch: (e) => e }).pipe(
      Effect.map((ok) => (ok ? decoded : NO_MATCH))
    )
  })

/** The deadline of a wait when the step parks: a delay (database clock) or a date; a notify period. */
const waitDeadline = (
  options: StepOptions<unknown>,
  run: RunContext<unknown>
): Effect.Effect<{ readonly ms: number | null; readonly at: Date | null; readonly periodMs: number | null }, unknown> =>
  // the deadline function's services are the workflow's, provided where it runs
  Effect.gen(function* () {
    const timeout = options.waitTimeout
    if (timeout === undefined) return { ms: null, at: null, periodMs: null }
    const value = typeof timeout === "function" ? yield* timeout(run) : timeout
    if (value === undefined) return { ms: null, at: null, periodMs: null }
    if (value instanceof Date) {
      if (Number.isNaN(value.getTime())) return yield* Effect.fail(new Error("waitTimeout gave an invalid Date"))
      return { ms: null, at: value, periodMs: null }
    }
    const d = Duration.fromInput(value)
    if (d._tag === "None" || !Duration.isFinite(d.value) || !Duration.isPositive(d.value)) {
      return yield* Effect.fail(new Error(`waitTimeout must give a positive duration, a Date or undefined`))
    }
    const ms = Duration.toMillis(d.value)
    return { ms, at: null, periodMs: ms }
  }) as Effect.Effect<
    { readonly ms: number | null; readonly at: Date | null; readonly periodMs: number | null },
    unknown
  >

// A metric with attributes keys its series on first use: one per workflow, step and outcome,
// kept, rather than a new one (and its key) for every step.
const stepMetricsOf = boundedMemo((key) => {
  const [workflow, step, outcome] = key.split("\u0000")
  const attributes = { workflow_class: workflow!, step: step!, outcome: outcome! }
  return {
    total: stepsTotal.pipe(Metric.withAttributes(attributes)),
    duration: stepDuration.pipe(Metric.withAttributes(attributes))
  }
})
const stepMetrics = (workflow: string, step: string, outcome: string) =>
  stepMetricsOf(`${workflow}\u0000${step}\u0000${outcome}`)
const finishedOf = boundedMemo((workflow) => finishedTotal.pipe(Metric.withAttributes({ workflow_class: workflow })))

// Every outcome records the hash of the step names so far, and the runs of a workflow share
// their name sequences: a memo spares a sha256 per step (about 3% of the runner's CPU in W3 of
// bench:workflows).
const hashJoined = boundedMemo((joined) => createHash("sha256").update(joined).digest("hex").slice(0, 32))
const hashNames = (names: ReadonlyArray<string>): string => hashJoined(names.join("\u0000"))

// ---------------------------------------------------------------------------------------------
// Row mapping

const toRunInfo = (row: RunRow): RunInfo => ({
  id: row.id,
  workflow: row.workflow,
  subject: row.subject ?? undefined,
  resourceId: row.resource_id ?? undefined,
  payload: row.payload,
  status: row.status,
  currentStep: row.current_step ?? undefined,
  idempotencyKey: row.idempotency_key ?? undefined,
  pausedReason: row.paused_reason ?? undefined,
  error: row.error ?? undefined,
  output: row.output ?? undefined,
  engineVersion: row.engine_version,
  definitionVersion: row.definition_version ?? undefined,
  definitionHash: row.definition_hash ?? undefined,
  rerunOf: row.rerun_of ?? undefined,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
  finishedAt: row.finished_at ?? undefined,
  availableActions: States.availableActions(row.status)
})

const toStepAttempt = (row: StepRow): StepAttempt => ({
  id: row.id,
  name: row.name,
  attempt: row.attempt,
  position: row.position,
  status: row.status,
  queue: row.queue,
  scheduledAt: row.scheduled_at,
  dueAt: row.due_at,
  startedAt: row.started_at ?? undefined,
  finishedAt: row.finished_at ?? undefined,
  worker: row.worker ?? undefined,
  appRevision: row.app_revision ?? undefined,
  output: row.output ?? undefined,
  error: row.error ?? undefined,
  waitingFor: row.status === "waiting" ? (row.wait_for ?? undefined) : undefined,
  batchId: row.batch_id ?? undefined
})

const toAuditEvent = (row: EventRow): AuditEvent => ({
  id: row.id,
  type: row.type,
  step: row.step ?? undefined,
  attempt: row.attempt ?? undefined,
  actor: row.actor,
  reason: row.reason ?? undefined,
  details: row.details ?? undefined,
  at: row.at
})

const encodeCursor = (row: { readonly cursor_at: string; readonly id: string }) =>
  Buffer.from(`${row.cursor_at}|${row.id}`).toString("base64url")
const decodeCursor = (cursor: string): { readonly createdAt: string; readonly id: string } | undefined => {
  const [at, id] = Buffer.from(cursor, "base64url").toString("utf8").split("|")
  const valid = at !== undefined && !Number.isNaN(new Date(at).getTime())
  return id && valid && /^[0-9a-f-]{36}$/i.test(id) ? { createdAt: at, id } : undefined
}

// ---------------------------------------------------------------------------------------------
// The registered side: workflows with their services

/** A workflow ready to execute in this process. */
export interface RegisteredWorkflow {
  readonly workflow: AnyWorkflow
  /** Provides the services the workflow's code needs (captured where it was registered). */
  readonly provide: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, Exclude<R, never>>
}

/** One info line when a run finishes, pauses (with its reason) or is cancelled by a step's outcome. */
const logRunEnd = (workflow: string, runId: string, step: string, after: string | null, next: NextAction) =>
  after === "finished"
    ? Effect.logInfo(`pgbus: workflow ${workflow} run ${runId} finished (last step ${step})`)
    : after === "paused"
      ? Effect.logInfo(
          `pgbus: workflow ${workflow} run ${runId} paused at step ${step}${next._tag === "pause" ? `: ${next.reason}${next.message ? `: ${next.message}` : ""}` : ""}`
        )
      : after === "cancelled"
        ? Effect.logInfo(`pgbus: workflow ${workflow} run ${runId} cancelled at step ${step}`)
        : Effect.void

/** The payload of a workflow step message. */
export const StepMessage = Schema.Struct({
  workflow: Schema.String,
  run: Schema.String,
  step: Schema.NullOr(Schema.String),
  /** A start's message: the run's input, so that its worker replays to the first step before claiming. */
  input: Schema.optionalKey(
    Schema.Struct({
      payload: Schema.Unknown,
      subject: Schema.NullOr(Schema.String),
      resource_id: Schema.NullOr(Schema.String)
    })
  ),
  /** A notify notice of a per-run deadline: the missed deadline (ISO), to evaluate the deadline again. */
  deadline: Schema.optionalKey(Schema.String)
})
export type StepMessage = typeof StepMessage.Type

/** What a replay reads from a claim (a fresh run's first replay reads it from its start message). */
type Claimed = Pick<
  ClaimRow,
  | "id"
  | "payload"
  | "subject"
  | "resource_id"
  | "history"
  | "held_signal"
  | "step_id"
  | "step_name"
  | "step_attempt"
  | "step_position"
  | "step_reattempts"
  | "step_timed_out"
>

/** A start's message carries the run's input when its payload is at most this many bytes. */
const CARRIED_INPUT_LIMIT = 8 * 1024

/** What the runner knows about the delivery it executes. */
export interface Delivery {
  /** The message's read count (above 1: a redelivery). */
  readonly attempt: number
  /** The message's id (a step claimed at its send in this process is found by it). */
  readonly msgId?: bigint | undefined
  /** The queue the message was read from: with its id and read count it marks the claims of this delivery. */
  readonly queue?: string | undefined
  /** The message's last delivery: a run it cannot execute pauses as undeliverable instead of its message dead-lettered. */
  readonly last?: boolean | undefined
}

/** Identifies one delivery of a message (id and read count). */
const deliveryKey = (msgId: bigint, readCt: number) => `${msgId}:${readCt}`

/**
 * The claim mark of a delivery, recorded on every step its execution claims:
 * `<queue>:<msg id>:<read count>` (none without a message, as in the test helpers). A
 * redelivery finds by its prefix the step its predecessor held; a claim whose reply was lost
 * finds by the whole mark the step it holds itself.
 */
const claimMarkOf = (delivery: Delivery): string | null =>
  delivery.msgId === undefined || delivery.queue === undefined
    ? null
    : `${delivery.queue}:${delivery.msgId}:${delivery.attempt}`

/** The part of a delivery's mark shared by every delivery of its message. */
const messageMarkOf = (delivery: Delivery): string | null =>
  delivery.msgId === undefined || delivery.queue === undefined ? null : `${delivery.queue}:${delivery.msgId}:`

/** Whether a step's claim mark is a delivery's (else a local hand-over's, or none). */
const isDeliveryMark = (mark: string | null): boolean => mark !== null && /^[a-z][a-z0-9_]*:\d+:\d+$/.test(mark)

/**
 * One execution of a step message: the mark of its claims, and what a drain that interrupts it
 * must release (the attempt it claimed and has not ended, or a completed attempt whose outcome
 * waits for the next step).
 */
interface Execution {
  readonly mark: string | null
  /** Its claim failed with its connection (it may have committed): sent again, it found nothing to claim. */
  claimLost: boolean
  held: bigint | undefined
  pending: Pending | undefined
  /** The workflow's queue (where a continue message goes). */
  queue: string | undefined
}

/** What a run would do next, for the test helpers. */
export type NextWork =
  | { readonly _tag: "Step"; readonly message: StepMessage; readonly step: string }
  | { readonly _tag: "Continue"; readonly message: StepMessage }
  | { readonly _tag: "Waiting"; readonly step: string; readonly waitingFor: string }
  | { readonly _tag: "Running"; readonly step: string }
  | { readonly _tag: "Stopped"; readonly status: States.RunStatus }

/**
 * The runner service: executes workflow step messages.
 *
 * @category services
 */
export class WorkflowRunner extends Context.Service<
  WorkflowRunner,
  {
    readonly execute: (
      workflows: ReadonlyMap<string, RegisteredWorkflow>,
      message: StepMessage,
      delivery: Delivery
    ) => Effect.Effect<void, DatabaseError | QueueError | WorkflowNotRegistered>
    /** What the run would do next (test helpers); a scheduled step is made due now. */
    readonly next: (runId: string) => Effect.Effect<NextWork, DatabaseError | RunNotFound>
    /** Resumes the fan-out step waiting on a finished batch (its callback job); false if none waits. */
    readonly fanOutFinished: (outcome: BatchFinished) => Effect.Effect<boolean, DatabaseError | QueueError>
  }
>()("effect-pgbus/WorkflowRunner") {}

// ---------------------------------------------------------------------------------------------
// The engine

type Stop =
  | { readonly _tag: "applied" }
  /** A fresh run replayed before its claim and must replay again from the claim (none: unclaimed). */
  | { readonly _tag: "restart"; readonly claim: ClaimRow | undefined }
  /** A fresh run's claim failed inside the body: the execution fails with it (the message is retried). */
  | { readonly _tag: "claimFailed"; readonly error: DatabaseError }

interface Target {
  readonly id: bigint
  readonly name: string
  readonly attempt: number
  readonly position: number
  readonly reattempts: number
  readonly queue: string
}

interface Pending {
  readonly step: Target
  readonly status: "completed" | "skipped"
  readonly output: string | null
}

/** The callback every fan-out batch gets: the registry runs it as `WorkflowRunner.fanOutFinished`. */
const fanOutCallback = Job.make(FAN_OUT_JOB, { payload: BatchFinishedSchema }, () => Effect.void)

/** What a finished batch's callback would have carried (the sweep's make-up, the test helper). */
export const fanOutOutcomeOf = (batch: BatchInfo): BatchFinished => ({
  batchId: batch.id,
  callback: "onFinish",
  succeeded: batch.failedJobs === 0,
  description: batch.description ?? null,
  properties: batch.properties,
  totalJobs: batch.totalJobs,
  completedJobs: batch.completedJobs,
  failedJobs: batch.failedJobs,
  finishedAt: (batch.finishedAt ?? new Date(0)).toISOString()
})

/** A fan-out whose step was moved on while its body ran (its transaction rolls back). */
const LATE = Symbol("late")

/** Builds the engine's services on the database. */
const make = Effect.gen(function* () {
  const config = yield* PgBusConfig
  const sql = yield* SqlClient.SqlClient
  const store = yield* QueueStore
  const notifier = yield* Notifier
  const jobs = yield* JobClient
  const batches = yield* Batches
  const statements: WorkflowSql = makeWorkflowSql(sql, config.schema, (physical, name, rows, now, claim) =>
    store.messageCtes(physical, name, rows, now, claim)
  )
  const worker = `${os.hostname()}:${process.pid}`
  /** Steps a signal claimed for this process's worker, by the delivery of their message (local dispatch). */
  const preclaimed = new Map<string, ClaimRow>()
  const revision = config.appRevision ?? null
  const db =
    (operation: string) =>
    <A>(effect: Effect.Effect<A, SqlError>): Effect.Effect<A, DatabaseError> =>
      Effect.mapError(effect, toDatabaseError(operation))

  /** The logical and physical queue of a workflow's step messages. */
  const queueOf = (logical: string, priority?: number) => {
    const queue = physicalQueueOf(config, { queue: logical, priority: undefined }, { queue: logical, priority })
    return { queue, physical: QueueName.physicalOf(config.queuePrefix, queue) }
  }

  const errorJson = (error: unknown) =>
    JSON.stringify(encodeError(error, config.workflowErrorBacktraceLines, worker, config.appRevision))

  // ---- client ------------------------------------------------------------------------------

  const verbError = (verb: States.OutsideVerb, run: RunRow) => {
    if (States.isTerminal(run.status) && verb !== "rerun") {
      return new NotOngoing({ verb, current: run.status, run: run.id })
    }
    if (verb === "resume" || verb === "resume_at") return new NotPaused({ verb, current: run.status, run: run.id })
    return new InvalidTransition({ verb, current: run.status, run: run.id })
  }

  const getRow = (id: string, resourceId: string | null) =>
    statements.runGet(id, resourceId).pipe(
      db("get run"),
      Effect.flatMap((rows) => (rows[0] ? Effect.succeed(rows[0]) : Effect.fail(new RunNotFound({ id }))))
    )

  const isUuid = (id: string) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(id)

  /** A handle made from a definition checks signals against its declared Schemas. */
  const makeHandle = (row: RunRow, duplicateStart: boolean, definition?: WorkflowRef<unknown>): RunHandle => ({
    id: row.id,
    info: toRunInfo(row),
    duplicateStart,
    refresh: Effect.map(getRow(row.id, null), (r) => makeHandle(r, false, definition)),
    pause: (o) => client.pause(row.id, o),
    resume: (o) => client.resume(row.id, o),
    resumeAt: (step, o) => client.resumeAt(row.id, step, o),
    cancel: (o) => client.cancel(row.id, o),
    runNow: (o) => client.runNow(row.id, o),
    reschedule: (at, o) => client.reschedule(row.id, at, o),
    rerun: (o) => client.rerun(row.id, o),
    events: client.events(row.id),
    steps: client.steps(row.id),
    progress: client.progress(row.id),
    signal: (name, payload, o) =>
      client.signal(
        row.id,
        name,
        payload,
        definition?.signals === undefined
          ? o
          : { workflow: { name: definition.name, signals: definition.signals }, ...o }
      ),
    skip: (o) => client.skip(row.id, o)
  })

  /** Splits entries into consecutive runs with the same statement time. */
  const sameTimeRuns = (entries: ReadonlyArray<StartEntry>): Array<Array<StartEntry>> => {
    const out: Array<Array<StartEntry>> = []
    for (const e of entries) {
      const last = out[out.length - 1]
      if (last !== undefined && last[0]!.now?.getTime() === e.now?.getTime()) last.push(e)
      else out.push([e])
    }
    return out
  }

  // Starts made outside a transaction at the same time share a statement (one per queue out at
  // once): one round trip, one commit and one NOTIFY for several runs. Two starts that a unique
  // index could set against each other (one subject or key) never share one.
  const startBatchers = new Map<string, (entry: StartEntry) => Effect.Effect<RunRow | undefined, DatabaseError>>()
  const startBatched = (physical: string) => {
    let batcher = startBatchers.get(physical)
    if (batcher === undefined) {
      batcher = makeBatcher<StartEntry, RunRow | undefined, DatabaseError>({
        // one statement has one time: starts stamped at different times (a test clock; in
        // production `now` is the server's) go in one statement per time, in order
        many: (entries) =>
          Effect.map(
            Effect.forEach(sameTimeRuns(entries), (group) =>
              statements.runStartMany(group, physical, group[0]!.now).pipe(db("start runs"))
            ),
            (groups) => groups.flat().map((row) => (row.id === null ? undefined : row))
          ),
        one: (e) =>
          statements.runStart({ ...e, physicalQueue: physical, rerunOf: null }).pipe(
            db("start run"),
            Effect.map((rows) => rows[0])
          ),
        key: (e) =>
          e.subject === null && e.idempotencyKey === null
            ? e.id
            : `${e.workflow}\u0000${e.subject}\u0000${e.idempotencyKey}`
      })
      startBatchers.set(physical, batcher)
    }
    return batcher
  }

  const startRun = <P>(
    workflow: WorkflowRef<P>,
    payload: P,
    options: StartOptions,
    rerunOf: string | null
  ): Effect.Effect<RunHandle, InvalidWorkflowPayload | AlreadyRunning | QueueError> =>
    Effect.gen(function* () {
      const encoded = yield* Schema.encodeEffect(workflow.payload)(payload).pipe(
        Effect.mapError((e) => new InvalidWorkflowPayload({ workflow: workflow.name, issue: e.message }))
      )
      let text: string | undefined
      try {
        text = JSON.stringify(encoded)
      } catch (e) {
        return yield* new InvalidWorkflowPayload({ workflow: workflow.name, issue: `not JSON: ${String(e)}` })
      }
      if (text === undefined) {
        return yield* new InvalidWorkflowPayload({ workflow: workflow.name, issue: "not JSON" })
      }
      const size = Buffer.byteLength(text, "utf8")
      if (size > config.maxPayloadSize) {
        return yield* new InvalidWorkflowPayload({
          workflow: workflow.name,
          issue: `${size} bytes, over the limit of ${config.maxPayloadSize}`
        })
      }
      const key = options.idempotencyKey?.trim() ? options.idempotencyKey : null
      const subject = options.subject ?? null
      const { queue, physical } = queueOf(workflow.queue ?? config.workflowQueue)
      yield* jobs.ensureQueue(queue)
      const now = yield* statementNow
      const id = crypto.randomUUID()
      const entry: StartEntry = {
        id,
        workflow: workflow.name,
        subject,
        resourceId: options.resourceId ?? null,
        payload: text,
        idempotencyKey: key,
        engineVersion: ENGINE_VERSION,
        definitionVersion: workflow.version ?? null,
        actor: options.actor ?? "app",
        reason: options.reason ?? null,
        carryInput: size <= CARRIED_INPUT_LIMIT,
        now
      }
      // outside a transaction, concurrent starts into one queue share a statement
      const inserted =
        rerunOf === null && Option.isNone(yield* Effect.serviceOption(sql.transactionService))
          ? yield* startBatched(physical)(entry)
          : (yield* statements.runStart({ ...entry, physicalQueue: physical, rerunOf }).pipe(db("start run")))[0]
      // the start returns the new row: no read-back
      if (inserted !== undefined) return makeHandle(inserted, false, workflow)
      const [holder] = yield* statements.runFindConflicting(workflow.name, subject, key).pipe(db("find run"))
      if (holder === undefined) return yield* Effect.die(new Error("start found neither a new run nor a conflict"))
      if (key !== null && holder.idempotency_key === key) return makeHandle(holder, true, workflow)
      return yield* new AlreadyRunning({
        workflow: workflow.name,
        subject: subject ?? "",
        run: { id: holder.id, workflow: holder.workflow, status: holder.status }
      })
    }).pipe(
      Effect.withSpan("pgbus.workflow.start", { attributes: { workflow: workflow.name } }, { captureStackTrace: false })
    )

  /** Runs an outside verb in a transaction: lock, check the table, act, write its event. */
  const verb = <A, E>(
    name: States.OutsideVerb,
    id: string,
    options: VerbOptions | undefined,
    act: (run: RunRow, now: Date | null) => Effect.Effect<A, E | SqlError>
  ): Effect.Effect<
    A,
    Exclude<E, SqlError> | RunNotFound | InvalidTransition | NotPaused | NotOngoing | DatabaseError
  > =>
    Effect.gen(function* () {
      if (!isUuid(id)) return yield* new RunNotFound({ id })
      const now = yield* statementNow
      return yield* withTransaction(
        sql,
        Effect.gen(function* () {
          const [run] = yield* statements.runLock(id, options?.resourceId ?? null)
          if (run === undefined) return yield* new RunNotFound({ id })
          if (!States.isLegal(name, run.status)) return yield* verbError(name, run)
          return yield* act(run, now)
        })
      ).pipe(Effect.mapError((e) => (isSqlError(e) ? toDatabaseError(`workflow ${name}`)(e) : e)))
    }).pipe(
      Effect.withSpan(`pgbus.workflow.${name}`, { attributes: { workflow_id: id } }, { captureStackTrace: false })
    ) as Effect.Effect<
      A,
      Exclude<E, SqlError> | RunNotFound | InvalidTransition | NotPaused | NotOngoing | DatabaseError
    >

  const event = (
    run: RunRow,
    type: string,
    options: VerbOptions | undefined,
    now: Date | null,
    extra: { step?: string; attempt?: number; details?: unknown } = {}
  ) =>
    statements.eventInsert({
      runId: run.id,
      type,
      step: extra.step ?? null,
      attempt: extra.attempt ?? null,
      actor: options?.actor ?? "app",
      reason: options?.reason ?? null,
      details: extra.details === undefined ? null : JSON.stringify(extra.details),
      now
    })

  const setStatus = (run: RunRow, name: States.Verb, now: Date | null, pausedReason?: string) =>
    statements.runSetStatus({
      id: run.id,
      from: States.fromStates(name),
      to: States.targetOf(name, run.status),
      pausedReason: pausedReason ?? null,
      now
    })

  const reread = (id: string) => Effect.map(statements.runGet(id, null), (rows) => toRunInfo(rows[0]!))

  const toReceipt = (row: SignalRow, duplicate: boolean): SignalReceipt => ({
    id: row.id,
    runId: row.run_id,
    name: row.name,
    payload: row.payload,
    status: row.status,
    duplicate,
    claimed: row.status !== "pending"
  })

  /**
   * Stores a signal under the run's row lock and, when the run's waiting step waits for it,
   * claims it and wakes the step (a paused run takes it and stays paused). With the workflow's
   * definition the payload is checked against its declared Schema and matchers run here: an
   * error reaches the caller and nothing is stored.
   */
  const sendSignal = (
    id: string,
    name: string,
    payload: unknown,
    options: SignalOptions
  ): Effect.Effect<SignalReceipt, SignalError> =>
    Effect.gen(function* () {
      const definition = options.workflow
      const declared = definition?.signals[name]
      const schema = declared === undefined ? undefined : isSignalMatcher(declared) ? declared.schema : declared
      const encoded =
        schema === undefined
          ? payload
          : yield* Schema.encodeUnknownEffect(schema)(payload).pipe(
              Effect.mapError(
                (e) => new InvalidSignal({ workflow: definition?.name ?? "", signal: name, issue: e.message })
              )
            )
      let text: string | undefined
      try {
        text = JSON.stringify(encoded ?? {})
      } catch (e) {
        return yield* new InvalidSignal({
          workflow: definition?.name ?? "",
          signal: name,
          issue: `not JSON: ${String(e)}`
        })
      }
      const size = Buffer.byteLength(text ?? "", "utf8")
      if (text === undefined || size > config.maxPayloadSize) {
        return yield* new InvalidSignal({
          workflow: definition?.name ?? "",
          signal: name,
          issue: text === undefined ? "not JSON" : `${size} bytes, over the limit of ${config.maxPayloadSize}`
        })
      }
      const key = options.idempotencyKey?.trim() ? options.idempotencyKey : null
      // Local dispatch: when a reader of this process has a free slot, the woken step's message
      // is inserted claimed for it and handed over after the commit (no NOTIFY, no read). Not
      // inside the caller's transaction: its outcome is not known here.
      const local = Option.isNone(yield* Effect.serviceOption(sql.transactionService))
      let slot: LocalSlot | undefined
      let handover: { readonly message: Message; readonly claim: ClaimRow } | undefined
      /** The step a hand-over woke and claimed, and its queue (released by the slot's mark if the reply is lost). */
      let handedStep: { readonly workflow: string; readonly stepId: bigint; readonly queue: string } | undefined
      return yield* verb("signal", id, options, (run, now) =>
        Effect.gen(function* () {
          if (definition !== undefined && definition.name !== run.workflow) {
            return yield* new RunNotFound({ id })
          }
          if (key !== null) {
            const [existing] = yield* statements.signalByKey(run.id, key)
            if (existing !== undefined) {
              yield* statements.eventInsert({
                runId: run.id,
                type: "signal_received",
                step: null,
                attempt: null,
                actor: options.actor ?? "app",
                reason: options.reason ?? null,
                details: JSON.stringify({ name, idempotency_key: key, duplicate: true }),
                now
              })
              return toReceipt(existing, true)
            }
          }
          const [stored] = yield* statements.signalInsert({
            runId: run.id,
            name,
            payload: text!,
            idempotencyKey: key,
            actor: options.actor ?? "app",
            reason: options.reason ?? null,
            now
          })
          if (stored === undefined) {
            const [existing] = yield* statements.signalByKey(run.id, key ?? "")
            return toReceipt(existing!, true)
          }
          const [waiting] = yield* statements.stepWaitingOf(run.id)
          if (waiting === undefined || waiting.wait_for !== name) return toReceipt(stored, false)
          const canJudge = !waiting.wait_matcher || (definition !== undefined && declaredMatcher(definition, name))
          const matched = canJudge
            ? definition === undefined || (yield* matchSignal(definition, name, stored.payload)) !== NO_MATCH
            : true
          if (!matched) return toReceipt(stored, false)
          const physical = queueOf(waiting.queue || config.workflowQueue).physical
          if (canJudge) {
            yield* statements.signalClaim({ runId: run.id, signalId: stored.id, stepId: waiting.id, now })
          }
          // a matcher this process cannot run is judged at the gate: wake the step to decide
          if (run.status === "waiting") {
            slot = local
              ? notifier.reserveLocal(physical, { inOrder: false, runs: { workflow: run.workflow } })
              : undefined
            if (slot === undefined) {
              yield* statements.stepWake({
                workflow: run.workflow,
                runId: run.id,
                stepId: waiting.id,
                timedOut: false,
                physicalQueue: physical,
                now
              })
            } else {
              // woken and claimed for this process's worker: it runs the step with no claim of its own
              handedStep = {
                workflow: run.workflow,
                stepId: waiting.id,
                queue: queueOf(waiting.queue || config.workflowQueue).queue
              }
              const [claimRow] = yield* statements.stepWakeClaim({
                workflow: run.workflow,
                runId: run.id,
                stepId: waiting.id,
                physicalQueue: physical,
                claim: { claimedBy: slot.claimedBy, visibilityMs: slot.visibilityMs },
                worker,
                appRevision: revision,
                now
              })
              const message =
                claimRow === undefined
                  ? undefined
                  : store.claimedMessage(queueOf(waiting.queue || config.workflowQueue).queue, claimRow)
              handover = message === undefined || claimRow === undefined ? undefined : { message, claim: claimRow }
            }
          }
          return {
            ...toReceipt(stored, false),
            status: canJudge ? "claimed" : "pending",
            claimed: canJudge
          } as SignalReceipt
        }).pipe(
          Effect.mapError((e) =>
            isSqlError(e) || isTagged(e)
              ? e
              : new InvalidSignal({ workflow: run.workflow, signal: name, issue: String(e) })
          )
        )
      ).pipe(
        // committed (verb's transaction is the outermost): the claimed message goes to its reader
        Effect.onExit((exit) =>
          Effect.suspend(() => {
            const taken = slot
            slot = undefined
            if (taken === undefined) return Effect.void
            const handed = handedStep
            if (Exit.isSuccess(exit) && handover !== undefined && handed !== undefined) {
              const { message, claim } = handover
              const key = deliveryKey(message.msgId, message.readCt)
              preclaimed.set(key, claim)
              // a refused hand-over (the worker is stopping, or has no free executor for it) has its
              // step released before the message goes back: the message's next delivery is no stall
              const release = releaseStep({
                workflow: handed.workflow,
                stepId: handed.stepId,
                claimedBy: taken.claimedBy,
                reason: "handed to a worker of this process that could not take it (stopping, or no free slot)"
              }).pipe(Effect.catchCause((cause) => Effect.logWarning("pgbus: releasing a refused step failed", cause)))
              return taken.deliver(message, Effect.asVoid(release)).pipe(
                Effect.tap((took) => Effect.sync(() => (took ? undefined : preclaimed.delete(key)))),
                Effect.asVoid
              )
            }
            taken.cancel()
            if (handed === undefined || Exit.isSuccess(exit) || !isPassingFailure(Cause.squash(exit.cause))) {
              return Effect.void
            }
            // the wake-and-claim may have committed with its reply lost: once the database answers,
            // its step is released (a new attempt) and its message given back, both by the slot's
            // mark, in the background (the caller has its error, and may send the signal again)
            return Effect.forkDetach(
              retryTransient(
                releaseStep({
                  workflow: handed.workflow,
                  stepId: handed.stepId,
                  claimedBy: taken.claimedBy,
                  reason: "the hand-over's reply was lost with its connection"
                })
              ).pipe(
                Effect.andThen(retryTransient(store.releaseClaim(handed.queue, taken.claimedBy))),
                Effect.catchCause((cause) => Effect.logWarning("pgbus: releasing a lost hand-over failed", cause))
              )
            ).pipe(Effect.asVoid)
          })
        )
      )
    }) as Effect.Effect<SignalReceipt, SignalError>

  /** run_now (at null) and reschedule: the scheduled step's message is due at `at` instead. */
  const moveScheduled = (
    name: "run_now" | "reschedule",
    id: string,
    at: Date | null,
    options: VerbOptions | undefined
  ) =>
    verb(name, id, options, (run, now) =>
      Effect.gen(function* () {
        const [latest] = yield* statements.stepLatest(run.id)
        if (latest?.status !== "scheduled") {
          return yield* new InvalidTransition({ verb: name, current: `${run.status} (no scheduled step)`, run: run.id })
        }
        yield* statements.stepReschedule({
          workflow: run.workflow,
          stepId: latest.id,
          runId: run.id,
          at,
          physicalQueue: queueOf(latest.queue).physical,
          now
        })
        yield* event(run, name === "run_now" ? "run_now" : "rescheduled", options, now, {
          step: latest.name,
          attempt: latest.attempt,
          ...(at === null ? {} : { details: { at: at.toISOString() } })
        })
        return yield* reread(run.id)
      })
    )

  /** A new attempt of the step, due at once, counting `reattempts` consecutive reattempts. */
  const nextAttemptNow = (step: StepRow, reattempts: number): NextAction => ({
    _tag: "schedule",
    name: step.name,
    attempt: step.attempt + 1,
    position: step.position,
    queue: step.queue,
    physicalQueue: queueOf(step.queue || config.workflowQueue).physical,
    delayMs: 0,
    timeoutMs: step.timeout_ms,
    reattempts,
    reattempt: true
  })

  /** What `workflowStallAction` does to a step found stalled (a redelivered claim, or the sweep). */
  const stallNext = (step: StepRow, stalled: StepStalled): NextAction => {
    switch (config.workflowStallAction) {
      case "reattempt":
        return nextAttemptNow(step, step.reattempts + 1)
      case "cancel":
        return { _tag: "cancel", reason: "stalled" }
      case "pause":
        return { _tag: "pause", reason: "stalled", error: errorJson(stalled), message: `step ${step.name} stalled` }
    }
  }

  const client: WorkflowClientShape = {
    start: (workflow, payload, options = {}) => startRun(workflow, payload, options, null),

    get: (id, options) =>
      isUuid(id)
        ? Effect.map(getRow(id, options?.resourceId ?? null), (row) => makeHandle(row, false))
        : Effect.fail(new RunNotFound({ id })),

    findBySubject: (workflow, subject) =>
      statements.runFindBySubject(workflow, subject).pipe(
        db("find run by subject"),
        Effect.flatMap((rows) =>
          rows[0]
            ? Effect.succeed(makeHandle(rows[0], false))
            : Effect.fail(new RunNotFound({ id: `${workflow}:${subject}` }))
        )
      ),

    list: (options: ListOptions = {}) =>
      Effect.gen(function* () {
        const limit = Math.min(500, Math.max(1, options.limit ?? 50))
        const before = options.cursor ? decodeCursor(options.cursor) : undefined
        const rows = yield* statements
          .runList({
            workflow: options.workflow,
            status:
              options.status === undefined
                ? undefined
                : typeof options.status === "string"
                  ? [options.status]
                  : options.status,
            subject: options.subject,
            resourceId: options.resourceId,
            pausedReason: options.pausedReason,
            createdFrom: options.createdFrom,
            createdTo: options.createdTo,
            before,
            limit: limit + 1
          })
          .pipe(db("list runs"))
        const page = rows.slice(0, limit)
        return {
          runs: page.map(toRunInfo),
          next: rows.length > limit ? encodeCursor(page[page.length - 1]!) : undefined
        } satisfies RunPage
      }),

    counts: (options = {}) =>
      statements.runCounts(options.workflow ?? null, options.resourceId ?? null).pipe(
        db("count runs"),
        Effect.map((rows) => {
          const out = Object.fromEntries(States.RunStatuses.map((s) => [s, 0])) as Record<States.RunStatus, number>
          for (const r of rows) out[r.status] = Number(r.n)
          return out
        })
      ),

    steps: (id) =>
      isUuid(id)
        ? statements.stepsOf(id).pipe(
            db("list steps"),
            Effect.map((rows) => rows.map(toStepAttempt))
          )
        : Effect.succeed([]),

    events: (id) =>
      isUuid(id)
        ? statements.eventsOf(id).pipe(
            db("list events"),
            Effect.map((rows) => rows.map(toAuditEvent))
          )
        : Effect.succeed([]),

    progress: (id) =>
      Effect.map(client.steps(id), (attempts): RunProgress => {
        const byName = new Map<
          string,
          { name: string; status: States.StepStatus; attempts: number; position: number }
        >()
        for (const a of attempts) {
          if (a.name.startsWith("patch:")) continue
          byName.set(a.name, { name: a.name, status: a.status, attempts: a.attempt, position: a.position })
        }
        const steps = [...byName.values()].sort((a, b) => a.position - b.position)
        return {
          completedSteps: steps.filter((s) => s.status === "completed" || s.status === "skipped").length,
          steps: steps.map(({ name, status, attempts }) => ({ name, status, attempts }))
        }
      }),

    pause: (id, options) =>
      verb("pause", id, options, (run, now) =>
        Effect.gen(function* () {
          yield* setStatus(run, "pause", now, "manual")
          yield* event(run, "paused", options, now)
          return yield* reread(run.id)
        })
      ),

    resume: (id, options) =>
      verb("resume", id, options, (run, now) =>
        Effect.gen(function* () {
          const [latest] = yield* statements.stepLatest(run.id)
          const { physical } = queueOf(latest?.queue || config.workflowQueue)
          if (latest?.status === "in_progress") {
            // the step that ran at the outside pause still runs: the run goes on performing it
            yield* statements.runSetStatus({ id: run.id, from: ["paused"], to: "performing", now })
            yield* event(run, "resumed", options, now, { details: { transition: "unpause" } })
          } else if (latest?.status === "waiting") {
            // paused while it waited: it waits again (its deadline moved by the pause), or runs
            // now with the signal it took while paused
            const held = (yield* statements.signalHeldBy(latest.id))[0]
            yield* statements.runRewait(run.id, latest.id, now)
            if (held !== undefined) {
              yield* statements.stepWake({
                workflow: run.workflow,
                runId: run.id,
                stepId: latest.id,
                timedOut: false,
                physicalQueue: physical,
                now
              })
            }
            yield* event(run, "resumed", options, now, {
              step: latest.name,
              attempt: latest.attempt,
              details: { transition: held === undefined ? "rewait" : "wake" }
            })
          } else if (latest?.status === "failed" || latest?.status === "cancelled") {
            yield* jobs.ensureQueue(latest.queue)
            yield* setStatus(run, "resume", now)
            const [next] = yield* statements.stepInsertScheduled({
              workflow: run.workflow,
              runId: run.id,
              name: latest.name,
              attempt: latest.attempt + 1,
              position: latest.position,
              queue: latest.queue,
              physicalQueue: physical,
              reattempts: 0,
              actor: options?.actor ?? "app",
              now
            })
            // the next attempt runs with the signal the failed one held, without matching again
            if (next !== undefined) yield* statements.signalTransfer(latest.id, next.id)
            yield* event(run, "resumed", options, now, { step: latest.name, attempt: latest.attempt + 1 })
          } else if (latest?.status === "scheduled") {
            yield* setStatus(run, "resume", now)
            yield* statements.stepReschedule({
              workflow: run.workflow,
              stepId: latest.id,
              runId: run.id,
              at: latest.due_at,
              physicalQueue: physical,
              now
            })
            yield* event(run, "resumed", options, now, { step: latest.name, attempt: latest.attempt })
          } else {
            yield* setStatus(run, "resume", now)
            yield* statements.runSendContinue(run.workflow, run.id, queueOf(config.workflowQueue).physical, now)
            yield* event(run, "resumed", options, now)
          }
          return yield* reread(run.id)
        })
      ),

    resumeAt: (id, step, options) =>
      verb("resume_at", id, options, (run, now) =>
        Effect.gen(function* () {
          const [latest] = yield* statements.stepLatestNamed(run.id, step)
          if (latest === undefined || step.startsWith("patch:")) return yield* new UnknownStep({ run: run.id, step })
          yield* jobs.ensureQueue(latest.queue)
          yield* statements.stepsCancelOpen(run.id, now)
          yield* setStatus(run, "resume_at", now)
          yield* statements.stepInsertScheduled({
            workflow: run.workflow,
            runId: run.id,
            name: latest.name,
            attempt: latest.attempt + 1,
            position: latest.position,
            queue: latest.queue,
            physicalQueue: queueOf(latest.queue).physical,
            reattempts: 0,
            actor: options?.actor ?? "app",
            now
          })
          yield* event(run, "resumed", options, now, {
            step,
            attempt: latest.attempt + 1,
            details: { resume_at: step }
          })
          return yield* reread(run.id)
        })
      ),

    cancel: (id, options) =>
      verb("cancel", id, options, (run, now) =>
        Effect.gen(function* () {
          yield* statements.stepsCancelOpen(run.id, now)
          yield* setStatus(run, "cancel", now)
          yield* event(run, "cancelled", options, now)
          yield* Metric.update(cancelledTotal.pipe(Metric.withAttributes({ workflow_class: run.workflow })), 1)
          return yield* reread(run.id)
        })
      ),

    runNow: (id, options) => moveScheduled("run_now", id, null, options),

    reschedule: (id, at, options) => moveScheduled("reschedule", id, at, options),

    rerun: (id, options) =>
      Effect.gen(function* () {
        const run = yield* verb("rerun", id, options, (row) => Effect.succeed(row))
        const ref: WorkflowRef<unknown> = {
          name: run.workflow,
          payload: Schema.Unknown,
          version: run.definition_version ?? undefined,
          queue: undefined
        }
        return yield* startRun(
          ref,
          run.payload,
          {
            subject: run.subject ?? undefined,
            resourceId: run.resource_id ?? undefined,
            actor: options?.actor,
            reason: options?.reason
          },
          run.id
        )
      }),
    signal: (id, name, payload, options) => sendSignal(id, name, payload, options ?? {}),

    signalSubject: (workflow, subject, name, payload, options = {}) =>
      Effect.gen(function* () {
        const rows = yield* statements.runFindBySubject(workflow, subject).pipe(db("find run by subject"))
        const run = rows[0]
        if (run === undefined || States.isTerminal(run.status)) {
          if (options.missing === "ignore") return undefined
          return yield* new NotOngoing({
            verb: "signal",
            current: run?.status ?? "none",
            run: `${workflow}:${subject}`
          })
        }
        return yield* sendSignal(run.id, name, payload, options)
      }),

    skip: (id, options) =>
      verb("skip", id, options, (run, now) =>
        Effect.gen(function* () {
          const [waiting] = yield* statements.stepWaitingOf(run.id)
          if (waiting === undefined) {
            return yield* new InvalidTransition({
              verb: "skip",
              current: `${run.status} (no waiting step)`,
              run: run.id
            })
          }
          yield* statements.stepResolveWaiting({
            workflow: run.workflow,
            runId: run.id,
            stepId: waiting.id,
            outcome: "skip",
            error: null,
            actor: options?.actor ?? "app",
            reason: options?.reason ?? null,
            eventType: "skipped",
            eventDetails: null,
            physicalQueue: queueOf(waiting.queue || config.workflowQueue).physical,
            now
          })
          return yield* reread(run.id)
        })
      ),

    fastForward: (id, data, options) =>
      Effect.gen(function* () {
        const run = yield* getRow(id, options?.resourceId ?? null)
        if (run.status === "paused") return yield* client.resume(id, options)
        if (run.status === "waiting") {
          const [waiting] = yield* statements.stepWaitingOf(run.id).pipe(db("find waiting step"))
          if (waiting?.wait_for) {
            yield* sendSignal(id, waiting.wait_for, data ?? {}, {
              ...options,
              reason: options?.reason ?? "fast-forward"
            })
          }
          return toRunInfo(yield* getRow(id, null))
        }
        if (run.status === "ready") {
          const [latest] = yield* statements.stepLatest(run.id).pipe(db("find step"))
          if (latest?.status === "scheduled" && latest.wait_for === POLL_WAIT && data !== undefined) {
            // a poll between checks: its result is `data`
            yield* verb("signal", id, options, (locked, now) =>
              Effect.gen(function* () {
                const [stored] = yield* statements.signalInsert({
                  runId: locked.id,
                  name: POLL_WAIT,
                  payload: JSON.stringify(data),
                  idempotencyKey: null,
                  actor: options?.actor ?? "app",
                  reason: options?.reason ?? "fast-forward",
                  now
                })
                if (stored !== undefined) {
                  yield* statements.signalClaim({ runId: locked.id, signalId: stored.id, stepId: latest.id, now })
                }
              })
            )
          }
          if (latest?.status === "scheduled") return yield* client.runNow(id, options)
        }
        return toRunInfo(run)
      }),

    signals: (id) =>
      isUuid(id)
        ? statements.signalsOf(id).pipe(
            db("list signals"),
            Effect.map((rows) => rows.map((row) => toReceipt(row, false)))
          )
        : Effect.succeed([])
  }

  // ---- runner ------------------------------------------------------------------------------

  const finish = (p: Omit<Parameters<WorkflowSql["stepFinish"]>[0], "worker" | "appRevision">) =>
    statements.stepFinish({ ...p, worker, appRevision: revision }).pipe(db("apply step outcome"))

  /**
   * Releases an attempt this process claimed and will not finish (a drain interrupted its
   * execution, or a hand-over was refused or lost): it fails with `StepInterrupted` and a new
   * attempt is due at once, after a `step_interrupted` event saying why. Not the step's failure:
   * it does not count as a reattempt. Guarded: an attempt no longer in progress, or held by
   * another claim than `claimedBy`, is left alone. True when it released it.
   */
  const releaseStep = (p: {
    readonly workflow: string
    readonly stepId: bigint
    readonly claimedBy?: string | undefined
    readonly reason: string
  }) =>
    Effect.gen(function* () {
      const [step] = yield* statements.stepGet(p.stepId).pipe(db("find step"))
      if (step === undefined || step.status !== "in_progress") return false
      const now = yield* statementNow
      const [r] = yield* finish({
        workflow: p.workflow,
        runId: step.run_id,
        stepId: step.id,
        status: "failed",
        output: null,
        error: errorJson(new StepInterrupted({ step: step.name, reason: p.reason })),
        definitionHash: null,
        // not the step's failure: no reattempt counted
        next: nextAttemptNow(step, step.reattempts),
        onlyIfClaimedBy: p.claimedBy,
        stepEvent: { type: "step_interrupted", reason: p.reason },
        now
      })
      if (r?.applied !== 1n) return false
      yield* Metric.update(stepMetrics(p.workflow, step.name, "interrupted").total, 1)
      return true
    })

  // Outcomes of the common case (completed, no signal held, the next step claimed at once or the
  // run finished) from concurrent executions share a statement: while one is out, the next ones
  // pile up and leave together (one round trip and one commit for several runs; W3 went from
  // 5.4 to 3.1 statements per run). Idle, an outcome leaves at once, alone.
  // Claims of fresh runs and outcomes have one batch out between them (a group): while one kind
  // is out, both pile up. In W3 (10 executions) this took statements from 1.9 to 1.3-1.5 per run and
  // the database's CPU per run down by about a quarter; idle, a claim or outcome still leaves at once.
  const workflowBatches = makeBatchGroup(1)
  const finishBatched = makeBatcher<FinishManyEntry, FinishRow | undefined, DatabaseError>({
    many: (entries) => statements.stepFinishMany(entries, worker, revision).pipe(db("apply step outcomes")),
    // alone, the same outcome through the single statement; it reads the workflow's name and the
    // queue only to send a scheduled step's message, which a shared outcome never has
    one: (e) =>
      finish({
        workflow: "",
        runId: e.runId,
        stepId: e.stepId,
        status: "completed",
        output: e.output,
        error: null,
        definitionHash: e.definitionHash,
        next: e.next._tag === "claim" ? { ...e.next, physicalQueue: "" } : e.next,
        mayHoldSignal: false,
        now: e.now
      }).pipe(Effect.map((rows) => rows[0])),
    key: (e) => e.runId,
    group: workflowBatches
  })

  // Fresh runs claimed with their first step by concurrent executions share a statement, as
  // outcomes do (`finishBatched`).
  const claimFirstBatched = makeBatcher<ClaimFirstEntry, ClaimRow | undefined, DatabaseError>({
    many: (entries) =>
      statements.runClaimFirstMany(entries, worker, revision).pipe(
        db("claim runs"),
        Effect.map((rows) => rows.map((row) => (row.id === null ? undefined : row)))
      ),
    one: (e) =>
      statements.runClaimFirst({ ...e, worker, appRevision: revision }).pipe(
        db("claim run"),
        Effect.map((rows) => rows[0])
      ),
    key: (e) => e.runId,
    group: workflowBatches
  })

  const lateCompletion = (runId: string, step: Target, now: Date | null) =>
    statements
      .eventInsert({
        runId,
        type: "late_completion_ignored",
        step: step.name,
        attempt: step.attempt,
        actor: "system",
        reason: "the step was moved on while it ran (cancelled, or found stalled)",
        details: null,
        now
      })
      .pipe(db("record late completion"))

  /**
   * Executes one claimed run: replays the body and applies what it leads to. A fresh run
   * (`speculative`) replays before its claim, from the input its start message carried: the
   * first step it reaches is claimed with the run in one statement; anything else claims the run
   * alone and asks for a replay from that claim (`restart`). Nothing is written before the claim.
   */
  const executeClaimed = (
    registered: RegisteredWorkflow,
    claim: Claimed,
    /** The execution: its claims' mark, what it holds (a drain releases it, see `execute`). */
    ex: Execution,
    speculative = false,
    /** Set for a notify notice of a per-run deadline: the claimed waiting step's missed deadline. */
    renewalOf?: Date
  ) =>
    Effect.gen(function* () {
      const def = registered.workflow
      const runId = claim.id
      if (claim.step_id !== null) ex.held = claim.step_id
      const stepPolicies = new Map<string, StepOptions<unknown>>()
      const history: ReadonlyArray<HistoryEntry> = claim.history
      const order: Array<string> = []
      const latest = new Map<string, HistoryEntry>()
      for (const h of history) {
        if (!latest.has(h.name)) order[h.position] = h.name
        const prev = latest.get(h.name)
        if (!prev || prev.attempt < h.attempt) latest.set(h.name, h)
      }
      const namesSeen: Array<string> = []
      const seen = new Set<string>()
      let cursor = 0
      let target: Target | undefined =
        claim.step_id === null
          ? undefined
          : {
              id: claim.step_id,
              name: claim.step_name!,
              attempt: claim.step_attempt!,
              position: claim.step_position!,
              reattempts: claim.step_reattempts ?? 0,
              queue: history.find((h) => h.id === String(claim.step_id))?.name ? "" : ""
            }
      let targetReached = false
      let stop: Stop | undefined
      let control: ControlVerb | undefined
      let inStep = false
      /** Set by a poll's check that found nothing yet: the step is checked again later. */
      let pollRequest: { readonly intervalMs: number; readonly timeoutMs: number | null } | undefined
      /** Set by a fan-out's build: open one batch with these members and park the step on it. */
      let fanOutRequest: { readonly members: ReadonlyArray<FanOutMember> } | undefined
      /** A fresh run's first step, inserted claimed with the run's claim. */
      let preclaimed: bigint | undefined
      /** Attempts inserted by this execution with no gate run: they hold no signal. */
      const signalFree = new Set<bigint>()
      const decoded = yield* Schema.decodeUnknownEffect(def.payload)(claim.payload).pipe(Effect.option)
      const runContext: RunContext<unknown> = {
        workflowId: runId,
        workflow: def.name,
        subject: claim.subject ?? undefined,
        resourceId: claim.resource_id ?? undefined,
        payload: Option.getOrUndefined(decoded)
      }
      const defaultQueue = def.queue ?? config.workflowQueue

      const halt = (s: Stop) => {
        stop = s
        return Effect.interrupt
      }

      /** Records the step a claim returned as held by this execution (inside the claim's uninterruptible region). */
      const holding = <A extends { readonly id: bigint } | { readonly step_id: bigint | null }, E, R>(
        claimed: Effect.Effect<ReadonlyArray<A>, E, R>
      ) =>
        Effect.tap(claimed, (rows) =>
          Effect.sync(() => {
            const row = rows[0]
            const id = row === undefined ? null : "step_id" in row ? row.step_id : row.id
            if (id !== null) ex.held = id
          })
        )

      /** A fresh run claims itself alone, then replays from that claim. */
      const claimForRestart = Effect.gen(function* () {
        speculative = false
        const [row] = yield* statements.runClaimContinue(runId, yield* statementNow).pipe(db("claim run"))
        return { _tag: "restart", claim: row } as const
      })
      const restartFromClaim = Effect.matchEffect(claimForRestart, {
        onFailure: (error) => halt({ _tag: "claimFailed", error }),
        onSuccess: halt
      })

      /** A fresh run reached its first step: claim the run with it, if the run has no history. */
      const claimWithFirst = (name: string, options: StepOptions<unknown>) =>
        Effect.gen(function* () {
          const { queue } = queueOf(options.queue ?? defaultQueue, options.priority)
          yield* jobs.ensureQueue(queue)
          speculative = false
          const timeoutMs =
            options.timeout === undefined ? null : Duration.toMillis(Duration.fromInputUnsafe(options.timeout))
          const now = yield* statementNow
          const batchable =
            (timeoutMs === null || Number.isFinite(timeoutMs)) &&
            Option.isNone(yield* Effect.serviceOption(sql.transactionService))
          const alone = statements
            .runClaimFirst({ runId, name, queue, timeoutMs, worker, appRevision: revision, claimedBy: ex.mark, now })
            .pipe(db("claim run"))
          const [row] = yield* (
            batchable
              ? Effect.map(claimFirstBatched({ runId, name, queue, timeoutMs, claimedBy: ex.mark, now }), (r) =>
                  r === undefined ? [] : [r]
                )
              : alone
          ).pipe(
            // a reply lost with its connection may hide a commit: sent again, a claim that finds the
            // run taken goes to `unclaimed`, which knows this execution's own claim by its mark
            Effect.catchIf(isPassingFailure, () =>
              Effect.andThen(
                Effect.sync(() => {
                  ex.claimLost = true
                }),
                retryTransient(alone)
              )
            ),
            holding,
            Effect.uninterruptible,
            Effect.catch((error) => halt({ _tag: "claimFailed", error }))
          )
          if (row?.step_id === null || row?.step_id === undefined) {
            return yield* halt({ _tag: "restart", claim: row })
          }
          preclaimed = row.step_id
        })

      /** Pauses the run on an error that is not a step's (divergence, a bad option, a glue error). */
      const pauseWith = (error: unknown, reason: string) =>
        Effect.gen(function* () {
          const now = yield* statementNow
          const errorText = errorJson(error)
          const message = messageOf(error)
          if (ex.pending !== undefined) {
            const r = yield* finish({
              workflow: def.name,
              runId,
              stepId: ex.pending.step.id,
              status: ex.pending.status,
              output: ex.pending.output,
              error: null,
              definitionHash: hashNames(namesSeen),
              next: { _tag: "pause", reason, error: errorText, message },
              now
            })
            if (r[0]?.applied === 0n) yield* lateCompletion(runId, ex.pending.step, now)
            ex.pending = undefined
          } else if (target !== undefined) {
            const r = yield* finish({
              workflow: def.name,
              runId,
              stepId: target.id,
              status: "failed",
              output: null,
              error: errorText,
              definitionHash: hashNames(namesSeen),
              next: { _tag: "pause", reason, error: errorText, message },
              now
            })
            if (r[0]?.applied === 0n) yield* lateCompletion(runId, target, now)
          } else {
            yield* statements
              .runEndFromPerforming({
                runId,
                to: "paused",
                output: null,
                error: errorText,
                pausedReason: reason,
                reason: message,
                definitionHash: hashNames(namesSeen),
                now
              })
              .pipe(db("pause run"))
          }
          yield* Metric.update(
            pausedTotal.pipe(Metric.withAttributes({ workflow_class: def.name, error_class: reason })),
            1
          )
        })

      const divergence = (expected: string, found: string, position: number) =>
        Effect.gen(function* () {
          yield* pauseWith(new ReplayDivergence({ run: runId, position, expected, found }), "version_mismatch")
          return yield* halt({ _tag: "applied" })
        })

      /**
       * An outcome sent again after a lost reply found its step moved on: if its first sending had
       * committed (the step has the status it wrote), that outcome is this one, with the next step
       * it claimed for this execution, found by the execution's mark.
       */
      const ownOutcome = (step: Target, status: "completed" | "skipped" | "failed" | "cancelled") =>
        Effect.gen(function* () {
          const [row] = yield* statements.stepGet(step.id).pipe(db("find step"))
          if (row?.status !== status) return undefined
          const [next] =
            ex.mark === null ? [] : yield* statements.runLoadClaimed(runId, ex.mark).pipe(db("find own claim"))
          return {
            before: null,
            applied: 1n,
            next_id: next?.step_id ?? null,
            next_status: next === undefined ? null : ("in_progress" as const),
            after: null
          } satisfies FinishRow
        })

      /** Applies a finished attempt (or a skip) and what follows it. */
      const applyOutcome = (
        step: Target,
        status: "completed" | "skipped" | "failed" | "cancelled",
        output: string | null,
        error: string | null,
        next: NextAction
      ) =>
        Effect.gen(function* () {
          const now = yield* statementNow
          const definitionHash = hashNames(namesSeen)
          const inTransaction = Option.isSome(yield* Effect.serviceOption(sql.transactionService))
          const batchable =
            status === "completed" &&
            error === null &&
            signalFree.has(step.id) &&
            (next._tag === "finish" ||
              (next._tag === "claim" && (next.timeoutMs === null || Number.isFinite(next.timeoutMs)))) &&
            !inTransaction
          // the step has run: a lost connection or a restarting server must not lose its outcome
          // (if a lost reply hid a commit, the retry finds the step moved on: a late completion);
          // not in a caller's transaction, which a lost connection has ended
          const write = batchable
            ? finishBatched({
                runId,
                stepId: step.id,
                output,
                definitionHash,
                next: next._tag === "claim" ? { ...next } : (next as Extract<NextAction, { _tag: "finish" }>),
                now
              })
            : finish({
                workflow: def.name,
                runId,
                stepId: step.id,
                status,
                output,
                error,
                definitionHash,
                next,
                mayHoldSignal: !signalFree.has(step.id),
                now
              }).pipe(Effect.map((rows) => rows[0]))
          // uninterruptible: a drain must know what this execution holds afterwards (the next step
          // claimed with it); a reply lost with its connection may hide a commit: sent again, an
          // outcome that finds its step moved on looks for its own commit before calling it late
          const r = yield* (
            inTransaction
              ? write
              : write.pipe(
                  Effect.catchIf(isPassingFailure, () =>
                    retryTransient(write).pipe(
                      Effect.flatMap((again) =>
                        again !== undefined && again.applied === 1n ? Effect.succeed(again) : ownOutcome(step, status)
                      )
                    )
                  )
                )
          ).pipe(
            Effect.tap((r) =>
              Effect.sync(() => {
                if (ex.pending?.step.id === step.id) ex.pending = undefined
                if (r?.next_status === "in_progress" && r.next_id !== null) ex.held = r.next_id
              })
            ),
            Effect.uninterruptible
          )
          if (r === undefined || r.applied === 0n) {
            yield* lateCompletion(runId, step, now)
            return undefined
          }
          if (r.after === "finished") yield* Metric.update(finishedOf(def.name), 1)
          if (r.after === "cancelled")
            yield* Metric.update(cancelledTotal.pipe(Metric.withAttributes({ workflow_class: def.name })), 1)
          yield* logRunEnd(def.name, runId, step.name, r.after, next)
          return r
        })

      const recordStep = (step: Target, outcome: string, startedAt: number) =>
        Effect.flatMap(Clock.currentTimeMillis, (end) => {
          const metrics = stepMetrics(def.name, step.name, outcome)
          return Effect.all(
            [Metric.update(metrics.total, 1), Metric.update(metrics.duration, (end - startedAt) / 1000)],
            { discard: true }
          )
        })

      /** Runs the step whose turn it is (claimed), returning its output to the body. */
      /**
       * A notify notice of the waiting target's per-run deadline: under the run's row lock, the
       * deadline is evaluated again and the notice written with the next deadline (or the run paused
       * with the evaluation's error), as the sweep does for a static one.
       */
      const renewDeadline = (step: Target, options: StepOptions<unknown>, missedAt: Date) =>
        Effect.gen(function* () {
          targetReached = true
          const noticed = yield* withTransaction(
            sql,
            Effect.gen(function* () {
              yield* statements.runLock(runId, null)
              const answer = yield* Effect.exit(waitDeadline(options, runContext))
              const renewal = Exit.isSuccess(answer)
                ? { at: answer.value.at, periodMs: answer.value.periodMs, pauseError: null }
                : { at: null, periodMs: null, pauseError: errorJson(Cause.squash(answer.cause)) }
              const now = yield* statementNow
              const [row] = yield* statements.stepNotifyLate({ runId, stepId: step.id, missedAt, renewal, now })
              if (row !== undefined && Exit.isFailure(answer)) {
                yield* Effect.logError(
                  `pgbus: workflow ${def.name} step ${step.name}: waitTimeout failed at a late notice (run paused)`,
                  Cause.squash(answer.cause)
                )
              }
              return row !== undefined
            })
          )
          if (noticed) {
            yield* Metric.update(
              waitOverdueTotal.pipe(Metric.withAttributes({ workflow_class: def.name, step: step.name })),
              1
            )
          }
          return yield* halt({ _tag: "applied" })
        })

      const runTarget = <A, E, R>(step: Target, effect: Effect.Effect<A, E, R>, options: RunnerStepOptions<A>) =>
        Effect.gen(function* () {
          targetReached = true
          const startedAt = yield* Clock.currentTimeMillis
          // guards and the signal gate, under the run's row lock
          let received: ReceivedSignal | undefined
          let readers: SignalReaders["Service"] = { woken: false, signalReady: false }
          const timedOut = claim.step_id === step.id ? claim.step_timed_out === true : false
          // woken with its signal and no guards: the claim read the held signal, which cannot
          // change while the step is in progress, so the gate needs no transaction of its own
          const heldAtClaim =
            claim.step_id === step.id && !timedOut && def.cancelIf === undefined && options.skipIf === undefined
              ? claim.held_signal
              : null
          if (heldAtClaim !== null && (options.waitFor !== undefined || options.takesHeldSignal === true)) {
            const decoded = yield* (
              options.waitFor === undefined
                ? Effect.succeed(heldAtClaim.payload)
                : matchSignal(def, options.waitFor, heldAtClaim.payload, { decodeOnly: true })
            ).pipe(Effect.exit)
            if (Exit.isFailure(decoded)) return yield* failed(step, Cause.squash(decoded.cause), options, startedAt)
            received = { id: String(heldAtClaim.id), name: heldAtClaim.name, payload: decoded.value }
            readers = { woken: options.waitFor !== undefined, signalReady: options.waitFor !== undefined }
          } else if (
            def.cancelIf !== undefined ||
            options.skipIf !== undefined ||
            options.waitFor !== undefined ||
            options.takesHeldSignal === true
          ) {
            // the gate may claim a signal for the attempt
            signalFree.delete(step.id)
            const waitName =
              options.waitFor === undefined
                ? undefined
                : typeof options.waitFor === "string"
                  ? options.waitFor
                  : options.waitFor.name
            const guard = yield* withTransaction(
              sql,
              Effect.gen(function* () {
                yield* statements.runLock(runId, null)
                let held: SignalRow | undefined
                let candidate: { readonly row: SignalRow; readonly payload: unknown } | undefined
                if (waitName === undefined && options.takesHeldSignal === true) {
                  held = (yield* statements.signalHeldBy(step.id))[0]
                }
                if (waitName !== undefined) {
                  held = (yield* statements.signalHeldBy(step.id))[0]
                  if (held === undefined && !timedOut) {
                    for (const row of yield* statements.signalsPending(runId, waitName)) {
                      const decoded = yield* matchSignal(def, options.waitFor!, row.payload)
                      if (decoded !== NO_MATCH) {
                        candidate = { row, payload: decoded }
                        break
                      }
                    }
                  }
                }
                readers = { woken: held !== undefined, signalReady: held !== undefined || candidate !== undefined }
                const withReaders = <X, Y, Z>(e: Effect.Effect<X, Y, Z>) =>
                  Effect.provideService(e, SignalReaders, readers)
                if (def.cancelIf !== undefined && (yield* withReaders(def.cancelIf(runContext as never)))) {
                  return { _tag: "cancel" } as const
                }
                if (options.skipIf !== undefined && (yield* withReaders(options.skipIf(runContext)))) {
                  return { _tag: "skip" } as const
                }
                if (waitName === undefined && held !== undefined) {
                  return {
                    _tag: "signal",
                    signal: { id: String(held.id), name: held.name, payload: held.payload }
                  } as const
                }
                if (waitName === undefined || timedOut) return { _tag: "run" } as const
                const now = yield* statementNow
                if (held !== undefined) {
                  const payload = yield* matchSignal(def, options.waitFor!, held.payload, { decodeOnly: true })
                  return {
                    _tag: "signal",
                    signal: {
                      id: String(held.id),
                      name: held.name,
                      payload: payload === NO_MATCH ? held.payload : payload
                    }
                  } as const
                }
                if (candidate !== undefined) {
                  yield* statements.signalClaim({ runId, signalId: candidate.row.id, stepId: step.id, now })
                  return {
                    _tag: "signal",
                    signal: { id: String(candidate.row.id), name: candidate.row.name, payload: candidate.payload }
                  } as const
                }
                // no signal: the step parks (nothing is sent until a signal or the deadline wakes it)
                const deadline = yield* waitDeadline(options, runContext)
                yield* statements.stepPark({
                  runId,
                  stepId: step.id,
                  waitFor: waitName,
                  matcher: typeof options.waitFor !== "string" || declaredMatcher(def, waitName),
                  timeoutMs: deadline.ms,
                  timeoutAt: deadline.at,
                  onTimeout: options.onTimeout ?? (deadline.at === null && deadline.ms === null ? null : "pause"),
                  periodMs: deadline.periodMs,
                  perRun: typeof options.waitTimeout === "function",
                  now
                })
                return { _tag: "parked" } as const
              })
            ).pipe(Effect.exit)
            if (Exit.isFailure(guard)) {
              return yield* failed(step, Cause.squash(guard.cause), options, startedAt)
            }
            switch (guard.value._tag) {
              case "cancel":
                yield* applyOutcome(step, "cancelled", null, null, { _tag: "cancel", reason: "cancelIf" })
                yield* recordStep(step, "cancelled", startedAt)
                return yield* halt({ _tag: "applied" })
              case "skip":
                ex.pending = { step, status: "skipped", output: null }
                yield* recordStep(step, "skipped", startedAt)
                return undefined
              case "parked":
                yield* recordStep(step, "waiting", startedAt)
                return yield* halt({ _tag: "applied" })
              case "signal":
                received = guard.value.signal
                break
              case "run":
                break
            }
          }
          const stepContext: StepContext["Service"] = {
            workflowId: runId,
            workflow: def.name,
            subject: runContext.subject,
            resourceId: runContext.resourceId,
            payload: runContext.payload,
            step: step.name,
            attempt: step.attempt,
            stepIdempotencyKey: `pgbus-wf:${runId}:${step.name}`,
            attemptIdempotencyKey: `pgbus-wf:${runId}:${step.name}:${step.attempt}`,
            signal: received,
            timedOut
          }
          const timeoutMs =
            options.timeout === undefined ? undefined : Duration.toMillis(Duration.fromInputUnsafe(options.timeout))
          inStep = true
          control = undefined
          const ran = effect.pipe(
            Effect.provideService(StepContext, stepContext),
            Effect.provideService(SignalReaders, readers)
          )
          const exit = yield* (
            timeoutMs === undefined
              ? ran
              : ran.pipe(
                  Effect.timeoutOrElse({
                    duration: Duration.millis(timeoutMs),
                    orElse: () => Effect.fail(new StepTimeout({ step: step.name, timeoutMs }))
                  })
                )
          ).pipe(Effect.withSpan(...stepSpan(def.name, runId, step), { captureStackTrace: false }), Effect.exit)
          inStep = false
          const verbCalled = control as ControlVerb | undefined
          control = undefined
          if (verbCalled !== undefined) return yield* controlled(step, verbCalled, startedAt)
          const pollAgain = pollRequest
          pollRequest = undefined
          if (pollAgain !== undefined) {
            const now = yield* statementNow
            const [again] = yield* statements
              .stepPollAgain({
                workflow: def.name,
                runId,
                stepId: step.id,
                intervalMs: pollAgain.intervalMs,
                timeoutMs: pollAgain.timeoutMs,
                physicalQueue: queueOf(step.queue || defaultQueue).physical,
                now
              })
              .pipe(db("schedule the next check"))
            if (again !== undefined) {
              yield* recordStep(step, "polled", startedAt)
              return yield* halt({ _tag: "applied" })
            }
            // past its deadline: the poll ends with timedOut
            ex.pending = { step, status: "completed", output: JSON.stringify({ timedOut: true }) }
            yield* recordStep(step, "completed", startedAt)
            return { timedOut: true } as A
          }
          const fanOut = fanOutRequest
          fanOutRequest = undefined
          if (fanOut !== undefined) {
            // one transaction: the batch, its members' messages, the step parked on it and the
            // `fan_out_opened` event; the batch's callback can only finish it after the commit
            const stepKey = `pgbus-wf:${runId}:${step.name}`
            const opened = yield* withTransaction(
              sql,
              Effect.gen(function* () {
                const batch = yield* batches.make({
                  onFinish: { job: fanOutCallback, queue: step.queue || defaultQueue },
                  description: `${def.name}#${step.name} ${runId}`,
                  properties: { workflow_id: runId, step_id: String(step.id) }
                })
                yield* batch.enqueue(
                  Effect.forEach(
                    fanOut.members,
                    (member, i) => {
                      const { key, ...enqueueOptions } = member.options
                      // the builder's `add` checked the payload's type against the job
                      return jobs.enqueue(member.job as never, member.payload as never, {
                        ...enqueueOptions,
                        headers: { ...enqueueOptions.headers, pgbus_idempotency_key: `${stepKey}:${key ?? i}` }
                      })
                    },
                    { discard: true }
                  )
                )
                const now = yield* statementNow
                const [parked] = yield* statements.stepPark({
                  runId,
                  stepId: step.id,
                  waitFor: FAN_OUT_WAIT,
                  matcher: false,
                  timeoutMs: null,
                  timeoutAt: null,
                  onTimeout: null,
                  periodMs: null,
                  batch: { id: batch.id, size: fanOut.members.length },
                  now
                })
                // the step was moved on while its body ran: no batch
                if (parked === undefined) return yield* Effect.fail(LATE)
                return batch.id
              })
            ).pipe(Effect.exit)
            if (Exit.isFailure(opened)) {
              const error = Cause.squash(opened.cause)
              if (error === LATE) {
                yield* lateCompletion(runId, step, yield* statementNow)
                return yield* halt({ _tag: "applied" })
              }
              return yield* failed(step, error, options, startedAt)
            }
            yield* recordStep(step, "waiting", startedAt)
            return yield* halt({ _tag: "applied" })
          }
          if (Exit.isFailure(exit)) {
            // an interruption from outside never gets here (the execution stops, and `execute`
            // releases the step): this one came from inside the body, a failure of the step
            const error = Cause.hasInterruptsOnly(exit.cause)
              ? new Error(`step ${step.name} was interrupted from inside its body`)
              : Cause.squash(exit.cause)
            return yield* failed(step, error, options, startedAt)
          }
          const value = exit.value
          const encodedOutput = yield* (
            options.output === undefined
              ? Effect.succeed(value as unknown)
              : Schema.encodeEffect(options.output)(value).pipe(Effect.mapError((e) => e as unknown))
          ).pipe(Effect.result)
          if (encodedOutput._tag === "Failure") return yield* failed(step, encodedOutput.failure, options, startedAt)
          // what is stored must come back the same from JSON, or replay sees another value (or
          // fails to decode it): the output itself, or what its Schema encodes it to
          const mismatch =
            encodedOutput.success === undefined
              ? undefined
              : jsonMismatch(encodedOutput.success, options.output === undefined ? "output" : "encoded output")
          if (mismatch !== undefined) {
            return yield* failed(step, new OutputNotJson({ step: step.name, detail: mismatch }), options, startedAt)
          }
          let outputText: string | undefined
          try {
            outputText = encodedOutput.success === undefined ? undefined : JSON.stringify(encodedOutput.success)
          } catch (e) {
            return yield* failed(step, e, options, startedAt)
          }
          if (outputText !== undefined) {
            if (!isStorableJson(outputText)) {
              return yield* failed(step, new OutputNotStorable({ step: step.name }), options, startedAt)
            }
            const size = Buffer.byteLength(outputText, "utf8")
            if (size > config.maxPayloadSize) {
              return yield* failed(
                step,
                new OutputTooLarge({ step: step.name, size, limit: config.maxPayloadSize }),
                options,
                startedAt
              )
            }
          }
          ex.pending = { step, status: "completed", output: outputText ?? null }
          yield* recordStep(step, "completed", startedAt)
          return value
        })

      /** A flow-control verb called inside the step. */
      const controlled = (step: Target, verbCalled: ControlVerb, startedAt: number) =>
        Effect.gen(function* () {
          switch (verbCalled._tag) {
            case "skip":
              ex.pending = { step, status: "skipped", output: null }
              yield* recordStep(step, "skipped", startedAt)
              return undefined
            case "pause":
              yield* applyOutcome(step, "completed", null, null, {
                _tag: "pause",
                reason: "step_pause",
                error: null,
                message: textOf(verbCalled.reason)
              })
              yield* recordStep(step, "paused", startedAt)
              return yield* halt({ _tag: "applied" })
            case "cancel":
              yield* applyOutcome(step, "cancelled", null, null, { _tag: "cancel", reason: textOf(verbCalled.reason) })
              yield* recordStep(step, "cancelled", startedAt)
              return yield* halt({ _tag: "applied" })
            case "finish":
              yield* applyOutcome(step, "completed", null, null, { _tag: "finish", output: null })
              yield* recordStep(step, "completed", startedAt)
              return yield* halt({ _tag: "applied" })
            case "reattempt": {
              const delayMs =
                verbCalled.wait === undefined ? 0 : Duration.toMillis(Duration.fromInputUnsafe(verbCalled.wait))
              yield* applyOutcome(step, "failed", null, errorJson(new Error("reattempt requested by the step")), {
                _tag: "schedule",
                name: step.name,
                attempt: step.attempt + 1,
                position: step.position,
                queue: step.queue || defaultQueue,
                physicalQueue: queueOf(step.queue || defaultQueue).physical,
                delayMs,
                reattempts: step.reattempts + 1,
                reattempt: true
              })
              yield* recordStep(step, "reattempted", startedAt)
              return yield* halt({ _tag: "applied" })
            }
          }
        })

      /** A step failed: the policies decide. */
      const failed = (step: Target, error: unknown, options: StepOptions<unknown>, startedAt: number) =>
        Effect.gen(function* () {
          const resolution = yield* resolvePolicy(error, options.onError ?? [], def.onError, step.reattempts)
          const reporter = yield* ErrorReporter
          if (resolution.report) {
            yield* reporter.report(error, {
              workflow: def.name,
              workflowId: runId,
              step: step.name,
              attempt: step.attempt,
              outcome: resolution.action
            })
          }
          const errorText = errorJson(error)
          const message = messageOf(error)
          switch (resolution.action) {
            case "skip":
              ex.pending = { step, status: "skipped", output: null }
              yield* recordStep(step, "skipped", startedAt)
              return undefined
            case "reattempt":
              yield* applyOutcome(step, "failed", null, errorText, {
                _tag: "schedule",
                name: step.name,
                attempt: step.attempt + 1,
                position: step.position,
                queue: step.queue || defaultQueue,
                physicalQueue: queueOf(step.queue || defaultQueue).physical,
                delayMs: resolution.waitMs,
                reattempts: step.reattempts + 1,
                reattempt: true
              })
              yield* recordStep(step, "reattempted", startedAt)
              return yield* halt({ _tag: "applied" })
            case "cancel":
              yield* applyOutcome(step, "failed", null, errorText, { _tag: "cancel", reason: message })
              yield* recordStep(step, "cancelled", startedAt)
              return yield* halt({ _tag: "applied" })
            case "pause":
              yield* applyOutcome(step, "failed", null, errorText, {
                _tag: "pause",
                reason: "error",
                error: errorText,
                message
              })
              yield* Metric.update(
                pausedTotal.pipe(
                  Metric.withAttributes({ workflow_class: def.name, error_class: JSON.parse(errorText).tag })
                ),
                1
              )
              yield* recordStep(step, "paused", startedAt)
              return yield* halt({ _tag: "applied" })
          }
        })

      /** The body reached a step it has not recorded: schedule it, or claim and run it now. */
      const reachNew = <A, E, R>(
        name: string,
        effect: Effect.Effect<A, E, R>,
        options: StepOptions<A>,
        position: number,
        attempt: number
      ) =>
        Effect.gen(function* () {
          const delayMs = options.wait === undefined ? 0 : Duration.toMillis(Duration.fromInputUnsafe(options.wait))
          const queue = options.queue ?? defaultQueue
          const { queue: queueName, physical } = queueOf(queue, options.priority)
          yield* jobs.ensureQueue(queueName)
          // run it here and now when nothing stands between: no wait, no guard, same queue
          const dueAt = options.at ?? null
          const fast =
            delayMs === 0 &&
            dueAt === null &&
            options.skipIf === undefined &&
            def.cancelIf === undefined &&
            queueName === queueOf(ex.pending?.step.queue || defaultQueue).queue
          const timeoutMs =
            options.timeout === undefined ? null : Duration.toMillis(Duration.fromInputUnsafe(options.timeout))
          const now = yield* statementNow
          if (ex.pending !== undefined) {
            const done = ex.pending
            const r = yield* applyOutcome(
              done.step,
              done.status,
              done.output,
              null,
              fast
                ? {
                    _tag: "claim",
                    name,
                    attempt,
                    position,
                    queue: queueName,
                    physicalQueue: physical,
                    reattempts: 0,
                    timeoutMs,
                    claimedBy: ex.mark
                  }
                : {
                    _tag: "schedule",
                    name,
                    attempt,
                    position,
                    queue: queueName,
                    physicalQueue: physical,
                    delayMs,
                    dueAt,
                    timeoutMs,
                    reattempts: 0,
                    reattempt: false
                  }
            )
            if (r === undefined || r.next_status !== "in_progress" || r.next_id === null) {
              return yield* halt({ _tag: "applied" })
            }
            target = { id: r.next_id, name, attempt, position, reattempts: 0, queue: queueName }
            signalFree.add(target.id)
            return yield* runTarget(target, effect, options)
          }
          if (preclaimed !== undefined) {
            target = { id: preclaimed, name, attempt, position, reattempts: 0, queue: queueName }
            preclaimed = undefined
            signalFree.add(target.id)
            return yield* runTarget(target, effect, options)
          }
          if (delayMs === 0 && dueAt === null && options.skipIf === undefined) {
            const insert = statements
              .stepInsertClaimed({
                runId,
                name,
                attempt,
                position,
                queue: queueName,
                reattempts: 0,
                timeoutMs,
                worker,
                appRevision: revision,
                claimedBy: ex.mark,
                now
              })
              .pipe(db("claim step"))
            // a reply lost with its connection may hide a commit: the step this execution claimed is
            // looked for by its mark before the insert is sent again
            const own =
              ex.mark === null
                ? Effect.succeed([])
                : Effect.map(statements.runLoadClaimed(runId, ex.mark).pipe(db("find own claim")), (rows) =>
                    rows.flatMap((r) => (r.step_id !== null && r.step_name === name ? [{ id: r.step_id }] : []))
                  )
            const [row] = yield* insert.pipe(
              Effect.catchIf(isPassingFailure, () =>
                retryTransient(Effect.flatMap(own, (rows) => (rows.length > 0 ? Effect.succeed(rows) : insert)))
              ),
              holding,
              Effect.uninterruptible
            )
            if (row === undefined) return yield* halt({ _tag: "applied" })
            target = { id: row.id, name, attempt, position, reattempts: 0, queue: queueName }
            signalFree.add(target.id)
            return yield* runTarget(target, effect, options)
          }
          yield* statements
            .stepScheduleNew({
              workflow: def.name,
              runId,
              name,
              attempt,
              position,
              queue: queueName,
              physicalQueue: physical,
              delayMs,
              dueAt,
              timeoutMs,
              reattempts: 0,
              now
            })
            .pipe(db("schedule step"))
          return yield* halt({ _tag: "applied" })
        })

      const runtimeStep = <A, E, R>(name: string, effect: Effect.Effect<A, E, R>, options: RunnerStepOptions<A>) =>
        Effect.gen(function* () {
          if (stop !== undefined) return yield* Effect.interrupt
          const { takesHeldSignal: _internal, ...userOptions } = options
          const invalid = checkStep(name, userOptions as StepOptions<unknown>)
          if (speculative) {
            // the first step, run at once as `reachNew` would (no wait, no skipIf): claimed with the run
            if (
              invalid === undefined &&
              options.wait === undefined &&
              options.at === undefined &&
              options.skipIf === undefined
            ) {
              yield* claimWithFirst(name, options as StepOptions<unknown>)
            } else {
              return yield* restartFromClaim
            }
          }
          if (invalid !== undefined) {
            yield* pauseWith(new InvalidWorkflowDefinition({ workflow: def.name, reason: invalid }), "error")
            return yield* halt({ _tag: "applied" })
          }
          if (seen.has(name)) {
            yield* pauseWith(
              new InvalidWorkflowDefinition({
                workflow: def.name,
                reason: `step ${name} is yielded twice in one run (step names identify steps)`
              }),
              "version_mismatch"
            )
            return yield* halt({ _tag: "applied" })
          }
          seen.add(name)
          namesSeen.push(name)
          stepPolicies.set(name, options as StepOptions<unknown>)
          const position = cursor++
          const recorded = order[position]
          if (recorded !== undefined && recorded !== name) return yield* divergence(recorded, name, position)
          const entry = latest.get(name)
          if (target !== undefined && !targetReached && name === target.name) {
            if (renewalOf !== undefined) return yield* renewDeadline(target, options as StepOptions<unknown>, renewalOf)
            return yield* runTarget(
              { ...target, queue: entry?.status === "scheduled" ? target.queue : target.queue },
              effect,
              options
            )
          }
          if (entry !== undefined && recorded === name) {
            if (entry.status === "completed") {
              if (options.output === undefined) return entry.output as A
              const value = yield* Schema.decodeUnknownEffect(options.output)(entry.output).pipe(Effect.result)
              if (value._tag === "Failure") {
                yield* pauseWith(value.failure, "version_mismatch")
                return yield* halt({ _tag: "applied" })
              }
              return value.success
            }
            if (entry.status === "skipped") return undefined
          }
          if (target !== undefined && !targetReached) {
            // the claimed step must come before any step the history has not completed
            return yield* divergence(target.name, name, position)
          }
          // a step past the recorded history (or one whose last attempt ended unfinished)
          const attempt = entry === undefined ? 1 : entry.attempt + 1
          return yield* reachNew(name, effect, options, position, attempt)
        }).pipe(Effect.orDie) as Effect.Effect<A | undefined, never, R>

      const runtime = WorkflowRuntime.of({
        step: runtimeStep,

        control: (verbCalled) =>
          Effect.suspend(() => {
            if (inStep) {
              control = verbCalled
              return Effect.interrupt
            }
            // outside a step: the verb applies after the last completed step
            return Effect.gen(function* () {
              if (speculative) return yield* restartFromClaim
              const now = yield* statementNow
              const next: NextAction | undefined =
                verbCalled._tag === "finish"
                  ? { _tag: "finish", output: null }
                  : verbCalled._tag === "cancel"
                    ? { _tag: "cancel", reason: textOf(verbCalled.reason) }
                    : verbCalled._tag === "pause"
                      ? { _tag: "pause", reason: "step_pause", error: null, message: textOf(verbCalled.reason) }
                      : undefined
              if (next === undefined) {
                yield* pauseWith(
                  new InvalidWorkflowDefinition({
                    workflow: def.name,
                    reason: `${verbCalled._tag} is only meaningful inside a step`
                  }),
                  "error"
                )
              } else if (ex.pending !== undefined) {
                const done = ex.pending
                yield* applyOutcome(done.step, done.status, done.output, null, next)
              } else {
                yield* statements
                  .runEndFromPerforming({
                    runId,
                    to: next._tag === "finish" ? "finished" : next._tag === "cancel" ? "cancelled" : "paused",
                    output: null,
                    error: null,
                    pausedReason: next._tag === "pause" ? "step_pause" : null,
                    reason: next._tag === "cancel" ? next.reason : next._tag === "pause" ? next.message : null,
                    definitionHash: hashNames(namesSeen),
                    now
                  })
                  .pipe(db("end run"))
              }
              return yield* halt({ _tag: "applied" })
            })
          }) as Effect.Effect<never>,

        patched: (id) =>
          Effect.gen(function* () {
            if (stop !== undefined) return yield* Effect.interrupt
            if (speculative) return yield* restartFromClaim
            if (typeof id !== "string" || !isStorableText(id)) {
              yield* pauseWith(
                new InvalidWorkflowDefinition({
                  workflow: def.name,
                  reason: `a patch id must be a string without a NUL character or a lone surrogate`
                }),
                "error"
              )
              return yield* halt({ _tag: "applied" })
            }
            const marker = `patch:${id}`
            const recorded = order[cursor]
            if (recorded === marker) {
              cursor++
              namesSeen.push(marker)
              return true
            }
            if (recorded !== undefined) return false
            // the run reaches the patch new: record the marker, so that replays take this path
            const now = yield* statementNow
            yield* statements.markerInsert({ runId, name: marker, position: cursor, now }).pipe(db("record patch"))
            order[cursor] = marker
            cursor++
            namesSeen.push(marker)
            return true
          }).pipe(Effect.orDie),

        fanOut: <E, R>(
          name: string,
          build: (add: (member: FanOutMember) => Effect.Effect<void>) => Effect.Effect<unknown, E, R>,
          options: FanOutOptions
        ) => {
          const body = Effect.gen(function* () {
            const context = yield* StepContext
            const given = context.signal
            if (given !== undefined) {
              // the batch finished (its callback, or the sweep, delivered the outcome)
              const outcome = given.payload as Partial<BatchFinished> & { readonly gone?: boolean }
              const batchId = String(outcome.batchId ?? "")
              const result: FanOutResult = {
                batchId,
                totalJobs: Number(outcome.totalJobs ?? 0),
                completedJobs: Number(outcome.completedJobs ?? 0),
                failedJobs: Number(outcome.failedJobs ?? 0)
              }
              yield* statements.eventInsert({
                runId,
                type: "fan_out_finished",
                step: name,
                attempt: context.attempt,
                actor: "system",
                reason: outcome.gone === true ? "the batch row is gone" : null,
                details: JSON.stringify({
                  batch_id: batchId,
                  failed_jobs: result.failedJobs,
                  total_jobs: result.totalJobs
                }),
                now: yield* statementNow
              })
              if (outcome.gone === true || result.failedJobs > 0) {
                // consumed now: the next attempt (resume, reattempt) opens a fresh batch
                yield* statements.signalConsume(BigInt(given.id))
                return yield* new FanOutFailed({
                  step: name,
                  batchId,
                  reason: outcome.gone === true ? "batch_gone" : "dead_lettered",
                  failedJobs: result.failedJobs,
                  totalJobs: result.totalJobs
                })
              }
              return result
            }
            const members: Array<FanOutMember> = []
            yield* build((member) => Effect.sync(() => void members.push(member)))
            if (members.length === 0) {
              return { batchId: null, totalJobs: 0, completedJobs: 0, failedJobs: 0 } satisfies FanOutResult
            }
            fanOutRequest = { members }
            return yield* Effect.interrupt
          })
          const onError = [
            // a batch whose row is gone has an unknown outcome: always pause
            {
              match: (e: unknown) => e instanceof FanOutFailed && e.reason === "batch_gone",
              action: "pause" as const
            },
            { match: "FanOutFailed", action: options.onBatchFailure ?? ("pause" as const) },
            ...(options.onError ?? [])
          ]
          return runtimeStep(name, body, {
            takesHeldSignal: true,
            onError,
            ...(options.queue !== undefined ? { queue: options.queue } : {})
          }) as Effect.Effect<FanOutResult | undefined, never, R>
        },

        poll: <A, E, R>(
          name: string,
          check: Effect.Effect<Option.Option<A>, E, R>,
          options: {
            readonly interval?: Duration.Input | undefined
            readonly timeout?: Duration.Input | undefined
            readonly output?: Schema.ConstraintCodec<unknown, unknown> | undefined
          }
        ) => {
          const intervalMs =
            options.interval === undefined ? 30_000 : Duration.toMillis(Duration.fromInputUnsafe(options.interval))
          const timeoutMs =
            options.timeout === undefined ? null : Duration.toMillis(Duration.fromInputUnsafe(options.timeout))
          const body = Effect.gen(function* () {
            // fast-forwarded: the result was handed over as a signal the step holds
            const given = (yield* StepContext).signal
            if (given !== undefined) return { timedOut: false as const, data: given.payload as A }
            const result = yield* check
            if (Option.isSome(result)) return { timedOut: false as const, data: result.value }
            pollRequest = { intervalMs, timeoutMs }
            return yield* Effect.interrupt
          })
          return runtimeStep(name, body, { takesHeldSignal: true }) as Effect.Effect<
            { readonly timedOut: false; readonly data: A } | { readonly timedOut: true },
            never,
            R
          >
        }
      })

      if (Option.isNone(decoded)) {
        if (speculative) return yield* claimForRestart
        yield* pauseWith(
          new InvalidWorkflowPayload({ workflow: def.name, issue: "the stored payload no longer decodes" }),
          "version_mismatch"
        )
        return
      }

      const exit = yield* registered
        .provide(def.body(runContext as never))
        .pipe(Effect.provideService(WorkflowRuntime, runtime), Effect.exit)
      const stopped = stop as Stop | undefined
      if (stopped !== undefined) {
        if (stopped._tag === "claimFailed") return yield* Effect.fail(stopped.error)
        return stopped._tag === "restart" ? stopped : undefined
      }
      // a fresh run that ended (or failed) before any step: claim it and replay from the claim
      if (speculative) return yield* claimForRestart
      if (Exit.isSuccess(exit)) {
        if (target !== undefined && !targetReached) {
          yield* divergence(target.name, "(the end of the workflow)", cursor).pipe(Effect.exit)
          return
        }
        let outputText: string | null = null
        try {
          outputText = exit.value === undefined ? null : (JSON.stringify(exit.value) ?? null)
        } catch {
          outputText = null
        }
        if (outputText !== null && !isStorableJson(outputText)) {
          yield* pauseWith(new OutputNotStorable({ step: `workflow ${def.name}` }), "error")
          return
        }
        const now = yield* statementNow
        if (ex.pending !== undefined) {
          const done = ex.pending
          yield* applyOutcome(done.step, done.status, done.output, null, { _tag: "finish", output: outputText })
        } else {
          const [r] = yield* statements
            .runEndFromPerforming({
              runId,
              to: "finished",
              output: outputText,
              error: null,
              pausedReason: null,
              reason: null,
              definitionHash: hashNames(namesSeen),
              now
            })
            .pipe(db("finish run"))
          if (r !== undefined) {
            yield* Metric.update(finishedOf(def.name), 1)
            yield* Effect.logInfo(`pgbus: workflow ${def.name} run ${runId} finished`)
          }
        }
        return
      }
      // an interruption from outside never gets here (see runTarget): the body interrupted itself
      yield* pauseWith(
        Cause.hasInterruptsOnly(exit.cause)
          ? new Error(`workflow ${def.name} was interrupted from inside its body`)
          : Cause.squash(exit.cause),
        "error"
      )
    }).pipe(Effect.annotateLogs({ workflow: registered.workflow.name, workflow_id: claim.id }))

  /** `executeClaimed`, typed: the registered workflow's services were captured where it was registered. */
  const runClaimed = (
    registered: RegisteredWorkflow,
    claim: Claimed,
    ex: Execution,
    speculative = false,
    renewalOf?: Date
  ) => executeClaimed(registered, claim, ex, speculative, renewalOf) as Effect.Effect<Stop | undefined, DatabaseError>

  /**
   * A message whose claim found nothing to claim: this execution's own claim whose reply was lost
   * (the step is in progress under this delivery's mark: it runs), the redelivery of a message
   * whose earlier delivery's worker died holding a step (under that delivery's mark, or the step
   * the message names when a hand-over claimed it: the stall action applies), or a duplicate.
   */
  const unclaimed = (registered: RegisteredWorkflow, message: StepMessage, delivery: Delivery, ex: Execution) =>
    Effect.gen(function* () {
      const now = yield* statementNow
      const [step] = yield* statements.stepInProgress(message.run).pipe(db("find step"))
      const mark = step?.claimed_by ?? null
      if (step !== undefined && mark !== null && mark === ex.mark) {
        const [claim] = yield* statements.runLoadClaimed(message.run, mark).pipe(db("find own claim"))
        if (claim !== undefined) yield* runClaimed(registered, claim, ex)
        return
      }
      // a first delivery finds nothing of its own to repair, unless its own claim was lost
      if (delivery.attempt <= 1 && !ex.claimLost) return
      const earlier = messageMarkOf(delivery)
      const heldByThisMessage =
        step !== undefined &&
        delivery.attempt > 1 &&
        (mark === null
          ? // claimed before claim marks: the step the message names, or any step for a start or continue
            message.step === null || String(step.id) === message.step
          : isDeliveryMark(mark)
            ? earlier !== null && mark.startsWith(earlier)
            : // claimed by a local hand-over of the very message that names it
              String(step.id) === message.step)
      if (step === undefined || !heldByThisMessage) {
        // a start or continue whose claim died with its worker (or lost its reply) before any step:
        // claimed again
        if (
          message.step === null &&
          step === undefined &&
          (yield* statements.runReleaseContinue(message.run, now).pipe(db("release run"))).length > 0
        ) {
          const [claim] = yield* statements.runClaimContinue(message.run, now).pipe(db("claim run"))
          if (claim !== undefined) yield* runClaimed(registered, claim, ex)
        }
        return
      }
      // a delivery of this message claimed the step, and the message came back while the step is in
      // progress: that delivery's worker died (or lost its heartbeat); the stall action applies
      yield* statements
        .eventInsert({
          runId: message.run,
          type: "stall_detected",
          step: step.name,
          attempt: step.attempt,
          actor: "system",
          reason: "the message whose execution claimed the step was delivered again",
          details: JSON.stringify({ detection: "redelivery", action: config.workflowStallAction }),
          now
        })
        .pipe(db("record stall"))
      const stalled = new StepStalled({ step: step.name, detection: "redelivery" })
      const [r] = yield* finish({
        workflow: registered.workflow.name,
        runId: message.run,
        stepId: step.id,
        status: "failed",
        output: null,
        error: errorJson(stalled),
        definitionHash: null,
        next: stallNext(step, stalled),
        now
      })
      if (r?.applied === 1n) {
        yield* Metric.update(
          stallsTotal.pipe(
            Metric.withAttributes({
              workflow_class: registered.workflow.name,
              step: step.name,
              detection: "redelivery"
            })
          ),
          1
        )
      }
    })

  /**
   * What a drain that interrupts an execution leaves behind: a completed attempt whose outcome
   * waited for the next step is written (the run continues from a continue message); an attempt
   * it claimed and has not ended is released, as a new attempt due at once.
   */
  const releaseInterrupted = (workflow: string, runId: string, ex: Execution) =>
    Effect.suspend(() => {
      const done = ex.pending
      if (done !== undefined) {
        return Effect.flatMap(statementNow, (now) =>
          finish({
            workflow,
            runId,
            stepId: done.step.id,
            status: done.status,
            output: done.output,
            error: null,
            definitionHash: null,
            next: { _tag: "continue", physicalQueue: queueOf(ex.queue ?? config.workflowQueue).physical },
            now
          })
        )
      }
      const held = ex.held
      return held === undefined
        ? Effect.void
        : releaseStep({
            workflow,
            stepId: held,
            reason: "its execution was interrupted: the worker stopped (a drain past its timeout) before it finished"
          })
    }).pipe(
      Effect.catchCause((cause) =>
        Effect.logWarning("pgbus: releasing the step of an interrupted execution failed", Cause.pretty(cause))
      ),
      Effect.asVoid
    )

  /**
   * The message failed on its last delivery: rather than leave the run stranded with its message
   * dead-lettered, the run pauses as `undeliverable` with the error (an attempt this execution
   * holds fails with it). False when the run is in no state to pause that way.
   */
  const pauseUndeliverable = (message: StepMessage, ex: Execution, error: unknown) =>
    Effect.gen(function* () {
      const errorText = errorJson(error)
      const reason = `its message failed on its last delivery: ${messageOf(error)}`
      const now = yield* statementNow
      if (ex.held !== undefined) {
        const [r] = yield* finish({
          workflow: message.workflow,
          runId: message.run,
          stepId: ex.held,
          status: "failed",
          output: null,
          error: errorText,
          definitionHash: null,
          next: { _tag: "pause", reason: "undeliverable", error: errorText, message: reason },
          now
        })
        if (r?.applied === 1n) return true
      }
      const paused = yield* statements
        .runPauseUndeliverable({
          runId: message.run,
          from: States.fromStates("delivery_pause"),
          error: errorText,
          reason,
          now
        })
        .pipe(db("pause undeliverable run"))
      return paused.length > 0
    })

  const execute = (
    workflows: ReadonlyMap<string, RegisteredWorkflow>,
    message: StepMessage,
    delivery: Delivery
  ): Effect.Effect<void, DatabaseError | QueueError | WorkflowNotRegistered> => {
    const ex: Execution = {
      mark: claimMarkOf(delivery),
      claimLost: false,
      held: undefined,
      pending: undefined,
      queue: undefined
    }
    const executed = Effect.gen(function* () {
      const registered = workflows.get(message.workflow)
      // another process may have it: the message is retried, and its last delivery pauses the run
      if (registered === undefined) return yield* new WorkflowNotRegistered({ workflow: message.workflow })
      ex.queue = registered.workflow.queue ?? config.workflowQueue
      const run = (claim: Claimed, speculative: boolean, renewalOf?: Date) =>
        runClaimed(registered, claim, ex, speculative, renewalOf)
      if (message.deadline !== undefined && message.step !== null) {
        // a notify notice of a per-run deadline: replay to the waiting step and evaluate it again
        const missedAt = new Date(message.deadline)
        if (Number.isNaN(missedAt.getTime())) return
        const [loaded] = yield* statements
          .runLoadForRenewal(message.run, BigInt(message.step), missedAt)
          .pipe(db("load run for a deadline"))
        // already handled (a duplicate delivery), or the wait moved on
        if (loaded === undefined) return
        yield* run(loaded, false, missedAt)
        return
      }
      if (message.step === null && message.input !== undefined) {
        // a start's message: replay to the first step, then claim the run with it
        const input = message.input
        const outcome = yield* run(
          {
            id: message.run,
            payload: input.payload,
            subject: input.subject,
            resource_id: input.resource_id,
            history: [],
            held_signal: null,
            step_id: null,
            step_name: null,
            step_attempt: null,
            step_position: null,
            step_reattempts: null,
            step_timed_out: null
          },
          true
        )
        if (outcome?._tag !== "restart") return
        if (outcome.claim === undefined) return yield* unclaimed(registered, message, delivery, ex)
        yield* run(outcome.claim, false)
        return
      }
      // claimed by the signal that woke it, in this process (local dispatch)
      const key = delivery.msgId === undefined ? undefined : deliveryKey(delivery.msgId, delivery.attempt)
      const pre = key === undefined ? undefined : preclaimed.get(key)
      if (pre !== undefined && key !== undefined) {
        preclaimed.delete(key)
        if (message.step !== null && String(pre.step_id) === message.step) {
          ex.held = pre.step_id ?? undefined
          return yield* run(pre, false).pipe(Effect.asVoid)
        }
      }
      const now = yield* statementNow
      const claimOnce =
        message.step === null
          ? statements.runClaimContinue(message.run, now).pipe(db("claim run"))
          : statements
              .stepClaim({
                runId: message.run,
                stepId: BigInt(message.step),
                worker,
                appRevision: revision,
                claimedBy: ex.mark,
                now
              })
              .pipe(db("claim step"))
      // uninterruptible, so that a drain knows what it holds; a reply lost with its connection may
      // hide a commit: sent again, a claim that finds its step taken goes to `unclaimed`, which
      // knows this execution's own claim by its mark
      const [claim] = yield* claimOnce.pipe(
        Effect.catchIf(isPassingFailure, () =>
          Effect.andThen(
            Effect.sync(() => {
              ex.claimLost = true
            }),
            retryTransient(claimOnce)
          )
        ),
        Effect.tap((rows) =>
          Effect.sync(() => {
            const id = rows[0]?.step_id
            if (id !== null && id !== undefined) ex.held = id
          })
        ),
        Effect.uninterruptible
      )
      if (claim === undefined) return yield* unclaimed(registered, message, delivery, ex)
      yield* run(claim, false)
    })
    // interrupted from outside (a drain past its timeout): what it holds is released, not left
    // for the next delivery to take for a dead worker's (the stall action)
    const released = executed.pipe(Effect.onInterrupt(() => releaseInterrupted(message.workflow, message.run, ex)))
    const lastChance =
      delivery.last !== true
        ? released
        : Effect.catchCause(released, (cause) =>
            Cause.hasInterruptsOnly(cause)
              ? Effect.failCause(cause)
              : pauseUndeliverable(message, ex, Cause.squash(cause)).pipe(
                  Effect.catchCause(() => Effect.succeed(false)),
                  Effect.flatMap((paused) =>
                    paused
                      ? Effect.logWarning(
                          `pgbus: workflow run ${message.run} paused as undeliverable: its message failed on its last delivery`,
                          Cause.pretty(cause)
                        )
                      : Effect.failCause(cause)
                  )
                )
          )
    return lastChance.pipe(Effect.withSpan(...runSpan(message.workflow, message.run), { captureStackTrace: false }))
  }

  const next = (runId: string): Effect.Effect<NextWork, DatabaseError | RunNotFound> =>
    Effect.gen(function* () {
      const run = yield* getRow(runId, null)
      const [latest] = yield* statements.stepLatest(runId).pipe(db("find step"))
      if (run.status === "finished" || run.status === "cancelled" || run.status === "paused") {
        return { _tag: "Stopped", status: run.status } as const
      }
      if (
        latest?.status === "waiting" &&
        latest.timeout_at !== null &&
        latest.deadline_renewal_for?.getTime() === latest.timeout_at.getTime()
      ) {
        // a late notice handed over by the sweep: the deadline is evaluated again
        return {
          _tag: "Step",
          step: latest.name,
          message: {
            workflow: run.workflow,
            run: runId,
            step: String(latest.id),
            deadline: latest.timeout_at.toISOString()
          }
        } as const
      }
      if (latest?.status === "waiting") {
        return { _tag: "Waiting", step: latest.name, waitingFor: "a signal" } as const
      }
      if (latest?.status === "in_progress") return { _tag: "Running", step: latest.name } as const
      if (latest?.status === "scheduled") {
        const now = yield* statementNow
        yield* statements.stepMakeDue(latest.id, now).pipe(db("make step due"))
        return {
          _tag: "Step",
          step: latest.name,
          message: { workflow: run.workflow, run: runId, step: String(latest.id) }
        } as const
      }
      return { _tag: "Continue", message: { workflow: run.workflow, run: runId, step: null } } as const
    })

  // ---- the sweep ---------------------------------------------------------------------------

  const SWEEP_BATCH = 200

  /** Applies a waiting step's onTimeout (the sweep at its deadline; `expireWait` at once). */
  const applyTimeout = (step: StepRow & { readonly workflow: string }, now: Date | null) =>
    Effect.gen(function* () {
      const action = step.on_timeout ?? "pause"
      const physical = queueOf(step.queue || config.workflowQueue).physical
      const details = JSON.stringify({ wait_for: step.wait_for, action, timeout_at: step.timeout_at })
      if (action === "notify" && step.wait_deadline_per_run && step.timeout_at !== null) {
        // only a worker has the code of a per-run deadline: it writes the notice as it evaluates it
        const [handed] = yield* statements
          .stepRequestRenewal({
            workflow: step.workflow,
            runId: step.run_id,
            stepId: step.id,
            missedAt: step.timeout_at,
            physicalQueue: physical,
            thresholdMs: Duration.toMillis(config.workflowStallThreshold),
            now
          })
          .pipe(db("hand over a late notice"))
        return handed !== undefined
      }
      if (action === "notify") {
        const [noticed] = yield* statements
          .stepNotifyLate({ runId: step.run_id, stepId: step.id, missedAt: step.timeout_at, now })
          .pipe(db("late notice"))
        if (noticed !== undefined) {
          yield* Metric.update(
            waitOverdueTotal.pipe(Metric.withAttributes({ workflow_class: step.workflow, step: step.name })),
            1
          )
        }
        return noticed !== undefined
      }
      if (action === "run") {
        const [woke] = yield* statements
          .stepWake({
            workflow: step.workflow,
            runId: step.run_id,
            stepId: step.id,
            timedOut: true,
            physicalQueue: physical,
            now
          })
          .pipe(db("wake timed-out step"))
        if (woke !== undefined) {
          yield* statements
            .eventInsert({
              runId: step.run_id,
              type: "wait_timed_out",
              step: step.name,
              attempt: step.attempt,
              actor: "system",
              reason: null,
              details,
              now
            })
            .pipe(db("record timeout"))
        }
        return woke !== undefined
      }
      const error =
        action === "pause"
          ? errorJson(
              new WaitTimedOut({
                step: step.name,
                waitFor: step.wait_for ?? "",
                timeoutAt: step.timeout_at?.toISOString() ?? "now"
              })
            )
          : null
      const [resolved] = yield* statements
        .stepResolveWaiting({
          workflow: step.workflow,
          runId: step.run_id,
          stepId: step.id,
          outcome: action,
          error,
          actor: "system",
          reason: null,
          eventType: "wait_timed_out",
          eventDetails: details,
          physicalQueue: physical,
          now
        })
        .pipe(db("apply timeout"))
      return resolved !== undefined
    })

  /** What one sweep repaired. */
  /**
   * A fan-out's batch finished: its outcome goes to the step waiting on it as a signal (one per
   * batch: the callback and the sweep's make-up share the key). A callback for another attempt's
   * batch, or a run that is over, changes nothing.
   */
  const fanOutFinished = (
    outcome:
      | BatchFinished
      | { readonly batchId: string; readonly gone: true; readonly properties: BatchFinished["properties"] }
  ) =>
    Effect.gen(function* () {
      const runId = String(outcome.properties.workflow_id ?? "")
      const stepId = String(outcome.properties.step_id ?? "")
      if (!isUuid(runId)) return false
      const [waiting] = yield* statements.stepWaitingOf(runId).pipe(db("find waiting step"))
      if (waiting === undefined || waiting.wait_for !== FAN_OUT_WAIT || String(waiting.id) !== stepId) {
        yield* Effect.logDebug(`pgbus: fan-out callback for batch ${outcome.batchId} found no step waiting on it`)
        return false
      }
      const sent = yield* sendSignal(runId, FAN_OUT_WAIT, outcome, {
        idempotencyKey: `fan-out:${outcome.batchId}`,
        actor: "system",
        reason: "gone" in outcome ? "the batch row is gone" : "the batch finished"
      }).pipe(
        Effect.map((receipt) => !receipt.duplicate),
        Effect.catchTag(["NotOngoing", "RunNotFound", "InvalidSignal"], () => Effect.succeed(false))
      )
      return sent
    })

  const stuckWorkflows = new Set<string>()
  const sweepOnce: Effect.Effect<SweepReport, DatabaseError | QueueError> = Effect.gen(function* () {
    const now = yield* statementNow
    const thresholdMs = Duration.toMillis(config.workflowStallThreshold)
    let stalled = 0
    for (const step of yield* statements.stepsStalled(thresholdMs, now, SWEEP_BATCH).pipe(db("find stalled steps"))) {
      const detection = step.timeout_ms !== null && step.timeout_ms < thresholdMs ? "timeout" : "threshold"
      const stalledError = new StepStalled({ step: step.name, detection })
      const next = stallNext(step, stalledError)
      const [applied] = yield* finish({
        workflow: step.workflow,
        runId: step.run_id,
        stepId: step.id,
        status: "failed",
        output: null,
        error: errorJson(stalledError),
        definitionHash: null,
        next,
        now
      })
      if (applied?.applied === 1n) {
        stalled++
        yield* statements
          .eventInsert({
            runId: step.run_id,
            type: "stall_detected",
            step: step.name,
            attempt: step.attempt,
            actor: "system",
            reason: `in progress past its ${detection === "timeout" ? "timeout" : "stall threshold"}`,
            details: JSON.stringify({ detection, action: config.workflowStallAction }),
            now
          })
          .pipe(db("record stall"))
        yield* Metric.update(
          stallsTotal.pipe(Metric.withAttributes({ workflow_class: step.workflow, step: step.name, detection })),
          1
        )
      }
    }
    let resent = 0
    const overdue = yield* statements.stepsOverdue(thresholdMs, now, SWEEP_BATCH).pipe(db("find overdue steps"))
    const byQueue = new Map<string, Array<(typeof overdue)[number]>>()
    for (const step of overdue) {
      const queue = step.queue || config.workflowQueue
      byQueue.set(queue, [...(byQueue.get(queue) ?? []), step])
    }
    for (const [logical, group] of byQueue) {
      const { queue, physical } = queueOf(logical)
      yield* jobs.ensureQueue(queue)
      // a step behind a backlog still has its message: only a lost one is sent again
      const queued = yield* store.payloadValuesQueued(
        queue,
        "step",
        group.map((s) => String(s.id))
      )
      for (const step of group) {
        if (queued.has(String(step.id))) continue
        const r = yield* statements
          .stepResend({
            workflow: step.workflow,
            runId: step.run_id,
            stepId: step.id,
            physicalQueue: physical,
            thresholdMs,
            now
          })
          .pipe(db("re-send step"))
        resent += r.length
      }
    }
    for (const run of yield* statements.runsIdle(thresholdMs, now, SWEEP_BATCH).pipe(db("find idle runs"))) {
      const { queue, physical } = queueOf(config.workflowQueue)
      yield* jobs.ensureQueue(queue)
      yield* statements.runSendContinue(run.workflow, run.id, physical, now).pipe(db("re-send run"))
      resent++
    }
    let timedOut = 0
    for (const step of yield* statements
      .waitsTimedOut(now, thresholdMs, SWEEP_BATCH)
      .pipe(db("find timed-out waits"))) {
      if (yield* applyTimeout(step, now)) timedOut++
    }
    let deleted = 0
    if (config.workflowRetention !== undefined) {
      const retentionMs = Duration.toMillis(config.workflowRetention)
      while (true) {
        const n = yield* withTransaction(
          sql,
          Effect.gen(function* () {
            const ids = (yield* statements.runsDeleteFinished(retentionMs, now, 1_000)).map((r) => r.id)
            if (ids.length > 0) yield* statements.runsDeleteRows(ids)
            return ids.length
          })
        ).pipe(db("delete old runs"))
        deleted += n
        if (n < 1_000) break
      }
    }
    // lost fan-out callbacks: the batch finished long ago (or is gone) and the step still waits
    let fanOutsResolved = 0
    for (const step of yield* statements.fanOutsWaiting(thresholdMs, now, SWEEP_BATCH).pipe(db("find fan-outs"))) {
      const batchId = step.batch_id!
      const properties = { workflow_id: step.run_id, step_id: String(step.id) }
      const found = yield* batches.find(batchId).pipe(Effect.result)
      const nowMs = now?.getTime() ?? (yield* Clock.currentTimeMillis)
      if (found._tag === "Failure") {
        // a database error is for the next sweep; a batch row that is gone pauses the run
        if (found.failure instanceof BatchNotFound && (yield* fanOutFinished({ batchId, gone: true, properties }))) {
          fanOutsResolved++
        }
        continue
      }
      const batch = found.success
      if (!batch.finished || batch.finishedAt === undefined || nowMs - batch.finishedAt.getTime() < thresholdMs)
        continue
      if (yield* fanOutFinished(fanOutOutcomeOf(batch))) fanOutsResolved++
    }
    let waitingOverdue = 0
    const overdueThresholdMs = Duration.toMillis(config.workflowWaitingVisibilityThreshold)
    const stuck = new Map<string, number>()
    for (const row of yield* statements.runsWaitingOverdue(overdueThresholdMs, now).pipe(db("count stuck waits"))) {
      waitingOverdue += Number(row.n)
      stuck.set(row.workflow, Number(row.n))
    }
    // a workflow whose stuck runs moved on goes back to 0
    for (const workflow of stuckWorkflows) if (!stuck.has(workflow)) stuck.set(workflow, 0)
    for (const [workflow, n] of stuck) {
      yield* Metric.update(waitingOverdueGauge.pipe(Metric.withAttributes({ workflow_class: workflow })), n)
      if (n === 0) stuckWorkflows.delete(workflow)
      else stuckWorkflows.add(workflow)
    }
    return { stalled, resent, timedOut, deleted, waitingOverdue, fanOutsResolved } satisfies SweepReport
  }).pipe(Effect.withSpan("pgbus.workflow.sweep", {}, { captureStackTrace: false }))

  /** Applies the waiting step's onTimeout now, whatever its deadline (test helpers, support tooling). */
  const expireWait = (runId: string) =>
    Effect.gen(function* () {
      const run = yield* getRow(runId, null)
      const [waiting] = yield* statements.stepWaitingOf(runId).pipe(db("find waiting step"))
      if (waiting === undefined) return false
      const now = yield* statementNow
      return yield* applyTimeout({ ...waiting, workflow: run.workflow }, now)
    })

  return {
    client,
    runner: WorkflowRunner.of({ execute, next, fanOutFinished }),
    sweep: WorkflowSweep.of({ runOnce: sweepOnce, expireWait })
  }
})

/** What one sweep repaired. */
export interface SweepReport {
  /** In-progress steps past their timeout or the stall threshold, given the stall action. */
  readonly stalled: number
  /** Messages of overdue scheduled steps (and idle ready runs) sent again. */
  readonly resent: number
  /** Waits whose deadline passed, given their onTimeout (notify notices included). */
  readonly timedOut: number
  /** Finished and cancelled runs deleted after the retention. */
  readonly deleted: number
  /** Waiting runs whose step has waited longer than `workflowWaitingVisibilityThreshold` (stuck). */
  readonly waitingOverdue: number
  /** Fan-out steps whose batch's callback was lost (or whose batch row is gone), resolved. */
  readonly fanOutsResolved: number
}

/**
 * The workflow sweep: repairs what messages and workers cannot (dead workers' steps, lost
 * messages, wait deadlines, retention). `runOnce` is idempotent and safe with several
 * supervisors running it at once (every repair is a guarded statement).
 *
 * @category services
 */
export class WorkflowSweep extends Context.Service<
  WorkflowSweep,
  {
    readonly runOnce: Effect.Effect<SweepReport, DatabaseError | QueueError>
    /** Applies a waiting step's onTimeout now, whatever its deadline; false when nothing waits. */
    readonly expireWait: (runId: string) => Effect.Effect<boolean, DatabaseError | QueueError | RunNotFound>
  }
>()("effect-pgbus/WorkflowSweep") {}

/**
 * The workflow client and runner on the database.
 *
 * @category layers
 */
export const layer: Layer.Layer<
  WorkflowClient | WorkflowRunner | WorkflowSweep,
  never,
  PgBusConfig | SqlClient.SqlClient | QueueStore | Notifier | JobClient | Batches
> = Layer.effectContext(
  Effect.map(make, ({ client, runner, sweep }) =>
    Context.make(WorkflowClient, client).pipe(Context.add(WorkflowRunner, runner), Context.add(WorkflowSweep, sweep))
  )
)

export type { PgBusConfigShape }
