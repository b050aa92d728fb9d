/**
 * The workflow client: start runs, find them, list them, act on them. It needs no handlers (a
 * web process starts and inspects runs that worker processes execute).
 *
 * @since 0.1.0
 */
import { Context, type Effect, type Schema } from "effect"
import type { OutsideVerb, RunStatus, StepStatus } from "./States.ts"
import type {
  DatabaseError,
  InvalidInput,
  RunNotFound,
  SignalError,
  StartError,
  UnknownStep,
  VerbError
} from "./WorkflowError.ts"

/** Options of a start. */
export interface StartOptions {
  /** The record the run is about: at most one ongoing run per workflow and subject. */
  readonly subject?: string | undefined
  /** A repeated key returns the existing run (`duplicateStart`), whatever its status. */
  readonly idempotencyKey?: string | undefined
  /** Tenant scoping: queries and verbs given a resource id only see that resource's runs. */
  readonly resourceId?: string | undefined
  /** Who started it, for the audit trail (default "app"). */
  readonly actor?: string | undefined
  readonly reason?: string | undefined
  /** Priority sub-queue of every message of the run (0 highest; default: the workflow's, else the config's). */
  readonly priority?: number | undefined
  /** At most one ready, performing or waiting run of the workflow (default: the workflow's `singleton`). */
  readonly singleton?: boolean | undefined
  /** The schedule's slot this run is for (set by the scheduler; the body sees it as `run.schedule`). */
  readonly scheduledFor?: Date | undefined
}

/** Who and why, for an outside verb. */
export interface VerbOptions {
  readonly actor?: string | undefined
  readonly reason?: string | undefined
  /** Only act on a run of this resource. */
  readonly resourceId?: string | undefined
}

/** Options of a cancel. */
export interface CancelOptions extends VerbOptions {
  /** Also cancel the run's child runs that have not ended (and theirs); by default they run on. */
  readonly cancelChildren?: boolean | undefined
}

/** Options of a signal. */
export interface SignalOptions {
  /** A repeated key stores nothing, wakes nothing and returns the stored signal (`duplicate`). Blank is no key. */
  readonly idempotencyKey?: string | undefined
  readonly actor?: string | undefined
  readonly reason?: string | undefined
  /** The workflow's definition: its declared Schema validates the payload (and matchers run). */
  readonly workflow?:
    | {
        readonly name: string
        readonly signals: import("./Runtime.ts").SignalDeclarations
        /** The queue of its steps' messages (default: the config's `workflowQueue`). */
        readonly queue?: string | undefined
      }
    | undefined
  /** Only signal a run of this resource. */
  readonly resourceId?: string | undefined
}

/** A stored signal, as `signal` returns it. */
export interface SignalReceipt {
  readonly id: bigint
  readonly runId: string
  readonly name: string
  readonly payload: unknown
  readonly status: "pending" | "claimed" | "consumed"
  /** True when the idempotency key had been seen: nothing was stored or woken. */
  readonly duplicate: boolean
  /** True when a waiting step took it. */
  readonly claimed: boolean
}

/** A run as queries return it. */
export interface RunInfo {
  readonly id: string
  readonly workflow: string
  readonly subject: string | undefined
  readonly resourceId: string | undefined
  readonly payload: unknown
  readonly status: RunStatus
  readonly currentStep: string | undefined
  readonly idempotencyKey: string | undefined
  readonly pausedReason: string | undefined
  readonly error: unknown
  readonly output: unknown
  readonly engineVersion: number
  readonly definitionVersion: string | undefined
  readonly definitionHash: string | undefined
  readonly rerunOf: string | undefined
  /** Priority sub-queue of the run's messages (undefined: the config's default). */
  readonly priority: number | undefined
  /** Whether the run took the workflow's singleton slot. */
  readonly singleton: boolean
  /** The schedule's slot, for a run its schedule started. */
  readonly scheduledFor: Date | undefined
  readonly createdAt: Date
  readonly updatedAt: Date
  readonly finishedAt: Date | undefined
  /** The outside verbs the transition table allows now. */
  readonly availableActions: ReadonlyArray<OutsideVerb>
  /** A child run (`Workflow.child`): the run whose step started it, and that step. */
  readonly parentRunId?: string | undefined
  readonly parentStep?: string | undefined
}

