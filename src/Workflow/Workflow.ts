/**
 * Workflow definitions: an Effect generator whose yielded steps are durable. A run replays the
 * body from the top at each execution; completed steps return their stored output without
 * running; the step whose turn it is runs; a step that must wait ends the execution.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Exit, type Option, Result, Schema } from "effect"
import { isStorableText } from "../internal/storable.ts"
import type { AnyJob, Job } from "../Job/Job.ts"
import type { EnqueueOptions } from "../Job/JobClient.ts"
import { type BoundClient, bindClient, checkRunOptions, type Ref } from "./Ref.ts"
import {
  type ChildDefinition,
  type ChildOptions,
  type ErrorPolicy,
  type FanOutOptions,
  type FanOutResult,
  isSignalMatcher,
  type RunContext,
  type SignalDeclarations,
  type SignalMatcher,
  type SignalPayload,
  SignalReaders,
  StepContext,
  type StepOptions,
  type WaitForSignalOptions,
  WorkflowRuntime
} from "./Runtime.ts"
import { type ParsedSchedule, parseWorkflowSchedule, type ScheduleInput } from "./Schedule.ts"
import { InvalidWorkflowDefinition, NotInStep } from "./WorkflowError.ts"

export {
  type ChildOptions,
  type ControlVerb,
  type ErrorMatcher,
  type ErrorPolicy,
  type FanOutOptions,
  type FanOutResult,
  type OnTimeout,
  type PolicyAction,
  type PolicyDecision,
  type ReceivedSignal,
  type ReportMode,
  type RunContext,
  type SignalDeclarations,
  type SignalMatcher,
  type SignalPayload,
  StepContext,
  type StepOptions,
  type WaitForSignalOptions,
  type WaitTimeout,
  WorkflowRuntime
} from "./Runtime.ts"

// ---------------------------------------------------------------------------------------------
// Definitions

/** Options of `Workflow.make`. */
export interface WorkflowOptions<P, RG, S extends SignalDeclarations = SignalDeclarations> {
  /** Schema of the payload: encoded at start, decoded for every execution. */
  readonly payload: Schema.ConstraintCodec<P, unknown>
  /** The version the author declares; recorded on each run. */
  readonly version?: string | undefined
  /** Queue of the run's step messages (default: the config's `workflowQueue`). */
  readonly queue?: string | undefined
  /** Runs before every step, under the run's row lock; true cancels the run. */
  readonly cancelIf?: ((run: RunContext<P>) => Effect.Effect<boolean, unknown, RG>) | undefined
  /** Workflow-level exception policies (after the step's own). */
  readonly onError?: ReadonlyArray<ErrorPolicy> | undefined
  /** The signals the workflow takes: a Schema for each payload (typed, validated when sent), or a matcher. */
  readonly signals?: S | undefined
  /** At most one ready, performing or waiting run: another start fails with `SingletonRunInProgress`. */
  readonly singleton?: boolean | undefined
  /** Priority sub-queue of the runs' messages (0 highest; a start may give its own), when priorities are on. */
  readonly priority?: number | undefined
  /** Start a run on a schedule: cron, a macro or phrase, or a duration that divides the day ("5m", `{ hours: 1 }`). */
  readonly schedule?: ScheduleInput | undefined
  /** IANA time zone of a cron schedule (default UTC). */
  readonly timezone?: string | undefined
  /** The payload of the runs the schedule starts (default `{}`), checked against `payload` here. */
  readonly schedulePayload?: P | undefined
}

/**
 * What a workflow's body receives: the run, and `waitForSignal` typed by the workflow's
 * declared signals.
 *
 * @category models
 */
export interface WorkflowRun<P, S extends SignalDeclarations = SignalDeclarations> extends RunContext<P> {
  /** `Workflow.waitForSignal`, its payload typed (and decoded on replay) by the declaration. */
  readonly waitForSignal: <const K extends string, const O extends WaitForSignalOptions = {}>(
    signal: K,
    options?: O
  ) => Effect.Effect<
    O["onTimeout"] extends "run" | "skip" ? SignalPayload<S, K> | undefined : SignalPayload<S, K>,
    never,
    WorkflowRuntime
  >
}

