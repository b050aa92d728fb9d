/**
 * What the engine's modules share: its version, metrics, error encoding, the step message and
 * its delivery, the execution record, the run views, and the runner's and sweep's services.
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import { Context, Duration, Effect, Metric, Schema } from "effect"
import type { SqlError } from "effect/sql/SqlError"
import { type Finished as BatchFinished, Finished as BatchFinishedSchema, type BatchInfo } from "../../Batch/Batch.ts"
import { boundedMemo } from "../../internal/memo.ts"
import { storableText } from "../../internal/storable.ts"
import * as Job from "../../Job/Job.ts"
import type { QueueError } from "../../Queue/QueueError.ts"
import type { AuditEvent, RunInfo, StepAttempt } from "../Client.ts"
import {
  isSignalMatcher,
  type RunContext,
  type SignalDeclarations,
  type SignalMatcher,
  type StepOptions
} from "../Runtime.ts"
import * as States from "../States.ts"
import type { AnyWorkflow } from "../Workflow.ts"
import type { DatabaseError, RunNotFound, WorkflowNotRegistered } from "../WorkflowError.ts"
import { type ClaimRow, type EventRow, FAN_OUT_JOB, type RunRow, type StepRow } from "../WorkflowSql.ts"

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

export const stepsTotal = Metric.counter("pgbus_workflow_steps_total", {
  description: "workflow step attempts by outcome"
})
export const stepDuration = Metric.histogram("pgbus_workflow_step_duration_seconds", {
  description: "run time of workflow step attempts",
  boundaries: Metric.exponentialBoundaries({ start: 0.001, factor: 4, count: 10 })
})
export const finishedTotal = Metric.counter("pgbus_workflows_finished_total", { description: "runs finished" })
export const pausedTotal = Metric.counter("pgbus_workflows_paused_total", { description: "runs paused by a step" })
export const cancelledTotal = Metric.counter("pgbus_workflows_cancelled_total", { description: "runs cancelled" })
export const stallsTotal = Metric.counter("pgbus_workflow_stalls_total", { description: "steps found stalled" })
export const waitOverdueTotal = Metric.counter("pgbus_workflow_wait_overdue_total", {
  description: "late notices of notify waits (one per deadline, or one for a sweep that missed several)"
})
export const waitingOverdueGauge = Metric.gauge("pgbus_workflow_waiting_overdue", {
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

export const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

export const isSqlError = (u: unknown): u is SqlError => isObject(u) && u._tag === "SqlError"

export const isTagged = (u: unknown): boolean =>
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
export const messageOf = (error: unknown): string =>
  storableText(isObject(error) && typeof error.message === "string" ? error.message : String(error))

/** A reason given to a flow-control verb, as an event records it. */
export const textOf = (reason: string | undefined): string | null =>
  reason === undefined ? null : storableText(reason)

/** What `matchSignal` gives when the signal does not match. */
export const NO_MATCH: unique symbol = Symbol("pgbus/no-match")

/** Whether a declared signal has a predicate (only code that loads the workflow can evaluate it). */
export const declaredMatcher = (workflow: { readonly signals: SignalDeclarations }, name: string): boolean => {
  const declared = workflow.signals[name]
  return isSignalMatcher(declared) && declared.matches !== undefined
}

/**
 * Matches a stored signal payload against a wait: decodes it with the declared (or the
 * matcher's) Schema and applies the predicate. Gives the decoded payload, or NO_MATCH. A Schema
 * or a predicate that fails is an error of the step (the exception policies decide).
 */
/** A step's options plus the runner's own: a poll takes a held signal as its fast-forwarded result. */
export type RunnerStepOptions<A> = StepOptions<A> & { readonly takesHeldSignal?: boolean | undefined }

