/**
 * The execution record: one claimed run's execution, what it replays (the history, the cursor
 * into it, the claimed step) and what its body asked for. Every part of the execution reads and
 * writes this one record instead of variables of a closure.
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import { Effect, Exit, Option, Schema } from "effect"
import { boundedMemo } from "../../../internal/memo.ts"
import * as HistoryCursor from "../../HistoryCursor.ts"
import type { RunContext, StepOptions } from "../../Runtime.ts"
import type { HistoryEntry } from "../../WorkflowSql.ts"
import type { Claimed } from "../Messages.ts"
import type { RegisteredWorkflow } from "../Services.ts"
import type { Requested, Stop } from "./End.ts"

/** A step's options plus the runner's own: a poll takes a held signal as its fast-forwarded result. */
export type RunnerStepOptions<A> = StepOptions<A> & { readonly takesHeldSignal?: boolean | undefined }

// Every outcome records the hash of the step names so far, and the runs of a workflow share
// their name sequences: a memo spares a sha256 per step (about 3% of the runner's CPU in W3 of
// bench:workflows).
export const hashJoined = boundedMemo((joined) => createHash("sha256").update(joined).digest("hex").slice(0, 32))
/** The hash of a run's step names so far, recorded with each outcome. */
export const hashNames = (names: ReadonlyArray<string>): string => hashJoined(names.join("\u0000"))

/**
 * One execution of a step message: the mark of its claims, and what a drain that interrupts it
 * must release (the attempt it claimed and has not ended, or a completed attempt whose outcome
 * waits for the next step).
 */
export interface Execution {
  readonly mark: string | null
  /** Its claim failed with its connection (it may have committed): sent again, it found nothing to claim. */
  claimLost: boolean
  held: bigint | undefined
  /**
   * The step the worker's read claimed for it (ReadClaims.ts): its outcome may share the
   * workers' statement though it holds a signal (Outcome.ts).
   */
  claimedInRead?: bigint | undefined
  pending: Pending | undefined
  /** The workflow's queue (where a continue message goes). */
  queue: string | undefined
  /** The workflows this process registered (a `Workflow.child` step refuses a child not among them). */
  workflows?: ReadonlyMap<string, RegisteredWorkflow> | undefined
  /** Its delivery's worker takes a `Settling` back (see `Delivery.settles`). */
  mayLeaveSettling?: boolean | undefined
  /** The run's last outcome, left in flight: the execution's caller awaits it. */
  settling?: Effect.Effect<void, unknown> | undefined
}

export interface Target {
  readonly id: bigint
  readonly name: string
  readonly attempt: number
  readonly position: number
  readonly reattempts: number
  readonly queue: string
}

export interface Pending {
  readonly step: Target
  readonly status: "completed" | "skipped"
  readonly output: string | null
}

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
  /**
   * The first control verb the running step called: it ends the step whatever the step's code
   * then does with the defect carrying it (a catch cannot swallow it, as it cannot interruption).
   */
  controlInStep: Extract<Requested, { readonly _tag: "Control" }> | undefined
  /** A fresh run's first step, inserted claimed with the run's claim. */
  preclaimed: bigint | undefined
}

/** The payload decoders, one per Schema (a decoder per call compiled its parser's closure anew). */
const payloadDecoders = new WeakMap<object, (input: unknown) => Effect.Effect<unknown, unknown, unknown>>()
const payloadDecoderOf = (schema: RegisteredWorkflow["workflow"]["payload"]) => {
  let decode = payloadDecoders.get(schema)
  if (decode === undefined) {
    decode = Schema.decodeUnknownEffect(schema) as (input: unknown) => Effect.Effect<unknown, unknown, unknown>
    payloadDecoders.set(schema, decode)
  }
  return decode
}

/**
 * The record of a claimed run's execution, before its body runs. A payload that decodes at once
 * (a Schema with no effectful step, the common case) makes no Effect of its own.
 */
export const makeExecutionState = (
  registered: RegisteredWorkflow,
  claim: Claimed,
  ex: Execution,
  speculative: boolean,
  renewalOf: Date | undefined,
  workflowQueue: string
): Effect.Effect<ExecutionState> => {
  const def = registered.workflow
  const build = (decoded: Option.Option<unknown>): ExecutionState => {
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
            queue: ""
          }
    const runContext: RunContext<unknown> = {
      workflowId: runId,
      workflow: def.name,
      subject: claim.subject ?? undefined,
      resourceId: claim.resource_id ?? undefined,
      payload: Option.getOrUndefined(decoded),
      schedule: claim.scheduled_for == null ? undefined : { timestamp: new Date(claim.scheduled_for) }
    }
    return {
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
      controlInStep: undefined,
      preclaimed: undefined
    }
  }
  const decoding = payloadDecoderOf(def.payload)(claim.payload)
  // the Schema's parser answers a plain payload with an Exit: no fiber work
  if (Exit.isExit(decoding) && Exit.isSuccess(decoding)) return Effect.succeed(build(Option.some(decoding.value)))
  return Effect.map(Effect.option(decoding), build) as Effect.Effect<ExecutionState>
}