const TypeId = "~effect-pgbus/Workflow"

/**
 * A workflow definition.
 *
 * @category models
 */
export interface Workflow<
  out Name extends string,
  in out P,
  out A = unknown,
  out E = unknown,
  out R = never,
  in out S extends SignalDeclarations = SignalDeclarations
> extends BoundClient<P, S> {
  readonly [TypeId]: typeof TypeId
  readonly name: Name
  readonly payload: Schema.ConstraintCodec<P, unknown>
  readonly version: string | undefined
  readonly queue: string | undefined
  readonly cancelIf: ((run: RunContext<P>) => Effect.Effect<boolean, unknown, R>) | undefined
  readonly onError: ReadonlyArray<ErrorPolicy>
  readonly signals: S
  readonly singleton: boolean
  readonly priority: number | undefined
  /** The schedule, parsed, and the payload of its runs; undefined when the workflow has none. */
  readonly schedule: WorkflowSchedule | undefined
  readonly body: (run: RunContext<P>) => Effect.Effect<A, E, R | WorkflowRuntime>
}

/** Any workflow, for registries. */
export interface AnyWorkflow {
  readonly [TypeId]: typeof TypeId
  readonly name: string
  readonly payload: Schema.ConstraintCodec<unknown, unknown>
  readonly version: string | undefined
  readonly queue: string | undefined
  readonly cancelIf: ((run: RunContext<never>) => Effect.Effect<boolean, unknown, unknown>) | undefined
  readonly onError: ReadonlyArray<ErrorPolicy>
  readonly signals: SignalDeclarations
  readonly singleton: boolean
  readonly priority: number | undefined
  readonly schedule: WorkflowSchedule | undefined
  readonly body: (run: RunContext<never>) => Effect.Effect<unknown, unknown, unknown>
}

/** A workflow's schedule: parsed, with the payload its runs get (as given, checked). */
export interface WorkflowSchedule {
  readonly parsed: ParsedSchedule
  readonly payload: unknown
}

/** Whether a value is a workflow definition. */
export const isWorkflow = (u: unknown): u is AnyWorkflow => typeof u === "object" && u !== null && TypeId in u

const NAME = /^[A-Za-z][A-Za-z0-9_.:-]{0,127}$/
const QUEUE = /^[a-z][a-z0-9_]*$/

const checkDuration = (value: Duration.Input | undefined, what: string, allowZero: boolean): string | undefined => {
  if (value === undefined) return undefined
  const d = Duration.fromInput(value)
  if (d._tag === "None" || !Duration.isFinite(d.value)) return `${what} must be a finite duration`
  if (Duration.isNegative(d.value) || (!allowZero && Duration.isZero(d.value))) {
    return `${what} must be ${allowZero ? "zero or more" : "positive"}`
  }
  return undefined
}

/** Checks exception policies; the reason when invalid. */
export const checkPolicies = (policies: ReadonlyArray<ErrorPolicy>, where: string): string | undefined => {
  const allowed = new Set(["match", "action", "wait", "maxReattempts", "terminalAction", "report"])
  for (const policy of policies) {
    for (const key of Object.keys(policy)) if (!allowed.has(key)) return `${where}: unknown policy option ${key}`
    if (typeof policy.action === "string" && !["reattempt", "cancel", "pause", "skip"].includes(policy.action)) {
      return `${where}: unknown action ${policy.action}`
    }
    const wait = checkDuration(policy.wait, `${where}: wait`, true)
    if (wait) return wait
    if (policy.maxReattempts !== undefined && (!Number.isInteger(policy.maxReattempts) || policy.maxReattempts < 0)) {
      return `${where}: maxReattempts must be an integer of at least 0`
    }
    if (policy.terminalAction !== undefined && !["cancel", "pause", "skip"].includes(policy.terminalAction)) {
      return `${where}: terminalAction must be cancel, pause or skip`
    }
    if (policy.report !== undefined && !["always", "never", "terminal"].includes(policy.report)) {
      return `${where}: report must be always, never or terminal`
    }
  }
  return undefined
}

