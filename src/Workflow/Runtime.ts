/**
 * What a running body talks to: the engine's runtime service, the step context, and the types
 * of step options and exception policies.
 *
 * @since 0.1.0
 */
import { Context, type Duration, type Effect, type Option, Schema } from "effect"
import type { AnyJob } from "../Job/Job.ts"
import type { EnqueueOptions } from "../Job/JobClient.ts"

// ---------------------------------------------------------------------------------------------
// Exception policies

/** What a policy does with a failed step. */
export type PolicyAction = "reattempt" | "cancel" | "pause" | "skip"

/** A verb a policy function picks. */
export type PolicyDecision =
  | { readonly _tag: "reattempt"; readonly wait?: Duration.Input | undefined }
  | { readonly _tag: "cancel" }
  | { readonly _tag: "pause" }
  | { readonly _tag: "skip" }

/** When a policy reports the error to the `ErrorReporter`. */
export type ReportMode = "always" | "never" | "terminal"

/** What an error is matched by: a typed error's `_tag` or a defect's class name, a RegExp on its message, a predicate. */
export type ErrorMatcher = string | RegExp | ((error: unknown) => boolean)

/**
 * An exception policy. Without `match` it is blanket.
 *
 * @category models
 */
export interface ErrorPolicy {
  readonly match?: ErrorMatcher | ReadonlyArray<ErrorMatcher> | undefined
  readonly action: PolicyAction | ((error: unknown) => Effect.Effect<PolicyDecision>)
  /** For `reattempt`: the delay before the next attempt (default none). */
  readonly wait?: Duration.Input | undefined
  /** For `reattempt`: consecutive reattempts allowed before `terminalAction` (default unlimited). */
  readonly maxReattempts?: number | undefined
  /** What happens once `maxReattempts` are spent (default pause). */
  readonly terminalAction?: "cancel" | "pause" | "skip" | undefined
  /** Default `always`; `terminal` skips a reattempt that still has attempts left. */
  readonly report?: ReportMode | undefined
}

// ---------------------------------------------------------------------------------------------
// The run and the step as the body sees them

/** What a body and its guards know about the run. */
export interface RunContext<P> {
  /** The run's id. */
  readonly workflowId: string
  readonly workflow: string
  readonly subject: string | undefined
  readonly resourceId: string | undefined
  readonly payload: P
  /** The slot its schedule fired for, for a run the workflow's schedule started (else undefined). */
  readonly schedule?: { readonly timestamp: Date } | undefined
}

/**
 * What code inside a step knows: the run, the step, the attempt, and a key stable across
 * attempts for the step's side effects.
 *
 * @category services
 */
export class StepContext extends Context.Service<
  StepContext,
  {
    readonly workflowId: string
    readonly workflow: string
    readonly subject: string | undefined
    readonly resourceId: string | undefined
    readonly payload: unknown
    readonly step: string
    readonly attempt: number
    /** `pgbus-wf:<workflow id>:<step>`: the same on every attempt of the step. */
    readonly stepIdempotencyKey: string
    /** `<stepIdempotencyKey>:<attempt>`. */
    readonly attemptIdempotencyKey: string
    /** The signal this attempt runs with (a `waitFor` step), decoded with its Schema when declared. */
    readonly signal: ReceivedSignal | undefined
    /** True when the attempt runs because its wait timed out (`onTimeout: "run"`). */
    readonly timedOut: boolean
  }
>()("effect-pgbus/Workflow/StepContext") {}

