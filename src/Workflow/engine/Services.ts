/**
 * The engine's services besides the client: the runner (executes step messages) and the sweep.
 *
 * @since 0.1.0
 */
import { Context, Effect } from "effect"
import { type Finished as BatchFinished, Finished as BatchFinishedSchema, type BatchInfo } from "../../Batch/Batch.ts"
import * as Job from "../../Job/Job.ts"
import type { QueueError } from "../../Queue/QueueError.ts"
import type { ReadClaim } from "../../Queue/QueueRows.ts"
import type * as States from "../States.ts"
import type { AnyWorkflow } from "../Workflow.ts"
import type { DatabaseError, RunNotFound, WorkflowNotRegistered } from "../WorkflowError.ts"
import { FAN_OUT_JOB } from "../WorkflowSql.ts"
import type { Delivery, StepMessage } from "./Messages.ts"

/** A workflow ready to execute in this process. */
export interface RegisteredWorkflow {
  readonly workflow: AnyWorkflow
  /**
   * Provides the services the workflow's code needs (captured where it was registered); `also`
   * adds the execution's own in the same context update.
   */
  readonly provide: <A, E, R>(
    effect: Effect.Effect<A, E, R>,
    also?: (context: Context.Context<never>) => Context.Context<never>
  ) => Effect.Effect<A, E, Exclude<R, never>>
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
    /**
     * The claim a worker's read of a queue (the capsule's name of it) makes for the woken steps
     * of these workflows it delivers (`RegisteredJob.readClaim`); absent: none.
     */
    readonly readClaim?:
      | ((workflows: ReadonlyMap<string, RegisteredWorkflow>) => (logical: string) => ReadClaim | undefined)
      | undefined
  }
>()("effect-pgbus/WorkflowRunner") {}

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
