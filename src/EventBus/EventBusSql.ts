/**
 * Every SQL statement on the event bus's tables: `event_subscriptions` (pattern → subscriber
 * queue, so a publisher that does not load the handlers still routes) and `processed_events`
 * (the two-phase claims of idempotent handlers), plus the fan-out statement that writes one
 * event (or many) into every matching subscriber queue through the queue store's CTEs.
 *
 * Time: every statement takes `$now` and uses `coalesce($now, now())`.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { Result } from "effect"
import type { SqlClient, Statement } from "effect/sql"

/** A stored subscription. */
export interface SubscriptionRow {
  readonly handler: string
  readonly pattern: string
  readonly queue: string
  readonly registered_at: Date
}

/** What a claim found: the claim is ours (`taken_over` when it replaced one gone quiet), done, or held. */
export interface ClaimRow {
  readonly state: "claimed" | "completed" | "owned"
  readonly taken_over: boolean
  readonly age_ms: number | null
}

/** One event of a fan-out, its envelope already JSON text. */
export interface FanOutEvent {
  /** The job message (`{ job, payload: envelope }`); `payload.published_at` is set by the statement. */
  readonly message: string
  readonly delayMs: number
  readonly at: Date | null
}

/** One subscriber queue of a fan-out and the events (1-based positions) it receives. */
export interface FanOutTarget {
  readonly physical: string
  readonly ordinals: ReadonlyArray<number>
}

/** `QueueStore.messageCtes`: CTEs that insert messages into a queue from this module's statement. */
export type MessageCtes = (
  physical: string,
  name: string,
  rows: Statement.Fragment,
  now: Date | null
) => { readonly ctes: Statement.Fragment; readonly notifyRef: Statement.Fragment }

const typedArray = (values: ReadonlyArray<unknown>, oid: number): unknown =>
  Result.getOrThrow(PgTypes.array(values, oid))

