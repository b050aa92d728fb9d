/**
 * Claims: a scheduled step, a run with no open step (continue, first step), many first steps in
 * one statement, a new step claimed at once, and the claims a worker loads again.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { LEASE_COMMIT } from "../../internal/leaseCommit.ts"
import { StepOutcomeVerbs } from "../States.ts"
import type { WorkflowSqlContext } from "./Context.ts"
import { type ClaimFirstEntry, type ClaimRow, STEP_JOB } from "./Rows.ts"

/**
 * `stepClaim` for the step messages a worker's plain read claims (QueueRows.ReadClaim): CTEs
 * after the read's `u`, ending in `rc` (`rc_msg_id` and the claim's row). Only first deliveries
 * among the read's first `limit` (those an executor takes at once), and of the `soon` after
 * them (they wait in the buffer) those whose step has no timeout shorter than
 * `soonMinTimeoutMs` (the sweep's stall clock starts with the claim), that name a step of one of
 * `workflows` (no start, continue or deadline notice: a redelivery takes the runner's path, which
 * knows what an earlier delivery held); at most one step per run; a run another
 * transaction holds is skipped (its execution claims with `stepClaim`, which waits). The mark is
 * the delivery's (`<queue>:<msg id>:<read count>`, `queue` the name the messages carry), so a
 * redelivery, a lost reply and the sweep find the step as one `stepClaim` claimed. A lease like
 * the read: lost in a server crash, the step is scheduled again and its message visible.
 */
const stepClaimInReadOf =
  (ctx: WorkflowSqlContext) =>
  (p: {
    readonly queue: string
    readonly workflows: ReadonlyArray<string>
    readonly limit: number
    /** The messages after the first `limit`, claimed when their step's timeout allows the wait. */
    readonly soon?: number | undefined
    /** The shortest step timeout a claim of `soon` allows (its stall clock runs in the buffer). */
    readonly soonMinTimeoutMs?: number | undefined
    readonly worker: string
    readonly appRevision: string | null
    readonly now: Date | null
  }) => {
    const { runs, steps, events, NOW, claimedStepColumns, claimColumnsOf, textArray, sql, fromIn, toOf } = ctx
    return sql`rc_m AS (
      SELECT DISTINCT ON (m.run_id) m.msg_id, m.read_ct, m.run_id, m.step_id, m.n FROM (
        SELECT f.msg_id, f.read_ct, (f.message->'payload'->>'run')::uuid AS run_id,
          (f.message->'payload'->>'step')::int8 AS step_id, f.n
        FROM (SELECT msg_id, read_ct, message${
          // the position tells the messages an executor takes at once from those that wait
          (p.soon ?? 0) > 0 ? sql`, row_number() OVER (ORDER BY msg_id) AS n` : sql`, 0 AS n`
        }
              FROM u ORDER BY msg_id LIMIT ${p.limit + (p.soon ?? 0)}) f
        WHERE f.read_ct = 1 AND f.message->>'job' = ${STEP_JOB}::text
          AND f.message->'payload'->>'workflow' = ANY(${textArray(p.workflows)}::text[])
          AND f.message->'payload'->>'step' IS NOT NULL
          AND f.message->'payload'->'deadline' IS NULL AND f.message->'payload'->'input' IS NULL) m
      ORDER BY m.run_id, m.msg_id),
    rc_l AS (
      SELECT l.id FROM (SELECT run_id FROM rc_m ORDER BY run_id) k,
        LATERAL (SELECT ru.id FROM ${runs} ru WHERE ru.id = k.run_id AND ${fromIn("ru.status", "claim")}
                 FOR UPDATE SKIP LOCKED) l),
    rc_s AS (
      UPDATE ${steps} st SET status = 'in_progress', started_at = ${NOW(p.now)}, worker = ${p.worker},
        app_revision = ${p.appRevision},
        claimed_by = (SELECT ${p.queue}::text || ':' || m.msg_id || ':' || m.read_ct FROM rc_m m
                      WHERE m.step_id = st.id AND m.run_id = st.run_id)
      -- by id (= ANY of the locked runs' steps), not by a join with the CTEs: an index scan in
      -- every plan; rc_m has one row per run, so one per step of that run
      WHERE st.id = ANY(ARRAY(SELECT m.step_id FROM rc_m m JOIN rc_l l ON l.id = m.run_id))
        AND EXISTS (SELECT 1 FROM rc_m m WHERE m.step_id = st.id AND m.run_id = st.run_id${
          (p.soon ?? 0) > 0
            ? sql` AND (m.n <= ${p.limit}
              -- one that waits in the buffer: only a step whose stall clock allows the wait
              OR coalesce(st.timeout_ms, 'Infinity'::float8) >= ${PgTypes.float8(p.soonMinTimeoutMs ?? Infinity)})`
            : sql``
        })
        AND st.status = 'scheduled' AND st.due_at <= ${NOW(p.now)}
      RETURNING (SELECT m.msg_id FROM rc_m m WHERE m.step_id = st.id AND m.run_id = st.run_id) AS rc_msg_id,
        st.run_id, ${claimedStepColumns}),
    rc_r AS (
      UPDATE ${runs} ru SET status = ${toOf("claim")}, current_step = (SELECT s.name FROM rc_s s WHERE s.run_id = ru.id),
        updated_at = ${NOW(p.now)}
      WHERE ru.id = ANY(ARRAY(SELECT run_id FROM rc_s))
      RETURNING ru.*),
    rc_e AS (
      INSERT INTO ${events} (run_id, type, step, attempt, actor, at)
      SELECT rc_s.run_id, 'step_started', rc_s.name, rc_s.attempt, 'system', ${NOW(p.now)} FROM rc_s
      ORDER BY rc_s.rc_msg_id),
    rc AS (
      SELECT rc_s.rc_msg_id, ${claimColumnsOf("rc_r", "rc_s")} FROM rc_r JOIN rc_s ON rc_s.run_id = rc_r.id)`
  }

