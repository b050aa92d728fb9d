/**
 * Recorded histories: export a run's steps and events as JSON, and replay a history against the
 * current code without a database, to catch a change that would strand recorded runs before it
 * ships (commit a few histories and replay them in CI).
 *
 * @since 0.1.0
 */
import { Effect, Exit, type Option, Schema } from "effect"
import { WorkflowClient } from "../Workflow/Client.ts"
import * as HistoryCursor from "../Workflow/HistoryCursor.ts"
import { type ControlVerb, type FanOutResult, type StepOptions, WorkflowRuntime } from "../Workflow/Runtime.ts"
import { sleepVia } from "../Workflow/verbs/sleep.ts"
import { waitForSignalVia } from "../Workflow/verbs/waitForSignal.ts"
import type { Workflow } from "../Workflow/Workflow.ts"

/** A recorded history: what a replay needs, and the audit trail for context. */
export const History = Schema.Struct({
  workflow: Schema.String,
  version: Schema.NullOr(Schema.String),
  engineVersion: Schema.Number,
  payload: Schema.Unknown,
  steps: Schema.Array(
    Schema.Struct({
      name: Schema.String,
      attempt: Schema.Number,
      position: Schema.Number,
      status: Schema.String,
      output: Schema.Unknown
    })
  ),
  events: Schema.Array(Schema.Struct({ type: Schema.String, step: Schema.NullOr(Schema.String) }))
})
export type History = typeof History.Type

/** What a replay found. */
export type ReplayReport =
  | { readonly _tag: "Replayed"; readonly steps: number; readonly stoppedAt: string }
  | {
      readonly _tag: "Diverged"
      readonly position: number
      readonly expected: string
      readonly found: string
    }
  | { readonly _tag: "Failed"; readonly error: string }

/** Exports a run's history (steps and events) as a JSON-ready value. */
export const exportHistory = (runId: string) =>
  Effect.gen(function* () {
    const client = yield* WorkflowClient
    const run = (yield* client.get(runId)).info
    const steps = yield* client.steps(runId)
    const events = yield* client.events(runId)
    return {
      workflow: run.workflow,
      version: run.definitionVersion ?? null,
      engineVersion: run.engineVersion,
      payload: run.payload,
      steps: steps.map((s) => ({
        name: s.name,
        attempt: s.attempt,
        position: s.position,
        status: s.status,
        output: s.output ?? null
      })),
      events: events.map((e) => ({ type: e.type, step: e.step ?? null }))
    } satisfies History
  })

class Stop {
  constructor(readonly report: ReplayReport) {}
}

/**
 * Replays a recorded history against a workflow's current code. Completed steps return their
 * recorded outputs and no step runs; the replay stops at the first step the history did not
 * complete (or at the end of the body). Divergence from the recorded order is reported.
 */
export const replayHistory = <Name extends string, P, A, E, R>(
  workflow: Workflow<Name, P, A, E, R>,
  history: History
): Effect.Effect<ReplayReport, never, R> =>
  Effect.gen(function* () {
    // the engine's own cursor: a history is read here as a claimed run's is
    const cursor = HistoryCursor.make(history.steps)
    let stop: Stop | undefined
    const halt = (report: ReplayReport) => {
      stop = new Stop(report)
      return Effect.interrupt
    }
    const replayStep = <A, E, R>(name: string, _effect: Effect.Effect<A, E, R>, options: StepOptions<A>) =>
      Effect.gen(function* () {
        if (stop) return yield* Effect.interrupt
        const { position, recorded, entry: found, diverged } = HistoryCursor.reach(cursor, name)
        if (recorded === undefined) return yield* halt({ _tag: "Replayed", steps: position, stoppedAt: name })
        if (diverged) return yield* halt({ _tag: "Diverged", position, expected: recorded, found: name })
        const entry = found!
        if (entry.status === "skipped") return undefined
        if (entry.status !== "completed") return yield* halt({ _tag: "Replayed", steps: position, stoppedAt: name })
        if (options.output === undefined) return entry.output as A
        const decoded = yield* Schema.decodeUnknownEffect(options.output)(entry.output).pipe(Effect.result)
        if (decoded._tag === "Failure") {
          return yield* halt({ _tag: "Failed", error: `output of ${name} no longer decodes: ${decoded.failure}` })
        }
        return decoded.success
      }) as Effect.Effect<A | undefined, never, R>
    const runtime = WorkflowRuntime.of({
      step: replayStep,
      // a timer and a wait replay as the steps they are, composed as the engine composes them
      sleep: sleepVia(replayStep),
      waitForSignal: waitForSignalVia(replayStep),
      // a poll replays as the step it is: its recorded result
      poll: <A, E, R>(name: string, check: Effect.Effect<Option.Option<A>, E, R>) =>
        replayStep(name, check, {}) as unknown as Effect.Effect<
          { readonly timedOut: false; readonly data: A } | { readonly timedOut: true },
          never,
          R
        >,
      // a fan-out replays as the step it is: its recorded result
      fanOut: <E, R>(name: string, _build: unknown) =>
        replayStep(name, Effect.void as Effect.Effect<void, E, R>, {}) as unknown as Effect.Effect<
          FanOutResult | undefined,
          never,
          R
        >,
      // a child step replays as the step it is: its recorded result (the child's output)
      child: (name, _workflow, _input, options) =>
        replayStep(name, Effect.void, options.output === undefined ? {} : { output: options.output }),
      control: (_verb: ControlVerb) => Effect.interrupt,
      // a recorded marker takes the patched path; past the history, so does a new run
      patched: (id) => Effect.sync(() => HistoryCursor.patch(cursor, id) !== "unpatched")
    })
    const payload = yield* Schema.decodeUnknownEffect(workflow.payload)(history.payload).pipe(Effect.result)
    if (payload._tag === "Failure") {
      return { _tag: "Failed", error: `the payload no longer decodes: ${payload.failure.message}` } as ReplayReport
    }
    const exit = yield* workflow
      .body({
        workflowId: "replay",
        workflow: workflow.name,
        subject: undefined,
        resourceId: undefined,
        payload: payload.success
      })
      .pipe(Effect.provideService(WorkflowRuntime, runtime), Effect.exit)
    if (stop) return (stop as Stop).report
    if (Exit.isSuccess(exit)) {
      const unreached = HistoryCursor.unreached(cursor)
      if (unreached.length > 0) {
        return {
          _tag: "Diverged",
          position: cursor.position,
          expected: unreached[0]!,
          found: "(the end of the workflow)"
        } as ReplayReport
      }
      return { _tag: "Replayed", steps: cursor.position, stoppedAt: "(the end of the workflow)" } as ReplayReport
    }
    return { _tag: "Failed", error: String(exit.cause) } as ReplayReport
  })
