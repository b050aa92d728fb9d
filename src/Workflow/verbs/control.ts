/**
 * `Workflow.skip`/`pause`/`cancel`/`finish`/`reattempt`: inside a step the step ends with the
 * verb, a typed request (see `engine/execution/Step.ts`) that the step's code cannot catch away;
 * outside a step it applies after the last completed step.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { statementNow } from "../../Database.ts"
import { textOf } from "../engine/Errors.ts"
import { StepRequest } from "../engine/execution/End.ts"
import { hashNames } from "../engine/execution/State.ts"
import type { WorkflowRuntime } from "../Runtime.ts"
import { InvalidWorkflowDefinition } from "../WorkflowError.ts"
import type { NextAction } from "../WorkflowSql.ts"
import type { VerbEnv } from "./Env.ts"

/** The body's `control`, on one execution. */
export const makeControlVerb = ({ ctx, st, apply }: VerbEnv) => {
  const { statements, db } = ctx
  const { ex, def, runId, namesSeen } = st
  const { halt, restartFromClaim, pauseWith, applyOutcome, ending } = apply
  const control: WorkflowRuntime["Service"]["control"] = (verbCalled) =>
    Effect.suspend(() => {
      // inside a step: the step ends with the verb (a defect carrying it; its type promises no
      // failure), recorded first so that a catch in the step's code cannot swallow it
      if (st.inStep) {
        const requested = { _tag: "Control", verb: verbCalled } as const
        st.controlInStep ??= requested
        return Effect.die(new StepRequest(requested))
      }
      // outside a step: the verb applies after the last completed step
      return Effect.gen(function* () {
        // the execution ended (a body that caught its unwinding): its recorded end stands
        if (st.stop !== undefined) return yield* halt(st.stop)
        if (st.speculative) return yield* restartFromClaim
        const now = yield* statementNow
        const next: NextAction | undefined =
          verbCalled._tag === "finish"
            ? { _tag: "finish", output: null }
            : verbCalled._tag === "cancel"
              ? { _tag: "cancel", reason: textOf(verbCalled.reason) }
              : verbCalled._tag === "pause"
                ? { _tag: "pause", reason: "step_pause", error: null, message: textOf(verbCalled.reason) }
                : undefined
        if (next === undefined) {
          yield* pauseWith(
            new InvalidWorkflowDefinition({
              workflow: def.name,
              reason: `${verbCalled._tag} is only meaningful inside a step`
            }),
            "error"
          )
        } else if (ex.pending !== undefined) {
          const done = ex.pending
          yield* applyOutcome(done.step, done.status, done.output, null, next)
        } else {
          yield* ending(
            statements
              .runEndFromPerforming({
                runId,
                to: next._tag === "finish" ? "finished" : next._tag === "cancel" ? "cancelled" : "paused",
                output: null,
                error: null,
                pausedReason: next._tag === "pause" ? "step_pause" : null,
                reason: next._tag === "cancel" ? next.reason : next._tag === "pause" ? next.message : null,
                definitionHash: hashNames(namesSeen),
                now
              })
              .pipe(db("end run"))
          )
        }
        return yield* halt({ _tag: "applied" })
      })
    }) as Effect.Effect<never>
  return control
}
