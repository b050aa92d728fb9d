/**
 * `Workflow.child`: a step that starts a child run (once per step: the child row is unique on the
 * parent's run and step name), parks on `pgbus.child:<step>` and is woken, through the signal
 * path (a signal held by the step, `stepWake`), in the same transaction as the child's end. The
 * body always reads the child's row: a finished child gives its output, a cancelled one (or a
 * paused one, with `onChildPause: "fail"`) fails the step with `ChildWorkflowFailed`.
 *
 * @since 0.1.0
 */
import { Effect, Option, Schema } from "effect"
import { statementNow, toDatabaseError, withTransaction } from "../../Database.ts"
import { isStorableJson } from "../../internal/storable.ts"
import type { EngineContext } from "../engine/Context.ts"
import { isSqlError } from "../engine/Errors.ts"
import { LATE, parkedBy, StepRequest } from "../engine/execution/End.ts"
import type { ExecutionState, Target } from "../engine/execution/State.ts"
import { CARRIED_INPUT_LIMIT, ENGINE_VERSION } from "../engine/Messages.ts"
import type { ChildDefinition, ChildOptions, WorkflowRuntime } from "../Runtime.ts"
import * as States from "../States.ts"
import {
  AlreadyRunning,
  ChildOutputInvalid,
  ChildWorkflowFailed,
  InvalidWorkflowPayload,
  WorkflowNotRegistered
} from "../WorkflowError.ts"
import { CHILD_WAIT_PREFIX, type ChildLink, type RunRow } from "../WorkflowSql.ts"
import type { VerbEnv } from "./Env.ts"

/** What the body asks the runner for: start the child (unless it exists) and park the step on it. */
export interface ChildRequest {
  readonly workflow: ChildDefinition
  /** The child's payload, encoded with its Schema, as JSON text. */
  readonly payload: string
  readonly options: ChildOptions
}

/** Whether a child in this state wakes its parent: its end, or a pause the parent raises (not an operator's). */
const wakesParent = (link: Pick<ChildLink, "status" | "paused_reason" | "parent_wake_on_pause">) =>
  States.isTerminal(link.status) ||
  (link.status === "paused" && link.parent_wake_on_pause && link.paused_reason !== "manual")

/** The signal that wakes the parent for one child's end (or pause): one per child and kind. */
const wakeKey = (link: Pick<ChildLink, "id" | "status">) =>
  `child:${link.id}${States.isTerminal(link.status) ? "" : ":paused"}`

/** A child's message: its error's, or why it ended. */
const detailOf = (row: RunRow): string | undefined => {
  const error = row.error as { readonly message?: unknown } | null
  return typeof error?.message === "string" ? error.message : (row.paused_reason ?? undefined)
}

const built = new WeakMap<EngineContext, ReturnType<typeof buildChildWake>>()

/** Waking a child's parent: in the child's end's transaction, and by the sweep for a lost one (built once per engine). */
export const makeChildWake = (ctx: EngineContext) => {
  let wake = built.get(ctx)
  if (wake === undefined) {
    wake = buildChildWake(ctx)
    built.set(ctx, wake)
  }
  return wake
}

