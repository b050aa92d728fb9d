/**
 * Executing one claimed run: replays the body and applies what it leads to. The execution is
 * one record (`execution/State.ts`) that its parts share: its ends (`execution/Apply.ts`), the
 * claimed step's run (`execution/Step.ts`), reaching steps (`verbs/step.ts`) and the runtime
 * the body calls (`execution/Runtime.ts`).
 *
 * @since 0.1.0
 */
import { Cause, Context, Effect, Exit, Metric, Option, References } from "effect"
import { statementNow } from "../../Database.ts"
import { isStorableJson } from "../../internal/storable.ts"
import { WorkflowRuntime } from "../Runtime.ts"
import { makeReach } from "../verbs/step.ts"
import { InvalidWorkflowPayload, OutputNotStorable } from "../WorkflowError.ts"
import type { EngineContext } from "./Context.ts"
import { type Apply, makeApply } from "./execution/Apply.ts"
import type { Stop } from "./execution/End.ts"
import { makeRuntime } from "./execution/Runtime.ts"
import { type Execution, type ExecutionState, hashNames, makeExecutionState } from "./execution/State.ts"
import { makeStep } from "./execution/Step.ts"
import type { Claimed } from "./Messages.ts"
import { finishedOf } from "./Metrics.ts"
import type { Outcomes } from "./Outcomes.ts"
import type { RegisteredWorkflow } from "./Services.ts"

/** Executing one claimed run: replaying the body and applying what it leads to. */
export const makeExecute = (ctx: EngineContext, outcomes: Outcomes) => {
  const { config, statements, db } = ctx

  /**
   * Executes one claimed run: replays the body and applies what it leads to. A fresh run
   * (`speculative`) replays before its claim, from the input its start message carried: the
   * first step it reaches is claimed with the run in one statement; anything else claims the run
   * alone and asks for a replay from that claim (`restart`). Nothing is written before the claim.
   */
  const executeClaimed = (
    registered: RegisteredWorkflow,
    claim: Claimed,
    /** The execution: its claims' mark, what it holds (a drain releases it, see `execute`). */
    ex: Execution,
    speculative = false,
    /** Set for a notify notice of a per-run deadline: the claimed waiting step's missed deadline. */
    renewalOf?: Date
  ) =>
    Effect.suspend(() =>
      // a payload that decodes at once makes no Effect of its own (see `makeExecutionState`)
      Effect.flatMapEager(
        makeExecutionState(registered, claim, ex, speculative, renewalOf, config.workflowQueue),
        (st) => {
          const { def } = st
          // a continue message of a prioritized run goes to its priority sub-queue
          if (claim.priority != null) ex.queue = ctx.queueOf(def.queue ?? config.workflowQueue, claim.priority).queue
          const apply = makeApply(ctx, outcomes, st)
          const step = makeStep(ctx, outcomes, st, apply)
          const reach = makeReach(ctx, st, apply, step)
          const { runtime } = makeRuntime(ctx, st, apply, reach)
          // One context update per execution, as the job executor makes one per delivery: the
          // registry's services (the body's; its steps' engine code ran under them already, the
          // run's ends now do too), the runtime the body calls and the log annotations naming the run.
          return registered.provide(executeBody(st, apply), (context) =>
            Context.add(Context.add(context, WorkflowRuntime, runtime), References.CurrentLogAnnotations, {
              ...Context.get(context, References.CurrentLogAnnotations),
              workflow: def.name,
              workflow_id: claim.id
            })
          )
        }
      )
    )

  /** The execution once its record is built: the body replayed, then what it led to. */
  const executeBody = (st: ExecutionState, apply: Apply) =>
    Effect.gen(function* () {
      const { def, runId, namesSeen, decoded, runContext, ex } = st
      const { claimForRestart, pauseWith, divergence, applyOutcome, ending } = apply
      if (Option.isNone(decoded)) {
        if (st.speculative) return yield* claimForRestart
        yield* pauseWith(
          new InvalidWorkflowPayload({ workflow: def.name, issue: "the stored payload no longer decodes" }),
          "version_mismatch"
        )
        return
      }

      // under the registry's services and the runtime (see `executeClaimed`)
      const exit = yield* Effect.exit(def.body(runContext as never))
      const stopped = st.stop as Stop | undefined
      if (stopped !== undefined) {
        if (stopped._tag === "claimFailed") return yield* Effect.fail(stopped.error)
        return stopped._tag === "restart" ? stopped : undefined
      }
      // a fresh run that ended (or failed) before any step: claim it and replay from the claim
      if (st.speculative) return yield* claimForRestart
      if (Exit.isSuccess(exit)) {
        if (st.target !== undefined && !st.targetReached) {
          yield* divergence(st.target.name, "(the end of the workflow)", st.replay.position).pipe(Effect.exit)
          return
        }
        let outputText: string | null = null
        try {
          outputText = exit.value === undefined ? null : (JSON.stringify(exit.value) ?? null)
        } catch {
          outputText = null
        }
        if (outputText !== null && !isStorableJson(outputText)) {
          yield* pauseWith(new OutputNotStorable({ step: `workflow ${def.name}` }), "error")
          return
        }
        const now = yield* statementNow
        if (ex.pending !== undefined) {
          const done = ex.pending
          yield* applyOutcome(done.step, done.status, done.output, null, { _tag: "finish", output: outputText })
        } else {
          const [r] = yield* ending(
            statements
              .runEndFromPerforming({
                runId,
                to: "finished",
                output: outputText,
                error: null,
                pausedReason: null,
                reason: null,
                definitionHash: hashNames(namesSeen),
                now
              })
              .pipe(db("finish run"))
          )
          if (r !== undefined) {
            yield* Metric.update(finishedOf(def.name), 1)
            yield* Effect.logInfo(`pgbus: workflow ${def.name} run ${runId} finished`)
          }
        }
        return
      }
      // an interruption from outside never gets here (a drain stops the execution, and `execute`
      // releases what it holds): the body interrupted itself
      yield* pauseWith(
        Cause.hasInterruptsOnly(exit.cause)
          ? new Error(`workflow ${def.name} was interrupted from inside its body`)
          : Cause.squash(exit.cause),
        "error"
      )
    })

  return { executeClaimed }
}