/** Options of a step. Checked when the body reaches the step. */
export interface StepOptions<A> {
  /** Delay after the previous step (for the first step: after the start). */
  readonly wait?: Duration.Input | undefined
  /** Skips the step when it succeeds with true; runs under the run's row lock. */
  readonly skipIf?: ((run: RunContext<unknown>) => Effect.Effect<boolean, unknown, unknown>) | undefined
  /** Longest run of one attempt: a longer one fails with `StepTimeout`. */
  readonly timeout?: Duration.Input | undefined
  /** Queue of this step's message. */
  readonly queue?: string | undefined
  /** Priority sub-queue of this step's message (when priorities are on). */
  readonly priority?: number | undefined
  /** The step's own exception policies, tried first. */
  readonly onError?: ReadonlyArray<ErrorPolicy> | undefined
  /** Schema of the output: encoded when stored, decoded on replay (default: JSON as is). */
  readonly output?: Schema.ConstraintCodec<A, unknown> | undefined
  /** Absolute due time (a timer): the step runs at `at`, not after `wait`. */
  readonly at?: Date | undefined
  /** Wait for a signal before the body runs: its name, or a matcher. */
  readonly waitFor?: string | SignalMatcher | undefined
  /**
   * Deadline of the wait, from when the step parks: a duration, or a function of the run giving a
   * duration, a Date (the deadline itself) or undefined (no deadline this attempt).
   */
  readonly waitTimeout?: WaitTimeout | undefined
  /** What happens when the wait's deadline passes (default pause). */
  readonly onTimeout?: OnTimeout | undefined
}

/** A signal as a step receives it. */
export interface ReceivedSignal {
  readonly id: string
  readonly name: string
  readonly payload: unknown
}

/** Options of `waitForSignal`. */
export interface WaitForSignalOptions {
  /** The step's name (default `wait:<signal>`); needed to wait for the same signal twice. */
  readonly step?: string | undefined
  /** Deadline of the wait. */
  readonly timeout?: WaitTimeout | undefined
  readonly onTimeout?: OnTimeout | undefined
  readonly skipIf?: StepOptions<unknown>["skipIf"]
  readonly onError?: ReadonlyArray<ErrorPolicy> | undefined
  readonly queue?: string | undefined
  /** Schema of the payload as stored for replay (set by the body's typed `waitForSignal`). */
  readonly output?: Schema.ConstraintCodec<unknown, unknown> | undefined
}

/** What a wait does when its deadline passes. */
export type OnTimeout = "pause" | "cancel" | "skip" | "run" | "notify"

/** A wait's deadline: static, or per run. */
export type WaitTimeout =
  | Duration.Input
  | ((run: RunContext<unknown>) => Effect.Effect<Duration.Input | Date | undefined, unknown, unknown>)

/**
 * A signal matcher: a signal name plus a predicate on the payload (decoded with `schema` when
 * given). Matchers run under the run's row lock: keep them fast and free of side effects.
 *
 * @category models
 */
export interface SignalMatcher<out T = unknown> {
  readonly name: string
  readonly schema?: Schema.ConstraintCodec<unknown, unknown> | undefined
  readonly matches?: ((payload: unknown) => boolean) | undefined
  /** Type-level only: the payload a matched signal gives. */
  readonly "~payload"?: T | undefined
}

/** Declared signals of a workflow: a Schema for the payload, or a matcher. */
export type SignalDeclarations = Readonly<Record<string, Schema.ConstraintCodec<unknown, unknown> | SignalMatcher>>

/** Whether a signal declaration is a matcher (else it is a Schema). */
export const isSignalMatcher = (u: unknown): u is SignalMatcher =>
  typeof u === "object" &&
  u !== null &&
  "name" in u &&
  typeof (u as { name: unknown }).name === "string" &&
  !Schema.isSchema(u)

/** The payload type of signal `K` under declarations `S` (`unknown` when undeclared). */
export type SignalPayload<S, K extends string> = K extends keyof S
  ? S[K] extends { readonly Type: infer T }
    ? T
    : S[K] extends SignalMatcher<infer T>
      ? T
      : unknown
  : unknown

/**
 * The signal readers of a step (`Workflow.woken`, `Workflow.signalReady`), provided while its
 * guards and body run.
 *
 * @category services
 */
export class SignalReaders extends Context.Service<
  SignalReaders,
  {
    /** The attempt holds a signal before its gate (woken by a signal, or kept from an earlier attempt). */
    readonly woken: boolean
    /** The gate runs this attempt with a signal: one it holds, or a pending one its matcher takes. */
    readonly signalReady: boolean
  }
>()("effect-pgbus/Workflow/SignalReaders") {}

/** What a child step needs of the child's definition: its name, payload Schema and queue. */
export interface ChildDefinition {
  readonly name: string
  readonly payload: Schema.ConstraintCodec<unknown, unknown>
  readonly version?: string | undefined
  readonly queue?: string | undefined
  readonly singleton?: boolean | undefined
  readonly priority?: number | undefined
}

