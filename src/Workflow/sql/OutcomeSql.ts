/**
 * Step outcomes: an attempt's end and what follows it in one statement (one run or many), a
 * new step scheduled by replay, a poll's next check, audit events and `patched` markers.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { StepOutcomeVerbs } from "../States.ts"
import type { WorkflowSqlContext } from "./Context.ts"
import { type FinishRow, type NextAction, POLL_WAIT } from "./Rows.ts"

/** Outcome statements of one schema. */
export const makeOutcomeSql = (ctx: WorkflowSqlContext) => {
  const STEP_EVENT: Record<"completed" | "skipped" | "failed" | "cancelled", string> = {
    completed: "step_completed",
    skipped: "step_skipped",
    failed: "step_failed",
    cancelled: "step_cancelled"
  }
  const {
    runs,
    steps,
    events,
    signals,
    NOW,
    stepMessage,
    sql,
    messageCtes,
    fromIn,
    toOf,
    state,
    openStepList,
    scheduledRest
  } = ctx
  // an outcome on a performing run moves it (the table's advance, reattempt, ...); on a run
  // paused meanwhile it is held (the table's hold)
  const running = state("performing")

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

  /**
   * Applies the outcome of an attempt and what follows, in one statement: the attempt (still
   * in progress, else nothing is applied), the next step row and its message, the run's state
   * (performing → the table's target; paused → held), the audit events.
   */
  const stepFinish = (p: {
    readonly workflow: string
    readonly runId: string
    readonly stepId: bigint
    readonly status: "completed" | "skipped" | "failed" | "cancelled"
    readonly output: string | null
    readonly error: string | null
    readonly definitionHash: string | null
    readonly next: NextAction
    /** False when the attempt is known to hold no signal (no signal CTE then); default true. */
    readonly mayHoldSignal?: boolean | undefined
    /** Applies only to an attempt held by this claim (a release of this process's own claim). */
    readonly onlyIfClaimedBy?: string | undefined
    /** The attempt's event, when not the status's own (`step_interrupted`, with why). */
    readonly stepEvent?: { readonly type: string; readonly reason: string } | undefined
    readonly worker: string
    readonly appRevision: string | null
    readonly now: Date | null
  }) => {
    const next = p.next
    const hasNext = next._tag === "schedule" || next._tag === "claim"
    const claimNow = next._tag === "claim"
    const nextRow = hasNext
      ? sql`, m AS (
        INSERT INTO ${steps} (run_id, name, attempt, position, status, queue, scheduled_at, due_at, started_at,
                              timeout_ms, reattempts, worker, app_revision, claimed_by)
        SELECT ${p.runId}::uuid, ${next.name}, ${next.attempt}, ${next.position},
          CASE WHEN n.before = ${running} AND ${claimNow} THEN 'in_progress' ELSE 'scheduled' END,
          ${next.queue}, ${NOW(p.now)},
          greatest(${NOW(p.now)}, coalesce(${next._tag === "schedule" ? (next.dueAt ?? null) : null}::timestamptz,
            ${NOW(p.now)} + ${PgTypes.float8(next._tag === "schedule" ? next.delayMs : 0)} * interval '1 millisecond')),
          CASE WHEN n.before = ${running} AND ${claimNow} THEN ${NOW(p.now)} END,
          ${PgTypes.float8(next._tag === "claim" ? next.timeoutMs : (next.timeoutMs ?? null))},
          ${next.reattempts},
          CASE WHEN n.before = ${running} AND ${claimNow} THEN ${p.worker} END,
          CASE WHEN n.before = ${running} AND ${claimNow} THEN ${p.appRevision}::text END,
          CASE WHEN n.before = ${running} AND ${claimNow} THEN ${next._tag === "claim" ? next.claimedBy : null}::text END
        FROM n RETURNING id, name, attempt, status, due_at)`
      : sql``
    const message =
      hasNext && next._tag === "schedule"
        ? messageCtes(
            next.physicalQueue,
            "next_message",
            sql`SELECT m.due_at AS vt, ${stepMessage(p.workflow, sql`m.id`, sql`${p.runId}::uuid`)} AS message
                FROM m, n WHERE m.status = 'scheduled' AND n.before = ${running}`,
            p.now
          )
        : next._tag === "continue"
          ? messageCtes(
              next.physicalQueue,
              "continue_message",
              sql`SELECT ${NOW(p.now)} AS vt, ${stepMessage(p.workflow, sql`NULL`, sql`${p.runId}::uuid`)} AS message
                FROM n WHERE n.before = ${running}`,
              p.now
            )
          : undefined
    const target =
      next._tag === "schedule" || next._tag === "continue"
        ? sql`CASE WHEN n.before = ${running} THEN ${toOf("advance")} ELSE n.before END`
        : next._tag === "claim"
          ? sql`n.before`
          : next._tag === "finish"
            ? toOf("finish")
            : next._tag === "pause"
              ? toOf("step_pause")
              : toOf("step_cancel")
    const terminal = next._tag === "finish" || next._tag === "cancel"
    const runUpdate = sql`, r AS (
        UPDATE ${runs} ru SET status = ${target},
          current_step = ${hasNext ? sql`${next.name}` : sql`ru.current_step`},
          updated_at = ${NOW(p.now)},
          definition_hash = coalesce(${p.definitionHash}::text, ru.definition_hash),
          finished_at = ${terminal ? NOW(p.now) : sql`ru.finished_at`},
          paused_at = ${
            next._tag === "pause"
              ? sql`coalesce(ru.paused_at, ${NOW(p.now)})`
              : terminal
                ? sql`NULL`
                : sql`ru.paused_at`
          },
          paused_reason = ${next._tag === "pause" ? sql`${next.reason}` : terminal ? sql`NULL` : sql`ru.paused_reason`},
          error = ${next._tag === "pause" ? sql`${next.error}::jsonb` : sql`ru.error`},
          output = ${next._tag === "finish" ? sql`${next.output}::jsonb` : sql`ru.output`}
        FROM n WHERE ru.id = ${p.runId}::uuid
        RETURNING ru.status)`
    // a cancel closes the run's other open attempts (a finish leaves none open)
    const closeOthers =
      next._tag === "cancel"
        ? sql`, closed AS (
        UPDATE ${steps} SET status = 'cancelled', finished_at = ${NOW(p.now)}
        FROM n WHERE run_id = ${p.runId}::uuid AND ${steps}.id <> ${p.stepId}
          AND ${steps}.status IN ${openStepList}
        RETURNING 1)`
        : sql``
    const runEvent =
      next._tag === "finish"
        ? sql`SELECT 10, 'finished', NULL::text, NULL::int4, NULL::text FROM n`
        : next._tag === "pause"
          ? sql`SELECT 10, 'paused', n.name, n.attempt, ${next.message}::text FROM n WHERE n.before = ${running}`
          : next._tag === "cancel"
            ? sql`SELECT 10, 'cancelled', n.name, n.attempt, ${next.reason}::text FROM n`
            : sql`SELECT 10, NULL, NULL, NULL, NULL WHERE false`
    const nextEvents = hasNext
      ? sql`UNION ALL SELECT 3, 'step_reattempted', n.name, n.attempt, NULL FROM n WHERE ${next._tag === "schedule" && next.reattempt}
        UNION ALL SELECT 4, 'step_scheduled', m.name, m.attempt, NULL FROM m
        UNION ALL SELECT 5, 'step_started', m.name, m.attempt, NULL FROM m WHERE m.status = 'in_progress'`
      : sql``
    const signalFate =
      p.mayHoldSignal === false
        ? sql``
        : p.status === "failed"
          ? hasNext && next._tag === "schedule" && next.reattempt
            ? sql`, kept AS (
        UPDATE ${signals} sg SET claimed_by_step = m.id FROM m, n
        WHERE sg.claimed_by_step = n.id AND sg.status = 'claimed' RETURNING 1)`
            : sql``
          : sql`, consumed AS (
        UPDATE ${signals} sg SET status = 'consumed', consumed_at = ${NOW(p.now)} FROM n
        WHERE sg.claimed_by_step = n.id AND sg.status = 'claimed' RETURNING 1)`
    return sql<FinishRow>`WITH locked AS (
        SELECT id, status FROM ${runs} WHERE id = ${p.runId}::uuid FOR UPDATE),
      n AS (
        UPDATE ${steps} st SET status = ${p.status}, finished_at = ${NOW(p.now)},
          output = ${p.output}::jsonb, error = ${p.error}::jsonb
        FROM locked
        WHERE st.id = ${p.stepId} AND st.run_id = locked.id AND st.status = 'in_progress'
          AND ${fromIn("locked.status", ...StepOutcomeVerbs)}
          ${p.onlyIfClaimedBy === undefined ? sql`` : sql`AND st.claimed_by = ${p.onlyIfClaimedBy}`}
        RETURNING st.id, st.name, st.attempt, locked.status AS before)
      ${nextRow}
      ${runUpdate}
      ${closeOthers}
      ${signalFate},
      ev AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, reason, at)
        SELECT ${p.runId}::uuid, x.type, x.step, x.attempt, 'system', x.reason, ${NOW(p.now)} FROM (
          SELECT 1 AS ord, ${p.stepEvent?.type ?? STEP_EVENT[p.status]}::text AS type, n.name AS step,
            n.attempt AS attempt, ${p.stepEvent?.reason ?? null}::text AS reason FROM n
          ${nextEvents}
          UNION ALL ${runEvent}) AS x
        WHERE x.type IS NOT NULL
        ORDER BY x.ord)
      ${message ? sql`, ${message.ctes}` : sql``}
      SELECT (SELECT status FROM locked) AS before, (SELECT count(*) FROM n) AS applied,
        ${hasNext ? sql`(SELECT id FROM m)` : sql`NULL::int8`} AS next_id,
        ${hasNext ? sql`(SELECT status FROM m)` : sql`NULL::text`} AS next_status,
        (SELECT status FROM r) AS after
        ${message ? sql`, ${message.notifyRef} AS notified` : sql``}`
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

  return { stepScheduleNew, stepFinish, stepPollAgain }
}
