/**
 * `Workflow.step`, and the step primitive every other verb is composed from: the body reaching a
 * step is replayed from the history (through the shared `HistoryCursor`), runs as the claimed
 * step (`engine/execution/Step.ts`), or is a new step scheduled or claimed at once.
 *
 * @since 0.1.0
 */
import { Duration, Effect, type Fiber, Schema } from "effect"
import { isPassingFailure, retryTransient, statementNowOf } from "../../Database.ts"
import type { EngineContext } from "../engine/Context.ts"
import type { Apply } from "../engine/execution/Apply.ts"
import type { ExecutionState, RunnerStepOptions } from "../engine/execution/State.ts"
import type { StepRun } from "../engine/execution/Step.ts"
import * as HistoryCursor from "../HistoryCursor.ts"
import type { StepOptions } from "../Runtime.ts"
import { checkStep } from "../Workflow.ts"
import { InvalidWorkflowDefinition } from "../WorkflowError.ts"
import { dueOf } from "./sleep.ts"

/** The step primitive (`runtimeStep`, the body's `step`), on one execution. */
export const makeReach = (ctx: EngineContext, st: ExecutionState, apply: Apply, step: StepRun) => {
  const { jobs, statements, worker, revision, db, queueOf } = ctx
  const { ex, renewalOf, def, runId, stepPolicies, namesSeen, seen, signalFree, defaultQueue } = st
  const { halt, holding, restartFromClaim, claimWithFirst, pauseWith, divergence, applyOutcome } = apply
  const { renewDeadline, runTarget } = step

  /** Halts the execution once the effect before it has run (`halt` records the end when called). */
  const thenHalt = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.flatMap(effect, () => halt({ _tag: "applied" }))

  /**
   * The body reached a step it has not recorded: schedule it, or claim and run it now. Plain
   * functions, no generator: every step of every run comes here (`fiber` reads the statement time).
   */
  const reachNew = <A, E, R>(
    fiber: Fiber.Fiber<unknown, unknown>,
    name: string,
    effect: Effect.Effect<A, E, R>,
    options: StepOptions<A>,
    position: number,
    attempt: number
  ) => {
    const { delayMs, dueAt } = dueOf(options)
    const queue = options.queue ?? defaultQueue
    const { queue: queueName, physical } = queueOf(queue, options.priority ?? st.runPriority)
    // a queue already known is an Exit: no fiber work
    return Effect.flatMapEager(jobs.ensureQueue(queueName), () =>
      reachNewIn(fiber, name, effect, options, position, attempt, delayMs, dueAt, queueName, physical)
    )
  }

  /** `reachNew` once the step's queue exists. */
  const reachNewIn = <A, E, R>(
    fiber: Fiber.Fiber<unknown, unknown>,
    name: string,
    effect: Effect.Effect<A, E, R>,
    options: StepOptions<A>,
    position: number,
    attempt: number,
    delayMs: number,
    dueAt: Date | null,
    queueName: string,
    physical: string
  ): Effect.Effect<A | undefined, unknown, unknown> => {
    // run it here and now when nothing stands between: no wait, no guard, same queue
    const fast =
      delayMs === 0 &&
      dueAt === null &&
      options.skipIf === undefined &&
      def.cancelIf === undefined &&
      queueName === queueOf(ex.pending?.step.queue || defaultQueue).queue
    const timeoutMs =
      options.timeout === undefined ? null : Duration.toMillis(Duration.fromInputUnsafe(options.timeout))
    const now = statementNowOf(fiber)
    // the step row `id` is this execution's: run the body's effect as it
    const runClaimed = (id: bigint) => {
      const target = { id, name, attempt, position, reattempts: 0, queue: queueName }
      st.target = target
      signalFree.add(id)
      return runTarget(target, effect, options)
    }
    if (ex.pending !== undefined) {
      const done = ex.pending
      return Effect.flatMap(
        applyOutcome(
          done.step,
          done.status,
          done.output,
          null,
          fast
            ? {
                _tag: "claim",
                name,
                attempt,
                position,
                queue: queueName,
                physicalQueue: physical,
                reattempts: 0,
                timeoutMs,
                claimedBy: ex.mark
              }
            : {
                _tag: "schedule",
                name,
                attempt,
                position,
                queue: queueName,
                physicalQueue: physical,
                delayMs,
                dueAt,
                timeoutMs,
                reattempts: 0,
                reattempt: false
              }
        ),
        (r) =>
          r === undefined || r.next_status !== "in_progress" || r.next_id === null
            ? halt({ _tag: "applied" })
            : runClaimed(r.next_id)
      )
    }
    if (st.preclaimed !== undefined) {
      const id = st.preclaimed
      st.preclaimed = undefined
      return runClaimed(id)
    }
    if (delayMs === 0 && dueAt === null && options.skipIf === undefined) {
      const insert = statements
        .stepInsertClaimed({
          runId,
          name,
          attempt,
          position,
          queue: queueName,
          reattempts: 0,
          timeoutMs,
          worker,
          appRevision: revision,
          claimedBy: ex.mark,
          now
        })
        .pipe(db("claim step"))
      // a reply lost with its connection may hide a commit: the step this execution claimed is
      // looked for by its mark before the insert is sent again
      const own =
        ex.mark === null
          ? Effect.succeed([])
          : Effect.map(statements.runLoadClaimed(runId, ex.mark).pipe(db("find own claim")), (rows) =>
              rows.flatMap((r) => (r.step_id !== null && r.step_name === name ? [{ id: r.step_id }] : []))
            )
      return Effect.flatMap(
        insert.pipe(
          Effect.catchIf(isPassingFailure, () =>
            retryTransient(Effect.flatMap(own, (rows) => (rows.length > 0 ? Effect.succeed(rows) : insert)))
          ),
          holding,
          Effect.uninterruptible
        ),
        ([row]) => (row === undefined ? halt({ _tag: "applied" }) : runClaimed(row.id))
      )
    }
    return thenHalt(
      statements
        .stepScheduleNew({
          workflow: def.name,
          runId,
          name,
          attempt,
          position,
          queue: queueName,
          physicalQueue: physical,
          delayMs,
          dueAt,
          timeoutMs,
          reattempts: 0,
          now
        })
        .pipe(db("schedule step"))
    )
  }

  /** The body reached a step, once a fresh run has claimed itself with it (`reach`). */
  const reached = <A, E, R>(
    fiber: Fiber.Fiber<unknown, unknown>,
    name: string,
    effect: Effect.Effect<A, E, R>,
    options: RunnerStepOptions<A>,
    invalid: string | undefined
  ): Effect.Effect<A | undefined, unknown, unknown> => {
    if (invalid !== undefined) {
      return thenHalt(pauseWith(new InvalidWorkflowDefinition({ workflow: def.name, reason: invalid }), "error"))
    }
    if (seen.has(name)) {
      return thenHalt(
        pauseWith(
          new InvalidWorkflowDefinition({
            workflow: def.name,
            reason: `step ${name} is yielded twice in one run (step names identify steps)`
          }),
          "version_mismatch"
        )
      )
    }
    seen.add(name)
    namesSeen.push(name)
    stepPolicies.set(name, options as StepOptions<unknown>)
    const cursor = HistoryCursor.reach(st.replay, name)
    const { position, recorded, entry } = cursor
    if (cursor.diverged) return divergence(recorded!, name, position)
    if (st.target !== undefined && !st.targetReached && name === st.target.name) {
      if (renewalOf !== undefined) return renewDeadline(st.target, options as StepOptions<unknown>, renewalOf)
      return runTarget(st.target, effect, options)
    }
    if (entry !== undefined && cursor.replayed) {
      if (entry.status === "completed") {
        if (options.output === undefined) return Effect.succeed(entry.output as A)
        return Effect.flatMap(Effect.result(Schema.decodeUnknownEffect(options.output)(entry.output)), (value) =>
          value._tag === "Failure"
            ? thenHalt(pauseWith(value.failure, "version_mismatch"))
            : Effect.succeed(value.success as A)
        )
      }
      if (entry.status === "skipped") return Effect.succeed(undefined)
    }
    if (st.target !== undefined && !st.targetReached) {
      // the claimed step must come before any step the history has not completed
      return divergence(st.target.name, name, position)
    }
    // a step past the recorded history (or one whose last attempt ended unfinished)
    const attempt = entry === undefined ? 1 : entry.attempt + 1
    return reachNew(fiber, name, effect, options, position, attempt)
  }

  /** The body reached a step: one read of the fiber, then plain functions down to the step's own effect. */
  const reach = <A, E, R>(
    fiber: Fiber.Fiber<unknown, unknown>,
    name: string,
    effect: Effect.Effect<A, E, R>,
    options: RunnerStepOptions<A>
  ): Effect.Effect<A | undefined, unknown, unknown> => {
    if (st.stop !== undefined) return halt(st.stop)
    const { takesHeldSignal: _internal, ...userOptions } = options
    const invalid = checkStep(name, userOptions as StepOptions<unknown>)
    if (st.speculative) {
      // the first step, run at once as `reachNew` would (no wait, no skipIf): claimed with the run
      if (
        invalid === undefined &&
        options.wait === undefined &&
        options.at === undefined &&
        options.skipIf === undefined
      ) {
        return Effect.flatMap(claimWithFirst(name, options as StepOptions<unknown>), () =>
          reached(fiber, name, effect, options, invalid)
        )
      }
      return restartFromClaim
    }
    return reached(fiber, name, effect, options, invalid)
  }

  const runtimeStep = <A, E, R>(name: string, effect: Effect.Effect<A, E, R>, options: RunnerStepOptions<A>) =>
    Effect.orDie(Effect.withFiber((fiber) => reach(fiber, name, effect, options))) as Effect.Effect<
      A | undefined,
      never,
      R
    >

  return { reachNew, runtimeStep }
}

/** The body reaching a step. */
export type Reach = ReturnType<typeof makeReach>
