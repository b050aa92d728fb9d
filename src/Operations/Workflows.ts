/**
 * Workflows for operators: runs listed with the Workflows page's filters, one run with its
 * attempts, signals and audit trail, counts by status and stuck reason, the "needs attention"
 * groups, per-class insights, and the outside verbs, one run at a time or in bulk (at most 500 a
 * call, each through its own guarded transition). Every read and verb is scoped to the caller's
 * resource when it has one.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option } from "effect"
import { statementNow, toDatabaseError } from "../Database.ts"
import type { RunHandle, RunInfo } from "../Workflow/Client.ts"
import type { RunListRow, RunQuery, StuckClock, StuckReason } from "../Workflow/QuerySql.ts"
import * as States from "../Workflow/States.ts"
import type { InvalidInput, SignalError, StartError, VerbError } from "../Workflow/WorkflowError.ts"
import { CHILD_WAIT_PREFIX } from "../Workflow/WorkflowSql.ts"
import {
  BULK_LIMIT,
  type Change,
  count,
  type Deps,
  decodeCursor,
  encodeCursor,
  inWords,
  iso,
  isoOrNull,
  pageSize,
  UUID,
  type View
} from "./Deps.ts"
import type {
  AttentionGroup,
  BulkResult,
  DefinitionView,
  RunDetail,
  RunPage,
  RunSummary,
  SignalResult,
  VerbResult,
  WorkflowCounts,
  WorkflowStats
} from "./Model.ts"
import { Conflict, InvalidRequest, NotFound, type OperationsError } from "./OperationsError.ts"
import { payloadView, textView } from "./Redact.ts"

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

/** What an outside verb may carry besides who and why. */
export interface VerbInput extends Change {
  /** The status the caller read: a run that has moved on answers `Conflict` and nothing is done. */
  readonly expectedStatus?: States.RunStatus | undefined
  /** `resume_at`: the step to run again. */
  readonly step?: string | undefined
  /** `reschedule`: when the scheduled step runs. */
  readonly at?: Date | undefined
  /** `cancel`: also cancel the run's child runs that have not ended (and theirs). */
  readonly cancelChildren?: boolean | undefined
}

/** The child runs a run's detail lists (a parent has one per child step). */
const CHILDREN_SHOWN = 500

/** A signal to send. */
export interface SignalInput {
  readonly name: string
  readonly payload: unknown
  /** A retried call passes the same key: one signal is stored. Blank is no key. */
  readonly idempotencyKey?: string | undefined
}

/** The verbs `act` runs (a signal has its own function). */
export type ActVerb = Exclude<States.OutsideVerb, "signal">

/** The verbs in the past tense, for summaries. */
const DONE: Record<States.OutsideVerb, string> = {
  pause: "Paused",
  resume: "Resumed",
  resume_at: "Resumed",
  cancel: "Cancelled",
  run_now: "Ran now",
  reschedule: "Rescheduled",
  rerun: "Reran",
  skip: "Skipped",
  signal: "Signalled"
}

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