/** A job a fan-out step adds to its batch. */
export interface FanOutMember {
  readonly job: AnyJob
  readonly payload: unknown
  readonly options: EnqueueOptions & { readonly key?: string | undefined }
}

/** What a fan-out step gives once its batch finished (`batchId` null: nothing was added). */
export interface FanOutResult {
  readonly batchId: string | null
  readonly totalJobs: number
  readonly completedJobs: number
  readonly failedJobs: number
}

/** The options of a fan-out step. */
export interface FanOutOptions {
  /** What a batch with dead-lettered members does: pause (default), cancel or skip. */
  readonly onBatchFailure?: "pause" | "cancel" | "skip" | undefined
  /** The step's own exception policies (after the batch-failure policy). */
  readonly onError?: ReadonlyArray<ErrorPolicy> | undefined
  /** The queue of the step's messages and of its batch's callback. */
  readonly queue?: string | undefined
}

/** The options of a child workflow step (`Workflow.child`). */
export interface ChildOptions {
  /** The child run's subject (one ongoing run per workflow and subject: a clash fails the step with `AlreadyRunning`). */
  readonly subject?: string | undefined
  /** The child run's resource id (default: the parent run's). */
  readonly resourceId?: string | undefined
  /** Schema of the child's output: decoded when the child finished, stored encoded on the parent's step. */
  readonly output?: Schema.ConstraintCodec<unknown, unknown> | undefined
  /**
   * What a pause of the child does: `wait` (default) keeps the parent waiting until the child
   * is resumed and ends; `fail` raises `ChildWorkflowFailed` into the parent's policies (an
   * operator's pause of the child always waits).
   */
  readonly onChildPause?: "wait" | "fail" | undefined
  /** The step's own exception policies (`ChildWorkflowFailed`, `AlreadyRunning`, ...). */
  readonly onError?: ReadonlyArray<ErrorPolicy> | undefined
}

/** Flow-control verbs a body can call. */
export type ControlVerb =
  | { readonly _tag: "pause"; readonly reason?: string | undefined }
  | { readonly _tag: "cancel"; readonly reason?: string | undefined }
  | { readonly _tag: "reattempt"; readonly wait?: Duration.Input | undefined }
  | { readonly _tag: "skip" }
  | { readonly _tag: "finish" }

/**
 * The engine's side of a running body: each durable operation asks it what to do. Provided by
 * the runner; a body run anywhere else has none.
 *
 * @category services
 */
export class WorkflowRuntime extends Context.Service<
  WorkflowRuntime,
  {
    readonly step: <A, E, R>(
      name: string,
      effect: Effect.Effect<A, E, R>,
      options: StepOptions<A>
    ) => Effect.Effect<A | undefined, never, R>
    /** A durable timer: a step that does nothing, due after `wait` or at `at`. */
    readonly sleep: (
      name: string,
      until: { readonly wait: Duration.Input } | { readonly at: Date }
    ) => Effect.Effect<void>
    /** A step that takes a signal at its gate, or parks until one comes (or its deadline passes). */
    readonly waitForSignal: (signal: string | SignalMatcher, options: WaitForSignalOptions) => Effect.Effect<unknown>
    readonly control: (verb: ControlVerb) => Effect.Effect<never>
    readonly patched: (id: string) => Effect.Effect<boolean>
    readonly poll: <A, E, R>(
      name: string,
      check: Effect.Effect<Option.Option<A>, E, R>,
      options: {
        readonly interval?: Duration.Input | undefined
        readonly timeout?: Duration.Input | undefined
        readonly output?: Schema.ConstraintCodec<unknown, unknown> | undefined
      }
    ) => Effect.Effect<{ readonly timedOut: false; readonly data: A } | { readonly timedOut: true }, never, R>
    readonly fanOut: <E, R>(
      name: string,
      build: (add: (member: FanOutMember) => Effect.Effect<void>) => Effect.Effect<unknown, E, R>,
      options: FanOutOptions
    ) => Effect.Effect<FanOutResult | undefined, never, R>
    readonly child: (
      name: string,
      workflow: ChildDefinition,
      input: unknown,
      options: ChildOptions
    ) => Effect.Effect<unknown, never, never>
  }
>()("effect-pgbus/Workflow/WorkflowRuntime") {}
