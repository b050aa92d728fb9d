/**
 * The signals' own statements: stored, found, claimed for a step, moved to its next attempt,
 * consumed. Waking the step a signal is for is `WaitSql`'s.
 *
 * @since 0.1.0
 */
import type { WorkflowSqlContext } from "./Context.ts"
import type { SignalRow } from "./Rows.ts"

/** A signal to store. */
export interface SignalInput {
  readonly runId: string
  readonly name: string
  readonly payload: string
  readonly idempotencyKey: string | null
  readonly actor: string
  readonly reason: string | null
  readonly now: Date | null
}

/** The step a run waits at, beside a stored signal (`signalStore`); null columns when none waits. */
export interface WaitingOf {
  readonly waiting_step_id: bigint | null
  readonly waiting_for: string | null
  readonly waiting_matcher: boolean | null
  readonly waiting_queue: string | null
}

/** The signals' own statements. */
export const makeSignalSql = (ctx: WorkflowSqlContext) => {
  const { steps, events, signals, NOW, sql, signalClaimCtes } = ctx

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
  }) => sql<{ readonly id: bigint }>`WITH ${signalClaimCtes(p)} SELECT sgc.id FROM sgc`

  /** The CTEs `sg` (the stored signal, none for a repeated idempotency key) and `e` (its `signal_received` event). */
  const stored = (p: SignalInput) => sql`sg AS (
        INSERT INTO ${signals} (run_id, name, payload, status, idempotency_key, actor, reason, received_at)
        VALUES (${p.runId}::uuid, ${p.name}, ${p.payload}::jsonb, 'pending', ${p.idempotencyKey}, ${p.actor},
                ${p.reason}, ${NOW(p.now)})
        ON CONFLICT (run_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING *),
      e AS (
        INSERT INTO ${events} (run_id, type, actor, reason, details, at)
        SELECT ${p.runId}::uuid, 'signal_received', ${p.actor}, ${p.reason},
          jsonb_strip_nulls(jsonb_build_object('name', sg.name, 'idempotency_key', sg.idempotency_key,
            'duplicate', false)), ${NOW(p.now)} FROM sg)`

  /** Stores a signal (a repeated idempotency key stores nothing) with its `signal_received` event. */
  const signalInsert = (p: SignalInput) => sql<SignalRow>`WITH ${stored(p)} SELECT * FROM sg`

  /**
   * `signalInsert`, and the step the run waits at (as `stepWaitingOf`) in the same round trip:
   * the `waiting_*` columns, null when no step waits. Under the run's row lock (no step moves).
   */
  const signalStore = (p: SignalInput) =>
    sql<SignalRow & WaitingOf>`WITH ${stored(p)},
      w AS (
        SELECT id, wait_for, wait_matcher, queue FROM ${steps}
        WHERE run_id = ${p.runId}::uuid AND status = 'waiting' ORDER BY id DESC LIMIT 1)
      SELECT sg.*, w.id AS waiting_step_id, w.wait_for AS waiting_for, w.wait_matcher AS waiting_matcher,
        w.queue AS waiting_queue
      FROM sg LEFT JOIN w ON true`

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

  /** Consumes a held signal now (a fan-out that failed: its next attempt opens a fresh batch). */
  const signalConsume = (signalId: bigint) =>
    sql`UPDATE ${signals} SET status = 'consumed' WHERE id = ${signalId} AND status = 'claimed'`

  return {
    signalsPending,
    signalClaim,
    signalInsert,
    signalStore,
    signalByKey,
    signalsOf,
    signalHeldBy,
    signalTransfer,
    signalConsume
  }
}
