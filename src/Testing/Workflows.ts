/**
 * Test helpers for workflows, shipped to users: run a run's next step inline (ignoring its
 * wait) through the real runner, run a named step, speedrun a run until it stops being ready.
 * They need `PgBus.layer` and the `Registry` of the workflows, and no running supervisor.
 *
 * @since 0.1.0
 */
import { Effect, Option } from "effect"
import { Batches } from "../Batch/Batch.ts"
import type { InvalidInput } from "../Input.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import { Registry } from "../Registry.ts"
import type { SignalOptions } from "../Workflow/Client.ts"
import { WorkflowClient } from "../Workflow/Client.ts"
import { fanOutOutcomeOf, type NextWork, WorkflowRunner, WorkflowSweep } from "../Workflow/Engine.ts"
import type { RunStatus } from "../Workflow/States.ts"
import { type RunNotFound, StepWaiting, UnexpectedStep, type WorkflowNotRegistered } from "../Workflow/WorkflowError.ts"
import { CHILD_WAIT_PREFIX, FAN_OUT_WAIT } from "../Workflow/WorkflowSql.ts"

/** Runs what the run does next, inline; returns what that was. */
export const performNextStep = (runId: string) =>
  Effect.gen(function* () {
    const runner = yield* WorkflowRunner
    const registry = yield* Registry
    const work: NextWork = yield* runner.next(runId)
    if (work._tag === "Step" || work._tag === "Continue") {
      yield* runner.execute(registry.workflows, work.message, { attempt: 1 })
    }
    if (work._tag === "Waiting") {
      return yield* new StepWaiting({ run: runId, step: work.step, waitingFor: work.waitingFor })
    }
    return work
  })

/** Runs the named step inline; fails with `UnexpectedStep` when another step is next. */
export const runStepInline = (runId: string, step: string) =>
  Effect.gen(function* () {
    const runner = yield* WorkflowRunner
    const registry = yield* Registry
    const work = yield* runner.next(runId)
    if (work._tag === "Waiting") {
      return yield* new StepWaiting({ run: runId, step: work.step, waitingFor: work.waitingFor })
    }
    if (work._tag !== "Step") {
      return yield* new UnexpectedStep({
        run: runId,
        expected: step,
        next: work._tag === "Continue" ? "(not scheduled yet)" : work._tag
      })
    }
    if (work.step !== step) return yield* new UnexpectedStep({ run: runId, expected: step, next: work.step })
    yield* runner.execute(registry.workflows, work.message, { attempt: 1 })
  })

/**
 * Runs steps inline until the run stops being ready: returns its status (paused, finished,
 * cancelled), or fails with `StepWaiting` naming what a waiting step waits for. A step waiting
 * on a child workflow (`Workflow.child`) speedruns the child, whose end wakes the step.
 */
export const speedrun = (
  runId: string,
  options: { readonly maxSteps?: number } = {}
): Effect.Effect<
  RunStatus,
  InvalidInput | RunNotFound | StepWaiting | WorkflowNotRegistered | QueueError,
  Registry | WorkflowRunner | WorkflowClient
> =>
  Effect.gen(function* () {
    const client = yield* WorkflowClient
    const limit = options.maxSteps ?? 1_000
    for (let i = 0; i < limit; i++) {
      const work = yield* performNextStep(runId).pipe(
        Effect.map(Option.some),
        Effect.catchTag("StepWaiting", (waiting) => Effect.as(speedrunChild(waiting, options), Option.none()))
      )
      if (Option.isNone(work)) continue
      if (work.value._tag === "Stopped") return work.value.status
      if (work.value._tag === "Running") return (yield* client.get(runId)).info.status
    }
    return (yield* client.get(runId)).info.status as RunStatus
  })

/**
 * Speedruns the child a step waits on (`Workflow.child`); fails with the step's `StepWaiting`
 * when it waits on something else, or when the child's end did not wake it.
 */
const speedrunChild = (waiting: StepWaiting, options: { readonly maxSteps?: number }) =>
  Effect.gen(function* () {
    const client = yield* WorkflowClient
    const step = (yield* client.steps(waiting.run)).find((s) => s.status === "waiting" && s.name === waiting.step)
    if (step?.waitingFor?.startsWith(CHILD_WAIT_PREFIX) !== true) return yield* Effect.fail(waiting)
    const started = (yield* client.events(waiting.run))
      .filter((e) => e.type === "child_started" && e.step === waiting.step)
      .at(-1)
    const childId = (started?.details as { readonly child_run_id?: unknown } | undefined)?.child_run_id
    if (typeof childId !== "string") return yield* Effect.fail(waiting)
    yield* speedrun(childId, options)
    // a child that paused (the step waits it out) or stopped short leaves the step waiting
    if ((yield* client.get(waiting.run)).info.status === "waiting") return yield* Effect.fail(waiting)
  })

/** Sends a signal and runs the step it woke, inline (`StepWaiting` if it woke nothing). */
export const deliverSignal = (runId: string, name: string, payload: unknown, options: SignalOptions = {}) =>
  Effect.gen(function* () {
    const client = yield* WorkflowClient
    const receipt = yield* client.signal(runId, name, payload, options)
    yield* performNextStep(runId)
    return receipt
  })

/**
 * Applies the waiting step's onTimeout now, whatever its deadline (under notify it stays waiting;
 * a per-run deadline is evaluated again inline, which needs the `Registry`).
 */
export const expireWait = (runId: string) =>
  Effect.gen(function* () {
    const applied = yield* WorkflowSweep.use((sweep) => sweep.expireWait(runId))
    const registry = yield* Effect.serviceOption(Registry)
    if (applied && Option.isSome(registry)) {
      const runner = yield* WorkflowRunner
      const work = yield* runner.next(runId)
      if (work._tag === "Step" && work.message.deadline !== undefined) {
        yield* runner.execute(registry.value.workflows, work.message, { attempt: 1 })
      }
    }
    return applied
  })

/**
 * Completes every member of the run's waiting fan-out without running them (`failed` moves
 * them to their DLQ instead), runs the batch's callback and the step it resumes, inline.
 */
export const completeFanOut = (runId: string, outcome: "completed" | "failed" = "completed") =>
  Effect.gen(function* () {
    const client = yield* WorkflowClient
    const waiting = (yield* client.steps(runId)).find((s) => s.status === "waiting" && s.waitingFor === FAN_OUT_WAIT)
    if (waiting?.batchId === undefined) {
      return yield* new UnexpectedStep({ run: runId, expected: "a waiting fan-out", next: waiting?.name ?? "(none)" })
    }
    const batches = yield* Batches
    yield* batches.endMembers(waiting.batchId, outcome)
    const runner = yield* WorkflowRunner
    yield* runner.fanOutFinished(fanOutOutcomeOf(yield* batches.find(waiting.batchId)))
    return yield* performNextStep(runId)
  })