/** Checks a step's name and options; the reason when invalid. */
export const checkStep = (name: string, options: StepOptions<unknown>): string | undefined => {
  if (typeof name !== "string" || name.length === 0 || name.length > 200) {
    return "a step name must be a non-empty string of at most 200 characters"
  }
  if (!isStorableText(name)) {
    return `step ${JSON.stringify(name)}: a step name must not hold a NUL character or a lone surrogate (PostgreSQL cannot store them)`
  }
  if (name.startsWith("patch:")) return `step ${name}: names starting with "patch:" are reserved`
  const allowed = new Set([
    "wait",
    "skipIf",
    "timeout",
    "queue",
    "priority",
    "onError",
    "output",
    "at",
    "waitFor",
    "waitTimeout",
    "onTimeout"
  ])
  for (const key of Object.keys(options)) if (!allowed.has(key)) return `step ${name}: unknown option ${key}`
  const wait = checkDuration(options.wait, `step ${name}: wait`, true)
  if (wait) return wait
  const timeout = checkDuration(options.timeout, `step ${name}: timeout`, false)
  if (timeout) return timeout
  if (options.queue !== undefined && !QUEUE.test(options.queue)) {
    return `step ${name}: queue must use lowercase letters, digits and underscores`
  }
  if (options.priority !== undefined && (!Number.isInteger(options.priority) || options.priority < 0)) {
    return `step ${name}: priority must be an integer of at least 0`
  }
  if (options.at !== undefined && (!(options.at instanceof Date) || Number.isNaN(options.at.getTime()))) {
    return `step ${name}: at must be a valid Date`
  }
  if (options.at !== undefined && options.wait !== undefined) return `step ${name}: give wait or at, not both`
  if (options.onTimeout !== undefined && !["pause", "cancel", "skip", "run", "notify"].includes(options.onTimeout)) {
    return `step ${name}: onTimeout must be pause, cancel, skip, run or notify`
  }
  if ((options.waitTimeout !== undefined || options.onTimeout !== undefined) && options.waitFor === undefined) {
    return `step ${name}: waitTimeout and onTimeout need waitFor`
  }
  if (options.waitTimeout !== undefined && typeof options.waitTimeout !== "function") {
    const invalid = checkDuration(options.waitTimeout, `step ${name}: waitTimeout`, false)
    if (invalid) return invalid
  }
  if (options.waitFor !== undefined) {
    const waitName = typeof options.waitFor === "string" ? options.waitFor : options.waitFor.name
    if (typeof waitName !== "string" || waitName.length === 0) return `step ${name}: waitFor needs a signal name`
    if (!isStorableText(waitName)) {
      return `step ${name}: the signal name must not hold a NUL character or a lone surrogate`
    }
  }
  return options.onError === undefined ? undefined : checkPolicies(options.onError, `step ${name}`)
}

/** The definition's schedule checked (cron or duration, zone, payload), or the reason it is wrong. */
const checkSchedule = <P>(
  options: WorkflowOptions<P, unknown, SignalDeclarations>
): WorkflowSchedule | undefined | string => {
  if (options.schedule === undefined) {
    if (options.timezone !== undefined || options.schedulePayload !== undefined) {
      return "timezone and schedulePayload need a schedule"
    }
    return undefined
  }
  const parsed = parseWorkflowSchedule(options.schedule, options.timezone)
  if (Result.isFailure(parsed)) return `schedule: ${parsed.failure}`
  const payload = options.schedulePayload ?? {}
  const encoded = Schema.encodeUnknownExit(options.payload as Schema.Codec<unknown, unknown>)(payload)
  if (!Exit.isSuccess(encoded)) {
    return "the schedule's runs need a payload the Schema takes: give schedulePayload (the default {} does not fit)"
  }
  return { parsed: parsed.success, payload }
}

