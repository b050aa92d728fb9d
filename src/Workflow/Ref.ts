/**
 * Handler-less workflow refs (seed 004's `WorkflowRef`): a workflow's name, payload and signal
 * Schemas and its run options, without its body. A web process imports the ref to start,
 * signal and query runs that worker processes execute, without importing the handlers (or
 * their dependencies); the worker builds the full definition from the same ref
 * (`Workflow.implement`), so the two cannot disagree.
 *
 * @since 0.1.0
 */
import type { Effect, Schema } from "effect"
import * as Input from "../Input.ts"
import type {
  CheckedWorkflowClient,
  ListOptions,
  RunHandle,
  RunPage,
  SignalOptions,
  SignalReceipt,
  StartOptions
} from "./Client.ts"
import { WorkflowClient } from "./Client.ts"
import type { SignalDeclarations, SignalPayload } from "./Runtime.ts"
import type { DatabaseError, InvalidInput, RunNotFound, SignalError, StartError } from "./WorkflowError.ts"
import { InvalidWorkflowDefinition } from "./WorkflowError.ts"

/** Options of `Workflow.ref`: what both sides need to agree on. */
export interface RefOptions<P, S extends SignalDeclarations = SignalDeclarations> {
  /** Schema of the payload: starts encode with it, the worker decodes with it. */
  readonly payload: Schema.ConstraintCodec<P, unknown>
  /** The signals the workflow takes (signals sent through the ref are validated against them). */
  readonly signals?: S | undefined
  readonly version?: string | undefined
  /** Queue of the run's step messages (default: the config's `workflowQueue`). */
  readonly queue?: string | undefined
  /** Starts through the ref are singleton (seed 004: set it on the ref, not only on the definition). */
  readonly singleton?: boolean | undefined
  /** Default priority sub-queue of the runs (0 highest). */
  readonly priority?: number | undefined
}

const RefTypeId = "~effect-pgbus/WorkflowRef"

/**
 * A workflow's ref: its name, Schemas and run options, and the client verbs bound to them.
 *
 * @category models
 */
export interface Ref<out Name extends string, in out P, in out S extends SignalDeclarations = SignalDeclarations>
  extends BoundClient<P, S> {
  readonly [RefTypeId]: typeof RefTypeId
  readonly name: Name
  readonly payload: Schema.ConstraintCodec<P, unknown>
  readonly signals: S
  readonly version: string | undefined
  readonly queue: string | undefined
  readonly singleton: boolean
  readonly priority: number | undefined
}

/** The client verbs bound to a workflow, as refs and definitions both have them (`bindClient`). */
export interface BoundClient<in out P, in out S extends SignalDeclarations> {
  /** Starts a run (joins the caller's transaction). */
  readonly start: (payload: P, options?: StartOptions) => Effect.Effect<RunHandle, StartError, WorkflowClient>
  /** Finds a run of this workflow by id. */
  readonly get: (
    id: string,
    options?: { readonly resourceId?: string | undefined }
  ) => Effect.Effect<RunHandle, RunNotFound | DatabaseError | InvalidInput, WorkflowClient>
  /** The subject's ongoing run of this workflow (else its latest). */
  readonly findBySubject: (
    subject: string
  ) => Effect.Effect<RunHandle, RunNotFound | DatabaseError | InvalidInput, WorkflowClient>
  /** This workflow's runs, newest first. */
  readonly list: (
    options?: Omit<ListOptions, "workflow">
  ) => Effect.Effect<RunPage, DatabaseError | InvalidInput, WorkflowClient>
  /** Sends a signal to a run by id (its payload typed and validated by the declared Schema). */
  readonly signal: <const K extends string>(
    runId: string,
    name: K,
    payload: SignalPayload<S, K>,
    options?: SignalOptions
  ) => Effect.Effect<SignalReceipt, SignalError | InvalidInput, WorkflowClient>
  /** Sends a signal to the subject's ongoing run; `missing: "ignore"` gives undefined when there is none. */
  readonly signalSubject: <const K extends string>(
    subject: string,
    name: K,
    payload: SignalPayload<S, K>,
    options?: SignalOptions & { readonly missing?: "raise" | "ignore" }
  ) => Effect.Effect<SignalReceipt | undefined, SignalError | InvalidInput, WorkflowClient>
}

