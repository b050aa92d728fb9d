/**
 * Step outcomes shared by concurrent executions: `stepFinish`'s common case for many runs in
 * one statement.
 *
 * @since 0.1.0
 */
import { StepOutcomeVerbs } from "../States.ts"
import type { WorkflowSqlContext } from "./Context.ts"
import type { FinishManyEntry, FinishRow } from "./Rows.ts"

/** Step outcomes shared by concurrent executions. */
export const makeOutcomeManySql = (ctx: WorkflowSqlContext) => {
  const { runs, steps, events, lockRuns, sql, fromIn, toOf, state } = ctx
  // a run performing has its next step claimed with the outcome; one paused meanwhile holds it
  const running = state("performing")

  /**
   * `stepFinish` for many runs in one statement, in the runner's common case only: each attempt
   * completed, holds no signal, and its next step is claimed at once (`claim`) or its run
   * finishes (`finish`). Row for row and event for event what `stepFinish` writes for each entry
   * (the runs are locked in id order); one row per entry back, in order. The run ids must differ.
   */
  const stepFinishMany = (entries: ReadonlyArray<FinishManyEntry>, worker: string, appRevision: string | null) => {
    // one JSON parameter (outputs are JSON already, spliced in as they are)
    const json = `[${entries
      .map((e) => {
        const next =
          e.next._tag === "claim"
            ? `,"n":${JSON.stringify(e.next.name)},"a":${e.next.attempt},"p":${e.next.position},"q":${JSON.stringify(e.next.queue)},"x":${e.next.reattempts},"m":${e.next.timeoutMs === null ? "null" : e.next.timeoutMs},"c":${JSON.stringify(e.next.claimedBy)}`
            : e.next.output === null
              ? ""
              : `,"f":${e.next.output}`
        return `{"r":${JSON.stringify(e.runId)},"s":"${e.stepId}","h":${JSON.stringify(e.definitionHash)},"t":${e.now === null ? "null" : JSON.stringify(e.now.toISOString())}${e.output === null ? "" : `,"o":${e.output}`}${next}}`
      })
      .join(",")}]`
    return sql<FinishRow & { readonly run_id: string }>`WITH i AS (
        SELECT u.ord, (u.e->>'r')::uuid AS run_id, (u.e->>'s')::int8 AS step_id, u.e->'o' AS output,
          u.e->>'h' AS hash, u.e->>'n' AS next_name, (u.e->>'a')::int4 AS next_attempt,
          (u.e->>'p')::int4 AS next_position, u.e->>'q' AS next_queue, (u.e->>'x')::int4 AS next_reattempts,
          (u.e->>'m')::float8 AS next_timeout, u.e->>'c' AS next_claimed_by, u.e->'f' AS final_output,
          coalesce((u.e->>'t')::timestamptz, now()) AS at
        FROM jsonb_array_elements(${json}::jsonb) WITH ORDINALITY AS u(e, ord)),
      locked AS (${lockRuns(entries.map((e) => e.runId))}),
      n AS (
        UPDATE ${steps} st SET status = 'completed', finished_at = i.at, output = i.output, error = NULL
        FROM locked, i
        WHERE i.run_id = locked.id AND st.id = i.step_id AND st.run_id = locked.id AND st.status = 'in_progress'
          AND ${fromIn("locked.status", ...StepOutcomeVerbs)}
        RETURNING st.id, st.run_id, st.name, st.attempt, locked.status AS before, i.ord),
      m AS (
        INSERT INTO ${steps} (run_id, name, attempt, position, status, queue, scheduled_at, due_at, started_at,
                              timeout_ms, reattempts, worker, app_revision, claimed_by)
        SELECT n.run_id, i.next_name, i.next_attempt, i.next_position,
          CASE WHEN n.before = ${running} THEN 'in_progress' ELSE 'scheduled' END,
          i.next_queue, i.at, i.at, CASE WHEN n.before = ${running} THEN i.at END, i.next_timeout,
          i.next_reattempts, CASE WHEN n.before = ${running} THEN ${worker}::text END,
          CASE WHEN n.before = ${running} THEN ${appRevision}::text END,
          CASE WHEN n.before = ${running} THEN i.next_claimed_by END
        FROM n JOIN i ON i.ord = n.ord
        WHERE i.next_name IS NOT NULL
        ORDER BY n.ord
        RETURNING id, run_id, name, attempt, status),
      r AS (
        UPDATE ${runs} ru SET status = CASE WHEN i.next_name IS NULL THEN ${toOf("finish")} ELSE n.before END,
          current_step = coalesce(i.next_name, ru.current_step),
          updated_at = i.at,
          definition_hash = coalesce(i.hash, ru.definition_hash),
          finished_at = CASE WHEN i.next_name IS NULL THEN i.at ELSE ru.finished_at END,
          paused_at = CASE WHEN i.next_name IS NULL THEN NULL ELSE ru.paused_at END,
          paused_reason = CASE WHEN i.next_name IS NULL THEN NULL ELSE ru.paused_reason END,
          output = CASE WHEN i.next_name IS NULL THEN i.final_output ELSE ru.output END
        FROM n JOIN i ON i.ord = n.ord
        WHERE ru.id = n.run_id
        RETURNING ru.id, ru.status),
      ev AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, reason, at)
        SELECT x.run_id, x.type, x.step, x.attempt, 'system', NULL, x.at FROM (
          SELECT n.ord, 1 AS k, n.run_id, 'step_completed' AS type, n.name AS step, n.attempt, i.at
          FROM n JOIN i ON i.ord = n.ord
          UNION ALL SELECT n.ord, 4, m.run_id, 'step_scheduled', m.name, m.attempt, i.at
          FROM m JOIN n ON n.run_id = m.run_id JOIN i ON i.ord = n.ord
          UNION ALL SELECT n.ord, 5, m.run_id, 'step_started', m.name, m.attempt, i.at
          FROM m JOIN n ON n.run_id = m.run_id JOIN i ON i.ord = n.ord WHERE m.status = 'in_progress'
          UNION ALL SELECT n.ord, 10, n.run_id, 'finished', NULL, NULL, i.at
          FROM n JOIN i ON i.ord = n.ord WHERE i.next_name IS NULL) AS x
        ORDER BY x.ord, x.k)
      SELECT i.run_id::text AS run_id, locked.status AS before,
        (CASE WHEN n.id IS NULL THEN 0 ELSE 1 END)::int8 AS applied,
        m.id AS next_id, m.status AS next_status, r.status AS after
      FROM i LEFT JOIN locked ON locked.id = i.run_id LEFT JOIN n ON n.ord = i.ord
        LEFT JOIN m ON m.run_id = i.run_id LEFT JOIN r ON r.id = i.run_id
      ORDER BY i.ord`
  }

  return { stepFinishMany }
}
