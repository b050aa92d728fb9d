/**
 * The sweep's statements: stalled, overdue and idle work, timed-out waits, lost-message
 * repair, retention.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { StepOutcomeVerbs } from "../States.ts"
import type { WorkflowSqlContext } from "./Context.ts"
import { FAN_OUT_WAIT, type RunRow, type StepRow } from "./Rows.ts"

/** Sweep statements of one schema. */
export const makeSweepSql = (ctx: WorkflowSqlContext) => {
  const { runs, steps, events, NOW, uuidArray, stepMessage, renewalDue, sql, messageCtes, fromIn, openSteps } = ctx

  /** In-progress attempts past their own timeout or the stall threshold. */
  const stepsStalled = (thresholdMs: number, now: Date | null, limit: number) =>
    sql<StepRow & { readonly workflow: string }>`SELECT st.*, ru.workflow FROM ${steps} st
      JOIN ${runs} ru ON ru.id = st.run_id
      WHERE st.status = 'in_progress' AND ${fromIn("ru.status", ...StepOutcomeVerbs)}
        AND st.started_at < ${NOW(now)} - least(
          coalesce(st.timeout_ms, ${PgTypes.float8(thresholdMs)}), ${PgTypes.float8(thresholdMs)}) * interval '1 millisecond'
      ORDER BY st.started_at LIMIT ${limit}`

  /** Scheduled attempts of ready runs due more than the threshold ago (their message may be lost). */
  const stepsOverdue = (thresholdMs: number, now: Date | null, limit: number) =>
    sql<StepRow & { readonly workflow: string }>`SELECT st.*, ru.workflow FROM ${steps} st
      JOIN ${runs} ru ON ru.id = st.run_id
      WHERE st.status = 'scheduled' AND ${fromIn("ru.status", "claim")}
        AND st.due_at < ${NOW(now)} - ${PgTypes.float8(thresholdMs)} * interval '1 millisecond'
      ORDER BY st.due_at LIMIT ${limit}`

  /** Fan-out steps waiting on their batch since before the threshold (the sweep checks the batch). */
  const fanOutsWaiting = (thresholdMs: number, now: Date | null, limit: number) =>
    sql<StepRow & { readonly workflow: string }>`SELECT st.*, ru.workflow FROM ${steps} st
      JOIN ${runs} ru ON ru.id = st.run_id
      WHERE st.status = 'waiting' AND st.wait_for = ${FAN_OUT_WAIT} AND st.batch_id IS NOT NULL
        AND st.waiting_since < ${NOW(now)} - ${PgTypes.float8(thresholdMs)} * interval '1 millisecond'
      ORDER BY st.waiting_since LIMIT ${limit}`

  /** Waiting runs per workflow whose step has waited longer than the visibility threshold (stuck). */
  const runsWaitingOverdue = (thresholdMs: number, now: Date | null) =>
    sql<{ readonly workflow: string; readonly n: bigint }>`SELECT ru.workflow, count(*) AS n FROM ${runs} ru
      JOIN ${steps} st ON st.run_id = ru.id AND st.status = 'waiting'
      WHERE ${fromIn("ru.status", "wake")}
        AND st.waiting_since < ${NOW(now)} - ${PgTypes.float8(thresholdMs)} * interval '1 millisecond'
      GROUP BY ru.workflow`

  /** Ready runs with no open step, idle past the threshold (their continue message may be lost). */
  const runsIdle = (thresholdMs: number, now: Date | null, limit: number) =>
    sql<RunRow>`SELECT ru.* FROM ${runs} ru
      WHERE ${fromIn("ru.status", "claim")} AND ru.updated_at < ${NOW(now)} - ${PgTypes.float8(thresholdMs)} * interval '1 millisecond'
        AND NOT EXISTS (SELECT 1 FROM ${steps} st WHERE st.run_id = ru.id
                        AND ${openSteps("st.status")})
      ORDER BY ru.updated_at LIMIT ${limit}`

  /** Waiting steps of waiting runs whose deadline has passed. */
  const waitsTimedOut = (now: Date | null, thresholdMs: number, limit: number) =>
    sql<StepRow & { readonly workflow: string }>`SELECT st.*, ru.workflow FROM ${steps} st
      JOIN ${runs} ru ON ru.id = st.run_id
      WHERE st.status = 'waiting' AND st.timeout_at IS NOT NULL AND st.timeout_at <= ${NOW(now)}
        AND ${renewalDue(now, thresholdMs)}
        AND ${fromIn("ru.status", "wake")}
      ORDER BY st.timeout_at LIMIT ${limit}`

  /** Re-sends the message of a scheduled step (the sweep's lost-message repair); due now, so one sweep wins. */
  const stepResend = (p: {
    readonly workflow: string
    readonly runId: string
    readonly stepId: bigint
    readonly physicalQueue: string
    readonly thresholdMs: number
    readonly now: Date | null
  }) => {
    const message = messageCtes(
      p.physicalQueue,
      "resent_message",
      sql`SELECT ${NOW(p.now)} AS vt, ${stepMessage(p.workflow, sql`s.id`, sql`${p.runId}::uuid`)} AS message FROM s`,
      p.now
    )
    return sql<{ readonly id: bigint }>`WITH s AS (
        UPDATE ${steps} SET due_at = ${NOW(p.now)}
        WHERE id = ${p.stepId} AND status = 'scheduled'
          AND due_at < ${NOW(p.now)} - ${PgTypes.float8(p.thresholdMs)} * interval '1 millisecond'
        RETURNING id),
      ${message.ctes}
      SELECT s.id, ${message.notifyRef} AS notified FROM s`
  }

  /**
   * Deletes finished and cancelled runs older than the retention (their signals cascade); returns
   * their ids, whose steps and events `runsDeleteRows` deletes next.
   */
  const runsDeleteFinished = (retentionMs: number, now: Date | null, limit: number) =>
    sql<{ readonly id: string }>`DELETE FROM ${runs} WHERE id IN (
        SELECT id FROM ${runs} WHERE finished_at IS NOT NULL
          AND finished_at < ${NOW(now)} - ${PgTypes.float8(retentionMs)} * interval '1 millisecond'
        LIMIT ${limit})
      RETURNING id`

  /**
   * Deletes the steps and events of deleted runs. No foreign key ties them to their run
   * (migration 0009), so this runs after `runsDeleteFinished` in its transaction: the later
   * statement's snapshot also sees an event committed by a writer that held a run's row lock
   * while the runs' delete waited for it (one statement would have left that event orphaned).
   */
  const runsDeleteRows = (ids: ReadonlyArray<string>) => {
    const array = uuidArray(ids)
    return sql`WITH ds AS (DELETE FROM ${steps} WHERE run_id = ANY(${array}::uuid[]))
      DELETE FROM ${events} WHERE run_id = ANY(${array}::uuid[])`
  }

  /** Makes a scheduled step due now, without a message (test helpers run it inline). */
  const stepMakeDue = (stepId: bigint, now: Date | null) =>
    sql<{ readonly id: bigint }>`UPDATE ${steps} SET due_at = least(due_at, ${NOW(now)})
      WHERE id = ${stepId} AND status = 'scheduled' RETURNING id`

  return {
    stepsStalled,
    stepsOverdue,
    fanOutsWaiting,
    runsWaitingOverdue,
    runsIdle,
    waitsTimedOut,
    stepResend,
    runsDeleteFinished,
    runsDeleteRows,
    stepMakeDue
  }
}