/**
 * Defines a workflow. The body is an Effect generator; `Workflow.step` inside it is durable.
 * Throws `InvalidWorkflowDefinition` where it is written for a bad name or option.
 */
export const make = <
  const Name extends string,
  P,
  Eff extends Effect.Effect<unknown, unknown, unknown>,
  A,
  RG = never,
  const S extends SignalDeclarations = {}
>(
  name: Name,
  options: WorkflowOptions<P, RG, S>,
  body: (run: WorkflowRun<P, S>) => Generator<Eff, A, never>
): Workflow<
  Name,
  P,
  A,
  [Eff] extends [never] ? never : [Eff] extends [Effect.Effect<infer _A, infer E, infer _R>] ? E : never,
  | Exclude<
      [Eff] extends [never] ? never : [Eff] extends [Effect.Effect<infer _A, infer _E, infer R>] ? R : never,
      WorkflowRuntime
    >
  | RG,
  S
> => {
  const fail = (reason: string) => {
    throw new InvalidWorkflowDefinition({ workflow: name, reason })
  }
  if (!NAME.test(name)) fail("the name must start with a letter and use letters, digits, _ . : - (at most 128)")
  const allowed = new Set([
    "payload",
    "version",
    "queue",
    "cancelIf",
    "onError",
    "signals",
    "singleton",
    "priority",
    "schedule",
    "timezone",
    "schedulePayload"
  ])
  for (const key of Object.keys(options)) if (!allowed.has(key)) fail(`unknown option ${key}`)
  const problem = checkRunOptions(options)
  if (problem !== undefined) fail(problem)
  const schedule = checkSchedule(options)
  if (typeof schedule === "string") fail(schedule)
  if (options.queue !== undefined && !QUEUE.test(options.queue)) {
    fail("queue must use lowercase letters, digits and underscores")
  }
  if (options.version !== undefined && (typeof options.version !== "string" || options.version.length > 100)) {
    fail("version must be a string of at most 100 characters")
  }
  const policies = options.onError ?? []
  const invalid = checkPolicies(policies, "onError")
  if (invalid) fail(invalid)
  const fields = {
    name,
    payload: options.payload,
    version: options.version,
    queue: options.queue,
    signals: (options.signals ?? {}) as S,
    singleton: options.singleton ?? false,
    priority: options.priority
  }
  const definition = {
    [TypeId]: TypeId as typeof TypeId,
    ...fields,
    cancelIf: options.cancelIf as never,
    onError: policies,
    schedule: schedule as WorkflowSchedule | undefined,
    body: (run: RunContext<P>) =>
      Effect.gen(() => body({ ...run, waitForSignal: typedWait(options.signals ?? {}) as never })) as never,
    ...bindClient(fields)
  }
  return definition
}

export { checkRunOptions, isRef, type Ref, type RefOptions, ref } from "./Ref.ts"

/** What `implement` adds to a ref: every option but those the ref fixes. */
export type ImplementOptions<P, RG> = Omit<
  WorkflowOptions<P, RG>,
  "payload" | "signals" | "version" | "queue" | "singleton" | "priority"
>

/**
 * The full definition of a ref (in the worker that runs it): the ref's name, Schemas and run
 * options, with the body and the options only a worker needs (schedule, cancelIf, onError).
 * Throws `InvalidWorkflowDefinition` for an option the ref fixes.
 */
export const implement = <
  const Name extends string,
  P,
  Eff extends Effect.Effect<unknown, unknown, unknown>,
  A,
  RG = never,
  const S extends SignalDeclarations = {}
>(
  ref: Ref<Name, P, S>,
  options: ImplementOptions<P, RG>,
  body: (run: WorkflowRun<P, S>) => Generator<Eff, A, never>
) => {
  for (const key of ["payload", "signals", "version", "queue", "singleton", "priority"]) {
    if (key in options) throw new InvalidWorkflowDefinition({ workflow: ref.name, reason: `${key} is set on the ref` })
  }
  return make<Name, P, Eff, A, RG, S>(
    ref.name,
    {
      ...options,
      payload: ref.payload,
      signals: ref.signals,
      ...(ref.version === undefined ? {} : { version: ref.version }),
      ...(ref.queue === undefined ? {} : { queue: ref.queue }),
      ...(ref.singleton ? { singleton: true } : {}),
      ...(ref.priority === undefined ? {} : { priority: ref.priority })
    },
    body
  )
}