/** Claim statements of one schema. */
export const makeClaimSql = (ctx: WorkflowSqlContext) => {
  const {
    runs,
    steps,
    events,
    NOW,
    history,
    lockRuns,
    claimedStepColumns,
    claimRest,
    claimColumns,
    sql,
    fromIn,
    toOf,
    openSteps
  } = ctx

  /**
   * Claims a scheduled, due step of a ready run: step → in_progress, run → performing. Its own
   * transaction, committed without waiting for the WAL flush (a lease: lost in a server crash,
   * the step is scheduled again and its message redelivered; see internal/leaseCommit.ts).
   */
  const stepClaim = (p: {
    readonly runId: string
    readonly stepId: bigint
    readonly worker: string
    readonly appRevision: string | null
    readonly claimedBy: string | null
    readonly now: Date | null
  }) =>
    sql<ClaimRow>`WITH locked AS (
        SELECT id FROM ${runs} WHERE id = ${p.runId}::uuid AND ${fromIn("status", "claim")} FOR UPDATE),
      s AS (
        UPDATE ${steps} st SET status = 'in_progress', started_at = ${NOW(p.now)}, worker = ${p.worker},
          app_revision = ${p.appRevision}, claimed_by = ${p.claimedBy}
        FROM locked
        WHERE st.id = ${p.stepId} AND st.run_id = locked.id AND st.status = 'scheduled' AND st.due_at <= ${NOW(p.now)}
        RETURNING ${claimedStepColumns}),
      ${claimRest(p.runId, p.now)}
      SELECT ${claimColumns} FROM r, s WHERE ${sql.literal(LEASE_COMMIT)}`

  /** Claims a ready run with no open step, to find its next step by replay (start, resume). */
  const runClaimContinue = (runId: string, now: Date | null) =>
    sql<ClaimRow>`WITH r AS (
        UPDATE ${runs} SET status = ${toOf("claim")}, updated_at = ${NOW(now)}
        WHERE id = ${runId}::uuid AND ${fromIn("status", "claim")}
          AND NOT EXISTS (SELECT 1 FROM ${steps} WHERE run_id = ${runId}::uuid
                          AND ${openSteps("status")})
        RETURNING *)
      SELECT r.*, NULL::int8 AS step_id, NULL::text AS step_name, NULL::int4 AS step_attempt,
        NULL::int4 AS step_position, NULL::int4 AS step_reattempts, NULL::bool AS step_timed_out,
        NULL::timestamptz AS step_timeout_at, NULL::jsonb AS held_signal, ${history(sql`r.id`)} AS history
      FROM r`

  /**
   * `runClaimFirstMany`'s parts, for it and for `claimAndFinishMany` (which shares its statement
   * with outcomes): the entries (`ci`), the CTEs after the runs are locked (`locked`, every
   * entry's run: `runIds`) and the SELECT of one row per entry (`c_ord`: the entry's position).
   */
  const claimFirstParts = (entries: ReadonlyArray<ClaimFirstEntry>, worker: string, appRevision: string | null) => {
    const json = JSON.stringify(
      entries.map((e) => ({
        r: e.runId,
        n: e.name,
        q: e.queue,
        // JSON has no Infinity: PostgreSQL reads float8 'Infinity' from the text
        m: e.timeoutMs === null || Number.isFinite(e.timeoutMs) ? e.timeoutMs : String(e.timeoutMs),
        c: e.claimedBy,
        t: e.now === null ? null : e.now.toISOString()
      }))
    )
    const input = sql`ci AS (
        SELECT u.ord, (u.e->>'r')::uuid AS run_id, u.e->>'n' AS name, u.e->>'q' AS queue,
          (u.e->>'m')::float8 AS timeout_ms, u.e->>'c' AS claimed_by, coalesce((u.e->>'t')::timestamptz, now()) AS at
        FROM jsonb_array_elements(${json}::jsonb) WITH ORDINALITY AS u(e, ord))`
    const ctes = sql`cr AS (
        UPDATE ${runs} ru SET status = ${toOf("claim")}, updated_at = ci.at,
          current_step = CASE WHEN EXISTS (SELECT 1 FROM ${steps} WHERE run_id = ru.id)
                              THEN ru.current_step ELSE ci.name END
        FROM locked, ci
        -- the guard reads the locked row's status: written on ru, the generic plan found the
        -- run by the status index, reading every ready run (the whole backlog in W3)
        WHERE ru.id = locked.id AND ru.id = ci.run_id AND ${fromIn("locked.status", "claim")}
          AND NOT EXISTS (SELECT 1 FROM ${steps} WHERE run_id = ru.id
                          AND ${openSteps("status")})
        RETURNING ru.*, ci.ord AS claim_ord, ci.name AS first_name, ci.queue AS first_queue,
          ci.timeout_ms AS first_timeout, ci.claimed_by AS first_claimed_by, ci.at AS claim_at),
      cs AS (
        INSERT INTO ${steps} (run_id, name, attempt, position, status, queue, scheduled_at, due_at, started_at,
                              timeout_ms, reattempts, worker, app_revision, claimed_by)
        SELECT cr.id, cr.first_name, 1, 0, 'in_progress', cr.first_queue, cr.claim_at, cr.claim_at, cr.claim_at,
               cr.first_timeout, 0, ${worker}::text, ${appRevision}::text, cr.first_claimed_by
        FROM cr WHERE NOT EXISTS (SELECT 1 FROM ${steps} WHERE run_id = cr.id)
        ORDER BY cr.claim_ord
        RETURNING id, run_id, name, attempt, position, reattempts),
      ce AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, at)
        SELECT cs.run_id, t.type, cs.name, cs.attempt, 'system', cr.claim_at
        FROM cs JOIN cr ON cr.id = cs.run_id, (VALUES (1, 'step_scheduled'), (2, 'step_started')) AS t(ord, type)
        ORDER BY cr.claim_ord, t.ord)`
    const select = sql`SELECT ci.ord AS c_ord, cr.*, cs.id AS step_id, cs.name AS step_name, cs.attempt AS step_attempt,
        cs.position AS step_position, cs.reattempts AS step_reattempts, false AS step_timed_out,
        NULL::timestamptz AS step_timeout_at, NULL::jsonb AS held_signal,
        -- a run that got its first step here had no step in this statement's snapshot: its history is empty
        CASE WHEN cr.id IS NULL THEN NULL WHEN cs.id IS NOT NULL THEN '[]'::jsonb ELSE ${history(sql`cr.id`)} END AS history
      FROM ci LEFT JOIN cr ON cr.claim_ord = ci.ord LEFT JOIN cs ON cs.run_id = cr.id`
    return { input, ctes, select, runIds: entries.map((e) => e.runId) }
  }

  /**
   * Claims ready runs with no open step (as `runClaimContinue`) and, for each that has no step
   * row at all, inserts its first step claimed: the worker found that step by replaying from the
   * payload the start message carried, before the claim. A run with a history gets no step (the
   * caller replays it from the history returned, which never includes the step inserted here).
   * One statement for one run or many (concurrent executions share it): one row per entry back,
   * in order; an entry whose run was not claimed gives a row whose `id` is null. The run ids must
   * differ.
   */
  const runClaimFirstMany = (entries: ReadonlyArray<ClaimFirstEntry>, worker: string, appRevision: string | null) => {
    const p = claimFirstParts(entries, worker, appRevision)
    return sql<ClaimRow & { readonly id: string | null }>`WITH ${p.input},
      locked AS (${lockRuns(p.runIds)}),
      ${p.ctes}
      ${p.select}
      ORDER BY ci.ord`
  }

  /** A performing run's first new step, claimed at once (the replay found it due). */
  const stepInsertClaimed = (p: {
    readonly runId: string
    readonly name: string
    readonly attempt: number
    readonly position: number
    readonly queue: string
    readonly reattempts: number
    readonly timeoutMs: number | null
    readonly worker: string
    readonly appRevision: string | null
    readonly claimedBy: string | null
    readonly now: Date | null
  }) =>
    sql<{ readonly id: bigint }>`WITH r AS (
        UPDATE ${runs} SET current_step = ${p.name}, updated_at = ${NOW(p.now)}
        WHERE id = ${p.runId}::uuid AND ${fromIn("status", "begin")} RETURNING id),
      s AS (
        INSERT INTO ${steps} (run_id, name, attempt, position, status, queue, scheduled_at, due_at, started_at,
                              timeout_ms, reattempts, worker, app_revision, claimed_by)
        SELECT r.id, ${p.name}, ${p.attempt}, ${p.position}, 'in_progress', ${p.queue}, ${NOW(p.now)}, ${NOW(p.now)},
               ${NOW(p.now)}, ${p.timeoutMs}::float8, ${p.reattempts}, ${p.worker}, ${p.appRevision}, ${p.claimedBy}
        FROM r RETURNING id, name, attempt),
      e AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, at)
        SELECT ${p.runId}::uuid, t.type, s.name, s.attempt, 'system', ${NOW(p.now)}
        FROM s, (VALUES (1, 'step_scheduled'), (2, 'step_started')) AS t(ord, type) ORDER BY t.ord)
      SELECT s.id FROM s`

  /** A waiting run and its step whose missed deadline a worker is to evaluate again (for replay). */
  const runLoadForRenewal = (runId: string, stepId: bigint, missedAt: Date) =>
    sql<ClaimRow>`WITH r AS (SELECT * FROM ${runs} WHERE id = ${runId}::uuid AND ${fromIn("status", "notice")}),
      s AS (
        SELECT ${claimedStepColumns} FROM ${steps} st JOIN r ON st.run_id = r.id
        WHERE st.id = ${stepId} AND st.status = 'waiting'
          AND st.timeout_at = ${missedAt}::timestamptz AND st.deadline_renewal_for = ${missedAt}::timestamptz)
      SELECT ${claimColumns} FROM r, s`

  /**
   * The run and its step in progress that this claim (a delivery's mark) holds: a claim whose
   * reply was lost with its connection finds by it what it had claimed.
   */
  const runLoadClaimed = (runId: string, claimedBy: string) =>
    sql<ClaimRow>`WITH r AS (SELECT * FROM ${runs} WHERE id = ${runId}::uuid AND ${fromIn("status", ...StepOutcomeVerbs)}),
      s AS (
        SELECT ${claimedStepColumns} FROM ${steps} st JOIN r ON st.run_id = r.id
        WHERE st.status = 'in_progress' AND st.claimed_by = ${claimedBy})
      SELECT ${claimColumns} FROM r, s`

  const stepClaimInRead = stepClaimInReadOf(ctx)

  return {
    stepClaim,
    stepClaimInRead,
    runClaimContinue,
    runClaimFirstMany,
    claimFirstParts,
    stepInsertClaimed,
    runLoadForRenewal,
    runLoadClaimed
  }
}
