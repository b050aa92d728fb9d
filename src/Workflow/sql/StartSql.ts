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
  const { runs, steps, events, NOW, textArray, stepMessage, sql, messageCtes, fromIn, toOf, openSteps } = ctx

  /** Start: the run, its `started` event and its first message, unless a unique index says no. */
  const runStart = (p: StartEntry & { readonly physicalQueue: string; readonly rerunOf: string | null }) => {
    const input = p.carryInput
      ? sql`, 'input', jsonb_build_object('payload', run.payload, 'subject', run.subject, 'resource_id', run.resource_id${
          p.parent === undefined ? sql`` : sql`, 'parent_run_id', run.parent_run_id::text`
        })`
      : sql``
    const message = messageCtes(
      p.physicalQueue,
      "first_message",
      sql`SELECT ${NOW(p.now)} AS vt, ${stepMessage(p.workflow, sql`NULL`, sql`run.id`, input)} AS message FROM run`,
      p.now
    )
    return sql<RunRow & { readonly notified: unknown }>`WITH run AS (
        INSERT INTO ${runs} (id, workflow, subject, resource_id, payload, status, idempotency_key, engine_version,
                             definition_version, rerun_of, actor, priority, singleton, scheduled_for, created_at, updated_at${p.parent === undefined ? sql`` : sql`, parent_run_id, parent_step, parent_wake_on_pause`})
        VALUES (${p.id}::uuid, ${p.workflow}, ${p.subject}, ${p.resourceId}, ${p.payload}::jsonb, ${toOf("start")},
                ${p.idempotencyKey}, ${p.engineVersion}, ${p.definitionVersion}, ${p.rerunOf}::uuid, ${p.actor},
                ${p.priority}::int4, ${p.singleton}, ${p.scheduledFor}::timestamptz, ${NOW(p.now)}, ${NOW(p.now)}${p.parent === undefined ? sql`` : sql`, ${p.parent.runId}::uuid, ${p.parent.step}, ${p.parent.wakeOnPause}`})
        ON CONFLICT DO NOTHING
        RETURNING *),
      started AS (
        INSERT INTO ${events} (run_id, type, actor, reason, details, at)
        SELECT run.id, ${p.rerunOf === null ? "started" : "rerun"}, ${p.actor}, ${p.reason},
          jsonb_strip_nulls(jsonb_build_object('subject', ${p.subject}::text, 'idempotency_key', ${p.idempotencyKey}::text,
            'rerun_of', ${p.rerunOf}::text, 'parent_run_id', run.parent_run_id::text, 'parent_step', run.parent_step)),
          ${NOW(p.now)}
        FROM run),
      ${message.ctes}
      SELECT run.*, ${message.notifyRef} AS notified FROM run`
  }

  /**
   * `runStart` for many fresh runs (no rerun) into one queue, in one statement: each run that no
   * unique index refuses gets its row, its `started` event and its first message (one NOTIFY for
   * all). One row per entry back, in order; a refused entry gives a row whose `id` is null.
   */
  const runStartMany = (entries: ReadonlyArray<StartEntry>, physicalQueue: string, now: Date | null) => {
    // one JSON parameter (payloads are JSON already, spliced in as they are)
    const json = `[${entries
      .map(
        (e) =>
          `{"id":${JSON.stringify(e.id)},"w":${JSON.stringify(e.workflow)},"s":${JSON.stringify(e.subject)},"rs":${JSON.stringify(e.resourceId)},"p":${e.payload},"k":${JSON.stringify(e.idempotencyKey)},"v":${e.engineVersion},"dv":${JSON.stringify(e.definitionVersion)},"a":${JSON.stringify(e.actor)},"re":${JSON.stringify(e.reason)},"c":${e.carryInput},"pr":${JSON.stringify(e.priority)},"sg":${e.singleton},"sf":${JSON.stringify(e.scheduledFor)}}`
      )
      .join(",")}]`
    const message = messageCtes(
      physicalQueue,
      "first_message",
      sql`SELECT ${NOW(now)} AS vt, jsonb_build_object('job', ${STEP_JOB}::text, 'payload',
          CASE WHEN i.carry
            THEN jsonb_build_object('workflow', run.workflow, 'run', run.id, 'step', NULL::text, 'input',
              jsonb_build_object('payload', run.payload, 'subject', run.subject, 'resource_id', run.resource_id))
            ELSE jsonb_build_object('workflow', run.workflow, 'run', run.id, 'step', NULL::text) END) AS message
        FROM run JOIN i ON i.id = run.id ORDER BY i.ord`,
      now
    )
    return sql<RunRow & { readonly id: string | null }>`WITH i AS (
        SELECT u.ord, (u.e->>'id')::uuid AS id, u.e->>'w' AS workflow, u.e->>'s' AS subject,
          u.e->>'rs' AS resource_id, u.e->'p' AS payload, u.e->>'k' AS idempotency_key,
          (u.e->>'v')::int4 AS engine_version, u.e->>'dv' AS definition_version, u.e->>'a' AS actor,
          u.e->>'re' AS reason, (u.e->>'c')::boolean AS carry, (u.e->>'pr')::int4 AS priority,
          (u.e->>'sg')::boolean AS singleton, (u.e->>'sf')::timestamptz AS scheduled_for
        FROM jsonb_array_elements(${json}::jsonb) WITH ORDINALITY AS u(e, ord)),
      run AS (
        INSERT INTO ${runs} (id, workflow, subject, resource_id, payload, status, idempotency_key, engine_version,
                             definition_version, rerun_of, actor, priority, singleton, scheduled_for, created_at, updated_at)
        SELECT id, workflow, subject, resource_id, payload, ${toOf("start")}, idempotency_key, engine_version,
               definition_version, NULL, actor, priority, singleton, scheduled_for, ${NOW(now)}, ${NOW(now)}
        FROM i ORDER BY ord
        ON CONFLICT DO NOTHING
        RETURNING *),
      started AS (
        INSERT INTO ${events} (run_id, type, actor, reason, details, at)
        SELECT run.id, 'started', i.actor, i.reason,
          jsonb_strip_nulls(jsonb_build_object('subject', i.subject, 'idempotency_key', i.idempotency_key,
            'rerun_of', NULL::text)), ${NOW(now)}
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

  return { runStart, runStartMany, runFindConflicting, runEndFromPerforming, runReleaseContinue, runPauseUndeliverable }
}
