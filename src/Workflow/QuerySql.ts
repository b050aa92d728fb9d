/**
 * Read-only statements on the workflow tables for operators: run listings with every filter of
 * the Workflows page, counts by status and by stuck reason, the "needs attention" groups and the
 * per-class insights. Nothing here writes; the verbs go through the engine's guarded functions.
 *
 * A run's stuck reason is computed in one SQL expression (`stuckReason`), so the list filter, the
 * counts, the attention groups and the `pgbus_workflows_stuck` gauge agree:
 * `paused_error` (paused on a failed step), `stalled` (paused on a stalled step), `paused_manual`
 * (paused by an outside pause or the body's own), `overdue` (a ready run's scheduled step nobody
 * picked up within the stall threshold), `waiting_overdue` (a wait without a deadline older than
 * the waiting visibility threshold).
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { Result } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import type { RunStatus, StepStatus } from "./States.ts"
import type { RunRow } from "./WorkflowSql.ts"

/** The stuck reasons of seed 000, in the order the docs list them. */
export const StuckReasons = ["paused_error", "stalled", "paused_manual", "overdue", "waiting_overdue"] as const
export type StuckReason = (typeof StuckReasons)[number]

/** The thresholds a stuck reason is judged by, and the clock. */
export interface StuckClock {
  readonly now: Date | null
  readonly stallMs: number
  readonly waitingMs: number
}

/** Filters of a run listing (every one optional; they combine). */
export interface RunQuery {
  readonly workflow?: string | undefined
  readonly statuses?: ReadonlyArray<RunStatus> | undefined
  readonly subject?: string | undefined
  readonly resourceId?: string | undefined
  readonly id?: string | undefined
  /** The run's current step. */
  readonly step?: string | undefined
  /** The `tag` of the run's recorded error. */
  readonly errorClass?: string | undefined
  readonly stuckReason?: StuckReason | undefined
  readonly createdFrom?: Date | undefined
  readonly createdTo?: Date | undefined
  /** When the run finished or was cancelled. */
  readonly endedFrom?: Date | undefined
  readonly endedTo?: Date | undefined
  /** Cursor: runs created before this (created_at as text, id). */
  readonly before?: { readonly createdAt: string; readonly id: string } | undefined
  readonly limit: number
}

/** A listed run with what its row of the Workflows page shows. */
export interface RunListRow extends RunRow {
  readonly cursor_at: string
  readonly stuck_reason: StuckReason | null
  readonly error_class: string | null
  /** The current step's latest attempt (null when none). */
  readonly step_status: StepStatus | null
  readonly step_attempt: number | null
  readonly step_due_at: Date | null
  readonly step_wait_for: string | null
  readonly step_waiting_since: Date | null
  readonly step_timeout_at: Date | null
  readonly step_batch_id: string | null
  readonly db_now: Date
}

/** One "needs attention" group. */
export interface AttentionRow {
  readonly workflow: string
  readonly step: string | null
  readonly stuck_reason: StuckReason
  readonly error_class: string | null
  readonly n: bigint
  readonly first_seen: Date
  readonly last_seen: Date
  readonly newest_error: string | null
}

/** A workflow class's figures over a window. */
export interface DefinitionRow {
  readonly workflow: string
  readonly ongoing: bigint
  readonly paused: bigint
  readonly stuck: bigint
  readonly finished: bigint
  readonly cancelled: bigint
  readonly p50_ms: number | null
  readonly p95_ms: number | null
}

/** A step of a workflow class: runs at it now, and its attempts that ended in the window. */
export interface StepStatsRow {
  readonly step: string
  readonly position: number
  readonly scheduled: bigint
  readonly running: bigint
  readonly waiting: bigint
  readonly paused: bigint
  readonly attempts: bigint
  readonly failed: bigint
  readonly skipped: bigint
  /** Attempts after the first (a step run again after a failure or a resume). */
  readonly reattempted: bigint
  readonly p50_ms: number | null
  readonly p95_ms: number | null
  readonly p99_ms: number | null
  readonly pickup_p50_ms: number | null
}

const textArray = (values: ReadonlyArray<string>) => Result.getOrThrow(PgTypes.array(values, PgTypes.OID.text))

