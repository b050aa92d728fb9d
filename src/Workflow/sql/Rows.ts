/**
 * The rows the workflow statements return and the shapes they take: runs, step attempts,
 * signals, audit events, claims, and the entries of the shared (many-run) statements.
 *
 * @since 0.1.0
 */
import type { MessageCtes as QueueMessageCtes } from "../../Queue/QueueRows.ts"
import type { RunStatus, StepStatus } from "../States.ts"

/** A run row. */
export interface RunRow {
  readonly id: string
  readonly workflow: string
  readonly subject: string | null
  readonly resource_id: string | null
  readonly payload: unknown
  readonly status: RunStatus
  readonly current_step: string | null
  readonly idempotency_key: string | null
  readonly paused_reason: string | null
  readonly paused_at: Date | null
  readonly error: unknown
  readonly output: unknown
  readonly engine_version: number
  readonly definition_version: string | null
  readonly definition_hash: string | null
  readonly rerun_of: string | null
  /** Priority sub-queue of the run's messages; null: the config's default. */
  readonly priority: number | null
  readonly singleton: boolean
  /** The schedule's slot, for a run its schedule started. */
  readonly scheduled_for: Date | null
  readonly actor: string
  readonly created_at: Date
  readonly updated_at: Date
  readonly finished_at: Date | null
  /** A child run: the run whose `Workflow.child` step started it, and that step's name. */
  readonly parent_run_id?: string | null
  readonly parent_step?: string | null
}

/** A step attempt row. */
export interface StepRow {
  readonly id: bigint
  readonly run_id: string
  readonly name: string
  readonly attempt: number
  readonly position: number
  readonly status: StepStatus
  readonly queue: string
  readonly scheduled_at: Date
  readonly due_at: Date
  readonly started_at: Date | null
  readonly finished_at: Date | null
  readonly timeout_ms: number | null
  readonly reattempts: number
  readonly worker: string | null
  readonly app_revision: string | null
  readonly output: unknown
  readonly error: unknown
  readonly wait_for: string | null
  readonly wait_matcher: boolean
  readonly timeout_at: Date | null
  readonly on_timeout: OnTimeout | null
  readonly wait_period_ms: number | null
  readonly timed_out: boolean
  readonly waiting_since: Date | null
  /** The batch a fan-out step waits for. */
  readonly batch_id: string | null
  /** The wait's deadline came from a per-run function: a notify notice evaluates it again. */
  readonly wait_deadline_per_run: boolean
  /** The missed deadline whose notice the sweep handed to a worker (per-run deadlines). */
  readonly deadline_renewal_for: Date | null
  /** When that notice was handed over (handed over again if still pending past the stall threshold). */
  readonly deadline_renewal_at: Date | null
  /** The claim holding the attempt in progress: a delivery's mark (`<queue>:<msg id>:<read count>`) or a hand-over's. */
  readonly claimed_by: string | null
}

/** What a wait does when its deadline passes. */
export type OnTimeout = "pause" | "cancel" | "skip" | "run" | "notify"

/** A signal row. */
export interface SignalRow {
  readonly id: bigint
  readonly run_id: string
  readonly name: string
  readonly payload: unknown
  readonly status: "pending" | "claimed" | "consumed"
  readonly idempotency_key: string | null
  readonly claimed_by_step: bigint | null
  readonly actor: string
  readonly reason: string | null
  readonly received_at: Date
  readonly claimed_at: Date | null
  readonly consumed_at: Date | null
}

/** An audit event row. */
export interface EventRow {
  readonly id: bigint
  readonly run_id: string
  readonly type: string
  readonly step: string | null
  readonly attempt: number | null
  readonly actor: string
  readonly reason: string | null
  readonly details: unknown
  readonly at: Date
}

/** A step of the history a replay reads (from a claim). */
export interface HistoryEntry {
  readonly id: string
  readonly name: string
  readonly attempt: number
  readonly position: number
  readonly status: StepStatus
  readonly output: unknown
  readonly reattempts: number
}

/** What a claim returns: the run, the claimed step (none for a continue) and the history. */
export interface ClaimRow extends RunRow {
  readonly step_id: bigint | null
  readonly step_name: string | null
  readonly step_attempt: number | null
  readonly step_position: number | null
  readonly step_reattempts: number | null
  readonly step_timed_out: boolean | null
  readonly step_timeout_at: Date | null
  /** The signal the claimed step holds (woken by it, or kept from an earlier attempt). */
  readonly held_signal: { readonly id: string; readonly name: string; readonly payload: unknown } | null
  readonly history: ReadonlyArray<HistoryEntry>
}

/** Builds message CTEs into the queue named (see QueueSql.messageSendCtes). */
export type MessageCtes = QueueMessageCtes

/** The job name of workflow step messages. */
export const STEP_JOB = "pgbus.workflow.step"

