/**
 * Per-run notify deadlines: a late notice written under the run's lock, a renewal requested of a worker.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import type { Statement } from "effect/sql"
import type { WorkflowSqlContext } from "./Context.ts"

/** Per-run notify deadlines. */
export const makeDeadlineSql = (ctx: WorkflowSqlContext) => {
  const { runs, steps, events, NOW, stepMessage, renewalDue, sql, messageCtes, fromIn, toOf } = ctx

  /** A late notice of a `notify` wait: the deadline moves to `nextAt` (or goes, when null). */
  const stepNotifyLate = (p: {
    readonly runId: string
    readonly stepId: bigint
    /** The deadline that was missed (guards against a second sweep reporting it again). */
    readonly missedAt: Date | null
    /**
     * A per-run deadline evaluated again (by a worker, under the run's row lock): a date after now
     * is the next deadline, a period moves it on as a static one does, neither leaves the wait
     * without a deadline; an evaluation that failed pauses the run with its error.
     */
    readonly renewal?:
      | { readonly at: Date | null; readonly periodMs: number | null; readonly pauseError: string | null }
      | undefined
    readonly now: Date | null
  }) => {
    const r = p.renewal
    const nextAhead = (period: Statement.Fragment) =>
      sql`st.timeout_at + (floor(extract(epoch FROM (${NOW(p.now)} - st.timeout_at)) * 1000 / ${period}) + 1)
                 * ${period} * interval '1 millisecond'`
    const nextTimeout =
      r === undefined
        ? sql`CASE WHEN st.wait_period_ms IS NULL OR st.timeout_at IS NULL THEN NULL
            -- several missed deadlines are reported once: the next one ahead of now
            ELSE ${nextAhead(sql`st.wait_period_ms`)} END`
        : r.at !== null
          ? sql`CASE WHEN ${r.at}::timestamptz > ${NOW(p.now)} THEN ${r.at}::timestamptz END`
          : r.periodMs !== null && r.pauseError === null
            ? nextAhead(sql`${PgTypes.float8(r.periodMs)}::float8`)
            : sql`NULL::timestamptz`
    const pause =
      r?.pauseError == null
        ? sql``
        : // the table's notice_pause: waiting → paused, the step still waiting
          sql`,
      p AS (
        UPDATE ${runs} ru SET status = ${toOf("notice_pause")}, paused_at = ${NOW(p.now)}, paused_reason = 'error',
          error = ${r.pauseError}::jsonb, updated_at = ${NOW(p.now)}
        FROM s WHERE ru.id = ${p.runId}::uuid RETURNING 1),
      pe AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, reason, details, at)
        SELECT ${p.runId}::uuid, 'paused', s.name, s.attempt, 'system', 'waitTimeout failed at a late notice',
          jsonb_build_object('error', ${r.pauseError}::jsonb), ${NOW(p.now)} FROM s)`
    return sql<{ readonly id: bigint; readonly timeout_at: Date | null }>`WITH s AS (
        UPDATE ${steps} st SET timeout_at = ${nextTimeout},
          wait_period_ms = ${r === undefined ? sql`st.wait_period_ms` : sql`${PgTypes.float8(r.periodMs)}`}
        WHERE st.id = ${p.stepId} AND st.status = 'waiting'
          AND st.timeout_at IS NOT DISTINCT FROM ${p.missedAt}::timestamptz
          ${r === undefined ? sql`` : sql`AND st.deadline_renewal_for IS NOT DISTINCT FROM ${p.missedAt}::timestamptz`}
          AND EXISTS (SELECT 1 FROM ${runs} WHERE id = ${p.runId}::uuid AND ${fromIn("status", "notice")})
        RETURNING st.id, st.name, st.attempt, st.wait_for, st.timeout_at),
      e AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, details, at)
        SELECT ${p.runId}::uuid, 'wait_timed_out', s.name, s.attempt, 'system',
          jsonb_build_object('wait_for', s.wait_for, 'action', 'notify', 'timeout_at', ${p.missedAt}::timestamptz,
            'next_timeout_at', s.timeout_at${r === undefined ? sql`` : sql`, 'evaluated', true`}), ${NOW(p.now)} FROM s)${pause}
      SELECT s.id, s.timeout_at FROM s`
  }

  /**
   * A notify notice of a per-run deadline: handed to a worker (which has the workflow's code) as a
   * step message naming the missed deadline; recorded on the step, so one sweep hands it over once.
   */
  const stepRequestRenewal = (p: {
    readonly workflow: string
    readonly runId: string
    readonly stepId: bigint
    readonly missedAt: Date
    readonly physicalQueue: string
    /** A notice handed over this long ago and still pending is handed over again (its message is gone). */
    readonly thresholdMs: number
    readonly now: Date | null
  }) => {
    const message = messageCtes(
      p.physicalQueue,
      "renewal_message",
      sql`SELECT ${NOW(p.now)} AS vt, ${stepMessage(
        p.workflow,
        sql`s.id`,
        sql`${p.runId}::uuid`,
        sql`, 'deadline', ${p.missedAt.toISOString()}::text`
      )} AS message FROM s`,
      p.now
    )
    return sql<{ readonly id: bigint }>`WITH s AS (
        UPDATE ${steps} st SET deadline_renewal_for = st.timeout_at, deadline_renewal_at = ${NOW(p.now)}
        WHERE st.id = ${p.stepId} AND st.status = 'waiting' AND st.wait_deadline_per_run
          AND st.timeout_at = ${p.missedAt}::timestamptz
          AND ${renewalDue(p.now, p.thresholdMs)}
          AND EXISTS (SELECT 1 FROM ${runs} WHERE id = ${p.runId}::uuid AND ${fromIn("status", "notice")})
        RETURNING st.id),
      ${message.ctes}
      SELECT s.id, ${message.notifyRef} AS notified FROM s`
  }

  return { stepNotifyLate, stepRequestRenewal }
}
