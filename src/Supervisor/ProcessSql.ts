/**
 * Every SQL statement on the processes table.
 *
 * @since 0.1.0
 */
import type { SqlClient } from "effect/sql"

/** A process row. */
export interface ProcessRow {
  readonly id: string
  readonly pid: number
  readonly host: string
  readonly roles: ReadonlyArray<string>
  readonly capsules: unknown
  readonly busy: number
  readonly capacity: number
  readonly app_revision: string | null
  readonly version: string
  readonly started_at: Date
  readonly last_beat_at: Date
  /** Jobs that succeeded since the process started. */
  readonly succeeded: bigint
  /** Jobs that failed (retried or dead-lettered) since the process started. */
  readonly failed: bigint
  /** Jobs finished per second over the last beat interval. */
  readonly jobs_per_second: number
}

/** What a beat writes. */
export interface BeatFigures {
  readonly busy: number
  readonly capacity: number
  readonly succeeded: number
  readonly failed: number
  readonly jobsPerSecond: number
}

/** The statements of one schema. */
export const makeProcessSql = (sql: SqlClient.SqlClient, schema: string) => {
  const processes = sql(`${schema}.processes`)
  const NOW = (now: Date | null) => sql`coalesce(${now}::timestamptz, now())`

  const processRegister = (
    row: Pick<ProcessRow, "id" | "pid" | "host" | "roles" | "busy" | "capacity" | "app_revision" | "version"> & {
      readonly capsules: string
    },
    now: Date | null
  ) =>
    sql`INSERT INTO ${processes} (id, pid, host, roles, capsules, busy, capacity, app_revision, version, started_at, last_beat_at)
      VALUES (${row.id}, ${row.pid}, ${row.host}, ${[...row.roles]}::text[], ${row.capsules}::jsonb, ${row.busy},
              ${row.capacity}, ${row.app_revision}, ${row.version}, ${NOW(now)}, ${NOW(now)})`

  const processBeat = (id: string, f: BeatFigures, now: Date | null) =>
    sql<{ readonly id: string }>`UPDATE ${processes}
      SET busy = ${f.busy}, capacity = ${f.capacity}, succeeded = ${f.succeeded}, failed = ${f.failed},
        jobs_per_second = ${f.jobsPerSecond}::float8, last_beat_at = ${NOW(now)}
      WHERE id = ${id} RETURNING id`

  const processDelete = (ids: ReadonlyArray<string>) =>
    sql<{ readonly id: string }>`DELETE FROM ${processes} WHERE id = ANY(${[...ids]}::text[]) RETURNING id`

  // A server that started within the threshold stopped every process's beats while it was
  // down: no process is judged until it has been up for a whole threshold (by when the live
  // ones have beaten), whoever reaps, a process that booted after the restart included.
  const processListStale = (thresholdMs: number, now: Date | null) =>
    sql<ProcessRow>`SELECT * FROM ${processes}
      WHERE last_beat_at < ${NOW(now)} - ${thresholdMs}::float8 * interval '1 millisecond'
        AND pg_postmaster_start_time() < now() - ${thresholdMs}::float8 * interval '1 millisecond'`

  const processList = () => sql<ProcessRow>`SELECT * FROM ${processes} ORDER BY started_at`

  // One dispatcher at a time does maintenance; the lock lives until the transaction ends.
  const maintenanceLock = (key: string) =>
    sql<{ readonly locked: boolean }>`SELECT pg_try_advisory_xact_lock(hashtext(${`${schema}:${key}`})) AS locked`

  return { processRegister, processBeat, processDelete, processListStale, processList, maintenanceLock }
}