/** Whether a value is a workflow ref. */
export const isRef = (u: unknown): u is Ref<string, unknown> => typeof u === "object" && u !== null && RefTypeId in u

/** What the client verbs need of a workflow: a ref or a full definition. */
interface Bindable<P, S extends SignalDeclarations> {
  readonly name: string
  readonly payload: Schema.ConstraintCodec<P, unknown>
  readonly signals: S
  readonly version: string | undefined
  readonly queue: string | undefined
  readonly singleton: boolean
  readonly priority: number | undefined
}

/** The client verbs bound to a workflow (shared by refs and definitions). */
export const bindClient = <P, S extends SignalDeclarations>(self: Bindable<P, S>) => {
  const use = <X, Err>(f: (client: CheckedWorkflowClient) => Effect.Effect<X, Err>) => WorkflowClient.use(f)
  return {
    start: (payload: P, startOptions?: StartOptions) => use((client) => client.start(self, payload, startOptions)),
    get: (id: string, getOptions?: { readonly resourceId?: string | undefined }) =>
      use((client) => client.get(id, getOptions)),
    findBySubject: (subject: string) => use((client) => client.findBySubject(self.name, subject)),
    list: (listOptions?: Omit<ListOptions, "workflow">) =>
      use((client) => client.list({ ...listOptions, workflow: self.name })),
    signal: <const K extends string>(
      runId: string,
      signalName: K,
      payload: SignalPayload<S, K>,
      signalOptions?: SignalOptions
    ) => use((client) => client.signal(runId, signalName, payload, { ...signalOptions, workflow: self })),
    signalSubject: <const K extends string>(
      subject: string,
      signalName: K,
      payload: SignalPayload<S, K>,
      signalOptions?: SignalOptions & { readonly missing?: "raise" | "ignore" }
    ) =>
      use((client) =>
        client.signalSubject(self.name, subject, signalName, payload, { ...signalOptions, workflow: self })
      )
  }
}

/** Checks `singleton` and `priority` (of a definition or a ref); the reason when invalid. */
export const checkRunOptions = (options: {
  readonly singleton?: unknown
  readonly priority?: unknown
}): string | undefined => {
  if (options.singleton !== undefined && typeof options.singleton !== "boolean") return "singleton must be a boolean"
  if (options.priority === undefined) return undefined
  return Input.intProblem(options.priority, 0, Input.INT4_MAX, "priority")
}

const NAME = /^[A-Za-z][A-Za-z0-9_.:-]{0,127}$/
const QUEUE = /^[a-z][a-z0-9_]*$/
const OPTIONS = new Set(["payload", "signals", "version", "queue", "singleton", "priority"])

/**
 * A handler-less ref to a workflow: import it where runs are started, signalled and queried;
 * build the definition from it where they run (`Workflow.implement(ref, options, body)`).
 * Throws `InvalidWorkflowDefinition` where it is written for a bad name or option.
 */
export const ref = <const Name extends string, P, const S extends SignalDeclarations = {}>(
  name: Name,
  options: RefOptions<P, S>
): Ref<Name, P, S> => {
  const fail = (reason: string): never => {
    throw new InvalidWorkflowDefinition({ workflow: String(name), reason })
  }
  if (typeof name !== "string" || !NAME.test(name)) {
    fail("the name must start with a letter and use letters, digits, _ . : - (at most 128)")
  }
  if (typeof options !== "object" || options === null) fail("options must be an object with a payload Schema")
  for (const key of Object.keys(options)) if (!OPTIONS.has(key)) fail(`unknown option ${key}`)
  if (options.payload === undefined) fail("a ref needs its payload Schema")
  if (options.queue !== undefined && !QUEUE.test(options.queue)) {
    fail("queue must use lowercase letters, digits and underscores")
  }
  if (options.version !== undefined && (typeof options.version !== "string" || options.version.length > 100)) {
    fail("version must be a string of at most 100 characters")
  }
  const problem = checkRunOptions(options)
  if (problem !== undefined) fail(problem)
  const fields = {
    name,
    payload: options.payload,
    signals: (options.signals ?? {}) as S,
    version: options.version,
    queue: options.queue,
    singleton: options.singleton ?? false,
    priority: options.priority
  }
  return { [RefTypeId]: RefTypeId, ...fields, ...bindClient(fields) }
}