/**
 * A durable step: runs `effect` once per attempt and stores its output; on replay returns the
 * stored output. With `skipIf`, a skipped step gives `undefined`.
 */
export function step<A, E, R>(
  name: string,
  effect: Effect.Effect<A, E, R>,
  options: StepOptions<A> & { readonly skipIf: NonNullable<StepOptions<A>["skipIf"]> } & OutputFor<A>
): Effect.Effect<A | undefined, never, Exclude<R, StepContext> | WorkflowRuntime>
export function step<A, E, R>(
  name: string,
  effect: Effect.Effect<A, E, R>,
  ...options: OptionsFor<A>
): Effect.Effect<A, never, Exclude<R, StepContext> | WorkflowRuntime>
export function step<A, E, R>(
  name: string,
  effect: Effect.Effect<A, E, R>,
  options: StepOptions<A> = {}
): Effect.Effect<A | undefined, never, Exclude<R, StepContext> | WorkflowRuntime> {
  // the runtime provides the StepContext to the step
  return WorkflowRuntime.use((runtime) => runtime.step(name, effect, options)) as Effect.Effect<
    A | undefined,
    never,
    Exclude<R, StepContext> | WorkflowRuntime
  >
}

/**
 * What a step without an `output` Schema may return: a value JSON gives back the same (it is
 * stored as JSON and read back on replay). A `Date`, a `bigint`, a `Map` or a `Set` turns into a
 * message naming the cure, which the compiler shows as the constraint the output misses; a class
 * instance passes the types (it looks like a plain object) and fails at run time (`OutputNotJson`).
 */
export type JsonSafe<A> = A extends Date
  ? "a Date does not survive JSON: declare the step's output Schema (Schema.DateFromString)"
  : A extends bigint
    ? "a bigint does not survive JSON: declare the step's output Schema (Schema.BigIntFromString)"
    : A extends ReadonlyMap<unknown, unknown> | ReadonlySet<unknown>
      ? "a Map or Set does not survive JSON: declare the step's output Schema"
      : A extends symbol | ((...args: never) => unknown)
        ? "a function or symbol does not survive JSON"
        : A extends ReadonlyArray<unknown>
          ? { readonly [K in keyof A]: JsonSafe<A[K]> }
          : A extends object
            ? { readonly [K in keyof A]: JsonSafe<A[K]> }
            : A

/** A step output that is not `JsonSafe` needs an `output` Schema: the options must name one. */
type OutputFor<A> = [A] extends [JsonSafe<A>] ? unknown : { readonly output: Schema.ConstraintCodec<A, unknown> }

/** The options argument of a step: optional for a JSON-safe output, else required with its `output` Schema. */
type OptionsFor<A> = [A] extends [JsonSafe<A>]
  ? [options?: StepOptions<A>]
  : [options: StepOptions<A> & { readonly output: Schema.ConstraintCodec<A, unknown> }]

/** Ends the step and pauses the run after it (the step completes). */
export const pause = (reason?: string): Effect.Effect<never, never, WorkflowRuntime> =>
  WorkflowRuntime.use((runtime) => runtime.control({ _tag: "pause", reason }))

/** Cancels the run. */
export const cancel = (reason?: string): Effect.Effect<never, never, WorkflowRuntime> =>
  WorkflowRuntime.use((runtime) => runtime.control({ _tag: "cancel", reason }))

/** Fails this attempt of the step and schedules a new one after `wait`. */
export const reattempt = (
  options: { readonly wait?: Duration.Input } = {}
): Effect.Effect<never, never, WorkflowRuntime> =>
  WorkflowRuntime.use((runtime) => runtime.control({ _tag: "reattempt", wait: options.wait }))

