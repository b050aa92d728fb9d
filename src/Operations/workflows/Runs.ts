/**
 * One workflow run as operators see it: the list's filter, the summary and its sentence in
 * words, and the scoped look-ups every workflow operation starts from (one run's list row, its
 * children, the clock stuck reasons are measured by).
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import { statementNow, toDatabaseError } from "../../Database.ts"
import type { RunListRow, RunQuery, StuckClock, StuckReason } from "../../Workflow/QuerySql.ts"
import * as States from "../../Workflow/States.ts"
import { CHILD_WAIT_PREFIX } from "../../Workflow/WorkflowSql.ts"
import { type Deps, inWords, iso, isoOrNull, UUID, type View } from "../Deps.ts"
import type { RunSummary } from "../Model.ts"
import { InvalidRequest, NotFound } from "../OperationsError.ts"
import { textView } from "../Redact.ts"

/** Filters of the Workflows list (seed 000's: class, step, error class, subject, id, ranges). */
export interface RunFilter {
  readonly workflow?: string | undefined
  readonly status?: ReadonlyArray<States.RunStatus> | undefined
  readonly step?: string | undefined
  readonly errorClass?: string | undefined
  readonly subject?: string | undefined
  readonly id?: string | undefined
  readonly stuckReason?: StuckReason | undefined
  readonly createdFrom?: Date | undefined
  readonly createdTo?: Date | undefined
  readonly endedFrom?: Date | undefined
  readonly endedTo?: Date | undefined
}

/** The child runs a run's detail lists (a parent has one per child step). */
const CHILDREN_SHOWN = 500

/** What a run is doing and what happens next, in words. */
export const describeRun = (row: RunListRow): string => {
  const step = row.current_step === null ? undefined : `\`${row.current_step}\``
  const now = row.db_now.getTime()
  const ago = (d: Date | null) => (d === null ? "" : ` since ${inWords(now - d.getTime())} ago`)
  switch (row.status) {
    case "finished":
      return `Finished${row.finished_at ? ` ${inWords(now - row.finished_at.getTime())} ago` : ""}`
    case "cancelled":
      return `Cancelled${row.finished_at ? ` ${inWords(now - row.finished_at.getTime())} ago` : ""}`
    case "performing":
      return `Performing ${step ?? "a step"}${row.step_attempt !== null && row.step_attempt > 1 ? ` (attempt ${row.step_attempt})` : ""}`
    case "waiting": {
      const deadline = row.step_timeout_at ? `, deadline in ${inWords(row.step_timeout_at.getTime() - now)}` : ""
      if (row.step_wait_for === "pgbus.fan_out") {
        return `Waiting for its fan-out batch${row.step_batch_id ? ` ${row.step_batch_id}` : ""} at ${step ?? "a step"}${ago(row.step_waiting_since)}`
      }
      if (row.step_wait_for?.startsWith(CHILD_WAIT_PREFIX) === true) {
        return `Waiting for its child run at ${step ?? "a step"}${ago(row.step_waiting_since)}`
      }
      if (row.step_wait_for === "pgbus.poll") return `Polling at ${step ?? "a step"}${ago(row.step_waiting_since)}`
      return row.step_wait_for === null
        ? `Waiting at ${step ?? "a step"}${ago(row.step_waiting_since)}${deadline}`
        : `Waiting for signal \`${row.step_wait_for}\` at ${step ?? "a step"}${ago(row.step_waiting_since)}${deadline}`
    }
    case "paused": {
      const error = row.error_class ? `: ${row.error_class}` : ""
      return `Paused on ${step ?? "its step"}${error} (${row.paused_reason ?? "manual"}) — resume or cancel`
    }
    case "ready": {
      if (row.step_due_at === null) return `Ready: ${step ?? "the next step"} is about to run`
      const inMs = row.step_due_at.getTime() - now
      return inMs > 1000
        ? `Scheduled: ${step ?? "the next step"} runs in ${inWords(inMs)}`
        : `Ready: ${step ?? "the next step"} due ${inWords(-inMs)} ago${row.stuck_reason === "overdue" ? ", overdue (nobody picked it up)" : ""}`
    }
  }
}