/** Builds the statements for one schema; each returns an Effect running one statement. */
export const makeEventBusSql = (sql: SqlClient.SqlClient, schema: string) => {
  const subscriptions = sql(`${schema}.event_subscriptions`)
  const processed = sql(`${schema}.processed_events`)
  const NOW = (now: Date | null) => sql`coalesce(${now}::timestamptz, now())`
  const millis = (ms: number) => sql`${PgTypes.float8(ms)} * interval '1 millisecond'`

  /** Upserts subscriptions by handler: a handler whose pattern or queue changed is rebound. */
  const subscriptionUpsert = (
    rows: ReadonlyArray<{ readonly handler: string; readonly pattern: string; readonly queue: string }>,
    now: Date | null
  ) =>
    sql`INSERT INTO ${subscriptions} (handler, pattern, queue, registered_at)
      SELECT u.handler, u.pattern, u.queue, ${NOW(now)}
      FROM unnest(${typedArray(
        rows.map((r) => r.handler),
        PgTypes.OID.text
      )}::text[], ${typedArray(
        rows.map((r) => r.pattern),
        PgTypes.OID.text
      )}::text[], ${typedArray(
        rows.map((r) => r.queue),
        PgTypes.OID.text
      )}::text[]) AS u(handler, pattern, queue)
      ON CONFLICT (handler) DO UPDATE
        SET pattern = EXCLUDED.pattern, queue = EXCLUDED.queue, registered_at = EXCLUDED.registered_at`

  const subscriptionList = () =>
    sql<SubscriptionRow>`SELECT handler, pattern, queue, registered_at FROM ${subscriptions} ORDER BY handler`

  const subscriptionDelete = (handler: string) =>
    sql<{ readonly handler: string }>`DELETE FROM ${subscriptions} WHERE handler = ${handler} RETURNING handler`

  /**
   * Writes events into their subscriber queues in ONE statement, so a publish in the caller's
   * transaction commits or rolls back as a whole. `published_at` is stamped here, from the
   * same clock as the queue rows.
   */
  const eventFanOut = (
    events: ReadonlyArray<FanOutEvent>,
    targets: ReadonlyArray<FanOutTarget>,
    messageCtes: MessageCtes,
    now: Date | null
  ) => {
    const parts = targets.map((target, i) =>
      messageCtes(
        target.physical,
        `fan_${i}`,
        sql`SELECT ev.vt, ev.message FROM ev
            WHERE ev.ord = ANY(${typedArray(target.ordinals, PgTypes.OID.int4)}::int4[]) ORDER BY ev.ord`,
        now
      )
    )
    const counts = parts.length === 0 ? sql`0` : sql.join(" + ", false)(parts.map((p) => p.notifyRef))
    return sql<{ readonly published_at: Date; readonly notified: bigint | number }>`WITH ev AS (
        SELECT u.ord,
          jsonb_set(u.message::jsonb, '{payload,published_at}',
            to_jsonb(to_char(${NOW(now)} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))) AS message,
          coalesce(u.at, ${NOW(now)} + u.delay_ms * interval '1 millisecond') AS vt
        FROM unnest(${typedArray(
          events.map((e) => e.message),
          PgTypes.OID.text
        )}::text[], ${typedArray(
          events.map((e) => e.delayMs),
          PgTypes.OID.float8
        )}::float8[], ${typedArray(
          events.map((e) => e.at),
          PgTypes.OID.timestamptz
        )}::timestamptz[]) WITH ORDINALITY AS u(message, delay_ms, at, ord)),
      ${sql.join(", ", false)(parts.map((p) => p.ctes))}
      SELECT ${NOW(now)} AS published_at, ${counts} AS notified`
  }

  /** The time of the clock statements use (for a publish that matched no subscriber). */
  const clockNow = (now: Date | null) => sql<{ readonly now: Date }>`SELECT ${NOW(now)} AS now`

  /**
   * Phase one of an idempotent handler: insert a pending claim, or take over one whose
   * heartbeat is older than `windowMs`. No row is ours when the event is completed, or held
   * by a live holder (a claim inserted by a concurrent transaction is not visible to this
   * statement's snapshot, so it yields no row at all: also a live holder).
   */
  const processedClaim = (eventId: string, handler: string, holder: string, windowMs: number, now: Date | null) =>
    sql<ClaimRow>`WITH claim AS (
        INSERT INTO ${processed} AS p (event_id, handler, claimed_by, claimed_at, heartbeat_at)
        VALUES (${eventId}::uuid, ${handler}, ${holder}, ${NOW(now)}, ${NOW(now)})
        ON CONFLICT (event_id, handler) DO UPDATE
          SET claimed_by = EXCLUDED.claimed_by, claimed_at = EXCLUDED.claimed_at, heartbeat_at = EXCLUDED.heartbeat_at
          WHERE p.completed_at IS NULL AND p.heartbeat_at < ${NOW(now)} - ${millis(windowMs)}
        RETURNING (p.xmax <> 0) AS taken_over)
      SELECT 'claimed' AS state, claim.taken_over, NULL::float8 AS age_ms FROM claim
      UNION ALL
      SELECT CASE WHEN p.completed_at IS NULL THEN 'owned' ELSE 'completed' END, false,
             (extract(epoch FROM (${NOW(now)} - p.heartbeat_at)) * 1000)::float8
      FROM ${processed} p
      WHERE p.event_id = ${eventId}::uuid AND p.handler = ${handler} AND NOT EXISTS (SELECT 1 FROM claim)`

  /**
   * Phase two: the handler returned; stamps the claim completed (only if it is still ours). A
   * claim we completed already (a retry after a lost reply) keeps its stamp and counts as ours.
   */
  const processedComplete = (eventId: string, handler: string, holder: string, now: Date | null) =>
    sql<{ readonly handler: string }>`UPDATE ${processed} AS p
      SET completed_at = coalesce(p.completed_at, ${NOW(now)}), heartbeat_at = ${NOW(now)}
      WHERE event_id = ${eventId}::uuid AND handler = ${handler} AND claimed_by = ${holder}
      RETURNING handler`

  /** The handler failed or was interrupted: drops our pending claim so a retry runs at once. */
  const processedRelease = (eventId: string, handler: string, holder: string) =>
    sql`DELETE FROM ${processed}
      WHERE event_id = ${eventId}::uuid AND handler = ${handler} AND claimed_by = ${holder} AND completed_at IS NULL`

  /** Refreshes the heartbeat of the pending claims this holder runs. */
  const processedHeartbeat = (
    claims: ReadonlyArray<{ readonly eventId: string; readonly handler: string }>,
    holder: string,
    now: Date | null
  ) =>
    sql<{ readonly handler: string }>`UPDATE ${processed} p SET heartbeat_at = ${NOW(now)}
      FROM unnest(${typedArray(
        claims.map((c) => c.eventId),
        PgTypes.OID.text
      )}::text[], ${typedArray(
        claims.map((c) => c.handler),
        PgTypes.OID.text
      )}::text[]) AS u(event_id, handler)
      WHERE p.event_id = u.event_id::uuid AND p.handler = u.handler AND p.claimed_by = ${holder}
        AND p.completed_at IS NULL
      RETURNING p.handler`

  /** Deletes up to `limit` records (completed, or pending and silent) older than the TTL. */
  const processedPurge = (ttlMs: number, limit: number, now: Date | null) =>
    sql<{ readonly n: number }>`WITH d AS (
        DELETE FROM ${processed} WHERE (event_id, handler) IN (
          SELECT event_id, handler FROM ${processed}
          WHERE coalesce(completed_at, heartbeat_at) < ${NOW(now)} - ${millis(ttlMs)}
          LIMIT ${limit})
        RETURNING 1)
      SELECT count(*)::int AS n FROM d`

  return {
    subscriptionUpsert,
    subscriptionList,
    subscriptionDelete,
    eventFanOut,
    clockNow,
    processedClaim,
    processedComplete,
    processedRelease,
    processedHeartbeat,
    processedPurge
  }
}

/** The statements of one schema. */
export type EventBusSql = ReturnType<typeof makeEventBusSql>
