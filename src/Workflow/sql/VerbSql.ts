/**
 * The outside verbs' statements: each runs in a transaction that starts with `runLock`.
 *
 * @since 0.1.0
 */
import type { RunStatus } from "../States.ts"
import type { WorkflowSqlContext } from "./Context.ts"
import type { RunRow, StepRow } from "./Rows.ts"

/** Verb statements of one schema. */
export const makeVerbSql = (ctx: WorkflowSqlContext) => {
  const { runs, steps, NOW, textArray, stepMessage, sql, messageCtes, openSteps, scheduledRest } = ctx

  /** Locks a run (scoped to a resource when given). */
  const runLock = (id: string, resourceId: string | null) =>
    sql<RunRow>`SELECT * FROM ${runs}
      WHERE id = ${id}::uuid AND (${resourceId}::text IS NULL OR resource_id = ${resourceId}::text)
      FOR UPDATE`

  /** Moves a run to `to`, guarded on `from`. */
  const runSetStatus = (p: {
    readonly id: string
    readonly from: ReadonlyArray<RunStatus>
    readonly to: RunStatus
    readonly pausedReason?: string | null
    readonly now: Date | null
  }) =>
    sql<{ readonly status: RunStatus }>`UPDATE ${runs} SET status = ${p.to}, updated_at = ${NOW(p.now)},
        paused_at = ${p.to === "paused" ? sql`coalesce(paused_at, ${NOW(p.now)})` : sql`NULL`},
        paused_reason = ${p.to === "paused" ? sql`${p.pausedReason ?? "manual"}::text` : sql`NULL`},
        error = ${p.to === "paused" ? sql`error` : sql`NULL`},
        finished_at = ${p.to === "finished" || p.to === "cancelled" ? NOW(p.now) : sql`NULL`}
      WHERE id = ${p.id}::uuid AND status = ANY(${textArray(p.from)}::text[])
      RETURNING status`

  /** Cancels every open attempt of a run. */
  const stepsCancelOpen = (runId: string, now: Date | null) =>
    sql<{ readonly id: bigint; readonly name: string; readonly attempt: number }>`UPDATE ${steps}
      SET status = 'cancelled', finished_at = ${NOW(now)}
      WHERE run_id = ${runId}::uuid AND ${openSteps("status")}
      RETURNING id, name, attempt`

  /** The run's latest attempt (its current step). */
  const stepLatest = (runId: string) =>
    sql<StepRow>`SELECT * FROM ${steps} WHERE run_id = ${runId}::uuid ORDER BY id DESC LIMIT 1`

  /** The latest attempt of a named step. */
  const stepLatestNamed = (runId: string, name: string) =>
    sql<StepRow>`SELECT * FROM ${steps}
      WHERE run_id = ${runId}::uuid AND name = ${name} ORDER BY attempt DESC LIMIT 1`

  /** A new scheduled attempt of a step and its message (resume, resumeAt). */
  const stepInsertScheduled = (p: {
    readonly workflow: string
    readonly runId: string
    readonly name: string
    readonly attempt: number
    readonly position: number
    readonly queue: string
    readonly physicalQueue: string
    readonly reattempts: number
    readonly actor: string
    readonly now: Date | null
  }) => {
    return sql<{ readonly id: bigint }>`WITH s AS (
        INSERT INTO ${steps} (run_id, name, attempt, position, status, queue, scheduled_at, due_at, reattempts)
        SELECT id, ${p.name}, ${p.attempt}, ${p.position}, 'scheduled', ${p.queue}, ${NOW(p.now)},
                ${NOW(p.now)}, ${p.reattempts}
        FROM ${runs} WHERE id = ${p.runId}::uuid
        RETURNING id, name, attempt, due_at),
      ${scheduledRest({ ...p, label: "resume_message", actor: sql`${p.actor}` })}`
  }

  /** Moves a scheduled step's due time and sends its message for then (run_now, reschedule, resume). */
  const stepReschedule = (p: {
    readonly workflow: string
    readonly stepId: bigint
    readonly runId: string
    readonly at: Date | null
    readonly physicalQueue: string
    readonly now: Date | null
  }) => {
    const message = messageCtes(
      p.physicalQueue,
      "rescheduled_message",
      sql`SELECT s.due_at AS vt, ${stepMessage(p.workflow, sql`s.id`, sql`${p.runId}::uuid`)} AS message FROM s`,
      p.now
    )
    return sql<{ readonly id: bigint; readonly due_at: Date }>`WITH s AS (
        UPDATE ${steps} SET due_at = coalesce(${p.at}::timestamptz, ${NOW(p.now)})
        WHERE id = ${p.stepId} AND status = 'scheduled'
        RETURNING id, due_at),
      ${message.ctes}
      SELECT s.id, s.due_at, ${message.notifyRef} AS notified FROM s`
  }

  /** Sends a continue message for a run (its next step is found by replay). */
  const runSendContinue = (workflow: string, runId: string, physicalQueue: string, now: Date | null) => {
    const message = messageCtes(
      physicalQueue,
      "continue_message",
      sql`SELECT ${NOW(now)} AS vt, ${stepMessage(workflow, sql`NULL`, sql`${runId}::uuid`)} AS message`,
      now
    )
    return sql`WITH ${message.ctes} SELECT ${message.notifyRef} AS notified`
  }

  return {
    runLock,
    runSetStatus,
    stepsCancelOpen,
    stepLatest,
    stepLatestNamed,
    stepInsertScheduled,
    stepReschedule,
    runSendContinue
  }
}
