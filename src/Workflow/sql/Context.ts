/**
 * What every workflow statement shares: the client, the schema's tables, the clock fragment, the
 * message and history fragments, and the transition table as SQL (`fromIn`, `toOf`): each
 * statement's allowed from-states and target come from `States.ts`.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { Result } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import { fromStatesOf, OpenStepStatuses, type RunStatus, transitionOf, type Verb } from "../States.ts"
import { type MessageCtes, STEP_JOB } from "./Rows.ts"

const quoted = (values: ReadonlyArray<string>) => values.map((v) => `'${v}'`).join(", ")

/** The shared fragments of one schema's statements. */
export const makeWorkflowSqlContext = (sql: SqlClient.SqlClient, schema: string, messageCtes: MessageCtes) => {
  // The transition table as SQL. States are inlined as constants, not bound: the plans (and the
  // partial indexes on status) see the same text as a literal written in the statement.
  /** `<column> IN (…)`: the states the verbs may start from (their union), from `States.ts`. */
  // Each is built once per text and kept: statements are built per call (several per run), and
  // the table does not change.
  const literals = new Map<string, Statement.Fragment>()
  const literal = (text: string) => {
    let fragment = literals.get(text)
    if (fragment === undefined) {
      fragment = sql.literal(text)
      literals.set(text, fragment)
    }
    return fragment
  }
  const fromInTexts = new Map<string, string>()
  const fromIn = (column: string, ...verbs: ReadonlyArray<Verb>) => {
    const key = `${column}\u0000${verbs.join("\u0000")}`
    let text = fromInTexts.get(key)
    if (text === undefined) {
      text = `${column} IN (${quoted(fromStatesOf(verbs))})`
      fromInTexts.set(key, text)
    }
    return literal(text)
  }
  /** The state a verb leads to (a verb whose target is a state; `unchanged` keeps the column). */
  const toOf = (verb: Verb) => {
    const to = transitionOf(verb).to
    return literal(to === "unchanged" ? "status" : `'${to}'`)
  }
  /** A run state as a constant, for the statements' CASE branches. */
  const state = (status: RunStatus) => literal(`'${status}'`)
  /** `<column> IN (…)`: the open step states. */
  const openStepList = sql.literal(`(${quoted(OpenStepStatuses)})`)
  const openSteps = (column: string) => literal(`${column} IN (${quoted(OpenStepStatuses)})`)

  const runs = sql(`${schema}.workflow_runs`)
  const steps = sql(`${schema}.workflow_steps`)
  const events = sql(`${schema}.workflow_events`)
  const signals = sql(`${schema}.workflow_signals`)

  const NOW = (now: Date | null) => sql`coalesce(${now}::timestamptz, now())`
  const textArray = (values: ReadonlyArray<string>) => Result.getOrThrow(PgTypes.array(values, PgTypes.OID.text))
  const uuidArray = (values: ReadonlyArray<string>) => Result.getOrThrow(PgTypes.array(values, PgTypes.OID.uuid))

  const history = (runRef: Statement.Fragment) => sql`(SELECT coalesce(jsonb_agg(jsonb_build_object(
        'id', h.id::text, 'name', h.name, 'attempt', h.attempt, 'position', h.position, 'status', h.status,
        'output', h.output, 'reattempts', h.reattempts) ORDER BY h.position, h.attempt), '[]'::jsonb)
      FROM ${steps} h WHERE h.run_id = ${runRef})`

  const stepMessage = (
    workflow: string | Statement.Fragment,
    stepId: Statement.Fragment,
    runId: Statement.Fragment,
    input: Statement.Fragment = sql``
  ) =>
    sql`jsonb_build_object('job', ${STEP_JOB}::text, 'payload',
      jsonb_build_object('workflow', ${workflow}::text, 'run', ${runId}, 'step', ${stepId}::text${input}))`

  /**
   * Locks the runs of a shared statement (`id`, `status`), in id order (no deadlock between two
   * shared statements), one primary-key probe per id. `WHERE id = ANY($ids) ORDER BY id FOR UPDATE`
   * says the same, but the generic plan a prepared statement settles on after five executions
   * scanned the whole table while it was small (a few thousand rows, dead ones included): in
   * W3 of bench:workflows every shared claim and outcome read each run row of the bench.
   */
  const lockRuns = (ids: ReadonlyArray<string>) =>
    sql`SELECT l.id, l.status
        FROM (SELECT k.id FROM unnest(${uuidArray(ids)}::uuid[]) AS k(id) ORDER BY k.id) AS k,
          LATERAL (SELECT ru.id, ru.status FROM ${runs} ru WHERE ru.id = k.id FOR UPDATE) AS l`

  // A step's claim, shared by stepClaim, stepWakeClaim and runLoadForRenewal: its `s` CTE (the claimed step)
  // returns these columns; `claimRest` moves the run to performing and writes `step_started`;
  // the claim's row (ClaimRow) is `claimColumns` from `r` and `s`. `after`: FROM items the
  // `step_started` insert reads, so that the events they write come first in the trail.
  const claimedStepColumns = sql`st.id, st.name, st.attempt, st.position, st.reattempts, st.timed_out, st.timeout_at`

  const claimRest = (runId: string, now: Date | null, after?: Statement.Fragment) => sql`r AS (
        UPDATE ${runs} ru SET status = ${toOf("claim")}, current_step = s.name, updated_at = ${NOW(now)}
        FROM s WHERE ru.id = ${runId}::uuid
        RETURNING ru.*),
      e AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, at)
        SELECT ${runId}::uuid, 'step_started', s.name, s.attempt, 'system', ${NOW(now)} FROM s${after ?? sql``})`

  /**
   * The claim's row from the run CTE `r` and the step CTE `s` (named otherwise in a worker's
   * read); `held`: the held signal's expression when the statement itself claims it (a read of
   * the table in the same statement sees the signal as it was before).
   */
  const claimColumnsOf = (rName: string, sName: string, held?: Statement.Fragment) => {
    const r = sql.literal(rName)
    const s = sql.literal(sName)
    const heldSignal =
      held ??
      sql`(SELECT jsonb_build_object('id', sg.id::text, 'name', sg.name, 'payload', sg.payload)
           FROM ${signals} sg WHERE sg.claimed_by_step = ${s}.id AND sg.status = 'claimed' ORDER BY sg.id LIMIT 1)`
    return sql`${r}.*, ${s}.id AS step_id, ${s}.name AS step_name, ${s}.attempt AS step_attempt,
        ${s}.position AS step_position, ${s}.reattempts AS step_reattempts, ${s}.timed_out AS step_timed_out,
        ${s}.timeout_at AS step_timeout_at, ${heldSignal} AS held_signal,
        ${history(sql`${r}.id`)} AS history`
  }
  const claimColumns = claimColumnsOf("r", "s")

  /**
   * The rest of a statement whose `s` CTE inserted a scheduled step (`id`, `name`, `attempt`,
   * `due_at`): its `step_scheduled` event by `actor` and its message, due at the step's `due_at`.
   */
  const scheduledRest = (p: {
    readonly workflow: string
    readonly runId: string
    readonly physicalQueue: string
    /** The message CTE's name. */
    readonly label: string
    readonly actor: Statement.Fragment
    readonly now: Date | null
  }) => {
    const message = messageCtes(
      p.physicalQueue,
      p.label,
      sql`SELECT s.due_at AS vt, ${stepMessage(p.workflow, sql`s.id`, sql`${p.runId}::uuid`)} AS message FROM s`,
      p.now
    )
    return sql`e AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, at)
        SELECT ${p.runId}::uuid, 'step_scheduled', s.name, s.attempt, ${p.actor}, ${NOW(p.now)} FROM s),
      ${message.ctes}
      SELECT s.id, ${message.notifyRef} AS notified FROM s`
  }

  /**
   * A step takes a pending signal (pending → claimed) and the event says so: CTEs `sgc` (the
   * claimed signal's `id`), `sgc_step` and `sgc_event`, for `signalClaim` and for a wake that
   * claims its signal in the same statement.
   */
  const signalClaimCtes = (p: {
    readonly runId: string
    readonly signalId: bigint
    readonly stepId: bigint
    readonly now: Date | null
  }) => sql`sgc AS (
        UPDATE ${signals} sg SET status = 'claimed', claimed_by_step = ${p.stepId}, claimed_at = ${NOW(p.now)}
        WHERE sg.id = ${p.signalId} AND sg.status = 'pending' RETURNING sg.id, sg.name, sg.payload),
      sgc_step AS (SELECT name, attempt FROM ${steps} WHERE id = ${p.stepId}),
      sgc_event AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, details, at)
        SELECT ${p.runId}::uuid, 'signal_claimed', sgc_step.name, sgc_step.attempt, 'system',
          jsonb_build_object('signal', sgc.name, 'signal_id', sgc.id::text), ${NOW(p.now)} FROM sgc, sgc_step
        RETURNING 1)`

  /** The deadline's notice was not handed to a worker yet, or was handed over long ago and is still pending. */
  const renewalDue = (now: Date | null, thresholdMs: number) =>
    sql`(st.deadline_renewal_for IS DISTINCT FROM st.timeout_at
          OR st.deadline_renewal_at < ${NOW(now)} - ${PgTypes.float8(thresholdMs)} * interval '1 millisecond')`

  return {
    sql,
    messageCtes,
    runs,
    steps,
    events,
    signals,
    NOW,
    textArray,
    uuidArray,
    history,
    stepMessage,
    lockRuns,
    claimedStepColumns,
    claimRest,
    claimColumns,
    claimColumnsOf,
    scheduledRest,
    signalClaimCtes,
    renewalDue,
    fromIn,
    toOf,
    state,
    openSteps,
    openStepList
  }
}

/** The shared fragments of one schema's statements. */
export type WorkflowSqlContext = ReturnType<typeof makeWorkflowSqlContext>
