/**
 * Waits: parking a step, waking and resolving a waiting step, the rewait after a pause. The
 * signals' own statements are `SignalSql`'s, per-run notify deadlines `DeadlineSql`'s.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import type { ClaimedMessageRow } from "../../Queue/QueueRows.ts"
import type { RunStatus, Verb } from "../States.ts"
import type { WorkflowSqlContext } from "./Context.ts"
import type { ClaimRow, OnTimeout, SignalRow, StepRow } from "./Rows.ts"
import type { SignalInput } from "./SignalSql.ts"

/**
 * `signalStoreWake`'s answer: the locked run's state, whether the statement stepped aside
 * (`fallback`: nothing written) and, when it did not, the stored signal (`claimed` when it
 * woke the step; null columns when its idempotency key was stored before).
 */
export type SignalStoreWakeRow = {
  readonly run_status: RunStatus
  readonly run_workflow: string
  readonly fallback: boolean
} & { readonly [K in keyof SignalRow]: SignalRow[K] | null }

/** Parking a step at its gate and waking it (a signal, or its deadline). */
const makeParkWakeSql = (ctx: WorkflowSqlContext) => {
  const {
    runs,
    steps,
    events,
    NOW,
    stepMessage,
    claimedStepColumns,
    claimRest,
    claimColumns,
    claimColumnsOf,
    signalClaimCtes,
    signals,
    sql,
    messageCtes,
    fromIn,
    toOf
  } = ctx

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
        SELECT id, status FROM ${runs} WHERE id = ${p.runId}::uuid AND ${fromIn("status", "park", "hold")} FOR UPDATE),
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
        UPDATE ${runs} ru SET status = CASE WHEN ${fromIn("locked.status", "park")} THEN ${toOf("park")} ELSE locked.status END,
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
    /** A pending signal the step takes in the same statement (as `signalClaim`). */
    readonly claimSignal?: bigint | undefined
    readonly now: Date | null
  }) => {
    const claim =
      p.claimSignal === undefined
        ? sql``
        : sql`${signalClaimCtes({ runId: p.runId, signalId: p.claimSignal, stepId: p.stepId, now: p.now })},
      `
    const message = messageCtes(
      p.physicalQueue,
      "wake_message",
      sql`SELECT s.due_at AS vt, ${stepMessage(p.workflow, sql`s.id`, sql`${p.runId}::uuid`)} AS message
          FROM s, r WHERE r.status = ${toOf("wake")}`,
      p.now
    )
    return sql<{ readonly id: bigint; readonly run_status: RunStatus }>`WITH locked AS (
        SELECT id, status FROM ${runs} WHERE id = ${p.runId}::uuid AND ${fromIn("status", "wake", "hold")} FOR UPDATE),
      ${claim}s AS (
        UPDATE ${steps} st SET status = 'scheduled', due_at = ${NOW(p.now)}, timed_out = ${p.timedOut}
        FROM locked WHERE st.id = ${p.stepId} AND st.run_id = locked.id AND st.status = 'waiting'
        RETURNING st.id, st.name, st.attempt, st.due_at),
      r AS (
        UPDATE ${runs} ru SET status = CASE WHEN ${fromIn("locked.status", "wake")} THEN ${toOf("wake")} ELSE locked.status END,
          updated_at = ${NOW(p.now)}
        FROM s, locked WHERE ru.id = ${p.runId}::uuid RETURNING ru.status),
      ${message.ctes}
      SELECT s.id, (SELECT status FROM r) AS run_status, ${message.notifyRef} AS notified FROM s`
  }

  /**
   * A signal wakes a waiting run's step for a local reader (local dispatch): the wake and the
   * step's claim in one statement (as `stepWake`, then `stepClaim` for `worker`: step →
   * in_progress, run → performing, `step_started`), the message inserted claimed for that reader.
   * With `claimSignal`, the step takes that pending signal in the same statement (as
   * `signalClaim`; `signal_claimed` comes before `step_started`). Returns the claim, as
   * `stepClaim` does, with the message's `claimed_*` columns.
   */
  const stepWakeClaim = (p: {
    readonly workflow: string
    readonly runId: string
    readonly stepId: bigint
    readonly physicalQueue: string
    readonly claim: { readonly claimedBy: string; readonly visibilityMs: number }
    readonly worker: string
    readonly appRevision: string | null
    /** A pending signal the step takes in the same statement. */
    readonly claimSignal?: bigint | undefined
    readonly now: Date | null
  }) => {
    const signal =
      p.claimSignal === undefined
        ? undefined
        : signalClaimCtes({ runId: p.runId, signalId: p.claimSignal, stepId: p.stepId, now: p.now })
    const message = messageCtes(
      p.physicalQueue,
      "wake_message",
      sql`SELECT ${NOW(p.now)} AS vt, ${stepMessage(p.workflow, sql`s.id`, sql`${p.runId}::uuid`)} AS message FROM s`,
      p.now,
      p.claim
    )
    return sql<ClaimRow & ClaimedMessageRow>`WITH locked AS (
        SELECT id FROM ${runs} WHERE id = ${p.runId}::uuid AND ${fromIn("status", "wake_claim")} FOR UPDATE),
      s AS (
        UPDATE ${steps} st SET status = 'in_progress', due_at = ${NOW(p.now)}, timed_out = false,
          started_at = ${NOW(p.now)}, worker = ${p.worker}, app_revision = ${p.appRevision},
          claimed_by = ${p.claim.claimedBy}
        FROM locked WHERE st.id = ${p.stepId} AND st.run_id = locked.id AND st.status = 'waiting'
        RETURNING ${claimedStepColumns}),
      ${signal === undefined ? sql`` : sql`${signal},`}
      ${signal === undefined ? claimRest(p.runId, p.now) : claimRest(p.runId, p.now, sql`, (SELECT count(*) FROM sgc_event) AS sgc_first`)},
      ${message.ctes}
      SELECT ${
        signal === undefined
          ? claimColumns
          : claimColumnsOf(
              "r",
              "s",
              sql`(SELECT jsonb_build_object('id', sgc.id::text, 'name', sgc.name, 'payload', sgc.payload) FROM sgc)`
            )
      }, ${message.claimed} FROM r, s`
  }

  /**
   * A signal in one statement (no transaction of its own): the run locked, the signal stored
   * and, when the run waits at a step that waits for it, claimed by that step, which is woken
   * with its message, as `runLock`, `signalStore` and `stepWake` do one after the other. It
   * writes nothing and answers `fallback` when those three must go one by one: the step has a
   * matcher, the run is paused, the step's queue is not `queue`, or the run changed between the
   * statement's snapshot and its lock (the steps read would be the snapshot's, not the lock's).
   * Nothing is written either for a run the verb may not signal or of another workflow than
   * `workflow` (when given), nor for an idempotency key already stored (no signal row comes
   * back: the duplicate is the transaction's to answer). The step's message names the run's
   * workflow, as its row has it.
   */
  const signalStoreWake = (
    p: SignalInput & {
      /** The workflow the run must be of; null: whichever it is (a sender without the definition). */
      readonly workflow: string | null
      readonly resourceId: string | null
      /** The queue of the step's message, as its row names it (null or empty: `defaultQueue`). */
      readonly queue: string
      readonly defaultQueue: string
      readonly physicalQueue: string
    }
  ) => {
    const message = messageCtes(
      p.physicalQueue,
      "wake_message",
      sql`SELECT s.due_at AS vt, ${stepMessage(sql`go.workflow`, sql`s.id`, sql`${p.runId}::uuid`)} AS message FROM s, go`,
      p.now
    )
    return sql<SignalStoreWakeRow>`WITH locked AS (
        SELECT id, status, workflow, xmin::text AS version FROM ${runs}
        WHERE id = ${p.runId}::uuid AND (${p.resourceId}::text IS NULL OR resource_id = ${p.resourceId}::text)
        FOR UPDATE),
      snap AS (SELECT xmin::text AS version FROM ${runs} WHERE id = ${p.runId}::uuid),
      w AS (
        SELECT id, name, attempt, wait_for, wait_matcher, queue FROM ${steps}
        WHERE run_id = ${p.runId}::uuid AND status = 'waiting' ORDER BY id DESC LIMIT 1),
      v AS (
        SELECT locked.id, locked.status, locked.workflow,
          locked.version IS DISTINCT FROM (SELECT version FROM snap)
            OR coalesce(w.wait_for = ${p.name} AND (NOT ${fromIn("locked.status", "wake")}
              OR coalesce(w.wait_matcher, false) OR coalesce(nullif(w.queue, ''), ${p.defaultQueue}) <> ${p.queue}),
              false) AS fallback,
          coalesce(w.wait_for = ${p.name}, false) AS wakes, w.id AS step_id, w.name AS step_name,
          w.attempt AS step_attempt
        FROM locked LEFT JOIN w ON true),
      go AS (
        SELECT * FROM v WHERE NOT v.fallback AND ${fromIn("v.status", "signal")}
          AND (${p.workflow}::text IS NULL OR v.workflow = ${p.workflow}::text)),
      sg AS (
        INSERT INTO ${signals} (run_id, name, payload, status, idempotency_key, actor, reason, received_at,
                                claimed_by_step, claimed_at)
        SELECT go.id, ${p.name}, ${p.payload}::jsonb, CASE WHEN go.wakes THEN 'claimed' ELSE 'pending' END,
          ${p.idempotencyKey}, ${p.actor}, ${p.reason}, ${NOW(p.now)}, CASE WHEN go.wakes THEN go.step_id END,
          CASE WHEN go.wakes THEN ${NOW(p.now)} END
        FROM go
        ON CONFLICT (run_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING *),
      e AS (
        INSERT INTO ${events} (run_id, type, step, attempt, actor, reason, details, at)
        SELECT sg.run_id, 'signal_received', NULL, NULL, ${p.actor}, ${p.reason},
          jsonb_strip_nulls(jsonb_build_object('name', sg.name, 'idempotency_key', sg.idempotency_key,
            'duplicate', false)), ${NOW(p.now)} FROM sg
        UNION ALL
        SELECT sg.run_id, 'signal_claimed', go.step_name, go.step_attempt, 'system', NULL,
          jsonb_build_object('signal', sg.name, 'signal_id', sg.id::text), ${NOW(p.now)}
        FROM sg, go WHERE go.wakes),
      s AS (
        UPDATE ${steps} st SET status = 'scheduled', due_at = ${NOW(p.now)}, timed_out = false
        FROM go, sg WHERE go.wakes AND st.id = go.step_id AND st.status = 'waiting'
        RETURNING st.id, st.due_at),
      r AS (
        UPDATE ${runs} ru SET status = ${toOf("wake")}, updated_at = ${NOW(p.now)}
        FROM s WHERE ru.id = ${p.runId}::uuid),
      ${message.ctes}
      SELECT v.status AS run_status, v.workflow AS run_workflow, v.fallback, sg.*, ${message.notifyRef} AS notified
      FROM v LEFT JOIN sg ON true`
  }

  return { stepPark, stepWake, stepWakeClaim, signalStoreWake }
}

