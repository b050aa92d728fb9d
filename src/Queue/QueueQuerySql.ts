/**
 * Read-only statements on queue tables for operators: a queue's figures by job state, job
 * listings by state, and dead letters filtered by error class. Queue names reach this module
 * validated and are bound as quoted identifiers.
 *
 * A message's state follows from its columns: `ready` (visible now), `running` (claimed, its
 * visibility ahead), `retrying` (a failure recorded, waiting out its backoff), `scheduled`
 * (enqueued for later); `archived` rows are in the archive.
 *
 * @since 0.1.0
 */
import type { SqlClient, Statement } from "effect/sql"

/** The states of a queued message. */
export const JobStates = ["ready", "scheduled", "running", "retrying"] as const
export type JobState = (typeof JobStates)[number] | "archived"

/** A queue's figures. */
export interface QueueFiguresRow {
  readonly depth: bigint
  readonly ready: bigint
  readonly scheduled: bigint
  readonly running: bigint
  readonly retrying: bigint
  readonly oldest_age_ms: number | null
  /** Age of the oldest claimable message since it became claimable (0 when none is claimable). */
  readonly claimable_latency_ms: number | null
  readonly archived: bigint
}

/** A concurrency key of a queue, for operators. */
export interface LimitKeyRow {
  readonly key: string
  readonly running: bigint
  readonly waiting: bigint
  readonly limit_to: bigint
  readonly oldest_wait_ms: number | null
}

/** A rate bucket as the last claim left it. */
export interface RateBucketRow {
  readonly queue: string
  readonly key: string
  readonly tokens: number
  readonly refilled_at: Date
}

/** A listed message with its state. */
export interface JobRow {
  readonly msg_id: bigint
  readonly read_ct: number
  readonly enqueued_at: Date
  readonly vt: Date
  readonly message: unknown
  readonly headers: unknown
  readonly last_error: unknown
  readonly claimed_by: string | null
  readonly archived_at: Date | null
  readonly state: JobState
}

/** A dead letter with its block's fields. */
export interface DeadLetterRow {
  readonly msg_id: bigint
  readonly read_ct: number
  readonly enqueued_at: Date
  readonly message: unknown
  readonly headers: unknown
}

/** Archives at least this big (by the planner's estimate) are counted by the estimate. */
export const ARCHIVE_EXACT_LIMIT = 100_000

