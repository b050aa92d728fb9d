/**
 * Workflow figures for operators: counts by status and stuck reason, the "needs attention"
 * groups, one row per workflow class, and a class's per-step insights over a window.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option } from "effect"
import { toDatabaseError } from "../../Database.ts"
import * as States from "../../Workflow/States.ts"
import { count, type Deps, iso, type View } from "../Deps.ts"
import type { AttentionGroup, DefinitionView, WorkflowCounts, WorkflowStats } from "../Model.ts"
import { InvalidRequest, type OperationsError } from "../OperationsError.ts"
import { textView } from "../Redact.ts"
import type { RunLookup } from "./Runs.ts"

/** Counts, attention groups, per-class rows and per-step insights. */
export const makeWorkflowInsights = (deps: Deps, runs: RunLookup) => {
  const { config, workflowSql } = deps
  const { clock } = runs

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

  /** The window asked for (24 hours by default), at most the retention. */
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

  return { counts, attention, definitions, stats }
}