/** The statements of one schema. */
export const makeWorkflowQuerySql = (sql: SqlClient.SqlClient, schema: string) => {
  const runs = sql(`${schema}.workflow_runs`)
  const steps = sql(`${schema}.workflow_steps`)
  const NOW = (now: Date | null) => sql`coalesce(${now}::timestamptz, now())`
  const ago = (now: Date | null, ms: number) => sql`${NOW(now)} - ${PgTypes.float8(ms)} * interval '1 millisecond'`

  /** The stuck reason of the run aliased `ru` (null: not stuck). */
  const stuckReason = (c: StuckClock) => sql`CASE
      WHEN ru.status = 'paused' AND ru.paused_reason = 'stalled' THEN 'stalled'
      WHEN ru.status = 'paused' AND ru.paused_reason IN ('manual', 'step_pause') THEN 'paused_manual'
      WHEN ru.status = 'paused' THEN 'paused_error'
      WHEN ru.status = 'ready' AND EXISTS (SELECT 1 FROM ${steps} os WHERE os.run_id = ru.id
             AND os.status = 'scheduled' AND os.due_at < ${ago(c.now, c.stallMs)}) THEN 'overdue'
      WHEN ru.status = 'waiting' AND EXISTS (SELECT 1 FROM ${steps} ws WHERE ws.run_id = ru.id
             AND ws.status = 'waiting' AND ws.timeout_at IS NULL
             AND ws.waiting_since < ${ago(c.now, c.waitingMs)}) THEN 'waiting_overdue'
    END`

  const conditionsOf = (q: Omit<RunQuery, "limit" | "before">, c: StuckClock): Array<Statement.Fragment> => {
    const out: Array<Statement.Fragment> = []
    if (q.workflow !== undefined) out.push(sql`ru.workflow = ${q.workflow}`)
    if (q.statuses !== undefined && q.statuses.length > 0) {
      out.push(sql`ru.status = ANY(${textArray(q.statuses)}::text[])`)
    }
    if (q.subject !== undefined) out.push(sql`ru.subject = ${q.subject}`)
    if (q.resourceId !== undefined) out.push(sql`ru.resource_id = ${q.resourceId}`)
    if (q.id !== undefined) out.push(sql`ru.id = ${q.id}::uuid`)
    if (q.step !== undefined) out.push(sql`ru.current_step = ${q.step}`)
    if (q.errorClass !== undefined) out.push(sql`ru.error ->> 'tag' = ${q.errorClass}`)
    if (q.createdFrom !== undefined) out.push(sql`ru.created_at >= ${q.createdFrom}`)
    if (q.createdTo !== undefined) out.push(sql`ru.created_at < ${q.createdTo}`)
    if (q.endedFrom !== undefined) out.push(sql`ru.finished_at >= ${q.endedFrom}`)
    if (q.endedTo !== undefined) out.push(sql`ru.finished_at < ${q.endedTo}`)
    if (q.stuckReason !== undefined) out.push(sql`(${stuckReason(c)}) = ${q.stuckReason}`)
    return out
  }

  const where = (conditions: ReadonlyArray<Statement.Fragment>) =>
    conditions.length > 0 ? sql`WHERE ${sql.and(conditions)}` : sql``

  /** Runs newest first with the current step's latest attempt; the cursor carries created_at as text (microseconds). */
  const runListFiltered = (q: RunQuery, c: StuckClock) => {
    const conditions = conditionsOf(q, c)
    if (q.before !== undefined) {
      conditions.push(sql`(ru.created_at, ru.id) < (${q.before.createdAt}::timestamptz, ${q.before.id}::uuid)`)
    }
    return sql<RunListRow>`SELECT ru.*, ru.created_at::text AS cursor_at, ${stuckReason(c)} AS stuck_reason,
        ru.error ->> 'tag' AS error_class, st.status AS step_status, st.attempt AS step_attempt,
        st.due_at AS step_due_at, st.wait_for AS step_wait_for, st.waiting_since AS step_waiting_since,
        st.timeout_at AS step_timeout_at, st.batch_id::text AS step_batch_id, ${NOW(c.now)} AS db_now
      FROM ${runs} ru
      LEFT JOIN LATERAL (SELECT s.status, s.attempt, s.due_at, s.wait_for, s.waiting_since, s.timeout_at, s.batch_id
        FROM ${steps} s WHERE s.run_id = ru.id AND s.name = ru.current_step
        ORDER BY s.attempt DESC LIMIT 1) st ON true
      ${where(conditions)}
      ORDER BY ru.created_at DESC, ru.id DESC LIMIT ${q.limit}`
  }

  /** Ids of the runs a filter matches, oldest first (a bulk verb's targets), at most `limit`. */
  const runIdsMatching = (q: Omit<RunQuery, "before" | "limit">, c: StuckClock, limit: number) =>
    sql<{ readonly id: string; readonly status: RunStatus }>`SELECT ru.id::text AS id, ru.status FROM ${runs} ru
      ${where(conditionsOf(q, c))}
      ORDER BY ru.created_at, ru.id LIMIT ${limit}`

  /** A run's child runs (oldest first, at most `limit`), scoped to a resource when given. */
  const runChildren = (parentRunId: string, resourceId: string | null, limit: number) =>
    sql<{
      readonly id: string
      readonly workflow: string
      readonly parent_step: string
      readonly status: RunStatus
    }>`SELECT id::text AS id, workflow, parent_step, status FROM ${runs}
      WHERE parent_run_id = ${parentRunId}::uuid
        AND (${resourceId}::text IS NULL OR resource_id = ${resourceId}::text)
      ORDER BY created_at, id LIMIT ${limit}`

  /** How many runs a filter matches. */
  const runCountMatching = (q: Omit<RunQuery, "before" | "limit">, c: StuckClock) =>
    sql<{ readonly n: bigint }>`SELECT count(*) AS n FROM ${runs} ru ${where(conditionsOf(q, c))}`

  /**
   * Counts by workflow and status (the `pgbus_workflows` gauge and the home page); of some statuses
   * only when given (the ongoing ones are few, and counted from the status index, never a scan of
   * every finished run).
   */
  const runCountsByStatus = (
    workflow: string | null,
    resourceId: string | null,
    statuses: ReadonlyArray<RunStatus> | null = null
  ) =>
    sql<{ readonly workflow: string; readonly status: RunStatus; readonly n: bigint }>`SELECT workflow, status,
        count(*) AS n FROM ${runs}
      WHERE (${workflow}::text IS NULL OR workflow = ${workflow}::text)
        AND (${resourceId}::text IS NULL OR resource_id = ${resourceId}::text)
        ${statuses === null ? sql`` : sql`AND status = ANY(${textArray(statuses)}::text[])`}
      GROUP BY workflow, status`

  /** Counts of ongoing stuck runs by workflow and reason (the `pgbus_workflows_stuck` gauge). */
  const runCountsStuck = (c: StuckClock, workflow: string | null, resourceId: string | null) =>
    sql<{ readonly workflow: string; readonly stuck_reason: StuckReason; readonly n: bigint }>`SELECT workflow,
        stuck_reason, count(*) AS n FROM (
          SELECT ru.workflow, ${stuckReason(c)} AS stuck_reason FROM ${runs} ru
          WHERE ru.status IN ('ready', 'waiting', 'paused')
            AND (${workflow}::text IS NULL OR ru.workflow = ${workflow}::text)
            AND (${resourceId}::text IS NULL OR ru.resource_id = ${resourceId}::text)) s
      WHERE stuck_reason IS NOT NULL
      GROUP BY workflow, stuck_reason`

  /** Stuck runs grouped by class, step, reason and error class, biggest first (at most `limit`). */
  const runAttentionGroups = (c: StuckClock, workflow: string | null, resourceId: string | null, limit: number) =>
    sql<AttentionRow>`SELECT workflow, current_step AS step, stuck_reason, error_class, count(*) AS n,
        min(since) AS first_seen, max(since) AS last_seen,
        (array_agg(error_message ORDER BY since DESC))[1] AS newest_error
      FROM (
        SELECT ru.workflow, ru.current_step, ${stuckReason(c)} AS stuck_reason, ru.error ->> 'tag' AS error_class,
          ru.error ->> 'message' AS error_message, coalesce(ru.paused_at, ru.updated_at) AS since
        FROM ${runs} ru
        WHERE ru.status IN ('ready', 'waiting', 'paused')
          AND (${workflow}::text IS NULL OR ru.workflow = ${workflow}::text)
          AND (${resourceId}::text IS NULL OR ru.resource_id = ${resourceId}::text)) s
      WHERE stuck_reason IS NOT NULL
      GROUP BY workflow, current_step, stuck_reason, error_class
      ORDER BY count(*) DESC, max(since) DESC
      LIMIT ${limit}`

  /** Per workflow class: runs going on, paused and stuck now; ended in the window; end-to-end p50/p95. */
  const runDefinitions = (c: StuckClock, windowMs: number, resourceId: string | null) =>
    sql<DefinitionRow>`SELECT ru.workflow,
        count(*) FILTER (WHERE ru.status IN ('ready', 'performing', 'waiting', 'paused')) AS ongoing,
        count(*) FILTER (WHERE ru.status = 'paused') AS paused,
        count(*) FILTER (WHERE ru.status IN ('ready', 'waiting', 'paused') AND (${stuckReason(c)}) IS NOT NULL) AS stuck,
        count(*) FILTER (WHERE ru.status = 'finished' AND ru.finished_at >= ${ago(c.now, windowMs)}) AS finished,
        count(*) FILTER (WHERE ru.status = 'cancelled' AND ru.finished_at >= ${ago(c.now, windowMs)}) AS cancelled,
        (percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM ru.finished_at - ru.created_at) * 1000)
          FILTER (WHERE ru.status = 'finished' AND ru.finished_at >= ${ago(c.now, windowMs)}))::float8 AS p50_ms,
        (percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM ru.finished_at - ru.created_at) * 1000)
          FILTER (WHERE ru.status = 'finished' AND ru.finished_at >= ${ago(c.now, windowMs)}))::float8 AS p95_ms
      FROM ${runs} ru
      WHERE (${resourceId}::text IS NULL OR ru.resource_id = ${resourceId}::text)
      GROUP BY ru.workflow ORDER BY ru.workflow`

  /** Per step of a class: runs at it now by status, and its attempts that ended in the window. */
  const stepStats = (workflow: string, c: StuckClock, windowMs: number, resourceId: string | null) =>
    sql<StepStatsRow>`WITH r AS (
        SELECT id, status, current_step FROM ${runs}
        WHERE workflow = ${workflow} AND (${resourceId}::text IS NULL OR resource_id = ${resourceId}::text)),
      a AS (
        SELECT s.name, min(s.position) AS position,
          count(*) FILTER (WHERE s.finished_at >= ${ago(c.now, windowMs)}) AS attempts,
          count(*) FILTER (WHERE s.finished_at >= ${ago(c.now, windowMs)} AND s.status = 'failed') AS failed,
          count(*) FILTER (WHERE s.finished_at >= ${ago(c.now, windowMs)} AND s.status = 'skipped') AS skipped,
          count(*) FILTER (WHERE s.finished_at >= ${ago(c.now, windowMs)} AND s.attempt > 1) AS reattempted,
          (percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM s.finished_at - s.started_at) * 1000)
            FILTER (WHERE s.finished_at >= ${ago(c.now, windowMs)} AND s.started_at IS NOT NULL))::float8 AS p50_ms,
          (percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM s.finished_at - s.started_at) * 1000)
            FILTER (WHERE s.finished_at >= ${ago(c.now, windowMs)} AND s.started_at IS NOT NULL))::float8 AS p95_ms,
          (percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM s.finished_at - s.started_at) * 1000)
            FILTER (WHERE s.finished_at >= ${ago(c.now, windowMs)} AND s.started_at IS NOT NULL))::float8 AS p99_ms,
          (percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM s.started_at - s.due_at) * 1000)
            FILTER (WHERE s.finished_at >= ${ago(c.now, windowMs)} AND s.started_at IS NOT NULL))::float8
            AS pickup_p50_ms
        FROM ${steps} s JOIN r ON r.id = s.run_id
        GROUP BY s.name),
      n AS (
        SELECT current_step AS name,
          count(*) FILTER (WHERE status = 'ready') AS scheduled,
          count(*) FILTER (WHERE status = 'performing') AS running,
          count(*) FILTER (WHERE status = 'waiting') AS waiting,
          count(*) FILTER (WHERE status = 'paused') AS paused
        FROM r WHERE current_step IS NOT NULL AND status IN ('ready', 'performing', 'waiting', 'paused')
        GROUP BY current_step)
      SELECT a.name AS step, a.position, coalesce(n.scheduled, 0) AS scheduled, coalesce(n.running, 0) AS running,
        coalesce(n.waiting, 0) AS waiting, coalesce(n.paused, 0) AS paused, a.attempts, a.failed, a.skipped, a.reattempted,
        a.p50_ms, a.p95_ms, a.p99_ms, a.pickup_p50_ms
      FROM a LEFT JOIN n ON n.name = a.name
      ORDER BY a.position, a.name`

  return {
    runListFiltered,
    runIdsMatching,
    runCountMatching,
    runChildren,
    runCountsByStatus,
    runCountsStuck,
    runAttentionGroups,
    runDefinitions,
    stepStats
  }
}

/** The statements of one schema. */
export type WorkflowQuerySql = ReturnType<typeof makeWorkflowQuerySql>