/** Builds the statements for one schema. */
export const makeQueueQuerySql = (sql: SqlClient.SqlClient, schema: string) => {
  const messages = (physical: string) => sql(`${schema}.q_${physical}`)
  const archive = (physical: string) => sql(`${schema}.a_${physical}`)
  const NOW = (now: Date | null) => sql`coalesce(${now}::timestamptz, now())`

  const stateOf = (now: Date | null) => sql`CASE
      WHEN vt <= ${NOW(now)} THEN 'ready'
      WHEN claimed_by IS NOT NULL THEN 'running'
      WHEN last_error IS NOT NULL THEN 'retrying'
      ELSE 'scheduled' END`

  // An exact count of a large archive reads every row (about 50 ms a million): past ARCHIVE_EXACT_LIMIT
  // rows by the planner's estimate, the figure is that estimate (refreshed by autovacuum's analyze).
  const archivedCount = (physical: string) =>
    sql`(SELECT CASE WHEN c.reltuples >= ${ARCHIVE_EXACT_LIMIT} THEN c.reltuples::int8
        ELSE (SELECT count(*) FROM ${archive(physical)}) END
      FROM pg_class c WHERE c.oid = ${`${schema}.a_${physical}`}::regclass)`

  const queueFigures = (physical: string, now: Date | null) =>
    sql<QueueFiguresRow>`SELECT count(*) AS depth,
        count(*) FILTER (WHERE vt <= ${NOW(now)}) AS ready,
        count(*) FILTER (WHERE vt > ${NOW(now)} AND claimed_by IS NULL AND last_error IS NULL) AS scheduled,
        count(*) FILTER (WHERE vt > ${NOW(now)} AND claimed_by IS NOT NULL) AS running,
        count(*) FILTER (WHERE vt > ${NOW(now)} AND claimed_by IS NULL AND last_error IS NOT NULL) AS retrying,
        (extract(epoch FROM ${NOW(now)} - min(enqueued_at)) * 1000)::float8 AS oldest_age_ms,
        coalesce((extract(epoch FROM ${NOW(now)} - min(vt) FILTER (WHERE vt <= ${NOW(now)})) * 1000)::float8, 0)
          AS claimable_latency_ms,
        ${archivedCount(physical)} AS archived
      FROM ${messages(physical)}`

  const byId = (afterId: bigint | null): Statement.Fragment =>
    afterId === null ? sql`true` : sql`msg_id > ${afterId}::int8`

  /** Messages of a queue in id order, optionally of one state, after a cursor. */
  const jobsList = (
    physical: string,
    state: JobState | null,
    job: string | null,
    afterId: bigint | null,
    limit: number,
    now: Date | null,
    text: string | null = null
  ) => {
    const ofJob = sql.and([
      job === null ? sql`true` : sql`message ->> 'job' = ${job}`,
      text === null ? sql`true` : sql`strpos(message::text, ${text}) > 0`
    ])
    if (state === "archived") {
      return sql<JobRow>`SELECT msg_id, read_ct, enqueued_at, vt, message, headers, NULL::jsonb AS last_error,
          NULL::text AS claimed_by, archived_at, 'archived' AS state
        FROM ${archive(physical)} WHERE ${byId(afterId)} AND ${ofJob} ORDER BY msg_id LIMIT ${limit}`
    }
    return sql<JobRow>`SELECT * FROM (
        SELECT msg_id, read_ct, enqueued_at, vt, message, headers, last_error, claimed_by,
          NULL::timestamptz AS archived_at, ${stateOf(now)} AS state
        FROM ${messages(physical)} WHERE ${byId(afterId)} AND ${ofJob}) m
      WHERE ${state === null ? sql`true` : sql`m.state = ${state}`}
      ORDER BY msg_id LIMIT ${limit}`
  }

  /** One archived message. */
  const archivedGet = (physical: string, msgId: bigint) =>
    sql<JobRow>`SELECT msg_id, read_ct, enqueued_at, vt, message, headers, NULL::jsonb AS last_error,
        NULL::text AS claimed_by, archived_at, 'archived' AS state
      FROM ${archive(physical)} WHERE msg_id = ${msgId}`

  /** One queued message with its state. */
  const jobGet = (physical: string, msgId: bigint, now: Date | null) =>
    sql<JobRow>`SELECT msg_id, read_ct, enqueued_at, vt, message, headers, last_error, claimed_by,
        NULL::timestamptz AS archived_at, ${stateOf(now)} AS state
      FROM ${messages(physical)} WHERE msg_id = ${msgId}`

  const ofErrorClass = (errorClass: string | null) =>
    errorClass === null ? sql`true` : sql`headers -> 'pgbus_dead_letter' ->> 'error_class' = ${errorClass}`

  /** Dead letters of a dead-letter queue in id order, optionally of one error class. */
  const deadLettersList = (physical: string, errorClass: string | null, afterId: bigint | null, limit: number) =>
    sql<DeadLetterRow>`SELECT msg_id, read_ct, enqueued_at, message, headers FROM ${messages(physical)}
      WHERE ${byId(afterId)} AND ${ofErrorClass(errorClass)}
      ORDER BY msg_id LIMIT ${limit}`

  /** How many dead letters a filter matches. */
  const deadLettersCount = (physical: string, errorClass: string | null) =>
    sql<{ readonly n: bigint }>`SELECT count(*) AS n FROM ${messages(physical)} WHERE ${ofErrorClass(errorClass)}`

  /** Dead letters per error class (the filter's choices). */
  const deadLetterClasses = (physical: string) =>
    sql<{ readonly error_class: string | null; readonly n: bigint }>`SELECT
        headers -> 'pgbus_dead_letter' ->> 'error_class' AS error_class, count(*) AS n
      FROM ${messages(physical)} GROUP BY 1 ORDER BY 2 DESC`

  // Concurrency keys of a queue (jobs with `pgbus_limit_key`): running (claimed, lease live),
  // waiting (visible), the limit and the oldest wait. A scan of the queue: for operators.
  const queueLimitKeys = (physical: string, now: Date | null) =>
    sql<LimitKeyRow>`SELECT message ->> 'pgbus_limit_key' AS key,
        count(*) FILTER (WHERE claimed_by IS NOT NULL AND vt > ${NOW(now)}) AS running,
        count(*) FILTER (WHERE vt <= ${NOW(now)}) AS waiting,
        max(CASE WHEN jsonb_typeof(message -> 'pgbus_limit_to') = 'number'
                 THEN greatest(floor((message ->> 'pgbus_limit_to')::numeric), 1)::int8 ELSE 1 END) AS limit_to,
        (extract(epoch FROM ${NOW(now)} - min(enqueued_at) FILTER (WHERE vt <= ${NOW(now)})) * 1000)::float8
          AS oldest_wait_ms
      FROM ${messages(physical)}
      WHERE message ? 'pgbus_limit_key'
      GROUP BY 1`

  // The rate buckets (owned with the claim by QueueLimitSql.ts; read here for operators), their
  // tokens as the last claim left them.
  const rateBucketList = () =>
    sql<RateBucketRow>`SELECT queue, key, tokens, refilled_at FROM ${sql(`${schema}.rate_buckets`)}
      ORDER BY queue, key LIMIT 1000`

  return {
    queueLimitKeys,
    rateBucketList,
    queueFigures,
    jobsList,
    jobGet,
    archivedGet,
    deadLettersList,
    deadLettersCount,
    deadLetterClasses
  }
}

/** The statements of one schema. */
export type QueueQuerySql = ReturnType<typeof makeQueueQuerySql>
