/**
 * The workflow client's entry-point checks (the rules of `Input.ts`): what the client is given
 * is refused with a typed error before any SQL, rather than as PostgreSQL's refusal (a NUL in
 * a reason), a silent change (a lone surrogate stored as U+FFFD) or a `TypeError` thrown from a
 * missing definition. `withInputChecks` wraps the client once; its run handles call through it.
 *
 * @since 0.1.0
 */
import { Effect, Exit, Schema } from "effect"
import * as Input from "../Input.ts"
import type { CheckedWorkflowClient, RunHandle, WorkflowClientShape } from "./Client.ts"
import { checkRunOptions } from "./Ref.ts"
import { InvalidSignal, InvalidWorkflowPayload } from "./WorkflowError.ts"

const START_TEXT = ["subject", "idempotencyKey", "resourceId", "actor", "reason"] as const
const START_OPTIONS = [...START_TEXT, "priority", "singleton", "scheduledFor"] as const
const VERB_OPTIONS = ["actor", "reason", "resourceId"] as const
const CANCEL_OPTIONS = [...VERB_OPTIONS, "cancelChildren"] as const
const SIGNAL_OPTIONS = ["idempotencyKey", "actor", "reason", "workflow", "resourceId"] as const
const LIST_TEXT = ["workflow", "subject", "resourceId", "pausedReason", "cursor"] as const
const LIST_OPTIONS = [...LIST_TEXT, "status", "createdFrom", "createdTo", "limit"] as const

/** The first problem among optional text fields of an options object already checked for its keys. */
const textFields = (options: unknown, keys: ReadonlyArray<string>, what: string): string | undefined => {
  if (options === undefined) return undefined
  const given = options as Readonly<Record<string, unknown>>
  for (const key of keys) {
    if (given[key] === undefined) continue
    const problem = Input.textProblem(given[key], `${what}.${key}`)
    if (problem !== undefined) return problem
  }
  return undefined
}

/** Options: known keys, storable text in the text ones. */
const optionsWithText = (options: unknown, keys: ReadonlyArray<string>, text: ReadonlyArray<string>, what: string) =>
  Input.optionsProblem(options, keys, what) ?? textFields(options, text, what)

/**
 * Checks a start's workflow, payload and options; the error to fail with, or undefined. The
 * payload is checked as it will be stored (encoded with the workflow's Schema): a payload that
 * does not encode is left to the start, which reports its Schema issue.
 */
export const checkStart = (
  workflow: unknown,
  payload: unknown,
  options: unknown
): InvalidWorkflowPayload | undefined => {
  if (!Input.isPlainObject(workflow) || typeof workflow.name !== "string" || !Schema.isSchema(workflow.payload)) {
    return new InvalidWorkflowPayload({
      workflow: String(workflow),
      issue: "not a workflow definition (Workflow.make)"
    })
  }
  const name = workflow.name
  const ofWorkflow = checkRunOptions(workflow)
  if (ofWorkflow !== undefined) return new InvalidWorkflowPayload({ workflow: name, issue: `workflow ${ofWorkflow}` })
  const problem = optionsWithText(options, START_OPTIONS, START_TEXT, "options") ?? runOptionsProblem(options)
  if (problem !== undefined) return new InvalidWorkflowPayload({ workflow: name, issue: problem })
  const encoded = Schema.encodeUnknownExit(workflow.payload as Schema.Codec<unknown, unknown>)(payload)
  const unstorable = Exit.isSuccess(encoded) ? Input.jsonProblem(encoded.value, "payload") : undefined
  return unstorable === undefined ? undefined : new InvalidWorkflowPayload({ workflow: name, issue: unstorable })
}

/** A start's priority, singleton and slot: an integer of 0 or more, a boolean, a valid Date. */
const runOptionsProblem = (options: unknown): string | undefined => {
  if (options === undefined) return undefined
  const o = options as Readonly<Record<string, unknown>>
  const problem = checkRunOptions({ singleton: o.singleton, priority: o.priority })
  if (problem !== undefined) return `options.${problem}`
  const at = o.scheduledFor
  if (at !== undefined && !(at instanceof Date && !Number.isNaN(at.getTime()))) {
    return "options.scheduledFor must be a valid Date"
  }
  return undefined
}