const buildChildWake = (ctx: EngineContext) => {
  const { config, sql, statements, db, queueOf } = ctx

  /**
   * Wakes the parent of a child that ended (or paused, when the parent raises it): a signal
   * `pgbus.child:<step>` stored on the parent (once per child: its key), with the
   * `child_ended` / `child_paused` event, claimed by the parent's waiting step, which is woken
   * (`stepWake`; a paused parent holds it until resumed). A parent that is over, or waits on
   * something else, is left alone. Runs in the caller's transaction.
   */
  const wakeParent = (link: ChildLink, now: Date | null) =>
    Effect.gen(function* () {
      if (link.parent_run_id === null || link.parent_step === null || !wakesParent(link)) return false
      const [parent] = yield* statements.runLock(link.parent_run_id, null)
      if (parent === undefined || !States.isLegal("signal", parent.status)) return false
      const name = `${CHILD_WAIT_PREFIX}${link.parent_step}`
      const key = wakeKey(link)
      let [signal] = yield* statements.signalByKey(parent.id, key)
      if (signal === undefined) {
        ;[signal] = yield* statements.signalInsert({
          runId: parent.id,
          name,
          payload: JSON.stringify({ child_run_id: link.id, status: link.status }),
          idempotencyKey: key,
          actor: "system",
          reason: `child ${link.status}`,
          now
        })
        yield* statements.eventInsert({
          runId: parent.id,
          type: States.isTerminal(link.status) ? "child_ended" : "child_paused",
          step: link.parent_step,
          attempt: null,
          actor: "system",
          reason: null,
          details: JSON.stringify({ child_run_id: link.id, workflow: link.workflow, status: link.status }),
          now
        })
      }
      if (signal?.status !== "pending") return false
      const [waiting] = yield* statements.stepWaitingOf(parent.id)
      if (waiting === undefined || waiting.wait_for !== name) return false
      yield* statements.signalClaim({ runId: parent.id, signalId: signal.id, stepId: waiting.id, now })
      if (States.isLegal("wake", parent.status)) {
        yield* statements.stepWake({
          workflow: parent.workflow,
          runId: parent.id,
          stepId: waiting.id,
          timedOut: false,
          physicalQueue: queueOf(waiting.queue || config.workflowQueue).physical,
          now
        })
      }
      return true
    })

  /** Wakes the parent of this run if it is a child in a state that wakes it (in the caller's transaction). */
  const wakeParentOf = (runId: string, now: Date | null) =>
    Effect.gen(function* () {
      const [link] = yield* statements.runParentLink(runId)
      return link === undefined ? false : yield* wakeParent(link, now)
    })

  /**
   * A transition of a child run (`isChild`), with its parent's wake-up in the same transaction;
   * any other run's transition as it is (no statement added).
   */
  const withParentWake = <A, E, R>(runId: string, isChild: boolean, write: Effect.Effect<A, E, R>) =>
    isChild
      ? withTransaction(
          sql,
          Effect.tap(write, () => Effect.flatMap(statementNow, (now) => wakeParentOf(runId, now)))
        ).pipe(Effect.mapError((e) => (isSqlError(e) ? toDatabaseError("wake the parent run")(e) : e)))
      : write

  /** The sweep's repair: parents still waiting on a child that ended (a wake-up lost). How many it woke. */
  const repairLostWakes = (limit: number) =>
    Effect.gen(function* () {
      let woken = 0
      for (const link of yield* statements.childrenUnwoken(limit).pipe(db("find unwoken parents"))) {
        const now = yield* statementNow
        const done = yield* withTransaction(sql, wakeParent(link, now)).pipe(db("wake a parent run"))
        if (done) {
          woken++
          yield* Effect.logInfo(
            `pgbus: workflow run ${link.parent_run_id} woken by the sweep: its child ${link.id} ${link.status}`
          )
        }
      }
      return woken
    })

  return { wakeParent, wakeParentOf, withParentWake, repairLostWakes }
}

/** The body's `child`, on one execution. */
export const makeChildVerb = ({ ctx, st, reach }: VerbEnv) => {
  const { config, statements, db } = ctx
  const { runId } = st
  const { runtimeStep } = reach

  /** The child's outcome for the step, if it has one (ended, or paused and raised). */
  const outcomeOf = (name: string, row: RunRow, options: ChildOptions) =>
    Effect.gen(function* () {
      if (row.status === "finished") {
        if (options.output === undefined) return Option.some(row.output)
        const decoded = yield* Schema.decodeUnknownEffect(options.output)(row.output).pipe(
          Effect.mapError(
            (e) => new ChildOutputInvalid({ step: name, workflow: row.workflow, child: row.id, issue: e.message })
          )
        )
        return Option.some(decoded)
      }
      if (
        row.status === "cancelled" ||
        (row.status === "paused" && options.onChildPause === "fail" && row.paused_reason !== "manual")
      ) {
        const detail = detailOf(row)
        return yield* new ChildWorkflowFailed({
          step: name,
          workflow: row.workflow,
          child: row.id,
          status: row.status,
          ...(detail === undefined ? {} : { detail })
        })
      }
      return Option.none()
    })

  const child: WorkflowRuntime["Service"]["child"] = (name, workflow, input, options) => {
    const body = Effect.gen(function* () {
      // checked before anything is written: the child is registered here, its input encodes
      const registry = st.ex.workflows
      if (registry !== undefined && !registry.has(workflow.name)) {
        return yield* new WorkflowNotRegistered({ workflow: workflow.name })
      }
      const encoded = yield* Schema.encodeUnknownEffect(workflow.payload)(input).pipe(
        Effect.mapError((e) => new InvalidWorkflowPayload({ workflow: workflow.name, issue: e.message }))
      )
      let text: string | undefined
      try {
        text = JSON.stringify(encoded)
      } catch (e) {
        return yield* new InvalidWorkflowPayload({ workflow: workflow.name, issue: `not JSON: ${String(e)}` })
      }
      if (text === undefined || !isStorableJson(text)) {
        return yield* new InvalidWorkflowPayload({ workflow: workflow.name, issue: "not storable JSON" })
      }
      const size = Buffer.byteLength(text, "utf8")
      if (size > config.maxPayloadSize) {
        return yield* new InvalidWorkflowPayload({
          workflow: workflow.name,
          issue: `${size} bytes, over the limit of ${config.maxPayloadSize}`
        })
      }
      const [row] = yield* statements.runChildOf(runId, name).pipe(db("find child run"))
      if (row !== undefined) {
        const outcome = yield* outcomeOf(name, row, options)
        if (Option.isSome(outcome)) return outcome.value
      }
      return new StepRequest({ _tag: "Child", request: { workflow, payload: text, options } })
    })
    return runtimeStep(name, body, {
      ...(options.onError === undefined ? {} : { onError: options.onError }),
      ...(options.output === undefined ? {} : { output: options.output })
    })
  }
  return child
}