/** Skips the step; the run moves on. */
export const skip = (): Effect.Effect<never, never, WorkflowRuntime> =>
  WorkflowRuntime.use((runtime) => runtime.control({ _tag: "skip" }))

/** Completes the step and finishes the run now. */
export const finish = (): Effect.Effect<never, never, WorkflowRuntime> =>
  WorkflowRuntime.use((runtime) => runtime.control({ _tag: "finish" }))

/**
 * A durable branch for changed code: true for runs that reach it new, false for runs whose
 * recorded history took the old path. Keep the branch until no run recorded the old path.
 */
export const patched = (id: string): Effect.Effect<boolean, never, WorkflowRuntime> =>
  WorkflowRuntime.use((runtime) => runtime.patched(id))

/** The step's context (inside a step). */
export const context: Effect.Effect<StepContext["Service"], never, StepContext> = StepContext.use(Effect.succeed)

/** The step's idempotency key, stable across attempts (inside a step). */
export const stepIdempotencyKey: Effect.Effect<string, never, StepContext> = StepContext.use((c) =>
  Effect.succeed(c.stepIdempotencyKey)
)

/** A signal matcher: the signal's name, an optional payload Schema and a predicate. */
export const signalMatcher = <S extends Schema.ConstraintCodec<unknown, unknown>>(
  name: string,
  options: { readonly schema?: S; readonly matches: (payload: S["Type"]) => boolean }
): SignalMatcher<S["Type"]> => ({
  name,
  ...(options.schema ? { schema: options.schema } : {}),
  matches: options.matches as (payload: unknown) => boolean
})

const reader = (name: "woken" | "signalReady"): Effect.Effect<boolean, NotInStep> =>
  Effect.flatMap(Effect.serviceOption(SignalReaders), (readers) =>
    readers._tag === "Some" ? Effect.succeed(readers.value[name]) : Effect.fail(new NotInStep({ reader: name }))
  )

/**
 * True when this attempt holds a signal before its gate (a signal woke the step, or an earlier
 * attempt took one). One answer for the whole attempt; fails with `NotInStep` outside a step.
 */
export const woken: Effect.Effect<boolean, NotInStep> = reader("woken")

/**
 * True when the gate runs this attempt with a signal: one the step holds, or a pending one its
 * matcher takes. One answer for the whole attempt; fails with `NotInStep` outside a step.
 */
export const signalReady: Effect.Effect<boolean, NotInStep> = reader("signalReady")

/** `waitForSignal` bound to declarations: the declared Schema decodes the stored payload on replay. */
const typedWait =
  (declarations: SignalDeclarations) =>
  (signal: string, options: WaitForSignalOptions = {}): Effect.Effect<unknown, never, WorkflowRuntime> => {
    const declared = declarations[signal]
    const schema = declared === undefined ? undefined : isSignalMatcher(declared) ? declared.schema : declared
    return waitForSignal(signal, schema === undefined ? options : { ...options, output: schema })
  }

/**
 * Waits for a signal (a name, or a matcher) and gives its payload: a durable step that parks
 * and holds no worker until the signal comes. Gives undefined when the wait timed out with
 * `onTimeout: "run"` or was skipped.
 */
export const waitForSignal = (
  signal: string | SignalMatcher,
  options: WaitForSignalOptions = {}
): Effect.Effect<unknown, never, WorkflowRuntime> =>
  WorkflowRuntime.use((runtime) => runtime.waitForSignal(signal, options))

/** A durable timer: the run sleeps `duration`, holding no worker. */
export const sleep = (name: string, duration: Duration.Input): Effect.Effect<void, never, WorkflowRuntime> =>
  WorkflowRuntime.use((runtime) => runtime.sleep(name, { wait: duration }))

/** A durable timer: the run waits until `date` (a past date goes on at once), holding no worker. */
export const waitUntil = (name: string, date: Date): Effect.Effect<void, never, WorkflowRuntime> =>
  WorkflowRuntime.use((runtime) => runtime.sleep(name, { at: date }))