/** One attempt of a step. */
export interface StepAttempt {
  readonly id: bigint
  readonly name: string
  readonly attempt: number
  readonly position: number
  readonly status: StepStatus
  readonly queue: string
  readonly scheduledAt: Date
  readonly dueAt: Date
  readonly startedAt: Date | undefined
  readonly finishedAt: Date | undefined
  readonly worker: string | undefined
  readonly appRevision: string | undefined
  readonly output: unknown
  readonly error: unknown
  /** What a waiting step waits for (a signal name; `pgbus.fan_out` for a fan-out's batch). */
  readonly waitingFor: string | undefined
  /** The batch a fan-out step opened. */
  readonly batchId: string | undefined
}

/** One audit event. */
export interface AuditEvent {
  readonly id: bigint
  readonly type: string
  readonly step: string | undefined
  readonly attempt: number | undefined
  readonly actor: string
  readonly reason: string | undefined
  readonly details: unknown
  readonly at: Date
}

/** Progress of a run: steps completed (or skipped) so far. */
export interface RunProgress {
  readonly completedSteps: number
  readonly steps: ReadonlyArray<{ readonly name: string; readonly status: StepStatus; readonly attempts: number }>
}

/** Filters of `list`. */
export interface ListOptions {
  readonly workflow?: string | undefined
  readonly status?: RunStatus | ReadonlyArray<RunStatus> | undefined
  readonly subject?: string | undefined
  readonly resourceId?: string | undefined
  readonly pausedReason?: string | undefined
  readonly createdFrom?: Date | undefined
  readonly createdTo?: Date | undefined
  /** The `next` cursor of the previous page. */
  readonly cursor?: string | undefined
  /** Page size (default 50, at most 500). */
  readonly limit?: number | undefined
}

/** A page of runs, newest first. */
export interface RunPage {
  readonly runs: ReadonlyArray<RunInfo>
  /** Cursor of the next page, when there is one. */
  readonly next: string | undefined
}

/** What a start needs to know of a workflow (no handler). */
export interface WorkflowRef<P> {
  readonly name: string
  readonly payload: Schema.ConstraintCodec<P, unknown>
  readonly version: string | undefined
  readonly queue: string | undefined
  /** Declared signals: handles from `start` check payloads against them. */
  readonly signals?: import("./Runtime.ts").SignalDeclarations | undefined
  /** Starts are singleton (at most one ready, performing or waiting run). */
  readonly singleton?: boolean | undefined
  /** Default priority sub-queue of the runs (0 highest). */
  readonly priority?: number | undefined
}

/**
 * A run, with its verbs bound. Verbs re-read the run under its row lock; `info` is the state
 * when the handle was made.
 *
 * @category models
 */
export interface RunHandle {
  readonly id: string
  readonly info: RunInfo
  /** True when a start found the run by its idempotency key instead of creating it. */
  readonly duplicateStart: boolean
  readonly refresh: Effect.Effect<RunHandle, RunNotFound | DatabaseError>
  readonly pause: (options?: VerbOptions) => Effect.Effect<RunInfo, VerbError | InvalidInput>
  readonly resume: (options?: VerbOptions) => Effect.Effect<RunInfo, VerbError | InvalidInput>
  readonly resumeAt: (step: string, options?: VerbOptions) => Effect.Effect<RunInfo, VerbError | InvalidInput>
  readonly cancel: (options?: CancelOptions) => Effect.Effect<RunInfo, VerbError | InvalidInput>
  readonly runNow: (options?: VerbOptions) => Effect.Effect<RunInfo, VerbError | InvalidInput>
  readonly reschedule: (at: Date, options?: VerbOptions) => Effect.Effect<RunInfo, VerbError | InvalidInput>
  readonly rerun: (options?: VerbOptions) => Effect.Effect<RunHandle, VerbError | StartError | InvalidInput>
  readonly events: Effect.Effect<ReadonlyArray<AuditEvent>, DatabaseError>
  readonly steps: Effect.Effect<ReadonlyArray<StepAttempt>, DatabaseError>
  readonly progress: Effect.Effect<RunProgress, DatabaseError>
  readonly signal: (
    name: string,
    payload: unknown,
    options?: SignalOptions
  ) => Effect.Effect<SignalReceipt, SignalError>
  readonly skip: (options?: VerbOptions) => Effect.Effect<RunInfo, VerbError | InvalidInput>
}