// the runner's primitive under the verb: what the step's end asks for, applied

/** Starting a step's child and parking the step on it. */
export const makeChild = (ctx: EngineContext, st: ExecutionState) => {
  const { config, sql, jobs, statements, queueOf } = ctx
  const { runId, runContext } = st
  const { wakeParent } = makeChildWake(ctx)

  /**
   * One transaction under the parent's row lock: the child's row (unless the step started it
   * already), its `started` event and first message, the parent's `child_started` event, and the
   * step parked on `pgbus.child:<step>`. A child that ended meanwhile wakes the step at once.
   * The step's end is `parkedBy` the transaction.
   */
  const openChild = (step: Target, request: ChildRequest) =>
    Effect.gen(function* () {
      const { workflow, payload, options: childOptions } = request
      // seed 004: a child runs at its definition's priority, else at its parent's
      const priority = workflow.priority ?? st.runPriority ?? null
      const singleton = workflow.singleton ?? false
      const { queue, physical } = queueOf(workflow.queue ?? config.workflowQueue, priority ?? undefined)
      yield* jobs.ensureQueue(queue)
      return yield* withTransaction(
        sql,
        Effect.gen(function* () {
          yield* statements.runLock(runId, null)
          const now = yield* statementNow
          let [row] = yield* statements.runChildOf(runId, step.name)
          if (row === undefined) {
            const subject = childOptions.subject ?? null
            const [started] = yield* statements.runStartMany(
              [
                {
                  id: crypto.randomUUID(),
                  workflow: workflow.name,
                  subject,
                  resourceId: childOptions.resourceId ?? runContext.resourceId ?? null,
                  payload,
                  idempotencyKey: null,
                  engineVersion: ENGINE_VERSION,
                  definitionVersion: workflow.version ?? null,
                  actor: "system",
                  reason: `child of ${runId} (step ${step.name})`,
                  // a prioritized run is claimed before its first replay (the claim reads its priority)
                  carryInput: Buffer.byteLength(payload, "utf8") <= CARRIED_INPUT_LIMIT && priority === null,
                  priority,
                  singleton,
                  scheduledFor: null,
                  parent: { runId, step: step.name, wakeOnPause: childOptions.onChildPause === "fail" },
                  now
                }
              ],
              physical,
              now
            )
            // refused by a unique index: a row whose id is null
            const inserted = started?.id === null ? undefined : started
            if (inserted === undefined) {
              const [holder] = yield* statements.runFindConflicting(workflow.name, subject, null, singleton)
              return yield* new AlreadyRunning({
                workflow: workflow.name,
                subject: subject ?? "",
                run: { id: holder?.id ?? "", workflow: workflow.name, status: holder?.status ?? "ready" }
              })
            }
            row = inserted
            yield* statements.eventInsert({
              runId,
              type: "child_started",
              step: step.name,
              attempt: step.attempt,
              actor: "system",
              reason: null,
              details: JSON.stringify({ child_run_id: row.id, workflow: workflow.name }),
              now
            })
          }
          const [parked] = yield* statements.stepPark({
            runId,
            stepId: step.id,
            waitFor: `${CHILD_WAIT_PREFIX}${step.name}`,
            matcher: false,
            timeoutMs: null,
            timeoutAt: null,
            onTimeout: null,
            periodMs: null,
            now
          })
          // the step was moved on while its body ran: no child started
          if (parked === undefined) return yield* Effect.fail(LATE)
          // the child ended between the body's read and this lock: its wake-up found the step
          // running and was stored pending; claimed now, it wakes the step at once
          yield* wakeParent(
            {
              id: row.id,
              workflow: row.workflow,
              status: row.status,
              paused_reason: row.paused_reason,
              parent_run_id: runId,
              parent_step: step.name,
              parent_wake_on_pause: childOptions.onChildPause === "fail"
            },
            now
          )
          return row.id
        })
      ).pipe(Effect.exit, Effect.map(parkedBy))
    })

  return { openChild }
}
