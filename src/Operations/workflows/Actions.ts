/**
 * The outside verbs on one workflow run, for operators: each through the engine's guarded
 * transition, after the caller's expected-status check; a run that moved on answers `Conflict`
 * with where it is now. Signals are checked against the workflow's declared Schema when it is
 * registered here.
 *
 * @since 0.1.0
 */
import { Effect, Option } from "effect"
import type { RunHandle, RunInfo } from "../../Workflow/Client.ts"
import * as States from "../../Workflow/States.ts"
import type { InvalidInput, SignalError, StartError, VerbError } from "../../Workflow/WorkflowError.ts"
import { type Change, type Deps, UUID, type View } from "../Deps.ts"
import type { SignalResult, VerbResult } from "../Model.ts"
import { Conflict, InvalidRequest, NotFound, type OperationsError } from "../OperationsError.ts"
import { checkId, type RunLookup } from "./Runs.ts"

/** What an outside verb may carry besides who and why. */
export interface VerbInput extends Change {
  /** The status the caller read: a run that has moved on answers `Conflict` and nothing is done. */
  readonly expectedStatus?: States.RunStatus | undefined
  /** `resume_at`: the step to run again. */
  readonly step?: string | undefined
  /** `reschedule`: when the scheduled step runs. */
  readonly at?: Date | undefined
  /** `cancel`: also cancel the run's child runs that have not ended (and theirs). */
  readonly cancelChildren?: boolean | undefined
}

/** A signal to send. */
export interface SignalInput {
  readonly name: string
  readonly payload: unknown
  /** A retried call passes the same key: one signal is stored. Blank is no key. */
  readonly idempotencyKey?: string | undefined
}

/** The verbs `act` runs (a signal has its own function). */
export type ActVerb = Exclude<States.OutsideVerb, "signal">

/** The verbs in the past tense, for summaries. */
export const DONE: Record<States.OutsideVerb, string> = {
  pause: "Paused",
  resume: "Resumed",
  resume_at: "Resumed",
  cancel: "Cancelled",
  run_now: "Ran now",
  reschedule: "Rescheduled",
  rerun: "Reran",
  skip: "Skipped",
  signal: "Signalled"
}