/** `wait_for` of a poll scheduled for its next check: fast-forward gives it its result as a signal. */
export const POLL_WAIT = "pgbus.poll"

/** `wait_for` of a fan-out step: its batch's callback delivers this signal. */
export const FAN_OUT_WAIT = "pgbus.fan_out"

/** `wait_for` of a `Workflow.child` step, followed by the step's name: the child's end wakes it. */
export const CHILD_WAIT_PREFIX = "pgbus.child:"

/** The job name of fan-out callbacks (a batch finished: resume the run that opened it). */
export const FAN_OUT_JOB = "pgbus.workflow.fan_out_finished"

/** What follows a finished attempt. */
export type NextAction =
  | {
      readonly _tag: "schedule"
      readonly name: string
      readonly attempt: number
      readonly position: number
      readonly queue: string
      readonly physicalQueue: string
      readonly delayMs: number
      /** An absolute due time (a timer); wins over `delayMs`. */
      readonly dueAt?: Date | null | undefined
      readonly timeoutMs?: number | null | undefined
      readonly reattempts: number
      /** Write a `step_reattempted` event (a new attempt of the same step). */
      readonly reattempt: boolean
    }
  | {
      readonly _tag: "claim"
      readonly name: string
      readonly attempt: number
      readonly position: number
      readonly queue: string
      readonly physicalQueue: string
      readonly reattempts: number
      readonly timeoutMs: number | null
      /** The mark of the delivery whose execution runs it (null: none, as in the test helpers). */
      readonly claimedBy: string | null
    }
  /** The run goes back to ready with a continue message (its next step is found by replay). */
  | { readonly _tag: "continue"; readonly physicalQueue: string }
  | { readonly _tag: "finish"; readonly output: string | null }
  | { readonly _tag: "pause"; readonly reason: string; readonly error: string | null; readonly message: string | null }
  | { readonly _tag: "cancel"; readonly reason: string | null }

/** One entry of `runStartMany`: a fresh run (a rerun, a child) and its payload as JSON text. */
export interface StartEntry {
  readonly id: string
  readonly workflow: string
  readonly subject: string | null
  readonly resourceId: string | null
  readonly payload: string
  readonly idempotencyKey: string | null
  readonly engineVersion: number
  readonly definitionVersion: string | null
  readonly actor: string
  readonly reason: string | null
  /** Priority sub-queue of the run's messages; null: the config's default. */
  readonly priority: number | null
  /** The run takes the workflow's singleton slot. */
  readonly singleton: boolean
  /** The schedule's slot, for a run its schedule started. */
  readonly scheduledFor: Date | null
  /** The message carries the run's payload, subject and resource: its worker replays before claiming. */
  readonly carryInput: boolean
  readonly now: Date | null
  /** The run this one reruns (`rerun`): its event is `rerun`, not `started`. */
  readonly rerunOf?: string | null | undefined
  /** A child run: its parent's run and step (`Workflow.child`), and whether its pause wakes the parent. */
  readonly parent?: { readonly runId: string; readonly step: string; readonly wakeOnPause: boolean } | undefined
}

/** One entry of `runClaimFirstMany`: a fresh run and the first step its replay reached. */
export interface ClaimFirstEntry {
  readonly runId: string
  readonly name: string
  readonly queue: string
  readonly timeoutMs: number | null
  /** The mark of the delivery whose execution claims it. */
  readonly claimedBy: string | null
  readonly now: Date | null
}

/** One entry of `stepFinishMany`: a completed attempt that holds no signal, and what follows it. */
export interface FinishManyEntry {
  readonly runId: string
  readonly stepId: bigint
  /** The output as JSON text (null: none). */
  readonly output: string | null
  readonly definitionHash: string | null
  readonly next:
    | Omit<Extract<NextAction, { readonly _tag: "claim" }>, "physicalQueue">
    | { readonly _tag: "finish"; readonly output: string | null }
  /** The attempt may hold a signal (a woken step's): consumed with the outcome. Absent: it holds none. */
  readonly mayHoldSignal?: boolean | undefined
  readonly now: Date | null
}

/** What a finish statement did. */
export interface FinishRow {
  /** The run's status before (null when the run is gone). */
  readonly before: RunStatus | null
  /** 1 when the attempt was still in progress and its outcome applied. */
  readonly applied: bigint
  readonly next_id: bigint | null
  readonly next_status: StepStatus | null
  readonly after: RunStatus | null
}

/** Filters of a run listing. */
export interface RunFilter {
  readonly workflow?: string | undefined
  readonly status?: ReadonlyArray<RunStatus> | undefined
  readonly subject?: string | undefined
  readonly resourceId?: string | undefined
  readonly pausedReason?: string | undefined
  readonly createdFrom?: Date | undefined
  readonly createdTo?: Date | undefined
  /** Cursor: runs created before this (created_at, id). */
  readonly before?: { readonly createdAt: string; readonly id: string } | undefined
  readonly limit: number
}