/** The operators' workflow operations. */
export const makeWorkflows = (deps: Deps) => {
  const { config, workflows: client, workflowSql } = deps
  const clock = Effect.map(
    statementNow,
    (now): StuckClock => ({
      now,
      stallMs: Duration.toMillis(config.workflowStallThreshold),
      waitingMs: Duration.toMillis(config.workflowWaitingVisibilityThreshold)
    })
  )

  const summaryOf = (row: RunListRow, payloads: boolean): RunSummary => {
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

  const queryOf = (filter: RunFilter, view: View): Omit<RunQuery, "limit" | "before"> => ({
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

  const checkId = (id: string) => (UUID.test(id) ? Effect.void : Effect.fail(new NotFound({ kind: "run", id })))

  const validate = (filter: RunFilter) =>
    filter.id !== undefined && !UUID.test(filter.id)
      ? Effect.fail(new InvalidRequest({ reason: `invalid run id ${JSON.stringify(filter.id)}` }))
      : Effect.void

  /** Runs newest first; the filters combine and survive paging (`next`). */
  const list = (
    filter: RunFilter & { readonly cursor?: string | undefined; readonly limit?: number | undefined },
    view: View = {}
  ): Effect.Effect<RunPage, OperationsError> =>
    Effect.gen(function* () {
      yield* validate(filter)
      const limit = yield* pageSize(filter.limit)
      const before =
        filter.cursor === undefined
          ? undefined
          : yield* Effect.map(decodeCursor(filter.cursor, 2), ([createdAt, id]) => ({ createdAt: createdAt!, id: id! }))
      if (before !== undefined && !UUID.test(before.id)) return yield* new InvalidRequest({ reason: "invalid cursor" })
      const rows = yield* workflowSql
        .runListFiltered({ ...queryOf(filter, view), before, limit: limit + 1 }, yield* clock)
        .pipe(Effect.mapError(toDatabaseError("list workflow runs")))
      const page = rows.slice(0, limit)
      const last = page.at(-1)
      return {
        runs: page.map((r) => summaryOf(r, view.payloads === true)),
        next: rows.length > limit && last !== undefined ? encodeCursor(last.cursor_at, last.id) : null
      }
    })

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

  /** One run with its payload, output, newest 100 attempts, signals and audit trail. */
  const show = (id: string, view: View = {}): Effect.Effect<RunDetail, OperationsError> =>
    Effect.gen(function* () {
      const row = yield* rowOf(id, view)
      const payloads = view.payloads === true
      const [steps, signals, events] = yield* Effect.all([
        client.steps(id),
        client.signals(id),
        client.events(id)
      ]).pipe(Effect.catchTag("InvalidInput", (error) => Effect.fail(new InvalidRequest({ reason: error.message }))))
      const children = yield* childrenOf(id, view)
      return {
        run: {
          ...summaryOf(row, payloads),
          payload: payloadView(row.payload, payloads),
          output: payloadView(row.output, payloads),
          idempotencyKey: row.idempotency_key,
          rerunOf: row.rerun_of,
          engineVersion: row.engine_version,
          definitionVersion: row.definition_version
        },
        steps: steps.slice(-100).map((s) => ({
          name: s.name,
          attempt: s.attempt,
          position: s.position,
          status: s.status,
          queue: s.queue,
          scheduledAt: iso(s.scheduledAt),
          dueAt: iso(s.dueAt),
          startedAt: isoOrNull(s.startedAt),
          finishedAt: isoOrNull(s.finishedAt),
          durationMs:
            s.startedAt !== undefined && s.finishedAt !== undefined
              ? s.finishedAt.getTime() - s.startedAt.getTime()
              : null,
          worker: s.worker ?? null,
          appRevision: s.appRevision ?? null,
          waitingFor: s.waitingFor ?? null,
          batchId: s.batchId ?? null,
          output: payloadView(s.output, payloads),
          error: payloadView(s.error, payloads)
        })),
        signals: signals.map((s) => ({
          id: String(s.id),
          name: s.name,
          status: s.status,
          payload: payloadView(s.payload, payloads),
          duplicate: s.duplicate
        })),
        events: events.map((e) => ({
          id: String(e.id),
          type: e.type,
          step: e.step ?? null,
          attempt: e.attempt ?? null,
          actor: e.actor,
          reason: e.reason ?? null,
          details: payloads ? (e.details ?? null) : redactDetails(e.details),
          at: iso(e.at)
        })),
        children: children.map((c) => ({ id: c.id, workflow: c.workflow, step: c.parent_step, status: c.status }))
      }
    })

  /** Counts by status and of ongoing runs by stuck reason, overall and per workflow. */
  const counts = (
    options: {
      readonly workflow?: string | undefined
      /** Count the ongoing statuses only (finished and cancelled answer 0): index reads, whatever the history. */
      readonly ongoingOnly?: boolean | undefined
    } = {},
    view: View = {}
  ) =>
    Effect.gen(function* () {
      const workflow = options.workflow ?? null
      const resourceId = view.resourceId ?? null
      const byStatusRows = yield* workflowSql
        .runCountsByStatus(workflow, resourceId, options.ongoingOnly === true ? States.OngoingStatuses : null)
        .pipe(Effect.mapError(toDatabaseError("count workflow runs")))
      const stuckRows = yield* workflowSql
        .runCountsStuck(yield* clock, workflow, resourceId)
        .pipe(Effect.mapError(toDatabaseError("count stuck workflow runs")))
      const zero = () => Object.fromEntries(States.RunStatuses.map((s) => [s, 0])) as Record<string, number>
      const byStatus = zero()
      const stuck: Record<string, number> = {}
      const perWorkflow = new Map<string, { byStatus: Record<string, number>; stuck: Record<string, number> }>()
      const entry = (w: string) => {
        let e = perWorkflow.get(w)
        if (e === undefined) {
          e = { byStatus: zero(), stuck: {} }
          perWorkflow.set(w, e)
        }
        return e
      }
      for (const r of byStatusRows) {
        byStatus[r.status] = (byStatus[r.status] ?? 0) + count(r.n)
        entry(r.workflow).byStatus[r.status] = count(r.n)
      }
      for (const r of stuckRows) {
        stuck[r.stuck_reason] = (stuck[r.stuck_reason] ?? 0) + count(r.n)
        entry(r.workflow).stuck[r.stuck_reason] = count(r.n)
      }
      return {
        byStatus,
        stuck,
        byWorkflow: [...perWorkflow.entries()]
          .sort(([a], [b]) => (a < b ? -1 : 1))
          .map(([w, e]) => ({ workflow: w, ...e }))
      } satisfies WorkflowCounts
    })

  /** Stuck runs grouped by class, step, stuck reason and error class (the 200 biggest groups). */
  const attention = (
    options: { readonly workflow?: string | undefined } = {},
    view: View = {}
  ): Effect.Effect<ReadonlyArray<AttentionGroup>, OperationsError> =>
    Effect.gen(function* () {
      const rows = yield* workflowSql
        .runAttentionGroups(yield* clock, options.workflow ?? null, view.resourceId ?? null, 200)
        .pipe(Effect.mapError(toDatabaseError("group stuck workflow runs")))
      return rows.map((r) => ({
        workflow: r.workflow,
        step: r.step,
        stuckReason: r.stuck_reason,
        errorClass: r.error_class,
        count: count(r.n),
        firstSeen: iso(r.first_seen),
        lastSeen: iso(r.last_seen),
        newestError: textView(r.newest_error, view.payloads === true)
      }))
    })

  const windowOf = (windowMs: number | undefined) => {
    const retention = config.workflowRetention === undefined ? Infinity : Duration.toMillis(config.workflowRetention)
    const ms = windowMs ?? Duration.toMillis(Duration.hours(24))
    return Number.isFinite(ms) && ms > 0
      ? Effect.succeed(Math.min(ms, retention))
      : Effect.fail(new InvalidRequest({ reason: "window must be a positive number of milliseconds" }))
  }

  /** One row per workflow class: going on, paused, stuck now; ended in the window; end-to-end p50/p95. */
  const definitions = (
    options: { readonly windowMs?: number | undefined } = {},
    view: View = {}
  ): Effect.Effect<ReadonlyArray<DefinitionView>, OperationsError> =>
    Effect.gen(function* () {
      const windowMs = yield* windowOf(options.windowMs)
      const rows = yield* workflowSql
        .runDefinitions(yield* clock, windowMs, view.resourceId ?? null)
        .pipe(Effect.mapError(toDatabaseError("read workflow definitions")))
      const loaded = Option.match(deps.registry, {
        onNone: () => new Set<string>(),
        onSome: (r) => new Set(r.workflows.keys())
      })
      const seen = new Set(rows.map((r) => r.workflow))
      const never = [...loaded].filter((w) => !seen.has(w))
      return [
        ...rows.map((r) => ({
          workflow: r.workflow,
          loaded: loaded.has(r.workflow),
          ongoing: count(r.ongoing),
          paused: count(r.paused),
          stuck: count(r.stuck),
          finished: count(r.finished),
          cancelled: count(r.cancelled),
          p50Ms: r.p50_ms,
          p95Ms: r.p95_ms
        })),
        ...never.map((workflow) => ({
          workflow,
          loaded: true,
          ongoing: 0,
          paused: 0,
          stuck: 0,
          finished: 0,
          cancelled: 0,
          p50Ms: null,
          p95Ms: null
        }))
      ].sort((a, b) => (a.workflow < b.workflow ? -1 : 1))
    })

  /** A class's steps in order: runs at each now, and the attempts that ended in the window. */
  const stats = (
    workflow: string,
    options: { readonly windowMs?: number | undefined } = {},
    view: View = {}
  ): Effect.Effect<WorkflowStats, OperationsError> =>
    Effect.gen(function* () {
      const windowMs = yield* windowOf(options.windowMs)
      const rows = yield* workflowSql
        .stepStats(workflow, yield* clock, windowMs, view.resourceId ?? null)
        .pipe(Effect.mapError(toDatabaseError("read workflow step stats")))
      return {
        workflow,
        windowMs,
        steps: rows.map((r) => {
          const attempts = count(r.attempts)
          return {
            step: r.step,
            scheduled: count(r.scheduled),
            running: count(r.running),
            waiting: count(r.waiting),
            paused: count(r.paused),
            attempts,
            failureRate: attempts > 0 ? count(r.failed) / attempts : null,
            skipRate: attempts > 0 ? count(r.skipped) / attempts : null,
            reattemptRate: attempts > 0 ? count(r.reattempted) / attempts : null,
            p50Ms: r.p50_ms,
            p95Ms: r.p95_ms,
            p99Ms: r.p99_ms,
            pickupP50Ms: r.pickup_p50_ms,
            fewSamples: attempts < 20
          }
        })
      }
    })

  // ---- verbs ----

  const conflictOf = (verb: string, id: string, view: View) =>
    Effect.flatMap(rowOf(id, view), (row) =>
      Effect.fail(
        new Conflict({
          verb,
          run: id,
          current: row.status,
          allowed: States.availableActions(row.status),
          reason: "invalid_transition"
        })
      )
    )

  /** Maps a verb's error: a lost race re-reads the run and answers where it is now. */
  const fromVerbError =
    (verb: string, id: string, view: View) =>
    (error: VerbError | SignalError | StartError | InvalidInput): Effect.Effect<never, OperationsError> => {
      switch (error._tag) {
        case "RunNotFound":
          return Effect.fail(new NotFound({ kind: "run", id }))
        case "InvalidTransition":
        case "NotPaused":
        case "NotOngoing":
          return conflictOf(verb, id, view)
        case "UnknownStep":
          return Effect.fail(new NotFound({ kind: "step", id: `${id}:${error.step}` }))
        case "DatabaseError":
          return Effect.fail(error)
        default:
          return Effect.fail(new InvalidRequest({ reason: error.message }))
      }
    }

  const registered = (workflow: string) =>
    Option.flatMap(deps.registry, (r) => Option.fromUndefinedOr(r.workflows.get(workflow)))

  /** The run as it is now, checked against what the caller expects and what the verb allows. */
  const guard = (id: string, verb: States.OutsideVerb, expected: States.RunStatus | undefined, view: View) =>
    Effect.gen(function* () {
      const row = yield* rowOf(id, view)
      if (expected !== undefined && expected !== row.status) {
        return yield* new Conflict({
          verb,
          run: id,
          current: row.status,
          allowed: States.availableActions(row.status),
          reason: "status_mismatch",
          expected
        })
      }
      if (!States.isLegal(verb, row.status)) return yield* conflictOf(verb, id, view)
      return row
    })

  /**
   * Runs the engine's guarded verb on one run (after the caller's `expectedStatus` check, when
   * given); the id of the run after (a rerun's is new). A run that moved on is a `Conflict`.
   */
  const perform = (id: string, verb: ActVerb, input: VerbInput, view: View): Effect.Effect<string, OperationsError> =>
    Effect.gen(function* () {
      yield* checkId(id)
      if (input.expectedStatus !== undefined) yield* guard(id, verb, input.expectedStatus, view)
      const options = { actor: input.actor, reason: input.reason, resourceId: view.resourceId }
      const run = (effect: Effect.Effect<RunInfo | RunHandle, VerbError | StartError | InvalidInput>) =>
        effect.pipe(
          Effect.map((r) => r.id),
          Effect.catch(fromVerbError(verb, id, view))
        )
      switch (verb) {
        case "pause":
          return yield* run(client.pause(id, options))
        case "resume":
          return yield* run(client.resume(id, options))
        case "resume_at": {
          if (input.step === undefined) return yield* new InvalidRequest({ reason: "resume_at needs a step" })
          return yield* run(client.resumeAt(id, input.step, options))
        }
        case "cancel":
          return yield* run(client.cancel(id, { ...options, cancelChildren: input.cancelChildren }))
        case "run_now":
          return yield* run(client.runNow(id, options))
        case "reschedule": {
          if (input.at === undefined) return yield* new InvalidRequest({ reason: "reschedule needs a time (at)" })
          return yield* run(client.reschedule(id, input.at, options))
        }
        case "rerun":
          return yield* run(client.rerun(id, options))
        case "skip":
          return yield* run(client.skip(id, options))
      }
    })

  /** Runs one outside verb on one run, through the engine's guarded transition; the run after. */
  const act = (
    id: string,
    verb: ActVerb,
    input: VerbInput,
    view: View = {}
  ): Effect.Effect<VerbResult, OperationsError> =>
    Effect.gen(function* () {
      // a cancel of the children says how many it ended (those live before that are cancelled after)
      const withChildren = verb === "cancel" && input.cancelChildren === true && UUID.test(id)
      const liveBefore = withChildren ? yield* liveChildren(id, view) : []
      const runId = yield* perform(id, verb, input, view)
      const run = yield* summary(runId, view)
      const ended = withChildren
        ? (yield* childrenOf(id, view)).filter((c) => c.status === "cancelled" && liveBefore.includes(c.id)).length
        : 0
      return {
        verb,
        run,
        summary: `${DONE[verb]} run ${id}${runId !== id ? ` as ${runId}` : ""}: it is ${run.status}${withChildren ? ` (and ${ended} live child run(s))` : ""}`
      }
    })

  /** Sends a signal to one run (its payload checked against the workflow's declared Schema when registered here). */
  const signal = (
    id: string,
    sent: SignalInput,
    input: Change & { readonly expectedStatus?: States.RunStatus | undefined },
    view: View = {}
  ): Effect.Effect<SignalResult, OperationsError> =>
    Effect.gen(function* () {
      const row = yield* guard(id, "signal", input.expectedStatus, view)
      const declared = registered(row.workflow)
      const receipt = yield* client
        .signal(id, sent.name, sent.payload, {
          actor: input.actor,
          reason: input.reason,
          resourceId: view.resourceId,
          idempotencyKey: sent.idempotencyKey,
          workflow: Option.match(declared, {
            onNone: () => undefined,
            onSome: (w) => ({ name: w.workflow.name, signals: w.workflow.signals })
          })
        })
        .pipe(Effect.catch(fromVerbError("signal", id, view)))
      return {
        run: yield* summary(id, view),
        signal: { id: String(receipt.id), name: receipt.name, duplicate: receipt.duplicate, claimed: receipt.claimed }
      }
    })

  /**
   * Runs a verb on many runs: explicit ids (refused over 500) or a filter (its first 500, oldest
   * first; `capped` says more match). Each run goes through its own guarded transition; runs that
   * moved on first (or vanished) count as `alreadyMovedOn` and are left as they are.
   */
  const bulk = (
    verb: ActVerb,
    target: { readonly ids?: ReadonlyArray<string> | undefined; readonly filter?: RunFilter | undefined },
    input: Change & { readonly cancelChildren?: boolean | undefined },
    view: View = {}
  ): Effect.Effect<BulkResult, OperationsError> =>
    Effect.gen(function* () {
      if (verb === "resume_at" || verb === "reschedule") {
        return yield* new InvalidRequest({ reason: `${verb} is not a bulk verb` })
      }
      if (input.cancelChildren === true && verb !== "cancel") {
        return yield* new InvalidRequest({ reason: "cancelChildren goes with cancel only" })
      }
      let ids: ReadonlyArray<string>
      let capped = false
      if (target.ids !== undefined) {
        if (target.ids.length > BULK_LIMIT) {
          return yield* new InvalidRequest({
            reason: `at most ${BULK_LIMIT} runs per call (got ${target.ids.length}); split the call or use a filter`
          })
        }
        ids = target.ids
      } else if (target.filter !== undefined) {
        yield* validate(target.filter)
        const rows = yield* workflowSql
          .runIdsMatching(queryOf(target.filter, view), yield* clock, BULK_LIMIT + 1)
          .pipe(Effect.mapError(toDatabaseError("select workflow runs")))
        capped = rows.length > BULK_LIMIT
        ids = rows.slice(0, BULK_LIMIT).map((r) => r.id)
      } else {
        return yield* new InvalidRequest({ reason: "give ids or a filter" })
      }
      let moved = 0
      let movedOn = 0
      let failed = 0
      // each run in its own transaction, a few at a time (a pool's worth would starve other callers)
      yield* Effect.forEach(
        ids,
        (id) =>
          Effect.flatMap(Effect.result(perform(id, verb, input, view)), (result) => {
            if (result._tag === "Success") moved++
            else if (result.failure._tag === "Conflict" || result.failure._tag === "NotFound") movedOn++
            else {
              failed++
              return Effect.logWarning(`pgbus: bulk ${verb} of run ${id} failed`, result.failure)
            }
            return Effect.void
          }),
        { concurrency: 4, discard: true }
      )
      return {
        requested: ids.length,
        moved,
        alreadyMovedOn: movedOn,
        failed,
        capped,
        summary: `${DONE[verb]} ${moved}${movedOn > 0 ? `; ${movedOn} had already moved on` : ""}${failed > 0 ? `; ${failed} failed (see the log)` : ""}${capped ? "; more match: call again" : ""}`
      }
    })

  return { list, show, summary, counts, attention, definitions, stats, act, signal, bulk }
}

/** Audit details without payload-bearing fields (signal payloads, outputs, error text). */
const redactDetails = (details: unknown): unknown => {
  if (typeof details !== "object" || details === null || Array.isArray(details)) return details ?? null
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(details)) {
    out[key] = /payload|output|message|error|stack|data/i.test(key) ? payloadView(value, false) : value
  }
  return out
}
