/**
 * The signals' own statements: stored, found, claimed for a step, moved to its next attempt,
 * consumed. Waking the step a signal is for is `WaitSql`'s.
 *
 * @since 0.1.0
 */
import type { WorkflowSqlContext } from "./Context.ts"
import type { SignalRow } from "./Rows.ts"

/** The signals' own statements. */
export const makeSignalSql = (ctx: WorkflowSqlContext) => {
  const { steps, events, signals, NOW, sql } = ctx

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

  /** Consumes a held signal now (a fan-out that failed: its next attempt opens a fresh batch). */
  const signalConsume = (signalId: bigint) =>
    sql`UPDATE ${signals} SET status = 'consumed' WHERE id = ${signalId} AND status = 'claimed'`

  return {
    signalsPending,
    signalClaim,
    signalInsert,
    signalByKey,
    signalsOf,
    signalHeldBy,
    signalTransfer,
    signalConsume
  }
}