/**
 * The client's operations; `X` is what the entry-point checks add to every error channel
 * (`InvalidInput`; never for the engine's own client, which the checks wrap).
 */
export interface WorkflowClientOf<X> {
  readonly start: <P>(
    workflow: WorkflowRef<P>,
    payload: P,
    options?: StartOptions
  ) => Effect.Effect<RunHandle, StartError>
  readonly get: (
    id: string,
    options?: { readonly resourceId?: string | undefined }
  ) => Effect.Effect<RunHandle, RunNotFound | DatabaseError | X>
  /** The subject's ongoing run of a workflow (else its latest). */
  readonly findBySubject: (
    workflow: string,
    subject: string
  ) => Effect.Effect<RunHandle, RunNotFound | DatabaseError | X>
  readonly list: (options?: ListOptions) => Effect.Effect<RunPage, DatabaseError | X>
  readonly counts: (options?: {
    readonly workflow?: string | undefined
    readonly resourceId?: string | undefined
  }) => Effect.Effect<Readonly<Record<RunStatus, number>>, DatabaseError | X>
  readonly steps: (id: string) => Effect.Effect<ReadonlyArray<StepAttempt>, DatabaseError | X>
  readonly events: (id: string) => Effect.Effect<ReadonlyArray<AuditEvent>, DatabaseError | X>
  readonly progress: (id: string) => Effect.Effect<RunProgress, DatabaseError | X>
  readonly pause: (id: string, options?: VerbOptions) => Effect.Effect<RunInfo, VerbError | X>
  readonly resume: (id: string, options?: VerbOptions) => Effect.Effect<RunInfo, VerbError | X>
  readonly resumeAt: (
    id: string,
    step: string,
    options?: VerbOptions
  ) => Effect.Effect<RunInfo, VerbError | UnknownStep | X>
  readonly cancel: (id: string, options?: CancelOptions) => Effect.Effect<RunInfo, VerbError | X>
  readonly runNow: (id: string, options?: VerbOptions) => Effect.Effect<RunInfo, VerbError | X>
  readonly reschedule: (id: string, at: Date, options?: VerbOptions) => Effect.Effect<RunInfo, VerbError | X>
  readonly rerun: (id: string, options?: VerbOptions) => Effect.Effect<RunHandle, VerbError | StartError | X>
  /** Sends a signal to a run. */
  readonly signal: (
    id: string,
    name: string,
    payload: unknown,
    options?: SignalOptions
  ) => Effect.Effect<SignalReceipt, SignalError | X>
  /** Sends a signal to a subject's ongoing run of a workflow (`missing: "ignore"` gives undefined). */
  readonly signalSubject: (
    workflow: string,
    subject: string,
    name: string,
    payload: unknown,
    options?: SignalOptions & { readonly missing?: "raise" | "ignore" }
  ) => Effect.Effect<SignalReceipt | undefined, SignalError | X>
  /** Skips the step a waiting run waits at (its held signal consumed); the run moves on. */
  readonly skip: (id: string, options?: VerbOptions) => Effect.Effect<RunInfo, VerbError | X>
  /**
   * Completes whatever the run is stopped on (tests, support tooling): a signal wait gets the
   * signal (with `data`, default `{}`), a timer is cut short, a paused run is resumed.
   */
  readonly fastForward: (
    id: string,
    data?: unknown,
    options?: VerbOptions
  ) => Effect.Effect<RunInfo, VerbError | SignalError | X>
  /** The signals of a run, oldest first. */
  readonly signals: (id: string) => Effect.Effect<ReadonlyArray<SignalReceipt>, DatabaseError | X>
}

/** The client's operations as the engine builds them, before the entry-point checks. */
export interface WorkflowClientShape extends WorkflowClientOf<never> {}

/** The client's operations as the service gives them: arguments checked first (`ClientInput.withInputChecks`). */
export interface CheckedWorkflowClient extends WorkflowClientOf<InvalidInput> {}

/**
 * The workflow client service (provided by `PgBus.layer`).
 *
 * @category services
 */
export class WorkflowClient extends Context.Service<WorkflowClient, CheckedWorkflowClient>()(
  "effect-pgbus/WorkflowClient"
) {}
