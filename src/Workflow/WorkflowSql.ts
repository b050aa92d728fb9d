/**
 * Every SQL statement on the workflow tables: runs, step attempts and the audit trail. The
 * runner's transitions are single statements (data-modifying CTEs): the run row is locked,
 * each change is a guarded UPDATE, the audit events and the next step's message are written
 * in the same statement. Messages are written through the queue store's CTE builder, which
 * owns the queue tables.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { Result } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import type { ClaimedMessageRow, MessageCtes as QueueMessageCtes } from "../Queue/QueueSql.ts"
import type { RunStatus, StepStatus } from "./States.ts"

/** A run row. */
export interface RunRow {
  readonly id: string
  readonly workflow: string
  readonly subject: string | null
  readonly resource_id: string | null
  readonly payload: unknown
  readonly status: RunStatus
  readonly current_step: string | null
  readonly idempotency_key: string | null
  readonly paused_reason: string | null
  readonly paused_at: Date | null
  readonly error: unknown
  readonly output: unknown
  readonly engine_version: number
  readonly definition_version: string | null
  readonly definition_hash: string | null
  readonly rerun_of: string | null
  readonly actor: string
  readonly created_at: Date
  readonly updated_at: Date
  readonly finished_at: Date | null
}

/** A step attempt row. */
export interface StepRow {
  readonly id: bigint
  readonly run_id: string
  readonly name: string
  readonly attempt: number
  readonly position: number
  readonly status: StepStatus
  readonly queue: string
  readonly scheduled_at: Date
  readonly due_at: Date
  readonly started_at: Date | null
  readonly finished_at: Date | null
  readonly timeout_ms: number | null
  readonly reattempts: number
  readonly worker: string | null
  readonly app_revision: string | null
  readonly output: unknown
  readonly error: unknown
  readonly wait_for: string | null
  readonly wait_matcher: boolean
  readonly timeout_at: Date | null
  readonly on_timeout: OnTimeout | null
  readonly wait_period_ms: number | null
  readonly timed_out: boolean
  readonly waiting_since: Date | null
  /** The batch a fan-out step waits for. */
  readonly batch_id: string | null
  /** The wait's deadline came from a per-run function: a notify notice evaluates it again. */
  readonly wait_deadline_per_run: boolean
  /** The missed deadline whose notice the sweep handed to a worker (per-run deadlines). */
  readonly deadline_renewal_for: Date | null
  /** When that notice was handed over (handed over again if still pending past the stall threshold). */
  readonly deadline_renewal_at: Date | null
  /** The claim holding the attempt in progress: a delivery's mark (`<queue>:<msg id>:<read count>`) or a hand-over's. */
  readonly claimed_by: string | null
}

/** What a wait does when its deadline passes. */
export type OnTimeout = "pause" | "cancel" | "skip" | "run" | "notify"

/** A signal row. */
export interface SignalRow {
  readonly id: bigint
  readonly run_id: string
  readonly name: string
  readonly payload: unknown
  readonly status: "pending" | "claimed" | "consumed"
  readonly idempotency_key: string | null
  readonly claimed_by_step: bigint | null
  readonly actor: string
  readonly reason: string | null
  readonly received_at: Date
  readonly claimed_at: Date | null
  readonly consumed_at: Date | null
}

/** An audit event row. */
export interface EventRow {
  readonly id: bigint
  readonly run_id: string
  readonly type: string
  readonly step: string | null
  readonly attempt: number | null
  readonly actor: string
  readonly reason: string | null
  readonly details: unknown
  readonly at: Date
}

/** A step of the history a replay reads (from a claim). */
export interface HistoryEntry {
  readonly id: string
  readonly name: string
  readonly attempt: number
  readonly position: number
  readonly status: StepStatus
  readonly output: unknown
  readonly reattempts: number
}

/** What a claim returns: the run, the claimed step (none for a continue) and the history. */
export interface ClaimRow extends RunRow {
  readonly step_id: bigint | null
  readonly step_name: string | null
  readonly step_attempt: number | null
  readonly step_position: number | null
  readonly step_reattempts: number | null
  readonly step_timed_out: boolean | null
  readonly step_timeout_at: Date | null
  /** The signal the claimed step holds (woken by it, or kept from an earlier attempt). */
  readonly held_signal: { readonly id: string; readonly name: string; readonly payload: unknown } | null
  readonly history: ReadonlyArray<HistoryEntry>
}

/** Builds message CTEs into the queue named (see QueueSql.messageSendCtes). */
export type MessageCtes = QueueMessageCtes

/** The job name of workflow step messages. */
export const STEP_JOB = "pgbus.workflow.step"

/** `wait_for` of a poll scheduled for its next check: fast-forward gives it its result as a signal. */
export const POLL_WAIT = "pgbus.poll"

/** `wait_for` of a fan-out step: its batch's callback delivers this signal. */
export const FAN_OUT_WAIT = "pgbus.fan_out"

/** The job name of fan-out callbacks (a batch finished: resume the run that opened it). */
export const FAN_OUT_JOB = "pgbus.workflow.fan_out_finished"

/** What follows a finished attempt. */
export type NextAction =
  | {
      readonly _tag: "schedule"
      readonly name: string
      readonly attempt: number
      readonly position: number
      readonly queue: string
      readonly physicalQueue: string
      readonly delayMs: number
      /** An absolute due time (a timer); wins over `delayMs`. */
      readonly dueAt?: Date | null | undefined
      readonly timeoutMs?: number | null | undefined
      readonly reattempts: number
      /** Write a `step_reattempted` event (a new attempt of the same step). */
      readonly reattempt: boolean
    }
  | {
      readonly _tag: "claim"
      readonly name: string
      readonly attempt: number
      readonly position: number
      readonly queue: string
      readonly physicalQueue: string
      readonly reattempts: number
      readonly timeoutMs: number | null
      /** The mark of the delivery whose execution runs it (null: none, as in the test helpers). */
      readonly claimedBy: string | null
    }
  /** The run goes back to ready with a continue message (its next step is found by replay). */
  | { readonly _tag: "continue"; readonly physicalQueue: string }
  | { readonly _tag: "finish"; readonly output: string | null }
  | { readonly _tag: "pause"; readonly reason: string; readonly error: string | null; readonly message: string | null }
  | { readonly _tag: "cancel"; readonly reason: string | null }

/** A start (`runStart`, or one entry of `runStartMany`): a fresh run and its payload as JSON text. */
export interface StartEntry {
  readonly id: string
  readonly workflow: string
  readonly subject: string | null
  readonly resourceId: string | null
  readonly payload: string
  readonly idempotencyKey: string | null
  readonly engineVersion: number
  readonly definitionVersion: string | null
  readonly actor: string
  readonly reason: string | null
  /** The message carries the run's payload, subject and resource: its worker replays before claiming. */
  readonly carryInput: boolean
  readonly now: Date | null
}

/** One entry of `runClaimFirstMany`: a fresh run and the first step its replay reached. */
export interface ClaimFirstEntry {
  readonly runId: string
  readonly name: string
  readonly queue: string
  readonly timeoutMs: number | null
  /** The mark of the delivery whose execution claims it. */
  readonly claimedBy: string | null
  readonly now: Date | null
}

/** One entry of `stepFinishMany`: a completed attempt that holds no signal, and what follows it. */
export interface FinishManyEntry {
  readonly runId: string
  readonly stepId: bigint
  /** The output as JSON text (null: none). */
  readonly output: string | null
  readonly definitionHash: string | null
  readonly next:
    | Omit<Extract<NextAction, { readonly _tag: "claim" }>, "physicalQueue">
    | { readonly _tag: "finish"; readonly output: string | null }
  readonly now: Date | null
}

/** What a finish statement did. */
export interface FinishRow {
  /** The run's status before (null when the run is gone). */
  readonly before: RunStatus | null
  /** 1 when the attempt was still in progress and its outcome applied. */
  readonly applied: bigint
  readonly next_id: bigint | null
  readonly next_status: StepStatus | null
  readonly after: RunStatus | null
}

const ONGOING = ["ready", "performing", "waiting", "paused"]
const STEP_EVENT: Record<"completed" | "skipped" | "failed" | "cancelled", string> = {
  completed: "step_completed",
  skipped: "step_skipped",
  failed: "step_failed",
  cancelled: "step_cancelled"
}

