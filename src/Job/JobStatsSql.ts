/**
 * The statements of the `job_stats` table: adding a flush of buffered statistics to the rows of
 * their minutes (histograms added element by element), deleting rows past retention, and reading
 * series over a window in buckets of any width.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import type { SqlClient } from "effect/sql"

/** One row's worth of statistics to add (a minute, a queue, a job). */
export interface JobStatsDelta {
  readonly bucket: string
  readonly queue: string
  readonly job: string
  readonly completed: number
  readonly retried: number
  readonly dead_lettered: number
  readonly duration_ms_sum: number
  readonly duration_hist: ReadonlyArray<number>
  readonly latency_count: number
  readonly latency_ms_sum: number
  readonly latency_hist: ReadonlyArray<number>
}

/** Sums over a time bucket of a queue. */
export interface JobStatsSeriesRow {
  readonly at: Date
  readonly queue: string
  readonly completed: number
  readonly retried: number
  readonly dead_lettered: number
  readonly duration_ms_sum: number
  readonly latency_count: number
  readonly latency_ms_sum: number
}

/** A histogram's count at one index (1-based), summed over a time bucket of a queue. */
export interface JobStatsHistogramRow {
  readonly at: Date
  readonly queue: string
  readonly kind: "duration" | "latency"
  readonly i: number
  readonly v: number
}

/** Builds the statements for one schema. */
export const makeJobStatsSql = (sql: SqlClient.SqlClient, schema: string) => {
  const stats = sql(`${schema}.job_stats`)
  const addArrays = (column: string) =>
    sql`(SELECT array_agg(coalesce(a, 0) + coalesce(b, 0) ORDER BY i)
      FROM unnest(${sql(`job_stats.${column}`)}, ${sql(`excluded.${column}`)}) WITH ORDINALITY AS u(a, b, i))`

  /** Adds a flush's rows to the rows of their minutes. */
  const jobStatsAdd = (rows: ReadonlyArray<JobStatsDelta>) =>
    sql`INSERT INTO ${stats} (bucket, queue, job, completed, retried, dead_lettered, duration_ms_sum, duration_hist,
        latency_count, latency_ms_sum, latency_hist)
      SELECT bucket, queue, job, completed, retried, dead_lettered, duration_ms_sum, duration_hist,
        latency_count, latency_ms_sum, latency_hist
      FROM jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) AS r(bucket timestamptz, queue text, job text,
        completed int8, retried int8, dead_lettered int8, duration_ms_sum float8, duration_hist int8[],
        latency_count int8, latency_ms_sum float8, latency_hist int8[])
      ORDER BY bucket, queue, job
      ON CONFLICT (bucket, queue, job) DO UPDATE SET
        completed = job_stats.completed + excluded.completed,
        retried = job_stats.retried + excluded.retried,
        dead_lettered = job_stats.dead_lettered + excluded.dead_lettered,
        duration_ms_sum = job_stats.duration_ms_sum + excluded.duration_ms_sum,
        duration_hist = ${addArrays("duration_hist")},
        latency_count = job_stats.latency_count + excluded.latency_count,
        latency_ms_sum = job_stats.latency_ms_sum + excluded.latency_ms_sum,
        latency_hist = ${addArrays("latency_hist")}`

  /** Deletes the rows of minutes older than `olderThanMs`; how many. */
  const jobStatsDeleteOld = (olderThanMs: number, now: Date | null) =>
    sql<{ readonly n: bigint }>`WITH d AS (DELETE FROM ${stats}
        WHERE bucket < coalesce(${now}::timestamptz, now()) - ${PgTypes.float8(olderThanMs)} * interval '1 millisecond'
        RETURNING 1)
      SELECT count(*) AS n FROM d`

  const binned = (fromMs: number, binSeconds: number, queue: string | null, now: Date | null) =>
    sql`SELECT to_timestamp(floor(extract(epoch FROM bucket) / ${PgTypes.float8(binSeconds)}) * ${PgTypes.float8(binSeconds)}) AS at, *
      FROM ${stats}
      WHERE bucket >= coalesce(${now}::timestamptz, now()) - ${PgTypes.float8(fromMs)} * interval '1 millisecond'
        AND (${queue}::text IS NULL OR queue = ${queue}::text)`

  /** Sums per bucket of `binSeconds` and queue over the last `fromMs`. */
  const jobStatsSeries = (fromMs: number, binSeconds: number, queue: string | null, now: Date | null) =>
    sql<JobStatsSeriesRow>`SELECT at, queue, sum(completed)::float8 AS completed, sum(retried)::float8 AS retried,
        sum(dead_lettered)::float8 AS dead_lettered, sum(duration_ms_sum)::float8 AS duration_ms_sum,
        sum(latency_count)::float8 AS latency_count, sum(latency_ms_sum)::float8 AS latency_ms_sum
      FROM (${binned(fromMs, binSeconds, queue, now)}) s
      GROUP BY at, queue ORDER BY at, queue`

  /** Histogram counts per bucket of `binSeconds` and queue over the last `fromMs`. */
  const jobStatsHistograms = (fromMs: number, binSeconds: number, queue: string | null, now: Date | null) =>
    sql<JobStatsHistogramRow>`SELECT at, queue, kind, i::int4 AS i, sum(v)::float8 AS v FROM (
        SELECT s.at, s.queue, 'duration' AS kind, u.i, u.v
          FROM (${binned(fromMs, binSeconds, queue, now)}) s, unnest(s.duration_hist) WITH ORDINALITY AS u(v, i)
        UNION ALL
        SELECT s.at, s.queue, 'latency' AS kind, u.i, u.v
          FROM (${binned(fromMs, binSeconds, queue, now)}) s, unnest(s.latency_hist) WITH ORDINALITY AS u(v, i)) h
      WHERE v > 0
      GROUP BY at, queue, kind, i ORDER BY at, queue, kind, i`

  return { jobStatsAdd, jobStatsDeleteOld, jobStatsSeries, jobStatsHistograms }
}

/** The statements of one schema. */
export type JobStatsSql = ReturnType<typeof makeJobStatsSql>
