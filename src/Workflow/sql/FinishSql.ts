/**
 * A step attempt's outcome and what follows it, for one run in one statement (`stepFinish`):
 * the attempt's end, the next step row and its message, the run's state (from-states and
 * targets from `States.ts`), the other open attempts a cancel closes, the signal the attempt
 * held, the audit events. Each part is one CTE built below; `OutcomeManySql` has the shared
 * version of the runner's common case.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import type { Statement } from "effect/sql"
import { StepOutcomeVerbs } from "../States.ts"
import type { WorkflowSqlContext } from "./Context.ts"
import type { FinishRow, NextAction } from "./Rows.ts"

/** What `stepFinish` applies. */
export interface FinishInput {
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
}

const STEP_EVENT: Record<FinishInput["status"], string> = {
  completed: "step_completed",
  skipped: "step_skipped",
  failed: "step_failed",
  cancelled: "step_cancelled"
}

type Fragment = Statement.Fragment

/** `m`: the next step's row (claimed at once when the run is performing and `next` is a claim). */
const nextRowCte = (ctx: WorkflowSqlContext, p: FinishInput, running: Fragment): Fragment => {
  const { sql, steps, NOW } = ctx
  const next = p.next
  if (next._tag !== "schedule" && next._tag !== "claim") return sql``
  const claimNow = next._tag === "claim"
  return sql`, m AS (
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
}

/** The message `next` sends (a scheduled step's, a continue), if any, on a run still performing. */
const messageOf = (ctx: WorkflowSqlContext, p: FinishInput, running: Fragment) => {
  const { sql, NOW, messageCtes, stepMessage } = ctx
  const next = p.next
  if (next._tag === "schedule") {
    return messageCtes(
      next.physicalQueue,
      "next_message",
      sql`SELECT m.due_at AS vt, ${stepMessage(p.workflow, sql`m.id`, sql`${p.runId}::uuid`)} AS message
                FROM m, n WHERE m.status = 'scheduled' AND n.before = ${running}`,
      p.now
    )
  }
  if (next._tag === "continue") {
    return messageCtes(
      next.physicalQueue,
      "continue_message",
      sql`SELECT ${NOW(p.now)} AS vt, ${stepMessage(p.workflow, sql`NULL`, sql`${p.runId}::uuid`)} AS message
                FROM n WHERE n.before = ${running}`,
      p.now
    )
  }
  return undefined
}

/** `r`: the run's state (performing → the table's target for `next`; paused meanwhile → held). */
const runUpdateCte = (ctx: WorkflowSqlContext, p: FinishInput, running: Fragment): Fragment => {
  const { sql, runs, NOW, toOf } = ctx
  const next = p.next
  const hasNext = next._tag === "schedule" || next._tag === "claim"
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
  return sql`, r AS (
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
}

/** `closed`: a cancel closes the run's other open attempts (a finish leaves none open). */
const closeOthersCte = (ctx: WorkflowSqlContext, p: FinishInput): Fragment => {
  const { sql, steps, NOW, openStepList } = ctx
  if (p.next._tag !== "cancel") return sql``
  return sql`, closed AS (
        UPDATE ${steps} SET status = 'cancelled', finished_at = ${NOW(p.now)}
        FROM n WHERE run_id = ${p.runId}::uuid AND ${steps}.id <> ${p.stepId}
          AND ${steps}.status IN ${openStepList}
        RETURNING 1)`
}

/** The signal the attempt held: kept for a reattempt, consumed by any other end but a failure. */
const signalFateCte = (ctx: WorkflowSqlContext, p: FinishInput): Fragment => {
  const { sql, signals, NOW } = ctx
  if (p.mayHoldSignal === false) return sql``
  if (p.status === "failed") {
    return p.next._tag === "schedule" && p.next.reattempt
      ? sql`, kept AS (
        UPDATE ${signals} sg SET claimed_by_step = m.id FROM m, n
        WHERE sg.claimed_by_step = n.id AND sg.status = 'claimed' RETURNING 1)`
      : sql``
  }
  return sql`, consumed AS (
        UPDATE ${signals} sg SET status = 'consumed', consumed_at = ${NOW(p.now)} FROM n
        WHERE sg.claimed_by_step = n.id AND sg.status = 'claimed' RETURNING 1)`
}

/** `ev`: the audit events, in order (the attempt's, the next step's, the run's end). */
const eventsCte = (ctx: WorkflowSqlContext, p: FinishInput, running: Fragment): Fragment => {
  const { sql, events, NOW } = ctx
  const next = p.next
  const hasNext = next._tag === "schedule" || next._tag === "claim"
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
  return sql`ev AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, reason, at)
        SELECT ${p.runId}::uuid, x.type, x.step, x.attempt, 'system', x.reason, ${NOW(p.now)} FROM (
          SELECT 1 AS ord, ${p.stepEvent?.type ?? STEP_EVENT[p.status]}::text AS type, n.name AS step,
            n.attempt AS attempt, ${p.stepEvent?.reason ?? null}::text AS reason FROM n
          ${nextEvents}
          UNION ALL ${runEvent}) AS x
        WHERE x.type IS NOT NULL
        ORDER BY x.ord)`
}

/** The single-run outcome statement of one schema. */
export const makeFinishSql = (ctx: WorkflowSqlContext) => {
  const { sql, runs, steps, NOW, fromIn, state } = ctx
  // an outcome on a performing run moves it (the table's advance, reattempt, ...); on a run
  // paused meanwhile it is held (the table's hold)
  const running = state("performing")

  /**
   * Applies the outcome of an attempt and what follows, in one statement: the attempt (still
   * in progress, else nothing is applied), the next step row and its message, the run's state
   * (performing → the table's target; paused → held), the audit events.
   */
  const stepFinish = (p: FinishInput) => {
    const hasNext = p.next._tag === "schedule" || p.next._tag === "claim"
    const message = messageOf(ctx, p, running)
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
      ${nextRowCte(ctx, p, running)}
      ${runUpdateCte(ctx, p, running)}
      ${closeOthersCte(ctx, p)}
      ${signalFateCte(ctx, p)},
      ${eventsCte(ctx, p, running)}
      ${message ? sql`, ${message.ctes}` : sql``}
      SELECT (SELECT status FROM locked) AS before, (SELECT count(*) FROM n) AS applied,
        ${hasNext ? sql`(SELECT id FROM m)` : sql`NULL::int8`} AS next_id,
        ${hasNext ? sql`(SELECT status FROM m)` : sql`NULL::text`} AS next_status,
        (SELECT status FROM r) AS after
        ${message ? sql`, ${message.notifyRef} AS notified` : sql``}`
  }

  return { stepFinish }
}
