/**
 * Run lifecycle: a run's start (one or many), the run a start collided with, the end of a run
 * with no step in progress, the release of a dead continue claim, the undeliverable pause.
 *
 * @since 0.1.0
 */
import { OngoingStatuses, type RunStatus, SingletonHeldStatuses } from "../States.ts"
import type { WorkflowSqlContext } from "./Context.ts"
import { type RunRow, STEP_JOB, type StartEntry } from "./Rows.ts"

/** Start statements of one schema. */
export const makeStartSql = (ctx: WorkflowSqlContext) => {
  const ENDS = { finished: "end_finish", paused: "end_pause", cancelled: "end_cancel" } as const
  const { runs, steps, events, NOW, textArray, sql, messageCtes, fromIn, toOf, openSteps } = ctx

  /**
   * Starts runs into one queue in one statement (one or many; a rerun, a child): each run that
   * no unique index refuses gets its row, its `started` (or `rerun`) event and its first message
   * (one NOTIFY for all). One row per entry back, in order; a refused entry gives a row whose
   * `id` is null. One statement time (`now`) for all.
   */
  const runStartMany = (entries: ReadonlyArray<StartEntry>, physicalQueue: string, now: Date | null) => {
    // one JSON parameter (payloads are JSON already, spliced in as they are)
    const json = `[${entries
      .map(
        (e) =>
          `{"id":${JSON.stringify(e.id)},"w":${JSON.stringify(e.workflow)},"s":${JSON.stringify(e.subject)},"rs":${JSON.stringify(e.resourceId)},"p":${e.payload},"k":${JSON.stringify(e.idempotencyKey)},"v":${e.engineVersion},"dv":${JSON.stringify(e.definitionVersion)},"a":${JSON.stringify(e.actor)},"re":${JSON.stringify(e.reason)},"c":${e.carryInput},"pr":${JSON.stringify(e.priority)},"sg":${e.singleton},"sf":${JSON.stringify(e.scheduledFor)}${
            e.rerunOf == null ? "" : `,"ro":${JSON.stringify(e.rerunOf)}`
          }${
            e.parent === undefined
              ? ""
              : `,"pa":${JSON.stringify(e.parent.runId)},"ps":${JSON.stringify(e.parent.step)},"pw":${e.parent.wakeOnPause}`
          }}`
      )
      .join(",")}]`
    const message = messageCtes(
      physicalQueue,
      "first_message",
      sql`SELECT ${NOW(now)} AS vt, jsonb_build_object('job', ${STEP_JOB}::text, 'payload',
          CASE WHEN i.carry
            THEN jsonb_build_object('workflow', run.workflow, 'run', run.id, 'step', NULL::text, 'input',
              jsonb_build_object('payload', run.payload, 'subject', run.subject, 'resource_id', run.resource_id)
              || CASE WHEN run.parent_run_id IS NULL THEN '{}'::jsonb
                   ELSE jsonb_build_object('parent_run_id', run.parent_run_id::text) END)
            ELSE jsonb_build_object('workflow', run.workflow, 'run', run.id, 'step', NULL::text) END) AS message
        FROM run JOIN i ON i.id = run.id ORDER BY i.ord`,
      now
    )
    return sql<RunRow & { readonly id: string | null }>`WITH i AS (
        SELECT u.ord, (u.e->>'id')::uuid AS id, u.e->>'w' AS workflow, u.e->>'s' AS subject,
          u.e->>'rs' AS resource_id, u.e->'p' AS payload, u.e->>'k' AS idempotency_key,
          (u.e->>'v')::int4 AS engine_version, u.e->>'dv' AS definition_version, u.e->>'a' AS actor,
          u.e->>'re' AS reason, (u.e->>'c')::boolean AS carry, (u.e->>'pr')::int4 AS priority,
          (u.e->>'sg')::boolean AS singleton, (u.e->>'sf')::timestamptz AS scheduled_for,
          (u.e->>'ro')::uuid AS rerun_of, (u.e->>'pa')::uuid AS parent_run_id, u.e->>'ps' AS parent_step,
          coalesce((u.e->>'pw')::boolean, false) AS parent_wake_on_pause
        FROM jsonb_array_elements(${json}::jsonb) WITH ORDINALITY AS u(e, ord)),
      run AS (
        INSERT INTO ${runs} (id, workflow, subject, resource_id, payload, status, idempotency_key, engine_version,
                             definition_version, rerun_of, actor, priority, singleton, scheduled_for, created_at, updated_at,
                             parent_run_id, parent_step, parent_wake_on_pause)
        SELECT id, workflow, subject, resource_id, payload, ${toOf("start")}, idempotency_key, engine_version,
               definition_version, rerun_of, actor, priority, singleton, scheduled_for, ${NOW(now)}, ${NOW(now)},
               parent_run_id, parent_step, parent_wake_on_pause
        FROM i ORDER BY ord
        ON CONFLICT DO NOTHING
        RETURNING *),
      started AS (
        INSERT INTO ${events} (run_id, type, actor, reason, details, at)
        SELECT run.id, CASE WHEN i.rerun_of IS NULL THEN 'started' ELSE 'rerun' END, i.actor, i.reason,
          jsonb_strip_nulls(jsonb_build_object('subject', i.subject, 'idempotency_key', i.idempotency_key,
            'rerun_of', i.rerun_of::text, 'parent_run_id', run.parent_run_id::text, 'parent_step', run.parent_step)),
          ${NOW(now)}
        FROM run JOIN i ON i.id = run.id ORDER BY i.ord),
      ${message.ctes}
      SELECT run.*, ${message.notifyRef} AS notified FROM i LEFT JOIN run ON run.id = i.id ORDER BY i.ord`
  }

  /**
   * The run a start collided with: the one with the key, else the subject's ongoing run, else
   * (`singleton`) the run holding the workflow's singleton slot.
   */
  const runFindConflicting = (
    workflow: string,
    subject: string | null,
    idempotencyKey: string | null,
    singleton = false
  ) =>
    sql<RunRow>`SELECT * FROM ${runs}
      WHERE workflow = ${workflow}
        AND ((${idempotencyKey}::text IS NOT NULL AND idempotency_key = ${idempotencyKey}::text)
          OR (${subject}::text IS NOT NULL AND subject = ${subject}::text AND status = ANY(${textArray(OngoingStatuses)}::text[]))
          OR (${singleton} AND singleton AND status = ANY(${textArray(SingletonHeldStatuses)}::text[])))
      ORDER BY (idempotency_key IS NOT DISTINCT FROM ${idempotencyKey}::text) DESC,
        (subject IS NOT DISTINCT FROM ${subject}::text) DESC
      LIMIT 1`

  /** A performing run with no step in progress ends: finished, paused or cancelled (with its event). */
  const runEndFromPerforming = (p: {
    readonly runId: string
    readonly to: "finished" | "paused" | "cancelled"
    readonly output: string | null
    readonly error: string | null
    readonly pausedReason: string | null
    readonly reason: string | null
    readonly definitionHash: string | null
    readonly now: Date | null
  }) => {
    const verb = ENDS[p.to]
    return sql<{ readonly status: RunStatus }>`WITH r AS (
        UPDATE ${runs} SET status = ${toOf(verb)}, updated_at = ${NOW(p.now)},
          finished_at = ${p.to === "paused" ? sql`NULL` : NOW(p.now)},
          paused_at = ${p.to === "paused" ? NOW(p.now) : sql`NULL`},
          paused_reason = ${p.pausedReason}, error = coalesce(${p.error}::jsonb, error),
          output = coalesce(${p.output}::jsonb, output),
          definition_hash = coalesce(${p.definitionHash}::text, definition_hash)
        WHERE id = ${p.runId}::uuid AND ${fromIn("status", verb)} RETURNING status),
      e AS (
        INSERT INTO ${events} (run_id, type, actor, reason, at)
        SELECT ${p.runId}::uuid, ${p.to}, 'system', ${p.reason}, ${NOW(p.now)} FROM r)
      SELECT status FROM r`
  }

  /** A performing run whose continue claim died with its worker goes back to ready. */
  const runReleaseContinue = (runId: string, now: Date | null) =>
    sql<{ readonly id: string }>`UPDATE ${runs} SET status = ${toOf("release")}, updated_at = ${NOW(now)}
      WHERE id = ${runId}::uuid AND ${fromIn("status", "release")}
        AND NOT EXISTS (SELECT 1 FROM ${steps} WHERE run_id = ${runId}::uuid
                        AND ${openSteps("status")})
      RETURNING id`

  /** A run whose message failed on its last delivery pauses (`from`: the table's), with the error and why. */
  const runPauseUndeliverable = (p: {
    readonly runId: string
    readonly error: string
    readonly reason: string
    readonly now: Date | null
  }) =>
    sql<{ readonly id: string }>`WITH r AS (
        UPDATE ${runs} SET status = ${toOf("delivery_pause")}, paused_at = ${NOW(p.now)}, paused_reason = 'undeliverable',
          error = ${p.error}::jsonb, updated_at = ${NOW(p.now)}
        WHERE id = ${p.runId}::uuid AND ${fromIn("status", "delivery_pause")}
        RETURNING id),
      e AS (
        INSERT INTO ${events} (run_id, type, actor, reason, at)
        SELECT r.id, 'paused', 'system', ${p.reason}, ${NOW(p.now)} FROM r)
      SELECT id FROM r`

  return { runStartMany, runFindConflicting, runEndFromPerforming, runReleaseContinue, runPauseUndeliverable }
}