/** Runs `effect` unless a problem is named, then fails with InvalidInput. */
const guard = <A, E>(
  problem: string | undefined,
  effect: () => Effect.Effect<A, E>
): Effect.Effect<A, E | Input.InvalidInput> =>
  Effect.suspend(
    (): Effect.Effect<A, E | Input.InvalidInput> =>
      problem === undefined
        ? effect()
        : Effect.fail(new Input.InvalidInput({ input: problem.split(":")[0]!, issue: problem }))
  )

const idProblem = (id: unknown) => Input.textProblem(id, "id")
const verbProblem = (id: unknown, options: unknown) =>
  idProblem(id) ?? optionsWithText(options, VERB_OPTIONS, VERB_OPTIONS, "options")

const listProblem = (options: unknown): string | undefined => {
  const basic = optionsWithText(options, LIST_OPTIONS, LIST_TEXT, "options")
  if (basic !== undefined || options === undefined) return basic
  const o = options as Readonly<Record<string, unknown>>
  if (o.status !== undefined) {
    const statuses = typeof o.status === "string" ? [o.status] : o.status
    const bad = Input.listProblem(statuses, (s, path) => Input.textProblem(s, path), "options.status")
    if (bad !== undefined) return bad
  }
  for (const key of ["createdFrom", "createdTo"] as const) {
    if (o[key] !== undefined && !Input.isValidDate(o[key])) return `options.${key}: must be a valid Date`
  }
  if (o.limit !== undefined && (typeof o.limit !== "number" || !Number.isFinite(o.limit))) {
    return "options.limit: must be a finite number"
  }
  return undefined
}

const signalProblem = (name: unknown, options: unknown) =>
  Input.textProblem(name, "name") ??
  optionsWithText(options, SIGNAL_OPTIONS, ["idempotencyKey", "actor", "reason", "resourceId"], "options")

/** Fails a signal whose name, payload or options break the rules, with InvalidSignal. */
const guardSignal = <A, E>(
  name: unknown,
  payload: unknown,
  options: unknown,
  effect: () => Effect.Effect<A, E>
): Effect.Effect<A, E | InvalidSignal> =>
  Effect.suspend((): Effect.Effect<A, E | InvalidSignal> => {
    const problem =
      signalProblem(name, options) ??
      (payload === undefined ? "payload: undefined is not JSON" : Input.jsonProblem(payload, "payload"))
    return problem === undefined
      ? effect()
      : Effect.fail(
          new InvalidSignal({
            workflow: "",
            signal: typeof name === "string" ? Input.storableName(name) : String(name),
            issue: problem
          })
        )
  })

const optionsProblemOf = (options: unknown) => optionsWithText(options, VERB_OPTIONS, VERB_OPTIONS, "options")
/** A cancel's options: a verb's, and `cancelChildren` (a boolean). */
const cancelProblemOf = (options: unknown) => {
  const problem = optionsWithText(options, CANCEL_OPTIONS, VERB_OPTIONS, "options")
  if (problem !== undefined || options === undefined) return problem
  const given = (options as Readonly<Record<string, unknown>>).cancelChildren
  return given === undefined || typeof given === "boolean" ? undefined : "options.cancelChildren: must be a boolean"
}