/** Filters of a run listing. */
export interface RunFilter {
  readonly workflow?: string | undefined
  readonly status?: ReadonlyArray<RunStatus> | undefined
  readonly subject?: string | undefined
  readonly resourceId?: string | undefined
  readonly pausedReason?: string | undefined
  readonly createdFrom?: Date | undefined
  readonly createdTo?: Date | undefined
  /** Cursor: runs created before this (created_at, id). */
  readonly before?: { readonly createdAt: string; readonly id: string } | undefined
  readonly limit: number
}

/** The statements of one schema. */
export const makeWorkflowSql = (sql: SqlClient.SqlClient, schema: string, messageCtes: MessageCtes) => {
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
    workflow: string,
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

  /** Start: the run, its `started` event and its first message, unless a unique index says no. */
  const runStart = (p: StartEntry & { readonly physicalQueue: string; readonly rerunOf: string | null }) => {
    const input = p.carryInput
      ? sql`, 'input', jsonb_build_object('payload', run.payload, 'subject', run.subject, 'resource_id', run.resource_id)`
      : sql``
    const message = messageCtes(
      p.physicalQueue,
      "first_message",
      sql`SELECT ${NOW(p.now)} AS vt, ${stepMessage(p.workflow, sql`NULL`, sql`run.id`, input)} AS message FROM run`,
      p.now
    )
    return sql<RunRow & { readonly notified: unknown }>`WITH run AS (
        INSERT INTO ${runs} (id, workflow, subject, resource_id, payload, status, idempotency_key, engine_version,
                             definition_version, rerun_of, actor, created_at, updated_at)
        VALUES (${p.id}::uuid, ${p.workflow}, ${p.subject}, ${p.resourceId}, ${p.payload}::jsonb, 'ready',
                ${p.idempotencyKey}, ${p.engineVersion}, ${p.definitionVersion}, ${p.rerunOf}::uuid, ${p.actor},
                ${NOW(p.now)}, ${NOW(p.now)})
        ON CONFLICT DO NOTHING
        RETURNING *),
      started AS (
        INSERT INTO ${events} (run_id, type, actor, reason, details, at)
        SELECT run.id, ${p.rerunOf === null ? "started" : "rerun"}, ${p.actor}, ${p.reason},
          jsonb_strip_nulls(jsonb_build_object('subject', ${p.subject}::text, 'idempotency_key', ${p.idempotencyKey}::text,
            'rerun_of', ${p.rerunOf}::text)), ${NOW(p.now)}
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
          `{"id":${JSON.stringify(e.id)},"w":${JSON.stringify(e.workflow)},"s":${JSON.stringify(e.subject)},"rs":${JSON.stringify(e.resourceId)},"p":${e.payload},"k":${JSON.stringify(e.idempotencyKey)},"v":${e.engineVersion},"dv":${JSON.stringify(e.definitionVersion)},"a":${JSON.stringify(e.actor)},"re":${JSON.stringify(e.reason)},"c":${e.carryInput}}`
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
          u.e->>'re' AS reason, (u.e->>'c')::boolean AS carry
        FROM jsonb_array_elements(${json}::jsonb) WITH ORDINALITY AS u(e, ord)),
      run AS (
        INSERT INTO ${runs} (id, workflow, subject, resource_id, payload, status, idempotency_key, engine_version,
                             definition_version, rerun_of, actor, created_at, updated_at)
        SELECT id, workflow, subject, resource_id, payload, 'ready', idempotency_key, engine_version,
               definition_version, NULL, actor, ${NOW(now)}, ${NOW(now)}
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

  /** The run a start collided with: the one with the key, else the subject's ongoing run. */
  const runFindConflicting = (workflow: string, subject: string | null, idempotencyKey: string | null) =>
    sql<RunRow>`SELECT * FROM ${runs}
      WHERE workflow = ${workflow}
        AND ((${idempotencyKey}::text IS NOT NULL AND idempotency_key = ${idempotencyKey}::text)
          OR (${subject}::text IS NOT NULL AND subject = ${subject}::text AND status = ANY(${textArray(ONGOING)}::text[])))
      ORDER BY (idempotency_key IS NOT DISTINCT FROM ${idempotencyKey}::text) DESC
      LIMIT 1`

  // A step's claim, shared by stepClaim, stepWakeClaim and runLoadForRenewal: its `s` CTE (the claimed step)
  // returns these columns; `claimRest` moves the run to performing and writes `step_started`;
  // the claim's row (ClaimRow) is `claimColumns` from `r` and `s`.
  const claimedStepColumns = sql`st.id, st.name, st.attempt, st.position, st.reattempts, st.timed_out, st.timeout_at`
  const claimRest = (runId: string, now: Date | null) => sql`r AS (
        UPDATE ${runs} ru SET status = 'performing', current_step = s.name, updated_at = ${NOW(now)}
        FROM s WHERE ru.id = ${runId}::uuid
        RETURNING ru.*),
      e AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, at)
        SELECT ${runId}::uuid, 'step_started', s.name, s.attempt, 'system', ${NOW(now)} FROM s)`
  const claimColumns = sql`r.*, s.id AS step_id, s.name AS step_name, s.attempt AS step_attempt,
        s.position AS step_position, s.reattempts AS step_reattempts, s.timed_out AS step_timed_out,
        s.timeout_at AS step_timeout_at,
        (SELECT jsonb_build_object('id', sg.id::text, 'name', sg.name, 'payload', sg.payload)
           FROM ${signals} sg WHERE sg.claimed_by_step = s.id AND sg.status = 'claimed' ORDER BY sg.id LIMIT 1) AS held_signal,
        ${history(sql`r.id`)} AS history`

  /** Claims a scheduled, due step of a ready run: step → in_progress, run → performing. */
  const stepClaim = (p: {
    readonly runId: string
    readonly stepId: bigint
    readonly worker: string
    readonly appRevision: string | null
    readonly claimedBy: string | null
    readonly now: Date | null
  }) =>
    sql<ClaimRow>`WITH locked AS (
        SELECT id FROM ${runs} WHERE id = ${p.runId}::uuid AND status = 'ready' FOR UPDATE),
      s AS (
        UPDATE ${steps} st SET status = 'in_progress', started_at = ${NOW(p.now)}, worker = ${p.worker},
          app_revision = ${p.appRevision}, claimed_by = ${p.claimedBy}
        FROM locked
        WHERE st.id = ${p.stepId} AND st.run_id = locked.id AND st.status = 'scheduled' AND st.due_at <= ${NOW(p.now)}
        RETURNING ${claimedStepColumns}),
      ${claimRest(p.runId, p.now)}
      SELECT ${claimColumns} FROM r, s`

  /** Claims a ready run with no open step, to find its next step by replay (start, resume). */
  const runClaimContinue = (runId: string, now: Date | null) =>
    sql<ClaimRow>`WITH r AS (
        UPDATE ${runs} SET status = 'performing', updated_at = ${NOW(now)}
        WHERE id = ${runId}::uuid AND status = 'ready'
          AND NOT EXISTS (SELECT 1 FROM ${steps} WHERE run_id = ${runId}::uuid
                          AND status IN ('scheduled', 'in_progress', 'waiting'))
        RETURNING *)
      SELECT r.*, NULL::int8 AS step_id, NULL::text AS step_name, NULL::int4 AS step_attempt,
        NULL::int4 AS step_position, NULL::int4 AS step_reattempts, NULL::bool AS step_timed_out,
        NULL::timestamptz AS step_timeout_at, NULL::jsonb AS held_signal, ${history(sql`r.id`)} AS history
      FROM r`

  /**
   * Claims a ready run with no open step (as `runClaimContinue`) and, when it has no step row at
   * all, inserts its first step claimed: the worker found that step by replaying from the payload
   * the start message carried, before the claim. A run with a history gets no step (the caller
   * replays it from the history returned, which never includes the step inserted here).
   */
  const runClaimFirst = (p: {
    readonly runId: string
    readonly name: string
    readonly queue: string
    readonly timeoutMs: number | null
    readonly worker: string
    readonly appRevision: string | null
    readonly claimedBy: string | null
    readonly now: Date | null
  }) =>
    sql<ClaimRow>`WITH r AS (
        UPDATE ${runs} SET status = 'performing', updated_at = ${NOW(p.now)},
          current_step = CASE WHEN EXISTS (SELECT 1 FROM ${steps} WHERE run_id = ${p.runId}::uuid)
                              THEN current_step ELSE ${p.name} END
        WHERE id = ${p.runId}::uuid AND status = 'ready'
          AND NOT EXISTS (SELECT 1 FROM ${steps} WHERE run_id = ${p.runId}::uuid
                          AND status IN ('scheduled', 'in_progress', 'waiting'))
        RETURNING *),
      s AS (
        INSERT INTO ${steps} (run_id, name, attempt, position, status, queue, scheduled_at, due_at, started_at,
                              timeout_ms, reattempts, worker, app_revision, claimed_by)
        SELECT r.id, ${p.name}, 1, 0, 'in_progress', ${p.queue}, ${NOW(p.now)}, ${NOW(p.now)}, ${NOW(p.now)},
               ${p.timeoutMs}::float8, 0, ${p.worker}, ${p.appRevision}, ${p.claimedBy}
        FROM r WHERE NOT EXISTS (SELECT 1 FROM ${steps} WHERE run_id = ${p.runId}::uuid)
        RETURNING id, name, attempt, position, reattempts),
      e AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, at)
        SELECT ${p.runId}::uuid, t.type, s.name, s.attempt, 'system', ${NOW(p.now)}
        FROM s, (VALUES (1, 'step_scheduled'), (2, 'step_started')) AS t(ord, type) ORDER BY t.ord)
      SELECT r.*, s.id AS step_id, s.name AS step_name, s.attempt AS step_attempt,
        s.position AS step_position, s.reattempts AS step_reattempts, false AS step_timed_out,
        NULL::timestamptz AS step_timeout_at, NULL::jsonb AS held_signal, ${history(sql`r.id`)} AS history
      FROM r LEFT JOIN s ON true`

  /**
   * `runClaimFirst` for many runs in one statement: each entry's run is claimed (and its first
   * step inserted in progress) exactly as `runClaimFirst` would. One row per entry back, in order;
   * an entry whose run was not claimed gives a row whose `id` is null. The run ids must differ.
   */
  const runClaimFirstMany = (entries: ReadonlyArray<ClaimFirstEntry>, worker: string, appRevision: string | null) => {
    const json = JSON.stringify(
      entries.map((e) => ({
        r: e.runId,
        n: e.name,
        q: e.queue,
        m: e.timeoutMs,
        c: e.claimedBy,
        t: e.now === null ? null : e.now.toISOString()
      }))
    )
    return sql<ClaimRow & { readonly id: string | null }>`WITH i AS (
        SELECT u.ord, (u.e->>'r')::uuid AS run_id, u.e->>'n' AS name, u.e->>'q' AS queue,
          (u.e->>'m')::float8 AS timeout_ms, u.e->>'c' AS claimed_by, coalesce((u.e->>'t')::timestamptz, now()) AS at
        FROM jsonb_array_elements(${json}::jsonb) WITH ORDINALITY AS u(e, ord)),
      locked AS (${lockRuns(entries.map((e) => e.runId))}),
      r AS (
        UPDATE ${runs} ru SET status = 'performing', updated_at = i.at,
          current_step = CASE WHEN EXISTS (SELECT 1 FROM ${steps} WHERE run_id = ru.id)
                              THEN ru.current_step ELSE i.name END
        FROM locked, i
        -- the guard reads the locked row's status: written on ru, the generic plan found the
        -- run by the status index, reading every ready run (the whole backlog in W3)
        WHERE ru.id = locked.id AND ru.id = i.run_id AND locked.status = 'ready'
          AND NOT EXISTS (SELECT 1 FROM ${steps} WHERE run_id = ru.id
                          AND status IN ('scheduled', 'in_progress', 'waiting'))
        RETURNING ru.*, i.ord AS claim_ord, i.name AS first_name, i.queue AS first_queue,
          i.timeout_ms AS first_timeout, i.claimed_by AS first_claimed_by, i.at AS claim_at),
      s AS (
        INSERT INTO ${steps} (run_id, name, attempt, position, status, queue, scheduled_at, due_at, started_at,
                              timeout_ms, reattempts, worker, app_revision, claimed_by)
        SELECT r.id, r.first_name, 1, 0, 'in_progress', r.first_queue, r.claim_at, r.claim_at, r.claim_at,
               r.first_timeout, 0, ${worker}::text, ${appRevision}::text, r.first_claimed_by
        FROM r WHERE NOT EXISTS (SELECT 1 FROM ${steps} WHERE run_id = r.id)
        ORDER BY r.claim_ord
        RETURNING id, run_id, name, attempt, position, reattempts),
      e AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, at)
        SELECT s.run_id, t.type, s.name, s.attempt, 'system', r.claim_at
        FROM s JOIN r ON r.id = s.run_id, (VALUES (1, 'step_scheduled'), (2, 'step_started')) AS t(ord, type)
        ORDER BY r.claim_ord, t.ord)
      SELECT r.*, s.id AS step_id, s.name AS step_name, s.attempt AS step_attempt,
        s.position AS step_position, s.reattempts AS step_reattempts, false AS step_timed_out,
        NULL::timestamptz AS step_timeout_at, NULL::jsonb AS held_signal,
        CASE WHEN r.id IS NULL THEN NULL ELSE ${history(sql`r.id`)} END AS history
      FROM i LEFT JOIN r ON r.claim_ord = i.ord LEFT JOIN s ON s.run_id = r.id
      ORDER BY i.ord`
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
        WHERE id = ${p.runId}::uuid AND status = 'performing' RETURNING id),
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
    const message = messageCtes(
      p.physicalQueue,
      "scheduled_message",
      sql`SELECT s.due_at AS vt, ${stepMessage(p.workflow, sql`s.id`, sql`${p.runId}::uuid`)} AS message FROM s`,
      p.now
    )
    // a first step's wait counts from the start (seed 000), not from the claim that reached it
    const waitFrom = p.position === 0 && p.attempt === 1 ? sql`r.created_at` : NOW(p.now)
    return sql<{ readonly id: bigint }>`WITH r AS (
        UPDATE ${runs} SET status = 'ready', current_step = ${p.name}, updated_at = ${NOW(p.now)}
        WHERE id = ${p.runId}::uuid AND status = 'performing' RETURNING id, created_at),
      s AS (
        INSERT INTO ${steps} (run_id, name, attempt, position, status, queue, scheduled_at, due_at, timeout_ms,
                              reattempts)
        SELECT r.id, ${p.name}, ${p.attempt}, ${p.position}, 'scheduled', ${p.queue}, ${NOW(p.now)},
               greatest(${NOW(p.now)}, coalesce(${p.dueAt}::timestamptz,
                 ${waitFrom} + ${PgTypes.float8(p.delayMs)} * interval '1 millisecond')),
               ${PgTypes.float8(p.timeoutMs)}, ${p.reattempts}
        FROM r RETURNING id, name, attempt, due_at),
      e AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, at)
        SELECT ${p.runId}::uuid, 'step_scheduled', s.name, s.attempt, 'system', ${NOW(p.now)} FROM s),
      ${message.ctes}
      SELECT s.id, ${message.notifyRef} AS notified FROM s`
  }

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
  }) =>
    sql<{ readonly status: RunStatus }>`WITH r AS (
        UPDATE ${runs} SET status = ${p.to}, updated_at = ${NOW(p.now)},
          finished_at = ${p.to === "paused" ? sql`NULL` : NOW(p.now)},
          paused_at = ${p.to === "paused" ? NOW(p.now) : sql`NULL`},
          paused_reason = ${p.pausedReason}, error = coalesce(${p.error}::jsonb, error),
          output = coalesce(${p.output}::jsonb, output),
          definition_hash = coalesce(${p.definitionHash}::text, definition_hash)
        WHERE id = ${p.runId}::uuid AND status = 'performing' RETURNING status),
      e AS (
        INSERT INTO ${events} (run_id, type, actor, reason, at)
        SELECT ${p.runId}::uuid, ${p.to}, 'system', ${p.reason}, ${NOW(p.now)} FROM r)
      SELECT status FROM r`

  /** A performing run whose continue claim died with its worker goes back to ready. */
  const runReleaseContinue = (runId: string, now: Date | null) =>
    sql<{ readonly id: string }>`UPDATE ${runs} SET status = 'ready', updated_at = ${NOW(now)}
      WHERE id = ${runId}::uuid AND status = 'performing'
        AND NOT EXISTS (SELECT 1 FROM ${steps} WHERE run_id = ${runId}::uuid
                        AND status IN ('scheduled', 'in_progress', 'waiting'))
      RETURNING id`

  // ---- waits and signals ----

  /** The gate found no signal: the attempt parks (performing → waiting) with its deadline. */
  const stepPark = (p: {
    readonly runId: string
    readonly stepId: bigint
    readonly waitFor: string
    readonly matcher: boolean
    /** The deadline as a delay from now (computed with the database's clock)... */
    readonly timeoutMs: number | null
    /** ...or as a date (a past one means now). */
    readonly timeoutAt: Date | null
    readonly onTimeout: OnTimeout | null
    readonly periodMs: number | null
    /** The deadline came from a per-run function (evaluated again at each notify notice). */
    readonly perRun?: boolean | undefined
    /** A fan-out step: the batch it waits for (and the `fan_out_opened` event's size). */
    readonly batch?: { readonly id: string; readonly size: number } | undefined
    readonly now: Date | null
  }) =>
    sql<{ readonly id: bigint }>`WITH locked AS (
        SELECT id, status FROM ${runs} WHERE id = ${p.runId}::uuid AND status IN ('performing', 'paused') FOR UPDATE),
      s AS (
        UPDATE ${steps} st SET status = 'waiting', wait_for = ${p.waitFor}, wait_matcher = ${p.matcher},
          batch_id = ${p.batch?.id ?? null}::uuid,
          timeout_at = CASE
            WHEN ${p.timeoutAt}::timestamptz IS NOT NULL THEN greatest(${p.timeoutAt}::timestamptz, ${NOW(p.now)})
            WHEN ${PgTypes.float8(p.timeoutMs)} IS NOT NULL
              THEN ${NOW(p.now)} + ${PgTypes.float8(p.timeoutMs)} * interval '1 millisecond'
            END,
          on_timeout = ${p.onTimeout}, wait_period_ms = ${PgTypes.float8(p.periodMs)},
          wait_deadline_per_run = ${p.perRun === true}, deadline_renewal_for = NULL,
          waiting_since = ${NOW(p.now)}
        FROM locked WHERE st.id = ${p.stepId} AND st.run_id = locked.id AND st.status = 'in_progress'
        RETURNING st.id, st.name, st.attempt),
      -- a run paused while the step ran stays paused (resume puts it back to waiting)
      r AS (
        UPDATE ${runs} ru SET status = CASE WHEN locked.status = 'performing' THEN 'waiting' ELSE locked.status END,
          updated_at = ${NOW(p.now)} FROM s, locked WHERE ru.id = ${p.runId}::uuid RETURNING 1),
      e AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, details, at)
        SELECT ${p.runId}::uuid, 'step_waiting', s.name, s.attempt, 'system',
          jsonb_build_object('wait_for', ${p.waitFor}::text), ${NOW(p.now)} FROM s
        UNION ALL
        SELECT ${p.runId}::uuid, 'fan_out_opened', s.name, s.attempt, 'system',
          jsonb_build_object('batch_id', ${p.batch?.id ?? null}::text, 'size', ${p.batch?.size ?? 0}::int), ${NOW(p.now)}
        FROM s WHERE ${p.batch !== undefined}::boolean)
      SELECT s.id FROM s`

  /** Pending signals of a run with a name, oldest first (the gate takes the first that matches). */
  const signalsPending = (runId: string, name: string) =>
    sql<SignalRow>`SELECT * FROM ${signals}
      WHERE run_id = ${runId}::uuid AND name = ${name} AND status = 'pending' ORDER BY id`

  /** A step takes a pending signal (pending → claimed) and the event says so. */
  const signalClaim = (p: {
    readonly runId: string
    readonly signalId: bigint
    readonly stepId: bigint
    readonly now: Date | null
  }) =>
    sql<{ readonly id: bigint }>`WITH c AS (
        UPDATE ${signals} sg SET status = 'claimed', claimed_by_step = ${p.stepId}, claimed_at = ${NOW(p.now)}
        WHERE sg.id = ${p.signalId} AND sg.status = 'pending' RETURNING sg.id, sg.name),
      st AS (SELECT name, attempt FROM ${steps} WHERE id = ${p.stepId}),
      e AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, details, at)
        SELECT ${p.runId}::uuid, 'signal_claimed', st.name, st.attempt, 'system',
          jsonb_build_object('signal', c.name, 'signal_id', c.id::text), ${NOW(p.now)} FROM c, st)
      SELECT c.id FROM c`

  /** Stores a signal (a repeated idempotency key stores nothing) with its `signal_received` event. */
  const signalInsert = (p: {
    readonly runId: string
    readonly name: string
    readonly payload: string
    readonly idempotencyKey: string | null
    readonly actor: string
    readonly reason: string | null
    readonly now: Date | null
  }) =>
    sql<SignalRow>`WITH sg AS (
        INSERT INTO ${signals} (run_id, name, payload, status, idempotency_key, actor, reason, received_at)
        VALUES (${p.runId}::uuid, ${p.name}, ${p.payload}::jsonb, 'pending', ${p.idempotencyKey}, ${p.actor},
                ${p.reason}, ${NOW(p.now)})
        ON CONFLICT (run_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING *),
      e AS (
        INSERT INTO ${events} (run_id, type, actor, reason, details, at)
        SELECT ${p.runId}::uuid, 'signal_received', ${p.actor}, ${p.reason},
          jsonb_strip_nulls(jsonb_build_object('name', sg.name, 'idempotency_key', sg.idempotency_key,
            'duplicate', false)), ${NOW(p.now)} FROM sg)
      SELECT * FROM sg`

  /** The signal stored under an idempotency key. */
  const signalByKey = (runId: string, key: string) =>
    sql<SignalRow>`SELECT * FROM ${signals} WHERE run_id = ${runId}::uuid AND idempotency_key = ${key}`

  /** The signals of a run, oldest first. */
  const signalsOf = (runId: string) =>
    sql<SignalRow>`SELECT * FROM ${signals} WHERE run_id = ${runId}::uuid ORDER BY id`

  /** Whether a step holds a claimed signal. */
  const signalHeldBy = (stepId: bigint) =>
    sql<SignalRow>`SELECT * FROM ${signals} WHERE claimed_by_step = ${stepId} AND status = 'claimed' LIMIT 1`

  /** Moves the signal an attempt held to the attempt that replaces it (resume, resumeAt). */
  const signalTransfer = (fromStepId: bigint, toStepId: bigint) =>
    sql`UPDATE ${signals} SET claimed_by_step = ${toStepId} WHERE claimed_by_step = ${fromStepId} AND status = 'claimed'`

  /**
   * Wakes a waiting step: waiting → scheduled (due now) and, when the run waits, the run →
   * ready and the step's message; a paused run stays paused (its resume sends the step).
   */
  const stepWake = (p: {
    readonly workflow: string
    readonly runId: string
    readonly stepId: bigint
    readonly timedOut: boolean
    readonly physicalQueue: string
    readonly now: Date | null
  }) => {
    const message = messageCtes(
      p.physicalQueue,
      "wake_message",
      sql`SELECT s.due_at AS vt, ${stepMessage(p.workflow, sql`s.id`, sql`${p.runId}::uuid`)} AS message
          FROM s, r WHERE r.status = 'ready'`,
      p.now
    )
    return sql<{ readonly id: bigint; readonly run_status: RunStatus }>`WITH locked AS (
        SELECT id, status FROM ${runs} WHERE id = ${p.runId}::uuid AND status IN ('waiting', 'paused') FOR UPDATE),
      s AS (
        UPDATE ${steps} st SET status = 'scheduled', due_at = ${NOW(p.now)}, timed_out = ${p.timedOut}
        FROM locked WHERE st.id = ${p.stepId} AND st.run_id = locked.id AND st.status = 'waiting'
        RETURNING st.id, st.name, st.attempt, st.due_at),
      r AS (
        UPDATE ${runs} ru SET status = CASE WHEN locked.status = 'waiting' THEN 'ready' ELSE locked.status END,
          updated_at = ${NOW(p.now)}
        FROM s, locked WHERE ru.id = ${p.runId}::uuid RETURNING ru.status),
      ${message.ctes}
      SELECT s.id, (SELECT status FROM r) AS run_status, ${message.notifyRef} AS notified FROM s`
  }

  /**
   * A signal wakes a waiting run's step for a local reader (local dispatch): the wake and the
   * step's claim in one statement (as `stepWake`, then `stepClaim` for `worker`: step →
   * in_progress, run → performing, `step_started`), the message inserted claimed for that reader.
   * Returns the claim, as `stepClaim` does, with the message's `claimed_*` columns.
   */
  const stepWakeClaim = (p: {
    readonly workflow: string
    readonly runId: string
    readonly stepId: bigint
    readonly physicalQueue: string
    readonly claim: { readonly claimedBy: string; readonly visibilityMs: number }
    readonly worker: string
    readonly appRevision: string | null
    readonly now: Date | null
  }) => {
    const message = messageCtes(
      p.physicalQueue,
      "wake_message",
      sql`SELECT ${NOW(p.now)} AS vt, ${stepMessage(p.workflow, sql`s.id`, sql`${p.runId}::uuid`)} AS message FROM s`,
      p.now,
      p.claim
    )
    return sql<ClaimRow & ClaimedMessageRow>`WITH locked AS (
        SELECT id FROM ${runs} WHERE id = ${p.runId}::uuid AND status = 'waiting' FOR UPDATE),
      s AS (
        UPDATE ${steps} st SET status = 'in_progress', due_at = ${NOW(p.now)}, timed_out = false,
          started_at = ${NOW(p.now)}, worker = ${p.worker}, app_revision = ${p.appRevision},
          claimed_by = ${p.claim.claimedBy}
        FROM locked WHERE st.id = ${p.stepId} AND st.run_id = locked.id AND st.status = 'waiting'
        RETURNING ${claimedStepColumns}),
      ${claimRest(p.runId, p.now)},
      ${message.ctes}
      SELECT ${claimColumns}, ${message.claimed} FROM r, s`
  }

  /** The step a run waits at (status waiting), if any. */
  const stepWaitingOf = (runId: string) =>
    sql<StepRow>`SELECT * FROM ${steps} WHERE run_id = ${runId}::uuid AND status = 'waiting' ORDER BY id DESC LIMIT 1`

  /**
   * A waiting step resolved without its body: skipped (an outside skip, onTimeout skip), failed
   * into a pause (onTimeout pause) or cancelled (onTimeout cancel). A skip sends a continue
   * message (the next step is found by replay); a held signal is consumed.
   */
  const stepResolveWaiting = (p: {
    readonly workflow: string
    readonly runId: string
    readonly stepId: bigint
    readonly outcome: "skip" | "pause" | "cancel"
    readonly error: string | null
    readonly actor: string
    readonly reason: string | null
    readonly eventType: string
    readonly eventDetails: string | null
    readonly physicalQueue: string
    readonly now: Date | null
  }) => {
    const skip = p.outcome === "skip"
    const message = messageCtes(
      p.physicalQueue,
      "resolve_message",
      sql`SELECT ${NOW(p.now)} AS vt, ${stepMessage(p.workflow, sql`NULL`, sql`${p.runId}::uuid`)} AS message
          FROM r WHERE ${skip} AND r.status = 'ready'`,
      p.now
    )
    const runTo = skip
      ? sql`CASE WHEN locked.status = 'waiting' THEN 'ready' ELSE locked.status END`
      : p.outcome === "pause"
        ? sql`'paused'`
        : sql`'cancelled'`
    return sql<{ readonly id: bigint; readonly run_status: RunStatus }>`WITH locked AS (
        SELECT id, status FROM ${runs} WHERE id = ${p.runId}::uuid AND status IN ('waiting', 'paused') FOR UPDATE),
      s AS (
        UPDATE ${steps} st SET status = ${skip ? "skipped" : p.outcome === "pause" ? "failed" : "cancelled"},
          finished_at = ${NOW(p.now)}, error = ${p.error}::jsonb
        FROM locked WHERE st.id = ${p.stepId} AND st.run_id = locked.id AND st.status = 'waiting'
        RETURNING st.id, st.name, st.attempt),
      r AS (
        UPDATE ${runs} ru SET status = ${runTo}, updated_at = ${NOW(p.now)},
          paused_at = ${p.outcome === "pause" ? sql`coalesce(ru.paused_at, ${NOW(p.now)})` : sql`ru.paused_at`},
          paused_reason = ${p.outcome === "pause" ? sql`'wait_timed_out'` : sql`ru.paused_reason`},
          error = ${p.outcome === "pause" ? sql`${p.error}::jsonb` : sql`ru.error`},
          finished_at = ${p.outcome === "cancel" ? NOW(p.now) : sql`ru.finished_at`}
        FROM s, locked WHERE ru.id = ${p.runId}::uuid RETURNING ru.status),
      consumed AS (
        UPDATE ${signals} sg SET status = 'consumed', consumed_at = ${NOW(p.now)}
        FROM s WHERE sg.claimed_by_step = s.id AND sg.status = 'claimed' AND ${p.outcome !== "pause"} RETURNING 1),
      e AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, reason, details, at)
        SELECT ${p.runId}::uuid, x.type, s.name, s.attempt, ${p.actor}, ${p.reason}, x.details, ${NOW(p.now)}
        FROM s, (VALUES (1, ${p.eventType}::text, ${p.eventDetails}::jsonb),
                        (2, ${skip ? "step_skipped" : p.outcome === "pause" ? "step_failed" : "step_cancelled"}::text, NULL::jsonb),
                        (3, ${skip ? null : p.outcome === "pause" ? "paused" : "cancelled"}::text, NULL::jsonb)) AS x(ord, type, details)
        WHERE x.type IS NOT NULL ORDER BY x.ord),
      ${message.ctes}
      SELECT s.id, (SELECT status FROM r) AS run_status, ${message.notifyRef} AS notified FROM s`
  }

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
        UPDATE ${runs} ru SET status = 'paused', paused_at = ${NOW(p.now)}, paused_reason = 'error',
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
          AND EXISTS (SELECT 1 FROM ${runs} WHERE id = ${p.runId}::uuid AND status = 'waiting')
        RETURNING st.id, st.name, st.attempt, st.wait_for, st.timeout_at),
      e AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, details, at)
        SELECT ${p.runId}::uuid, 'wait_timed_out', s.name, s.attempt, 'system',
          jsonb_build_object('wait_for', s.wait_for, 'action', 'notify', 'timeout_at', ${p.missedAt}::timestamptz,
            'next_timeout_at', s.timeout_at${r === undefined ? sql`` : sql`, 'evaluated', true`}), ${NOW(p.now)} FROM s)${pause}
      SELECT s.id, s.timeout_at FROM s`
  }

  /** The deadline's notice was not handed to a worker yet, or was handed over long ago and is still pending. */
  const renewalDue = (now: Date | null, thresholdMs: number) =>
    sql`(st.deadline_renewal_for IS DISTINCT FROM st.timeout_at
          OR st.deadline_renewal_at < ${NOW(now)} - ${PgTypes.float8(thresholdMs)} * interval '1 millisecond')`

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
          AND EXISTS (SELECT 1 FROM ${runs} WHERE id = ${p.runId}::uuid AND status = 'waiting')
        RETURNING st.id),
      ${message.ctes}
      SELECT s.id, ${message.notifyRef} AS notified FROM s`
  }

  /** A waiting run and its step whose missed deadline a worker is to evaluate again (for replay). */
  const runLoadForRenewal = (runId: string, stepId: bigint, missedAt: Date) =>
    sql<ClaimRow>`WITH r AS (SELECT * FROM ${runs} WHERE id = ${runId}::uuid AND status = 'waiting'),
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
    sql<ClaimRow>`WITH r AS (SELECT * FROM ${runs} WHERE id = ${runId}::uuid AND status IN ('performing', 'paused')),
      s AS (
        SELECT ${claimedStepColumns} FROM ${steps} st JOIN r ON st.run_id = r.id
        WHERE st.status = 'in_progress' AND st.claimed_by = ${claimedBy})
      SELECT ${claimColumns} FROM r, s`

  /** A run whose message failed on its last delivery pauses (`from`: the table's), with the error and why. */
  const runPauseUndeliverable = (p: {
    readonly runId: string
    readonly from: ReadonlyArray<RunStatus>
    readonly error: string
    readonly reason: string
    readonly now: Date | null
  }) =>
    sql<{ readonly id: string }>`WITH r AS (
        UPDATE ${runs} SET status = 'paused', paused_at = ${NOW(p.now)}, paused_reason = 'undeliverable',
          error = ${p.error}::jsonb, updated_at = ${NOW(p.now)}
        WHERE id = ${p.runId}::uuid AND status = ANY(${textArray(p.from)}::text[])
        RETURNING id),
      e AS (
        INSERT INTO ${events} (run_id, type, actor, reason, at)
        SELECT r.id, 'paused', 'system', ${p.reason}, ${NOW(p.now)} FROM r)
      SELECT id FROM r`

  /** Resume of a run paused while its step waited: it waits again, its deadline moved by the pause. */
  const runRewait = (runId: string, stepId: bigint, now: Date | null) =>
    sql<{ readonly id: bigint }>`WITH r AS (
        SELECT id, paused_at FROM ${runs} WHERE id = ${runId}::uuid AND status = 'paused' FOR UPDATE),
      s AS (
        UPDATE ${steps} st SET timeout_at = st.timeout_at + (${NOW(now)} - r.paused_at)
        FROM r WHERE st.id = ${stepId} AND st.status = 'waiting' AND st.timeout_at IS NOT NULL RETURNING st.id),
      u AS (
        UPDATE ${runs} ru SET status = 'waiting', paused_at = NULL, paused_reason = NULL, updated_at = ${NOW(now)}
        FROM r WHERE ru.id = r.id RETURNING ru.id)
      SELECT u.id FROM u`

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
          FROM s, r WHERE r.status = 'ready'`,
      p.now
    )
    return sql<{ readonly id: bigint }>`WITH locked AS (
        SELECT id, status FROM ${runs} WHERE id = ${p.runId}::uuid AND status IN ('performing', 'paused') FOR UPDATE),
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
        UPDATE ${runs} ru SET status = CASE WHEN locked.status = 'performing' THEN 'ready' ELSE locked.status END,
          updated_at = ${NOW(p.now)}
        FROM s, locked WHERE ru.id = ${p.runId}::uuid RETURNING ru.status),
      ${message.ctes}
      SELECT s.id, ${message.notifyRef} AS notified FROM s`
  }

  // ---- the sweep ----

  /** In-progress attempts past their own timeout or the stall threshold. */
  const stepsStalled = (thresholdMs: number, now: Date | null, limit: number) =>
    sql<StepRow & { readonly workflow: string }>`SELECT st.*, ru.workflow FROM ${steps} st
      JOIN ${runs} ru ON ru.id = st.run_id
      WHERE st.status = 'in_progress' AND ru.status IN ('performing', 'paused')
        AND st.started_at < ${NOW(now)} - least(
          coalesce(st.timeout_ms, ${PgTypes.float8(thresholdMs)}), ${PgTypes.float8(thresholdMs)}) * interval '1 millisecond'
      ORDER BY st.started_at LIMIT ${limit}`

  /** Scheduled attempts of ready runs due more than the threshold ago (their message may be lost). */
  const stepsOverdue = (thresholdMs: number, now: Date | null, limit: number) =>
    sql<StepRow & { readonly workflow: string }>`SELECT st.*, ru.workflow FROM ${steps} st
      JOIN ${runs} ru ON ru.id = st.run_id
      WHERE st.status = 'scheduled' AND ru.status = 'ready'
        AND st.due_at < ${NOW(now)} - ${PgTypes.float8(thresholdMs)} * interval '1 millisecond'
      ORDER BY st.due_at LIMIT ${limit}`

  /** Fan-out steps waiting on their batch since before the threshold (the sweep checks the batch). */
  const fanOutsWaiting = (thresholdMs: number, now: Date | null, limit: number) =>
    sql<StepRow & { readonly workflow: string }>`SELECT st.*, ru.workflow FROM ${steps} st
      JOIN ${runs} ru ON ru.id = st.run_id
      WHERE st.status = 'waiting' AND st.wait_for = ${FAN_OUT_WAIT} AND st.batch_id IS NOT NULL
        AND st.waiting_since < ${NOW(now)} - ${PgTypes.float8(thresholdMs)} * interval '1 millisecond'
      ORDER BY st.waiting_since LIMIT ${limit}`

  /** Consumes a held signal now (a fan-out that failed: its next attempt opens a fresh batch). */
  const signalConsume = (signalId: bigint) =>
    sql`UPDATE ${signals} SET status = 'consumed' WHERE id = ${signalId} AND status = 'claimed'`

  /** Waiting runs per workflow whose step has waited longer than the visibility threshold (stuck). */
  const runsWaitingOverdue = (thresholdMs: number, now: Date | null) =>
    sql<{ readonly workflow: string; readonly n: bigint }>`SELECT ru.workflow, count(*) AS n FROM ${runs} ru
      JOIN ${steps} st ON st.run_id = ru.id AND st.status = 'waiting'
      WHERE ru.status = 'waiting'
        AND st.waiting_since < ${NOW(now)} - ${PgTypes.float8(thresholdMs)} * interval '1 millisecond'
      GROUP BY ru.workflow`

  /** Ready runs with no open step, idle past the threshold (their continue message may be lost). */
  const runsIdle = (thresholdMs: number, now: Date | null, limit: number) =>
    sql<RunRow>`SELECT ru.* FROM ${runs} ru
      WHERE ru.status = 'ready' AND ru.updated_at < ${NOW(now)} - ${PgTypes.float8(thresholdMs)} * interval '1 millisecond'
        AND NOT EXISTS (SELECT 1 FROM ${steps} st WHERE st.run_id = ru.id
                        AND st.status IN ('scheduled', 'in_progress', 'waiting'))
      ORDER BY ru.updated_at LIMIT ${limit}`

  /** Waiting steps of waiting runs whose deadline has passed. */
  const waitsTimedOut = (now: Date | null, thresholdMs: number, limit: number) =>
    sql<StepRow & { readonly workflow: string }>`SELECT st.*, ru.workflow FROM ${steps} st
      JOIN ${runs} ru ON ru.id = st.run_id
      WHERE st.status = 'waiting' AND st.timeout_at IS NOT NULL AND st.timeout_at <= ${NOW(now)}
        AND ${renewalDue(now, thresholdMs)}
        AND ru.status = 'waiting'
      ORDER BY st.timeout_at LIMIT ${limit}`

  /** Re-sends the message of a scheduled step (the sweep's lost-message repair); due now, so one sweep wins. */
  const stepResend = (p: {
    readonly workflow: string
    readonly runId: string
    readonly stepId: bigint
    readonly physicalQueue: string
    readonly thresholdMs: number
    readonly now: Date | null
  }) => {
    const message = messageCtes(
      p.physicalQueue,
      "resent_message",
      sql`SELECT ${NOW(p.now)} AS vt, ${stepMessage(p.workflow, sql`s.id`, sql`${p.runId}::uuid`)} AS message FROM s`,
      p.now
    )
    return sql<{ readonly id: bigint }>`WITH s AS (
        UPDATE ${steps} SET due_at = ${NOW(p.now)}
        WHERE id = ${p.stepId} AND status = 'scheduled'
          AND due_at < ${NOW(p.now)} - ${PgTypes.float8(p.thresholdMs)} * interval '1 millisecond'
        RETURNING id),
      ${message.ctes}
      SELECT s.id, ${message.notifyRef} AS notified FROM s`
  }

  /**
   * Deletes finished and cancelled runs older than the retention (their signals cascade); returns
   * their ids, whose steps and events `runsDeleteRows` deletes next.
   */
  const runsDeleteFinished = (retentionMs: number, now: Date | null, limit: number) =>
    sql<{ readonly id: string }>`DELETE FROM ${runs} WHERE id IN (
        SELECT id FROM ${runs} WHERE finished_at IS NOT NULL
          AND finished_at < ${NOW(now)} - ${PgTypes.float8(retentionMs)} * interval '1 millisecond'
        LIMIT ${limit})
      RETURNING id`

  /**
   * Deletes the steps and events of deleted runs. No foreign key ties them to their run
   * (migration 0009), so this runs after `runsDeleteFinished` in its transaction: the later
   * statement's snapshot also sees an event committed by a writer that held a run's row lock
   * while the runs' delete waited for it (one statement would have left that event orphaned).
   */
  const runsDeleteRows = (ids: ReadonlyArray<string>) => {
    const array = uuidArray(ids)
    return sql`WITH ds AS (DELETE FROM ${steps} WHERE run_id = ANY(${array}::uuid[]))
      DELETE FROM ${events} WHERE run_id = ANY(${array}::uuid[])`
  }

  /** Makes a scheduled step due now, without a message (test helpers run it inline). */
  const stepMakeDue = (stepId: bigint, now: Date | null) =>
    sql<{ readonly id: bigint }>`UPDATE ${steps} SET due_at = least(due_at, ${NOW(now)})
      WHERE id = ${stepId} AND status = 'scheduled' RETURNING id`

  /** A step attempt by id. */
  const stepGet = (stepId: bigint) => sql<StepRow>`SELECT * FROM ${steps} WHERE id = ${stepId}`

  /** The attempt of a run in progress, if any. */
  const stepInProgress = (runId: string) =>
    sql<StepRow>`SELECT * FROM ${steps} WHERE run_id = ${runId}::uuid AND status = 'in_progress' ORDER BY id DESC LIMIT 1`

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
          CASE WHEN n.before = 'performing' AND ${claimNow} THEN 'in_progress' ELSE 'scheduled' END,
          ${next.queue}, ${NOW(p.now)},
          greatest(${NOW(p.now)}, coalesce(${next._tag === "schedule" ? (next.dueAt ?? null) : null}::timestamptz,
            ${NOW(p.now)} + ${PgTypes.float8(next._tag === "schedule" ? next.delayMs : 0)} * interval '1 millisecond')),
          CASE WHEN n.before = 'performing' AND ${claimNow} THEN ${NOW(p.now)} END,
          ${PgTypes.float8(next._tag === "claim" ? next.timeoutMs : (next.timeoutMs ?? null))},
          ${next.reattempts},
          CASE WHEN n.before = 'performing' AND ${claimNow} THEN ${p.worker} END,
          CASE WHEN n.before = 'performing' AND ${claimNow} THEN ${p.appRevision}::text END,
          CASE WHEN n.before = 'performing' AND ${claimNow} THEN ${next._tag === "claim" ? next.claimedBy : null}::text END
        FROM n RETURNING id, name, attempt, status, due_at)`
      : sql``
    const message =
      hasNext && next._tag === "schedule"
        ? messageCtes(
            next.physicalQueue,
            "next_message",
            sql`SELECT m.due_at AS vt, ${stepMessage(p.workflow, sql`m.id`, sql`${p.runId}::uuid`)} AS message
                FROM m, n WHERE m.status = 'scheduled' AND n.before = 'performing'`,
            p.now
          )
        : next._tag === "continue"
          ? messageCtes(
              next.physicalQueue,
              "continue_message",
              sql`SELECT ${NOW(p.now)} AS vt, ${stepMessage(p.workflow, sql`NULL`, sql`${p.runId}::uuid`)} AS message
                FROM n WHERE n.before = 'performing'`,
              p.now
            )
          : undefined
    const target =
      next._tag === "schedule" || next._tag === "continue"
        ? sql`CASE WHEN n.before = 'performing' THEN 'ready' ELSE n.before END`
        : next._tag === "claim"
          ? sql`n.before`
          : next._tag === "finish"
            ? sql`'finished'`
            : next._tag === "pause"
              ? sql`'paused'`
              : sql`'cancelled'`
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
          AND ${steps}.status IN ('scheduled', 'waiting', 'in_progress')
        RETURNING 1)`
        : sql``
    const runEvent =
      next._tag === "finish"
        ? sql`SELECT 10, 'finished', NULL::text, NULL::int4, NULL::text FROM n`
        : next._tag === "pause"
          ? sql`SELECT 10, 'paused', n.name, n.attempt, ${next.message}::text FROM n WHERE n.before = 'performing'`
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
          AND locked.status IN ('performing', 'paused')
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
          AND locked.status IN ('performing', 'paused')
        RETURNING st.id, st.run_id, st.name, st.attempt, locked.status AS before, i.ord),
      m AS (
        INSERT INTO ${steps} (run_id, name, attempt, position, status, queue, scheduled_at, due_at, started_at,
                              timeout_ms, reattempts, worker, app_revision, claimed_by)
        SELECT n.run_id, i.next_name, i.next_attempt, i.next_position,
          CASE WHEN n.before = 'performing' THEN 'in_progress' ELSE 'scheduled' END,
          i.next_queue, i.at, i.at, CASE WHEN n.before = 'performing' THEN i.at END, i.next_timeout,
          i.next_reattempts, CASE WHEN n.before = 'performing' THEN ${worker}::text END,
          CASE WHEN n.before = 'performing' THEN ${appRevision}::text END,
          CASE WHEN n.before = 'performing' THEN i.next_claimed_by END
        FROM n JOIN i ON i.ord = n.ord
        WHERE i.next_name IS NOT NULL
        ORDER BY n.ord
        RETURNING id, run_id, name, attempt, status),
      r AS (
        UPDATE ${runs} ru SET status = CASE WHEN i.next_name IS NULL THEN 'finished' ELSE n.before END,
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

  /** Appends an audit event (none when the run is gone: no foreign key checks it, see migration 0009). */
  const eventInsert = (p: {
    readonly runId: string
    readonly type: string
    readonly step: string | null
    readonly attempt: number | null
    readonly actor: string
    readonly reason: string | null
    readonly details: string | null
    readonly now: Date | null
  }) =>
    sql`INSERT INTO ${events} (run_id, type, step, attempt, actor, reason, details, at)
      SELECT id, ${p.type}, ${p.step}, ${p.attempt}, ${p.actor}, ${p.reason}, ${p.details}::jsonb, ${NOW(p.now)}
      FROM ${runs} WHERE id = ${p.runId}::uuid`

  /** Records a `patched` marker as a completed step of the run (at its position). */
  const markerInsert = (p: {
    readonly runId: string
    readonly name: string
    readonly position: number
    readonly now: Date | null
  }) =>
    sql`INSERT INTO ${steps} (run_id, name, attempt, position, status, queue, scheduled_at, due_at, started_at, finished_at)
      SELECT id, ${p.name}, 1, ${p.position}, 'completed', '', ${NOW(p.now)}, ${NOW(p.now)}, ${NOW(p.now)}, ${NOW(p.now)}
      FROM ${runs} WHERE id = ${p.runId}::uuid
      ON CONFLICT (run_id, name, attempt) DO NOTHING`

  // ---- outside verbs: each runs in a transaction that starts with runLock ----

  /** Locks a run (scoped to a resource when given). */
  const runLock = (id: string, resourceId: string | null) =>
    sql<RunRow>`SELECT * FROM ${runs}
      WHERE id = ${id}::uuid AND (${resourceId}::text IS NULL OR resource_id = ${resourceId}::text)
      FOR UPDATE`

  /** Moves a run to `to`, guarded on `from`. */
  const runSetStatus = (p: {
    readonly id: string
    readonly from: ReadonlyArray<RunStatus>
    readonly to: RunStatus
    readonly pausedReason?: string | null
    readonly now: Date | null
  }) =>
    sql<{ readonly status: RunStatus }>`UPDATE ${runs} SET status = ${p.to}, updated_at = ${NOW(p.now)},
        paused_at = ${p.to === "paused" ? sql`coalesce(paused_at, ${NOW(p.now)})` : sql`NULL`},
        paused_reason = ${p.to === "paused" ? sql`${p.pausedReason ?? "manual"}::text` : sql`NULL`},
        error = ${p.to === "paused" ? sql`error` : sql`NULL`},
        finished_at = ${p.to === "finished" || p.to === "cancelled" ? NOW(p.now) : sql`NULL`}
      WHERE id = ${p.id}::uuid AND status = ANY(${textArray(p.from)}::text[])
      RETURNING status`

  /** Cancels every open attempt of a run. */
  const stepsCancelOpen = (runId: string, now: Date | null) =>
    sql<{ readonly id: bigint; readonly name: string; readonly attempt: number }>`UPDATE ${steps}
      SET status = 'cancelled', finished_at = ${NOW(now)}
      WHERE run_id = ${runId}::uuid AND status IN ('scheduled', 'waiting', 'in_progress')
      RETURNING id, name, attempt`

  /** The run's latest attempt (its current step). */
  const stepLatest = (runId: string) =>
    sql<StepRow>`SELECT * FROM ${steps} WHERE run_id = ${runId}::uuid ORDER BY id DESC LIMIT 1`

  /** The latest attempt of a named step. */
  const stepLatestNamed = (runId: string, name: string) =>
    sql<StepRow>`SELECT * FROM ${steps}
      WHERE run_id = ${runId}::uuid AND name = ${name} ORDER BY attempt DESC LIMIT 1`

  /** A new scheduled attempt of a step and its message (resume, resumeAt). */
  const stepInsertScheduled = (p: {
    readonly workflow: string
    readonly runId: string
    readonly name: string
    readonly attempt: number
    readonly position: number
    readonly queue: string
    readonly physicalQueue: string
    readonly reattempts: number
    readonly actor: string
    readonly now: Date | null
  }) => {
    const message = messageCtes(
      p.physicalQueue,
      "resume_message",
      sql`SELECT s.due_at AS vt, ${stepMessage(p.workflow, sql`s.id`, sql`${p.runId}::uuid`)} AS message FROM s`,
      p.now
    )
    return sql<{ readonly id: bigint }>`WITH s AS (
        INSERT INTO ${steps} (run_id, name, attempt, position, status, queue, scheduled_at, due_at, reattempts)
        SELECT id, ${p.name}, ${p.attempt}, ${p.position}, 'scheduled', ${p.queue}, ${NOW(p.now)},
                ${NOW(p.now)}, ${p.reattempts}
        FROM ${runs} WHERE id = ${p.runId}::uuid
        RETURNING id, name, attempt, due_at),
      e AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, at)
        SELECT ${p.runId}::uuid, 'step_scheduled', s.name, s.attempt, ${p.actor}, ${NOW(p.now)} FROM s),
      ${message.ctes}
      SELECT s.id, ${message.notifyRef} AS notified FROM s`
  }

  /** Moves a scheduled step's due time and sends its message for then (run_now, reschedule, resume). */
  const stepReschedule = (p: {
    readonly workflow: string
    readonly stepId: bigint
    readonly runId: string
    readonly at: Date | null
    readonly physicalQueue: string
    readonly now: Date | null
  }) => {
    const message = messageCtes(
      p.physicalQueue,
      "rescheduled_message",
      sql`SELECT s.due_at AS vt, ${stepMessage(p.workflow, sql`s.id`, sql`${p.runId}::uuid`)} AS message FROM s`,
      p.now
    )
    return sql<{ readonly id: bigint; readonly due_at: Date }>`WITH s AS (
        UPDATE ${steps} SET due_at = coalesce(${p.at}::timestamptz, ${NOW(p.now)})
        WHERE id = ${p.stepId} AND status = 'scheduled'
        RETURNING id, due_at),
      ${message.ctes}
      SELECT s.id, s.due_at, ${message.notifyRef} AS notified FROM s`
  }

  /** Sends a continue message for a run (its next step is found by replay). */
  const runSendContinue = (workflow: string, runId: string, physicalQueue: string, now: Date | null) => {
    const message = messageCtes(
      physicalQueue,
      "continue_message",
      sql`SELECT ${NOW(now)} AS vt, ${stepMessage(workflow, sql`NULL`, sql`${runId}::uuid`)} AS message`,
      now
    )
    return sql`WITH ${message.ctes} SELECT ${message.notifyRef} AS notified`
  }

  // ---- queries ----

  const runGet = (id: string, resourceId: string | null) =>
    sql<RunRow>`SELECT * FROM ${runs}
      WHERE id = ${id}::uuid AND (${resourceId}::text IS NULL OR resource_id = ${resourceId}::text)`

  const runFindBySubject = (workflow: string, subject: string) =>
    sql<RunRow>`SELECT * FROM ${runs}
      WHERE workflow = ${workflow} AND subject = ${subject}
      ORDER BY (status = ANY(${textArray(ONGOING)}::text[])) DESC, created_at DESC LIMIT 1`

  const runList = (f: RunFilter) => {
    const conditions: Array<Statement.Fragment> = []
    if (f.workflow !== undefined) conditions.push(sql`workflow = ${f.workflow}`)
    if (f.status !== undefined) conditions.push(sql`status = ANY(${textArray(f.status)}::text[])`)
    if (f.subject !== undefined) conditions.push(sql`subject = ${f.subject}`)
    if (f.resourceId !== undefined) conditions.push(sql`resource_id = ${f.resourceId}`)
    if (f.pausedReason !== undefined) conditions.push(sql`paused_reason = ${f.pausedReason}`)
    if (f.createdFrom !== undefined) conditions.push(sql`created_at >= ${f.createdFrom}`)
    if (f.createdTo !== undefined) conditions.push(sql`created_at < ${f.createdTo}`)
    if (f.before !== undefined) {
      conditions.push(sql`(created_at, id) < (${f.before.createdAt}::timestamptz, ${f.before.id}::uuid)`)
    }
    // the cursor carries created_at as text: a JS Date would drop its microseconds
    return sql<RunRow & { readonly cursor_at: string }>`SELECT *, created_at::text AS cursor_at FROM ${runs}
      ${conditions.length > 0 ? sql`WHERE ${sql.and(conditions)}` : sql``}
      ORDER BY created_at DESC, id DESC LIMIT ${f.limit}`
  }

  const runCounts = (workflow: string | null, resourceId: string | null) =>
    sql<{ readonly status: RunStatus; readonly n: bigint }>`SELECT status, count(*) AS n FROM ${runs}
      WHERE (${workflow}::text IS NULL OR workflow = ${workflow}::text)
        AND (${resourceId}::text IS NULL OR resource_id = ${resourceId}::text)
      GROUP BY status`

  const stepsOf = (runId: string) =>
    sql<StepRow>`SELECT * FROM ${steps} WHERE run_id = ${runId}::uuid ORDER BY position, attempt`

  const eventsOf = (runId: string) => sql<EventRow>`SELECT * FROM ${events} WHERE run_id = ${runId}::uuid ORDER BY id`

  return {
    runStart,
    runStartMany,
    runFindConflicting,
    stepClaim,
    runClaimContinue,
    runClaimFirst,
    runClaimFirstMany,
    stepInsertClaimed,
    stepScheduleNew,
    runEndFromPerforming,
    runReleaseContinue,
    stepGet,
    stepInProgress,
    stepMakeDue,
    stepPark,
    signalsPending,
    signalClaim,
    signalInsert,
    signalByKey,
    signalsOf,
    signalHeldBy,
    signalTransfer,
    stepWake,
    stepWakeClaim,
    stepWaitingOf,
    stepResolveWaiting,
    stepNotifyLate,
    stepRequestRenewal,
    runLoadForRenewal,
    runLoadClaimed,
    runPauseUndeliverable,
    runRewait,
    stepPollAgain,
    stepsStalled,
    stepsOverdue,
    runsIdle,
    runsWaitingOverdue,
    fanOutsWaiting,
    signalConsume,
    waitsTimedOut,
    stepResend,
    runsDeleteFinished,
    runsDeleteRows,
    stepFinish,
    stepFinishMany,
    eventInsert,
    markerInsert,
    runLock,
    runSetStatus,
    stepsCancelOpen,
    stepLatest,
    stepLatestNamed,
    stepInsertScheduled,
    stepReschedule,
    runSendContinue,
    runGet,
    runFindBySubject,
    runList,
    runCounts,
    stepsOf,
    eventsOf
  }
}

/** The statements of one schema. */
export type WorkflowSql = ReturnType<typeof makeWorkflowSql>
