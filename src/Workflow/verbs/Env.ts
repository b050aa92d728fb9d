/**
 * What a body verb is built from: the engine's shared context, the execution record, the
 * execution's ends (`Apply`) and the step primitive every verb runs as (`verbs/step.ts`'s `runtimeStep`).
 * A new verb is one module here taking this, and one entry in `engine/execution/Runtime.ts`.
 *
 * @since 0.1.0
 */
import type { EngineContext } from "../engine/Context.ts"
import type { Apply } from "../engine/execution/Apply.ts"
import type { ExecutionState } from "../engine/execution/State.ts"
import type { Reach } from "./step.ts"

/** What a body verb is built from, on one execution. */
export interface VerbEnv {
  readonly ctx: EngineContext
  readonly st: ExecutionState
  readonly apply: Apply
  readonly reach: Reach
}
