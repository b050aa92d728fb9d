/**
 * Step outcomes shared by concurrent executions: `stepFinish`'s common case for many runs in
 * one statement.
 *
 * @since 0.1.0
 */
import { StepOutcomeVerbs } from "../States.ts"
import type { makeClaimSql } from "./ClaimSql.ts"
import type { WorkflowSqlContext } from "./Context.ts"
import type { ClaimFirstEntry, ClaimRow, FinishManyEntry, FinishRow } from "./Rows.ts"

type ClaimSql = ReturnType<typeof makeClaimSql>

/** Step outcomes shared by concurrent executions. */
export const makeOutcomeManySql = (
  ctx: WorkflowSqlContext,
  /** The claim statements' parts (`ClaimSql`), shared with a claim of first steps. */
  claimFirstParts: ClaimSql["claimFirstParts"]
) => {
  const { runs, steps, events, signals, lockRuns, sql, fromIn, toOf, state } = ctx
  // a run performing has its next step claimed with the outcome; one paused meanwhile holds it
  const running = state("performing")

  /**
   * `stepFinishMany`'s parts, for it and for `claimAndFinishMany`: the entries (`fi`), the CTEs
   * after the runs are locked (`locked`, every entry's run: `runIds`) and the SELECT of one row
   * per entry (`f_ord`: the entry's position).
   */
  const finishManyParts = (entries: ReadonlyArray<FinishManyEntry>, worker: string, appRevision: string | null) => {
    // one JSON parameter (outputs are JSON already, spliced in as they are)
    const json = `[${entries
      .map((e) => {
        const next =
          e.next._tag === "claim"
            ? `,"n":${JSON.stringify(e.next.name)},"a":${e.next.attempt},"p":${e.next.position},"q":${JSON.stringify(e.next.queue)},"x":${e.next.reattempts},"m":${e.next.timeoutMs === null ? "null" : e.next.timeoutMs},"c":${JSON.stringify(e.next.claimedBy)}`
            : e.next.output === null
              ? ""
              : `,"f":${e.next.output}`
        const held = e.mayHoldSignal === true ? `,"g":true` : ""
        return `{"r":${JSON.stringify(e.runId)},"s":"${e.stepId}","h":${JSON.stringify(e.definitionHash)},"t":${e.now === null ? "null" : JSON.stringify(e.now.toISOString())}${e.output === null ? "" : `,"o":${e.output}`}${next}${held}}`
      })
      .join(",")}]`
    const input = sql`fi AS (
        SELECT u.ord, (u.e->>'r')::uuid AS run_id, (u.e->>'s')::int8 AS step_id, u.e->'o' AS output,
          u.e->>'h' AS hash, u.e->>'n' AS next_name, (u.e->>'a')::int4 AS next_attempt,
          (u.e->>'p')::int4 AS next_position, u.e->>'q' AS next_queue, (u.e->>'x')::int4 AS next_reattempts,
          (u.e->>'m')::float8 AS next_timeout, u.e->>'c' AS next_claimed_by, u.e->'f' AS final_output,
          u.e ? 'g' AS may_hold_signal, coalesce((u.e->>'t')::timestamptz, now()) AS at
        FROM jsonb_array_elements(${json}::jsonb) WITH ORDINALITY AS u(e, ord))`
    const ctes = sql`fn AS (
        UPDATE ${steps} st SET status = 'completed', finished_at = fi.at, output = fi.output, error = NULL
        FROM locked, fi
        WHERE fi.run_id = locked.id AND st.id = fi.step_id AND st.run_id = locked.id AND st.status = 'in_progress'
          AND ${fromIn("locked.status", ...StepOutcomeVerbs)}
        RETURNING st.id, st.run_id, st.name, st.attempt, locked.status AS before, fi.ord),
      ${
        // the signal a woken step held is consumed with its completion (stepFinish's `consumed`)
        entries.some((e) => e.mayHoldSignal === true)
          ? sql`fc AS (
        UPDATE ${signals} sg SET status = 'consumed', consumed_at = fi.at
        FROM fn JOIN fi ON fi.ord = fn.ord
        WHERE fi.may_hold_signal AND sg.claimed_by_step = fn.id AND sg.status = 'claimed'
        RETURNING 1),`
          : sql``
      }
      fm AS (
        INSERT INTO ${steps} (run_id, name, attempt, position, status, queue, scheduled_at, due_at, started_at,
                              timeout_ms, reattempts, worker, app_revision, claimed_by)
        SELECT fn.run_id, fi.next_name, fi.next_attempt, fi.next_position,
          CASE WHEN fn.before = ${running} THEN 'in_progress' ELSE 'scheduled' END,
          fi.next_queue, fi.at, fi.at, CASE WHEN fn.before = ${running} THEN fi.at END, fi.next_timeout,
          fi.next_reattempts, CASE WHEN fn.before = ${running} THEN ${worker}::text END,
          CASE WHEN fn.before = ${running} THEN ${appRevision}::text END,
          CASE WHEN fn.before = ${running} THEN fi.next_claimed_by END
        FROM fn JOIN fi ON fi.ord = fn.ord
        WHERE fi.next_name IS NOT NULL
        ORDER BY fn.ord
        RETURNING id, run_id, name, attempt, status),
      fr AS (
        UPDATE ${runs} ru SET status = CASE WHEN fi.next_name IS NULL THEN ${toOf("finish")} ELSE fn.before END,
          current_step = coalesce(fi.next_name, ru.current_step),
          updated_at = fi.at,
          definition_hash = coalesce(fi.hash, ru.definition_hash),
          finished_at = CASE WHEN fi.next_name IS NULL THEN fi.at ELSE ru.finished_at END,
          paused_at = CASE WHEN fi.next_name IS NULL THEN NULL ELSE ru.paused_at END,
          paused_reason = CASE WHEN fi.next_name IS NULL THEN NULL ELSE ru.paused_reason END,
          output = CASE WHEN fi.next_name IS NULL THEN fi.final_output ELSE ru.output END
        FROM fn JOIN fi ON fi.ord = fn.ord
        WHERE ru.id = fn.run_id
        RETURNING ru.id, ru.status),
      fev AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, reason, at)
        SELECT x.run_id, x.type, x.step, x.attempt, 'system', NULL, x.at FROM (
          SELECT fn.ord, 1 AS k, fn.run_id, 'step_completed' AS type, fn.name AS step, fn.attempt, fi.at
          FROM fn JOIN fi ON fi.ord = fn.ord
          UNION ALL SELECT fn.ord, 4, fm.run_id, 'step_scheduled', fm.name, fm.attempt, fi.at
          FROM fm JOIN fn ON fn.run_id = fm.run_id JOIN fi ON fi.ord = fn.ord
          UNION ALL SELECT fn.ord, 5, fm.run_id, 'step_started', fm.name, fm.attempt, fi.at
          FROM fm JOIN fn ON fn.run_id = fm.run_id JOIN fi ON fi.ord = fn.ord WHERE fm.status = 'in_progress'
          UNION ALL SELECT fn.ord, 10, fn.run_id, 'finished', NULL, NULL, fi.at
          FROM fn JOIN fi ON fi.ord = fn.ord WHERE fi.next_name IS NULL) AS x
        ORDER BY x.ord, x.k)`
    const select = sql`SELECT fi.ord AS f_ord, fi.run_id::text AS run_id, locked.status AS before,
        (CASE WHEN fn.id IS NULL THEN 0 ELSE 1 END)::int8 AS applied,
        fm.id AS next_id, fm.status AS next_status, fr.status AS after
      FROM fi LEFT JOIN locked ON locked.id = fi.run_id LEFT JOIN fn ON fn.ord = fi.ord
        LEFT JOIN fm ON fm.run_id = fi.run_id LEFT JOIN fr ON fr.id = fi.run_id`
    return { input, ctes, select, runIds: entries.map((e) => e.runId) }
  }

  /**
   * `stepFinish` for many runs in one statement, in the runner's common case only: each attempt
   * completed (the signal it may hold consumed, `mayHoldSignal`), and its next step is claimed
   * at once (`claim`) or its run finishes (`finish`). Row for row and event for event what `stepFinish` writes for each entry
   * (the runs are locked in id order); one row per entry back, in order. The run ids must differ.
   */
  const stepFinishMany = (entries: ReadonlyArray<FinishManyEntry>, worker: string, appRevision: string | null) => {
    const p = finishManyParts(entries, worker, appRevision)
    return sql<FinishRow & { readonly run_id: string }>`WITH ${p.input},
      locked AS (${lockRuns(p.runIds)}),
      ${p.ctes}
      ${p.select}
      ORDER BY fi.ord`
  }

  /**
   * `runClaimFirstMany` and `stepFinishMany` in one statement (one round trip and one commit
   * where the two took turns): the runs of both locked together in id order, each part row for
   * row and event for event what it writes alone. Rows back: the claims' (`kind` 'c') then the
   * outcomes' ('f'), each in entry order; an outcome's columns are `f_`-prefixed. The run ids
   * must all differ.
   */
  const claimAndFinishMany = (
    claims: ReadonlyArray<ClaimFirstEntry>,
    finishes: ReadonlyArray<FinishManyEntry>,
    worker: string,
    appRevision: string | null
  ) => {
    const c = claimFirstParts(claims, worker, appRevision)
    const f = finishManyParts(finishes, worker, appRevision)
    return sql<
      ClaimRow & {
        readonly kind: "c" | "f"
        readonly id: string | null
        readonly f_run_id: string | null
        readonly f_before: FinishRow["before"]
        readonly f_applied: bigint | null
        readonly f_next_id: bigint | null
        readonly f_next_status: FinishRow["next_status"]
        readonly f_after: FinishRow["after"]
      }
    >`WITH ${c.input}, ${f.input},
      locked AS (${lockRuns([...c.runIds, ...f.runIds])}),
      ${c.ctes},
      ${f.ctes}
      SELECT k.kind, c.*, f.run_id AS f_run_id, f.before AS f_before, f.applied AS f_applied,
        f.next_id AS f_next_id, f.next_status AS f_next_status, f.after AS f_after
      FROM (SELECT 'c'::text AS kind, ord FROM ci UNION ALL SELECT 'f'::text, ord FROM fi) AS k
        LEFT JOIN (${c.select}) AS c ON k.kind = 'c' AND c.c_ord = k.ord
        LEFT JOIN (${f.select}) AS f ON k.kind = 'f' AND f.f_ord = k.ord
      ORDER BY k.kind, k.ord`
  }

  return { stepFinishMany, claimAndFinishMany }
}
