/**
 * Step outcomes other than an attempt's end (`FinishSql`, `OutcomeManySql`): a new step
 * scheduled by replay, a poll's next check.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import type { WorkflowSqlContext } from "./Context.ts"
import { POLL_WAIT } from "./Rows.ts"

/** Outcome statements of one schema. */
export const makeOutcomeSql = (ctx: WorkflowSqlContext) => {
  const { runs, steps, NOW, stepMessage, sql, messageCtes, fromIn, toOf, scheduledRest } = ctx

  /** A performing run's first new step, scheduled for later (the replay found a wait): run → ready. */
  const stepScheduleNew = (p: {
    readonly workflow: string
    readonly runId: string
    readonly name: string
    readonly attempt: number
    readonly position: number
    readonly queue: string
    readonly physicalQueue: string
    readonly delayMs: number
    readonly dueAt: Date | null
    readonly timeoutMs: number | null
    readonly reattempts: number
    readonly now: Date | null
  }) => {
    // a first step's wait counts from the start (seed 000), not from the claim that reached it
    const waitFrom = p.position === 0 && p.attempt === 1 ? sql`r.created_at` : NOW(p.now)
    return sql<{ readonly id: bigint }>`WITH r AS (
        UPDATE ${runs} SET status = ${toOf("schedule")}, current_step = ${p.name}, updated_at = ${NOW(p.now)}
        WHERE id = ${p.runId}::uuid AND ${fromIn("status", "schedule")} RETURNING id, created_at),
      s AS (
        INSERT INTO ${steps} (run_id, name, attempt, position, status, queue, scheduled_at, due_at, timeout_ms,
                              reattempts)
        SELECT r.id, ${p.name}, ${p.attempt}, ${p.position}, 'scheduled', ${p.queue}, ${NOW(p.now)},
               greatest(${NOW(p.now)}, coalesce(${p.dueAt}::timestamptz,
                 ${waitFrom} + ${PgTypes.float8(p.delayMs)} * interval '1 millisecond')),
               ${PgTypes.float8(p.timeoutMs)}, ${p.reattempts}
        FROM r RETURNING id, name, attempt, due_at),
      ${scheduledRest({ ...p, label: "scheduled_message", actor: sql.literal("'system'") })}`
  }

  /** A poll found nothing yet: the attempt goes back to scheduled for the next check. */
  const stepPollAgain = (p: {
    readonly workflow: string
    readonly runId: string
    readonly stepId: bigint
    readonly intervalMs: number
    /** The poll's timeout, counted from its first check; null polls without end. */
    readonly timeoutMs: number | null
    readonly physicalQueue: string
    readonly now: Date | null
  }) => {
    const message = messageCtes(
      p.physicalQueue,
      "poll_message",
      sql`SELECT s.due_at AS vt, ${stepMessage(p.workflow, sql`s.id`, sql`${p.runId}::uuid`)} AS message
          FROM s, r WHERE r.status = ${toOf("poll")}`,
      p.now
    )
    return sql<{ readonly id: bigint }>`WITH locked AS (
        SELECT id, status FROM ${runs} WHERE id = ${p.runId}::uuid AND ${fromIn("status", "poll", "hold")} FOR UPDATE),
      s AS (
        UPDATE ${steps} st SET status = 'scheduled', wait_for = ${POLL_WAIT},
          due_at = ${NOW(p.now)} + ${PgTypes.float8(p.intervalMs)} * interval '1 millisecond',
          timeout_at = coalesce(st.timeout_at,
            ${NOW(p.now)} + ${PgTypes.float8(p.timeoutMs)} * interval '1 millisecond')
        FROM locked WHERE st.id = ${p.stepId} AND st.run_id = locked.id AND st.status = 'in_progress'
          -- past its deadline the poll ends (the caller completes it with timedOut)
          AND coalesce(st.timeout_at, ${NOW(p.now)} + ${PgTypes.float8(p.timeoutMs)} * interval '1 millisecond',
                       'infinity'::timestamptz) > ${NOW(p.now)}
        RETURNING st.id, st.due_at),
      r AS (
        UPDATE ${runs} ru SET status = CASE WHEN ${fromIn("locked.status", "poll")} THEN ${toOf("poll")} ELSE locked.status END,
          updated_at = ${NOW(p.now)}
        FROM s, locked WHERE ru.id = ${p.runId}::uuid RETURNING ru.status),
      ${message.ctes}
      SELECT s.id, ${message.notifyRef} AS notified FROM s`
  }

  return { stepScheduleNew, stepPollAgain }
}
