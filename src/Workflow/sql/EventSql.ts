/**
 * Audit events and patch markers written on their own (most events are written by the
 * statement of their transition).
 *
 * @since 0.1.0
 */
import type { WorkflowSqlContext } from "./Context.ts"

/** Audit events and patch markers written on their own (most events are written by the statement of their transition). */
export const makeEventSql = (ctx: WorkflowSqlContext) => {
  const { runs, steps, events, NOW, sql } = ctx

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

  return { eventInsert, markerInsert }
}
