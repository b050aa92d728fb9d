/**
 * The outside verbs, composed: each locks the run, checks the transition table, acts and writes
 * its event (`outside/Transaction.ts`); the verbs by family under `outside/`.
 *
 * @since 0.1.0
 */
import type { WorkflowClientShape } from "../Client.ts"
import type { EngineContext } from "./Context.ts"
import type { makeOutcomes } from "./Outcomes.ts"
import { makeLifecycleVerbs } from "./outside/Lifecycle.ts"
import { makeResumeVerbs } from "./outside/Resume.ts"
import { makeSignalVerbs } from "./outside/Signal.ts"
import { makeVerbTransaction } from "./outside/Transaction.ts"
import type { Queries } from "./Queries.ts"
import type { makeStarts } from "./Starts.ts"

/** The outside verbs: each locks the run, checks the transition table, acts and writes its event. */
export const makeVerbs = (
  ctx: EngineContext,
  client: () => WorkflowClientShape,
  queries: Queries,
  outcomes: ReturnType<typeof makeOutcomes>,
  starts: ReturnType<typeof makeStarts>
) => {
  const env = { ctx, client, queries, outcomes, starts, tx: makeVerbTransaction(ctx, queries) }
  const signals = makeSignalVerbs(env)
  const verbs = {
    ...makeLifecycleVerbs(env),
    ...makeResumeVerbs(env),
    ...signals.verbs
  } satisfies Partial<WorkflowClientShape>
  return { sendSignal: signals.sendSignal, verbs }
}