export const matchSignal = (
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
export const waitDeadline = (
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
export const stepMetricsOf = boundedMemo((key) => {
  const [workflow, step, outcome] = key.split("\u0000")
  const attributes = { workflow_class: workflow!, step: step!, outcome: outcome! }
  return {
    total: stepsTotal.pipe(Metric.withAttributes(attributes)),
    duration: stepDuration.pipe(Metric.withAttributes(attributes))
  }
})
export const stepMetrics = (workflow: string, step: string, outcome: string) =>
  stepMetricsOf(`${workflow}\u0000${step}\u0000${outcome}`)
export const finishedOf = boundedMemo((workflow) =>
  finishedTotal.pipe(Metric.withAttributes({ workflow_class: workflow }))
)

// Every outcome records the hash of the step names so far, and the runs of a workflow share
// their name sequences: a memo spares a sha256 per step (about 3% of the runner's CPU in W3 of
// bench:workflows).
export const hashJoined = boundedMemo((joined) => createHash("sha256").update(joined).digest("hex").slice(0, 32))
export const hashNames = (names: ReadonlyArray<string>): string => hashJoined(names.join("\u0000"))

// ---------------------------------------------------------------------------------------------
// Row mapping

export const toRunInfo = (row: RunRow): RunInfo => ({
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
  priority: row.priority ?? undefined,
  singleton: row.singleton,
  scheduledFor: row.scheduled_for ?? undefined,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
  finishedAt: row.finished_at ?? undefined,
  availableActions: States.availableActions(row.status),
  ...(row.parent_run_id == null ? {} : { parentRunId: row.parent_run_id, parentStep: row.parent_step ?? undefined })
})

export const toStepAttempt = (row: StepRow): StepAttempt => ({
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

export const toAuditEvent = (row: EventRow): AuditEvent => ({
  id: row.id,
  type: row.type,
  step: row.step ?? undefined,
  attempt: row.attempt ?? undefined,
  actor: row.actor,
  reason: row.reason ?? undefined,
  details: row.details ?? undefined,
  at: row.at
})

export const encodeCursor = (row: { readonly cursor_at: string; readonly id: string }) =>
  Buffer.from(`${row.cursor_at}|${row.id}`).toString("base64url")
export const decodeCursor = (cursor: string): { readonly createdAt: string; readonly id: string } | undefined => {
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
      resource_id: Schema.NullOr(Schema.String),
      /** A child run's parent (its end wakes the parent, see `verbs/child.ts`). */
      parent_run_id: Schema.optionalKey(Schema.String)
    })
  ),
  /** A notify notice of a per-run deadline: the missed deadline (ISO), to evaluate the deadline again. */
  deadline: Schema.optionalKey(Schema.String)
})
export type StepMessage = typeof StepMessage.Type

/** What a replay reads from a claim (a fresh run's first replay reads it from its start message). */
export type Claimed = Pick<
  ClaimRow,
  | "id"
  | "payload"
  | "subject"
  | "resource_id"
  | "priority"
  | "scheduled_for"
  | "parent_run_id"
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
export const CARRIED_INPUT_LIMIT = 8 * 1024

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
export const deliveryKey = (msgId: bigint, readCt: number) => `${msgId}:${readCt}`

/**
 * The claim mark of a delivery, recorded on every step its execution claims:
 * `<queue>:<msg id>:<read count>` (none without a message, as in the test helpers). A
 * redelivery finds by its prefix the step its predecessor held; a claim whose reply was lost
 * finds by the whole mark the step it holds itself.
 */
export const claimMarkOf = (delivery: Delivery): string | null =>
  delivery.msgId === undefined || delivery.queue === undefined
    ? null
    : `${delivery.queue}:${delivery.msgId}:${delivery.attempt}`

/** The part of a delivery's mark shared by every delivery of its message. */
export const messageMarkOf = (delivery: Delivery): string | null =>
  delivery.msgId === undefined || delivery.queue === undefined ? null : `${delivery.queue}:${delivery.msgId}:`

/** Whether a step's claim mark is a delivery's (else a local hand-over's, or none). */
export const isDeliveryMark = (mark: string | null): boolean => mark !== null && /^[a-z][a-z0-9_]*:\d+:\d+$/.test(mark)

/**
 * One execution of a step message: the mark of its claims, and what a drain that interrupts it
 * must release (the attempt it claimed and has not ended, or a completed attempt whose outcome
 * waits for the next step).
 */
export interface Execution {
  readonly mark: string | null
  /** Its claim failed with its connection (it may have committed): sent again, it found nothing to claim. */
  claimLost: boolean
  held: bigint | undefined
  pending: Pending | undefined
  /** The workflow's queue (where a continue message goes). */
  queue: string | undefined
  /** The workflows this process registered (a `Workflow.child` step refuses a child not among them). */
  workflows?: ReadonlyMap<string, RegisteredWorkflow> | undefined
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

export interface Target {
  readonly id: bigint
  readonly name: string
  readonly attempt: number
  readonly position: number
  readonly reattempts: number
  readonly queue: string
}

export interface Pending {
  readonly step: Target
  readonly status: "completed" | "skipped"
  readonly output: string | null
}

/** The callback every fan-out batch gets: the registry runs it as `WorkflowRunner.fanOutFinished`. */
export const fanOutCallback = Job.make(FAN_OUT_JOB, { payload: BatchFinishedSchema }, () => Effect.void)

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
  /** Parents woken by the sweep: still waiting on a child that had ended (a wake-up lost). */
  readonly childrenWoken: number
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