/** A run handle whose verbs check their arguments first (as the client's do). */
const checkedHandle = (handle: RunHandle): RunHandle => ({
  ...handle,
  refresh: Effect.map(handle.refresh, checkedHandle),
  pause: (options) => guard(optionsProblemOf(options), () => handle.pause(options)),
  resume: (options) => guard(optionsProblemOf(options), () => handle.resume(options)),
  resumeAt: (step, options) =>
    guard(optionsProblemOf(options) ?? Input.textProblem(step, "step"), () => handle.resumeAt(step, options)),
  cancel: (options) => guard(cancelProblemOf(options), () => handle.cancel(options)),
  runNow: (options) => guard(optionsProblemOf(options), () => handle.runNow(options)),
  reschedule: (at, options) =>
    guard(optionsProblemOf(options) ?? (Input.isValidDate(at) ? undefined : "at: must be a valid Date"), () =>
      handle.reschedule(at, options)
    ),
  rerun: (options) => guard(optionsProblemOf(options), () => Effect.map(handle.rerun(options), checkedHandle)),
  skip: (options) => guard(optionsProblemOf(options), () => handle.skip(options)),
  signal: (name, payload, options) => guardSignal(name, payload, options, () => handle.signal(name, payload, options))
})

/** The client with every entry point checking its arguments first (and the handles it gives too). */
export const withInputChecks = (client: WorkflowClientShape): CheckedWorkflowClient => ({
  start: (workflow, payload, options) =>
    Effect.suspend(() => {
      const refused = checkStart(workflow, payload, options)
      return refused === undefined
        ? Effect.map(client.start(workflow, payload, options), checkedHandle)
        : Effect.fail(refused)
    }),
  get: (id, options) =>
    guard(idProblem(id) ?? optionsWithText(options, ["resourceId"], ["resourceId"], "options"), () =>
      Effect.map(client.get(id, options), checkedHandle)
    ),
  findBySubject: (workflow, subject) =>
    guard(Input.textProblem(workflow, "workflow") ?? Input.textProblem(subject, "subject"), () =>
      Effect.map(client.findBySubject(workflow, subject), checkedHandle)
    ),
  list: (options) => guard(listProblem(options), () => client.list(options)),
  counts: (options) =>
    guard(optionsWithText(options, ["workflow", "resourceId"], ["workflow", "resourceId"], "options"), () =>
      client.counts(options)
    ),
  steps: (id) => guard(idProblem(id), () => client.steps(id)),
  events: (id) => guard(idProblem(id), () => client.events(id)),
  progress: (id) => guard(idProblem(id), () => client.progress(id)),
  signals: (id) => guard(idProblem(id), () => client.signals(id)),
  pause: (id, options) => guard(verbProblem(id, options), () => client.pause(id, options)),
  resume: (id, options) => guard(verbProblem(id, options), () => client.resume(id, options)),
  resumeAt: (id, step, options) =>
    guard(verbProblem(id, options) ?? Input.textProblem(step, "step"), () => client.resumeAt(id, step, options)),
  cancel: (id, options) => guard(idProblem(id) ?? cancelProblemOf(options), () => client.cancel(id, options)),
  runNow: (id, options) => guard(verbProblem(id, options), () => client.runNow(id, options)),
  reschedule: (id, at, options) =>
    guard(verbProblem(id, options) ?? (Input.isValidDate(at) ? undefined : "at: must be a valid Date"), () =>
      client.reschedule(id, at, options)
    ),
  rerun: (id, options) => guard(verbProblem(id, options), () => Effect.map(client.rerun(id, options), checkedHandle)),
  skip: (id, options) => guard(verbProblem(id, options), () => client.skip(id, options)),
  fastForward: (id, data, options) =>
    guard(verbProblem(id, options) ?? (data === undefined ? undefined : Input.jsonProblem(data, "data")), () =>
      client.fastForward(id, data, options)
    ),
  signal: (id, name, payload, options) =>
    guard(idProblem(id), () => guardSignal(name, payload, options, () => client.signal(id, name, payload, options))),
  signalSubject: (workflow, subject, name, payload, options) =>
    guard(Input.textProblem(workflow, "workflow") ?? Input.textProblem(subject, "subject"), () =>
      guardSignal(name, payload, Input.isPlainObject(options) ? withoutMissing(options) : options, () =>
        client.signalSubject(workflow, subject, name, payload, options)
      )
    )
})

const withoutMissing = (options: object): object => {
  const { missing: _missing, ...rest } = options as { readonly missing?: unknown }
  return rest
}
