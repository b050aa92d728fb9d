/**
 * The execution record: one claimed run's execution, what it replays (the history, the cursor
 * into it, the claimed step) and what its body asked for. Every part of the execution reads and
 * writes this one record instead of variables of a closure.
 *
 * @since 0.1.0
 */
import { Effect, Option, Schema } from "effect"
import * as HistoryCursor from "../../HistoryCursor.ts"
import type { RunContext, StepOptions } from "../../Runtime.ts"
import type { HistoryEntry } from "../../WorkflowSql.ts"
import type { Claimed, Execution, RegisteredWorkflow, Target } from "../Shared.ts"
import type { Stop } from "./End.ts"

/** One claimed run's execution. */
export interface ExecutionState {
  readonly registered: RegisteredWorkflow
  readonly claim: Claimed
  /** The execution: its claims' mark, what it holds (a drain releases it). */
  readonly ex: Execution
  /** Set for a notify notice of a per-run deadline: the claimed waiting step's missed deadline. */
  readonly renewalOf: Date | undefined
  readonly def: RegisteredWorkflow["workflow"]
  readonly runId: string
  readonly stepPolicies: Map<string, StepOptions<unknown>>
  readonly history: ReadonlyArray<HistoryEntry>
  /** The cursor over the history the body replays (shared with `Testing/Replay.ts`). */
  readonly replay: HistoryCursor.HistoryCursor<HistoryEntry>
  /** The step names the body reached, in order (the definition hash). */
  readonly namesSeen: Array<string>
  readonly seen: Set<string>
  /** Attempts inserted by this execution with no gate run: they hold no signal. */
  readonly signalFree: Set<bigint>
  readonly decoded: Option.Option<unknown>
  readonly runContext: RunContext<unknown>
  readonly defaultQueue: string
  /** The run's priority sub-queue, for steps that name none (kept across resumes). */
  readonly runPriority: number | undefined
  /** A fresh run replaying before its claim, from the input its start message carried. */
  speculative: boolean
  /** The claimed step (none for a continue). */
  target: Target | undefined
  targetReached: boolean
  /** How the execution ended (a body that catches the defect unwinding it stops at its next verb). */
  stop: Stop | undefined
  /** The claimed step's effect is running: a control verb ends the step, not the run. */
  inStep: boolean
  /** A fresh run's first step, inserted claimed with the run's claim. */
  preclaimed: bigint | undefined
}

/** The record of a claimed run's execution, before its body runs. */
export const makeExecutionState = (
  registered: RegisteredWorkflow,
  claim: Claimed,
  ex: Execution,
  speculative: boolean,
  renewalOf: Date | undefined,
  workflowQueue: string
) =>
  Effect.gen(function* () {
    const def = registered.workflow
    const runId = claim.id
    if (claim.step_id !== null) ex.held = claim.step_id
    const history: ReadonlyArray<HistoryEntry> = claim.history
    const target: Target | undefined =
      claim.step_id === null
        ? undefined
        : {
            id: claim.step_id,
            name: claim.step_name!,
            attempt: claim.step_attempt!,
            position: claim.step_position!,
            reattempts: claim.step_reattempts ?? 0,
            queue: history.find((h) => h.id === String(claim.step_id))?.name ? "" : ""
          }
    const decoded = yield* Schema.decodeUnknownEffect(def.payload)(claim.payload).pipe(Effect.option)
    const runContext: RunContext<unknown> = {
      workflowId: runId,
      workflow: def.name,
      subject: claim.subject ?? undefined,
      resourceId: claim.resource_id ?? undefined,
      payload: Option.getOrUndefined(decoded),
      schedule: claim.scheduled_for == null ? undefined : { timestamp: new Date(claim.scheduled_for) }
    }
    const state: ExecutionState = {
      registered,
      claim,
      ex,
      renewalOf,
      def,
      runId,
      stepPolicies: new Map(),
      history,
      replay: HistoryCursor.make(history),
      namesSeen: [],
      seen: new Set(),
      signalFree: new Set(),
      decoded,
      runContext,
      defaultQueue: def.queue ?? workflowQueue,
      runPriority: claim.priority ?? undefined,
      speculative,
      target,
      targetReached: false,
      stop: undefined,
      inStep: false,
      preclaimed: undefined
    }
    return state
  })