/** A run's list row as the list shows it (error text redacted without payloads). */
export const summaryOf = (row: RunListRow, payloads: boolean): RunSummary => {
  const error = row.error as { readonly tag?: unknown; readonly message?: unknown } | null
  return {
    id: row.id,
    workflow: row.workflow,
    subject: row.subject,
    resourceId: row.resource_id,
    status: row.status,
    currentStep: row.current_step,
    pausedReason: row.paused_reason,
    stuckReason: row.stuck_reason,
    error:
      error !== null && typeof error === "object"
        ? {
            class: typeof error.tag === "string" ? error.tag : "Error",
            message: textView(typeof error.message === "string" ? error.message : "", payloads) ?? ""
          }
        : null,
    createdAt: iso(row.created_at),
    updatedAt: iso(row.updated_at),
    finishedAt: isoOrNull(row.finished_at),
    priority: row.priority,
    singleton: row.singleton,
    scheduledFor: isoOrNull(row.scheduled_for),
    parentRunId: row.parent_run_id ?? null,
    parentStep: row.parent_step ?? null,
    description: describeRun(row),
    availableActions: States.availableActions(row.status)
  }
}

/** The query statement's form of a list filter, scoped to the caller's resource. */
export const queryOf = (filter: RunFilter, view: View): Omit<RunQuery, "limit" | "before"> => ({
  workflow: filter.workflow,
  statuses: filter.status,
  step: filter.step,
  errorClass: filter.errorClass,
  subject: filter.subject,
  id: filter.id,
  stuckReason: filter.stuckReason,
  createdFrom: filter.createdFrom,
  createdTo: filter.createdTo,
  endedFrom: filter.endedFrom,
  endedTo: filter.endedTo,
  resourceId: view.resourceId
})

/** A run id that cannot name a run is `NotFound` (the statement is not run). */
export const checkId = (id: string) => (UUID.test(id) ? Effect.void : Effect.fail(new NotFound({ kind: "run", id })))

/** Refuses a filter whose run id is not a UUID. */
export const validateFilter = (filter: RunFilter) =>
  filter.id !== undefined && !UUID.test(filter.id)
    ? Effect.fail(new InvalidRequest({ reason: `invalid run id ${JSON.stringify(filter.id)}` }))
    : Effect.void

/** The scoped look-ups of one run every workflow operation starts from. */
export const makeRunLookup = (deps: Deps) => {
  const { config, workflowSql } = deps

  /** The statement time and the thresholds the stuck reasons are measured by. */
  const clock = Effect.map(
    statementNow,
    (now): StuckClock => ({
      now,
      stallMs: Duration.toMillis(config.workflowStallThreshold),
      waitingMs: Duration.toMillis(config.workflowWaitingVisibilityThreshold)
    })
  )

  /** The list row of one run (scoped), or `NotFound`. */
  const rowOf = (id: string, view: View) =>
    Effect.gen(function* () {
      yield* checkId(id)
      const [row] = yield* workflowSql
        .runListFiltered({ id, resourceId: view.resourceId, limit: 1 }, yield* clock)
        .pipe(Effect.mapError(toDatabaseError("read workflow run")))
      if (row === undefined) return yield* new NotFound({ kind: "run", id })
      return row
    })

  /** A run's child runs (scoped), oldest first. */
  const childrenOf = (id: string, view: View) =>
    workflowSql
      .runChildren(id, view.resourceId ?? null, CHILDREN_SHOWN)
      .pipe(Effect.mapError(toDatabaseError("read child workflow runs")))

  /** The ids of a run's children that have not ended. */
  const liveChildren = (id: string, view: View) =>
    Effect.map(childrenOf(id, view), (rows) =>
      rows.filter((c) => (States.OngoingStatuses as ReadonlyArray<string>).includes(c.status)).map((c) => c.id)
    )

  /** One run as the list shows it. */
  const summary = (id: string, view: View = {}) =>
    Effect.map(rowOf(id, view), (row) => summaryOf(row, view.payloads === true))

  return { clock, rowOf, childrenOf, liveChildren, summary }
}

/** The run look-ups (`makeRunLookup`). */
export type RunLookup = ReturnType<typeof makeRunLookup>
