/**
 * Every SQL statement on `queue_states`: the state an operator (or a circuit breaker) puts a
 * queue in. Keyed by the physical queue name, as the registry.
 *
 * Time: every statement takes `$now` and uses `coalesce($now, now())`.
 *
 * @since 0.1.0
 */
import type { SqlClient } from "effect/sql"

/** The actor the per-queue circuit breaker pauses queues as. */
export const BREAKER_ACTOR = "circuit-breaker"

/** A queue's state row. */
export interface QueueStateRow {
  readonly queue: string
  readonly paused_at: Date | null
  readonly paused_until: Date | null
  readonly reason: string | null
  readonly actor: string
  readonly updated_at: Date
  /** Circuit-breaker trips in a row (0: never tripped, or reset). */
  readonly breaker_trips: number
  /** Whether the row pauses the queue now (paused, and its end not passed). */
  readonly paused: boolean
}

/** The statements of one schema. */
export const makeQueueStateSql = (sql: SqlClient.SqlClient, schema: string, notifyChannel: string) => {
  const states = sql(`${schema}.queue_states`)
  const NOW = (now: Date | null) => sql`coalesce(${now}::timestamptz, now())`
  const pausedNow = (now: Date | null) =>
    sql`(paused_at IS NOT NULL AND (paused_until IS NULL OR paused_until > ${NOW(now)}))`

  /**
   * Pauses a queue (until `until`, or until resumed); a queue already paused keeps its start.
   * Returns the row and whether it was paused before.
   */
  const queueStatePause = (p: {
    readonly queue: string
    readonly until: Date | null
    readonly reason: string | null
    readonly actor: string
    readonly now: Date | null
  }) =>
    sql<QueueStateRow & { readonly was_paused: boolean }>`WITH old AS (
        SELECT ${pausedNow(p.now)} AS was_paused FROM ${states} WHERE queue = ${p.queue} FOR UPDATE)
      INSERT INTO ${states} AS s (queue, paused_at, paused_until, reason, actor, updated_at)
      VALUES (${p.queue}, ${NOW(p.now)}, ${p.until}::timestamptz, ${p.reason}, ${p.actor}, ${NOW(p.now)})
      ON CONFLICT (queue) DO UPDATE SET
        paused_at = CASE WHEN s.paused_at IS NOT NULL AND (s.paused_until IS NULL OR s.paused_until > ${NOW(p.now)})
                         THEN s.paused_at ELSE EXCLUDED.paused_at END,
        paused_until = EXCLUDED.paused_until, reason = EXCLUDED.reason, actor = EXCLUDED.actor,
        updated_at = EXCLUDED.updated_at
      RETURNING s.*, true AS paused, coalesce((SELECT was_paused FROM old), false) AS was_paused`

  /** Resumes a paused queue and wakes its readers everywhere; no row back: it was not paused. */
  const queueStateResume = (p: {
    readonly queue: string
    readonly reason: string | null
    readonly actor: string
    readonly now: Date | null
  }) =>
    sql<{ readonly queue: string }>`WITH r AS (
        UPDATE ${states} SET paused_at = NULL, paused_until = NULL, reason = ${p.reason}, actor = ${p.actor},
          updated_at = ${NOW(p.now)}
        WHERE queue = ${p.queue} AND ${pausedNow(p.now)}
        RETURNING queue)
      SELECT r.queue ${notifyChannel === "" ? sql`` : sql`, pg_notify(${notifyChannel}, r.queue)`} FROM r`

  /**
   * The circuit breaker's trip: pauses a queue that is not paused now for `baseMs × 2^(trips-1)`
   * (at most `maxMs`), where trips counts on from the previous trip when that pause ended less
   * than `maxMs` ago (else starts at 1). No row back: the queue was paused already (an operator's
   * pause is never shortened or replaced).
   */
  const queueStateTrip = (p: {
    readonly queue: string
    readonly baseMs: number
    readonly maxMs: number
    readonly reason: string
    readonly now: Date | null
  }) => {
    const continued = sql`(s.actor = ${BREAKER_ACTOR} AND s.paused_until IS NOT NULL
      AND s.paused_until > ${NOW(p.now)} - ${p.maxMs}::float8 * interval '1 millisecond')`
    const trips = sql`CASE WHEN ${continued} THEN s.breaker_trips + 1 ELSE 1 END`
    return sql<{ readonly paused_until: Date; readonly breaker_trips: number }>`INSERT INTO ${states} AS s
        (queue, paused_at, paused_until, reason, actor, updated_at, breaker_trips)
      VALUES (${p.queue}, ${NOW(p.now)}, ${NOW(p.now)} + ${p.baseMs}::float8 * interval '1 millisecond',
        ${p.reason}, ${BREAKER_ACTOR}, ${NOW(p.now)}, 1)
      ON CONFLICT (queue) DO UPDATE SET
        breaker_trips = ${trips},
        paused_at = EXCLUDED.paused_at,
        paused_until = EXCLUDED.paused_at
          + least(${p.baseMs}::float8 * 2 ^ (${trips} - 1), ${p.maxMs}::float8) * interval '1 millisecond',
        reason = EXCLUDED.reason, actor = EXCLUDED.actor, updated_at = EXCLUDED.updated_at
      WHERE NOT (s.paused_at IS NOT NULL AND (s.paused_until IS NULL OR s.paused_until > ${NOW(p.now)}))
      RETURNING s.paused_until, s.breaker_trips`
  }

  /** The queues paused now (what workers honour). */
  const queueStatesPaused = (now: Date | null) =>
    sql<{ readonly queue: string }>`SELECT queue FROM ${states} WHERE ${pausedNow(now)}`

  /** Every state row, with whether it pauses its queue now. */
  const queueStatesAll = (now: Date | null) =>
    sql<QueueStateRow>`SELECT *, ${pausedNow(now)} AS paused FROM ${states} ORDER BY queue`

  return { queueStatePause, queueStateResume, queueStateTrip, queueStatesPaused, queueStatesAll }
}

/** The statements of one schema. */
export type QueueStateSql = ReturnType<typeof makeQueueStateSql>