/** The outside verbs on one run: `perform` (the guarded verb alone), `act` and `signal`. */
export const makeRunActions = (deps: Deps, runs: RunLookup) => {
  const { workflows: client } = deps
  const { rowOf, childrenOf, liveChildren, summary } = runs

  const conflictOf = (verb: string, id: string, view: View) =>
    Effect.flatMap(rowOf(id, view), (row) =>
      Effect.fail(
        new Conflict({
          verb,
          run: id,
          current: row.status,
          allowed: States.availableActions(row.status),
          reason: "invalid_transition"
        })
      )
    )

  /** Maps a verb's error: a lost race re-reads the run and answers where it is now. */
  const fromVerbError =
    (verb: string, id: string, view: View) =>
    (error: VerbError | SignalError | StartError | InvalidInput): Effect.Effect<never, OperationsError> => {
      switch (error._tag) {
        case "RunNotFound":
          return Effect.fail(new NotFound({ kind: "run", id }))
        case "InvalidTransition":
        case "NotPaused":
        case "NotOngoing":
          return conflictOf(verb, id, view)
        case "UnknownStep":
          return Effect.fail(new NotFound({ kind: "step", id: `${id}:${error.step}` }))
        case "DatabaseError":
          return Effect.fail(error)
        default:
          return Effect.fail(new InvalidRequest({ reason: error.message }))
      }
    }

  const registered = (workflow: string) =>
    Option.flatMap(deps.registry, (r) => Option.fromUndefinedOr(r.workflows.get(workflow)))

  /** The run as it is now, checked against what the caller expects and what the verb allows. */
  const guard = (id: string, verb: States.OutsideVerb, expected: States.RunStatus | undefined, view: View) =>
    Effect.gen(function* () {
      const row = yield* rowOf(id, view)
      if (expected !== undefined && expected !== row.status) {
        return yield* new Conflict({
          verb,
          run: id,
          current: row.status,
          allowed: States.availableActions(row.status),
          reason: "status_mismatch",
          expected
        })
      }
      if (!States.isLegal(verb, row.status)) return yield* conflictOf(verb, id, view)
      return row
    })

  /**
   * Runs the engine's guarded verb on one run (after the caller's `expectedStatus` check, when
   * given); the id of the run after (a rerun's is new). A run that moved on is a `Conflict`.
   */
  const perform = (id: string, verb: ActVerb, input: VerbInput, view: View): Effect.Effect<string, OperationsError> =>
    Effect.gen(function* () {
      yield* checkId(id)
      if (input.expectedStatus !== undefined) yield* guard(id, verb, input.expectedStatus, view)
      const options = { actor: input.actor, reason: input.reason, resourceId: view.resourceId }
      const run = (effect: Effect.Effect<RunInfo | RunHandle, VerbError | StartError | InvalidInput>) =>
        effect.pipe(
          Effect.map((r) => r.id),
          Effect.catch(fromVerbError(verb, id, view))
        )
      switch (verb) {
        case "pause":
          return yield* run(client.pause(id, options))
        case "resume":
          return yield* run(client.resume(id, options))
        case "resume_at": {
          if (input.step === undefined) return yield* new InvalidRequest({ reason: "resume_at needs a step" })
          return yield* run(client.resumeAt(id, input.step, options))
        }
        case "cancel":
          return yield* run(client.cancel(id, { ...options, cancelChildren: input.cancelChildren }))
        case "run_now":
          return yield* run(client.runNow(id, options))
        case "reschedule": {
          if (input.at === undefined) return yield* new InvalidRequest({ reason: "reschedule needs a time (at)" })
          return yield* run(client.reschedule(id, input.at, options))
        }
        case "rerun":
          return yield* run(client.rerun(id, options))
        case "skip":
          return yield* run(client.skip(id, options))
      }
    })

  /** Runs one outside verb on one run, through the engine's guarded transition; the run after. */
  const act = (
    id: string,
    verb: ActVerb,
    input: VerbInput,
    view: View = {}
  ): Effect.Effect<VerbResult, OperationsError> =>
    Effect.gen(function* () {
      // a cancel of the children says how many it ended (those live before that are cancelled after)
      const withChildren = verb === "cancel" && input.cancelChildren === true && UUID.test(id)
      const liveBefore = withChildren ? yield* liveChildren(id, view) : []
      const runId = yield* perform(id, verb, input, view)
      const run = yield* summary(runId, view)
      const ended = withChildren
        ? (yield* childrenOf(id, view)).filter((c) => c.status === "cancelled" && liveBefore.includes(c.id)).length
        : 0
      return {
        verb,
        run,
        summary: `${DONE[verb]} run ${id}${runId !== id ? ` as ${runId}` : ""}: it is ${run.status}${withChildren ? ` (and ${ended} live child run(s))` : ""}`
      }
    })

  /** Sends a signal to one run (its payload checked against the workflow's declared Schema when registered here). */
  const signal = (
    id: string,
    sent: SignalInput,
    input: Change & { readonly expectedStatus?: States.RunStatus | undefined },
    view: View = {}
  ): Effect.Effect<SignalResult, OperationsError> =>
    Effect.gen(function* () {
      const row = yield* guard(id, "signal", input.expectedStatus, view)
      const declared = registered(row.workflow)
      const receipt = yield* client
        .signal(id, sent.name, sent.payload, {
          actor: input.actor,
          reason: input.reason,
          resourceId: view.resourceId,
          idempotencyKey: sent.idempotencyKey,
          workflow: Option.match(declared, {
            onNone: () => undefined,
            onSome: (w) => ({ name: w.workflow.name, signals: w.workflow.signals })
          })
        })
        .pipe(Effect.catch(fromVerbError("signal", id, view)))
      return {
        run: yield* summary(id, view),
        signal: { id: String(receipt.id), name: receipt.name, duplicate: receipt.duplicate, claimed: receipt.claimed }
      }
    })

  return { perform, act, signal }
}
