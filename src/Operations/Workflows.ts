/**
 * Workflows for operators: runs listed with the Workflows page's filters, one run with its
 * attempts, signals and audit trail, counts by status and stuck reason, the "needs attention"
 * groups, per-class insights, and the outside verbs, one run at a time or in bulk (at most 500 a
 * call, each through its own guarded transition). Every read and verb is scoped to the caller's
 * resource when it has one. The families live in `workflows/`: `Runs` (the summary and the
 * look-ups the others share), `Reads`, `Insights`, `Actions`, `BulkActions`.
 *
 * @since 0.1.0
 */
import type { Deps } from "./Deps.ts"
import { makeRunActions } from "./workflows/Actions.ts"
import { makeBulkActions } from "./workflows/BulkActions.ts"
import { makeWorkflowInsights } from "./workflows/Insights.ts"
import { makeRunReads } from "./workflows/Reads.ts"
import { makeRunLookup } from "./workflows/Runs.ts"

export type { ActVerb, SignalInput, VerbInput } from "./workflows/Actions.ts"
export { describeRun, type RunFilter } from "./workflows/Runs.ts"

/** The operators' workflow operations. */
export const makeWorkflows = (deps: Deps) => {
  const runs = makeRunLookup(deps)
  const { list, show } = makeRunReads(deps, runs)
  const { counts, attention, definitions, stats } = makeWorkflowInsights(deps, runs)
  const { perform, act, signal } = makeRunActions(deps, runs)
  const { bulk } = makeBulkActions(deps, runs, perform)
  return { list, show, summary: runs.summary, counts, attention, definitions, stats, act, signal, bulk }
}
