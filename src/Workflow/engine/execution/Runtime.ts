/**
 * The runtime a workflow's body calls: its steps, control verbs, sleeps, waits, polls, fan-outs,
 * children and patches, each turned into a step of the run: one module per verb under `verbs/`,
 * composed here.
 *
 * @since 0.1.0
 */
import { WorkflowRuntime } from "../../Runtime.ts"
import { makeChildVerb } from "../../verbs/child.ts"
import { makeControlVerb } from "../../verbs/control.ts"
import { makeFanOutVerb } from "../../verbs/fanOut.ts"
import { makePatchedVerb } from "../../verbs/patched.ts"
import { makePollVerb } from "../../verbs/poll.ts"
import { sleepVia } from "../../verbs/sleep.ts"
import type { Reach } from "../../verbs/step.ts"
import { waitForSignalVia } from "../../verbs/waitForSignal.ts"
import type { EngineContext } from "../Context.ts"
import type { Apply } from "./Apply.ts"
import type { ExecutionState } from "./State.ts"

/** The runtime a workflow's body calls, on one execution: one module per verb under `verbs/`. */
export const makeRuntime = (ctx: EngineContext, st: ExecutionState, apply: Apply, reach: Reach) => {
  const env = { ctx, st, apply, reach }
  const runtime = WorkflowRuntime.of({
    step: reach.runtimeStep,
    sleep: sleepVia(reach.runtimeStep),
    waitForSignal: waitForSignalVia(reach.runtimeStep),
    control: makeControlVerb(env),
    patched: makePatchedVerb(env),
    fanOut: makeFanOutVerb(env),
    poll: makePollVerb(env),
    child: makeChildVerb(env)
  })
  return { runtime }
}