/** Resolving a waiting step (skip, pause, cancel) and the rewait after a pause. */
const makeResolveWaitSql = (ctx: WorkflowSqlContext) => {
  const { runs, steps, events, signals, NOW, stepMessage, sql, messageCtes, fromIn, toOf } = ctx

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
    // a skip on a paused run holds it; a pause or a cancel moves it from either state
    const resolveVerbs: ReadonlyArray<Verb> = skip
      ? ["wait_skip", "hold"]
      : p.outcome === "pause"
        ? ["wait_pause"]
        : ["wait_cancel"]
    const message = messageCtes(
      p.physicalQueue,
      "resolve_message",
      sql`SELECT ${NOW(p.now)} AS vt, ${stepMessage(p.workflow, sql`NULL`, sql`${p.runId}::uuid`)} AS message
          FROM r WHERE ${skip} AND r.status = ${toOf("wait_skip")}`,
      p.now
    )
    const runTo = skip
      ? sql`CASE WHEN ${fromIn("locked.status", "wait_skip")} THEN ${toOf("wait_skip")} ELSE locked.status END`
      : p.outcome === "pause"
        ? toOf("wait_pause")
        : toOf("wait_cancel")
    return sql<{ readonly id: bigint; readonly run_status: RunStatus }>`WITH locked AS (
        SELECT id, status FROM ${runs} WHERE id = ${p.runId}::uuid AND ${fromIn("status", ...resolveVerbs)} FOR UPDATE),
      s AS (
        UPDATE ${steps} st SET status = ${skip ? "skipped" : p.outcome === "pause" ? "failed" : "cancelled"},
          finished_at = ${NOW(p.now)}, error = ${p.error}::jsonb
        FROM locked WHERE st.id = ${p.stepId} AND st.run_id = locked.id AND st.status = 'waiting'
        RETURNING st.id, st.name, st.attempt),
      r AS (
        UPDATE ${runs} ru SET status = ${runTo}, updated_at = ${NOW(p.now)},
          paused_at = ${
            p.outcome === "pause"
              ? sql`coalesce(ru.paused_at, ${NOW(p.now)})`
              : // a run paused meanwhile and cancelled now is no longer paused (the table's check)
                p.outcome === "cancel"
                ? sql`NULL`
                : sql`ru.paused_at`
          },
          paused_reason = ${
            p.outcome === "pause" ? sql`'wait_timed_out'` : p.outcome === "cancel" ? sql`NULL` : sql`ru.paused_reason`
          },
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

  /** Resume of a run paused while its step waited: it waits again, its deadline moved by the pause. */
  const runRewait = (runId: string, stepId: bigint, now: Date | null) =>
    sql<{ readonly id: bigint }>`WITH r AS (
        SELECT id, paused_at FROM ${runs} WHERE id = ${runId}::uuid AND ${fromIn("status", "rewait")} FOR UPDATE),
      s AS (
        UPDATE ${steps} st SET timeout_at = st.timeout_at + (${NOW(now)} - r.paused_at)
        FROM r WHERE st.id = ${stepId} AND st.status = 'waiting' AND st.timeout_at IS NOT NULL RETURNING st.id),
      u AS (
        UPDATE ${runs} ru SET status = ${toOf("rewait")}, paused_at = NULL, paused_reason = NULL, updated_at = ${NOW(now)}
        FROM r WHERE ru.id = r.id RETURNING ru.id)
      SELECT u.id FROM u`

  return { stepWaitingOf, stepResolveWaiting, runRewait }
}

/** Wait statements of one schema. */
export const makeWaitSql = (ctx: WorkflowSqlContext) => ({ ...makeParkWakeSql(ctx), ...makeResolveWaitSql(ctx) })