/** What a fan-out step's body adds its jobs with. */
export interface FanOutBuilder {
  /**
   * Adds a job to the step's batch. Its `pgbus_idempotency_key` header is the step's
   * `stepIdempotencyKey` plus `key` (default: its position), the same on every attempt.
   */
  readonly add: <P>(
    job: Job<string, P, unknown, unknown, unknown>,
    payload: P,
    options?: EnqueueOptions & { readonly key?: string | undefined }
  ) => Effect.Effect<void>
}

/**
 * A fan-out step: `build` adds jobs; when it returns, one batch opens with them and the step
 * and the run wait (holding no worker) until the batch finishes. With no dead-lettered member
 * the step completes with the counts; with any, `onBatchFailure` applies (pause by default,
 * with `FanOutFailed`). Nothing added: the step completes at once.
 */
export const fanOut = <E, R, const O extends FanOutOptions = {}>(
  name: string,
  build: (builder: FanOutBuilder) => Effect.Effect<unknown, E, R>,
  options?: O
): Effect.Effect<
  O["onBatchFailure"] extends "skip" ? FanOutResult | undefined : FanOutResult,
  never,
  Exclude<R, StepContext> | WorkflowRuntime
> =>
  WorkflowRuntime.use((runtime) =>
    runtime.fanOut(
      name,
      (add) =>
        build({
          add: (job, payload, addOptions = {}) => add({ job: job as AnyJob, payload, options: addOptions })
        }),
      options ?? {}
    )
  ) as never

/** What a poll gives. */
export type PollResult<A> = { readonly timedOut: false; readonly data: A } | { readonly timedOut: true }

/** Options of `poll`. */
export interface PollOptions {
  /** Time between checks (default 30 seconds). */
  readonly interval?: Duration.Input | undefined
  /** Gives `{ timedOut: true }` once this long has passed since the first check. */
  readonly timeout?: Duration.Input | undefined
  readonly output?: Schema.ConstraintCodec<unknown, unknown> | undefined
}

/**
 * Checks on an interval until `check` gives a value (`Option.some`), holding no worker between
 * checks; gives `{ timedOut: false, data }`, or `{ timedOut: true }` after `timeout`.
 */
export const poll = <A, E, R>(
  name: string,
  check: Effect.Effect<Option.Option<A>, E, R>,
  options: PollOptions = {}
): Effect.Effect<PollResult<A>, never, Exclude<R, StepContext> | WorkflowRuntime> =>
  WorkflowRuntime.use((runtime) => runtime.poll(name, check, options)) as Effect.Effect<
    PollResult<A>,
    never,
    Exclude<R, StepContext> | WorkflowRuntime
  >

/** What a child step gives: the child's output, decoded by `output` when given; undefined when a policy skips the step. */
export type ChildResult<A, O extends ChildOptions> =
  | (O["output"] extends Schema.ConstraintCodec<infer T, unknown> ? T : JsonSafe<A>)
  | (O["onError"] extends ReadonlyArray<ErrorPolicy> ? undefined : never)

/**
 * A child workflow step: starts a run of `workflow` with `input` (once per step: a replay or a
 * retry finds the child it started), waits holding no worker until the child ends, and gives its
 * output. A child that ends cancelled (or pauses, with `onChildPause: "fail"`) fails the step
 * with `ChildWorkflowFailed`, and the parent's policies decide (default pause). A child whose
 * input does not encode, or that this process has not registered, fails the step before any
 * child is written (`InvalidWorkflowPayload`, `WorkflowNotRegistered`).
 */
export const child = <Name extends string, P, A, E, R, S extends SignalDeclarations, const O extends ChildOptions = {}>(
  name: string,
  workflow: Workflow<Name, P, A, E, R, S>,
  input: P,
  options?: O
): Effect.Effect<ChildResult<A, O>, never, WorkflowRuntime> =>
  WorkflowRuntime.use((runtime) =>
    runtime.child(name, workflow as unknown as ChildDefinition, input, options ?? {})
  ) as Effect.Effect<ChildResult<A, O>, never, WorkflowRuntime>
