/**
 * `Workflow.step`, and the step primitive every other verb is composed from: the body reaching a
 * step is replayed from the history (through the shared `HistoryCursor`), runs as the claimed
 * step (`engine/execution/Step.ts`), or is a new step scheduled or claimed at once.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Schema } from "effect"
import { isPassingFailure, retryTransient, statementNow } from "../../Database.ts"
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

  /** The body reached a step it has not recorded: schedule it, or claim and run it now. */
  const reachNew = <A, E, R>(
    name: string,
    effect: Effect.Effect<A, E, R>,
    options: StepOptions<A>,
    position: number,
    attempt: number
  ) =>
    Effect.gen(function* () {
      const { delayMs, dueAt } = dueOf(options)
      const queue = options.queue ?? defaultQueue
      const { queue: queueName, physical } = queueOf(queue, options.priority ?? st.runPriority)
      yield* jobs.ensureQueue(queueName)
      // run it here and now when nothing stands between: no wait, no guard, same queue
      const fast =
        delayMs === 0 &&
        dueAt === null &&
        options.skipIf === undefined &&
        def.cancelIf === undefined &&
        queueName === queueOf(ex.pending?.step.queue || defaultQueue).queue
      const timeoutMs =
        options.timeout === undefined ? null : Duration.toMillis(Duration.fromInputUnsafe(options.timeout))
      const now = yield* statementNow
      // the step row `id` is this execution's: run the body's effect as it
      const runClaimed = (id: bigint) => {
        const target = { id, name, attempt, position, reattempts: 0, queue: queueName }
        st.target = target
        signalFree.add(id)
        return runTarget(target, effect, options)
      }
      if (ex.pending !== undefined) {
        const done = ex.pending
        const r = yield* applyOutcome(
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
        )
        if (r === undefined || r.next_status !== "in_progress" || r.next_id === null) {
          return yield* halt({ _tag: "applied" })
        }
        return yield* runClaimed(r.next_id)
      }
      if (st.preclaimed !== undefined) {
        const id = st.preclaimed
        st.preclaimed = undefined
        return yield* runClaimed(id)
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
        const [row] = yield* insert.pipe(
          Effect.catchIf(isPassingFailure, () =>
            retryTransient(Effect.flatMap(own, (rows) => (rows.length > 0 ? Effect.succeed(rows) : insert)))
          ),
          holding,
          Effect.uninterruptible
        )
        if (row === undefined) return yield* halt({ _tag: "applied" })
        return yield* runClaimed(row.id)
      }
      yield* statements
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
      return yield* halt({ _tag: "applied" })
    })

  const runtimeStep = <A, E, R>(name: string, effect: Effect.Effect<A, E, R>, options: RunnerStepOptions<A>) =>
    Effect.gen(function* () {
      if (st.stop !== undefined) return yield* halt(st.stop)
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
          yield* claimWithFirst(name, options as StepOptions<unknown>)
        } else {
          return yield* restartFromClaim
        }
      }
      if (invalid !== undefined) {
        yield* pauseWith(new InvalidWorkflowDefinition({ workflow: def.name, reason: invalid }), "error")
        return yield* halt({ _tag: "applied" })
      }
      if (seen.has(name)) {
        yield* pauseWith(
          new InvalidWorkflowDefinition({
            workflow: def.name,
            reason: `step ${name} is yielded twice in one run (step names identify steps)`
          }),
          "version_mismatch"
        )
        return yield* halt({ _tag: "applied" })
      }
      seen.add(name)
      namesSeen.push(name)
      stepPolicies.set(name, options as StepOptions<unknown>)
      const reached = HistoryCursor.reach(st.replay, name)
      const { position, recorded, entry } = reached
      if (reached.diverged) return yield* divergence(recorded!, name, position)
      if (st.target !== undefined && !st.targetReached && name === st.target.name) {
        if (renewalOf !== undefined) return yield* renewDeadline(st.target, options as StepOptions<unknown>, renewalOf)
        return yield* runTarget(
          { ...st.target, queue: entry?.status === "scheduled" ? st.target.queue : st.target.queue },
          effect,
          options
        )
      }
      if (entry !== undefined && reached.replayed) {
        if (entry.status === "completed") {
          if (options.output === undefined) return entry.output as A
          const value = yield* Schema.decodeUnknownEffect(options.output)(entry.output).pipe(Effect.result)
          if (value._tag === "Failure") {
            yield* pauseWith(value.failure, "version_mismatch")
            return yield* halt({ _tag: "applied" })
          }
          return value.success
        }
        if (entry.status === "skipped") return undefined
      }
      if (st.target !== undefined && !st.targetReached) {
        // the claimed step must come before any step the history has not completed
        return yield* divergence(st.target.name, name, position)
      }
      // a step past the recorded history (or one whose last attempt ended unfinished)
      const attempt = entry === undefined ? 1 : entry.attempt + 1
      return yield* reachNew(name, effect, options, position, attempt)
    }).pipe(Effect.orDie) as Effect.Effect<A | undefined, never, R>

  return { reachNew, runtimeStep }
}

/** The body reaching a step. */
export type Reach = ReturnType<typeof makeReach>
