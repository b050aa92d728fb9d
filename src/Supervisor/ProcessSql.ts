/**
 * Every SQL statement on the processes and maintenance_leaders tables.
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
  /** The maintenance roles it leads now (its lock held, per pg_locks). */
  readonly leads: ReadonlyArray<string>
}

/** A maintenance role's leader as recorded, and whether its backend still holds the lock. */
export interface LeaderRow {
  readonly role: string
  readonly process_id: string
  /** The backend of the leader's own connection. */
  readonly backend_pid: number
  readonly host: string
  readonly pid: number
  readonly acquired_at: Date
  readonly live: boolean
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

  // the beat a parent writes for its child while the child's event loop is blocked (ChildCapsule.ts):
  // the time alone, the figures are the child's to write
  const processTouch = (id: string, now: Date | null) =>
    sql<{ readonly id: string }>`UPDATE ${processes} SET last_beat_at = ${NOW(now)} WHERE id = ${id} RETURNING id`

  const processDelete = (ids: ReadonlyArray<string>) =>
    sql<{ readonly id: string }>`DELETE FROM ${processes} WHERE id = ANY(${[...ids]}::text[]) RETURNING id`

  // A server that started within the threshold stopped every process's beats while it was
  // down: no process is judged until it has been up for a whole threshold (by when the live
  // ones have beaten), whoever reaps, a process that booted after the restart included.
  const processListStale = (thresholdMs: number, now: Date | null) =>
    sql<Omit<ProcessRow, "leads">>`SELECT * FROM ${processes}
      WHERE last_beat_at < ${NOW(now)} - ${thresholdMs}::float8 * interval '1 millisecond'
        AND pg_postmaster_start_time() < now() - ${thresholdMs}::float8 * interval '1 millisecond'`

  // A leader row counts only while its backend holds the role's session lock: pg_locks shows a
  // two-key advisory lock as (classid, objid) = (key1, key2) with objsubid 2.
  const leaders = sql(`${schema}.maintenance_leaders`)
  const schemaKey = sql`hashtext(${schema})`
  const heldBy = (backendPid: unknown, lockId: unknown) =>
    sql`EXISTS (SELECT 1 FROM pg_locks k WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 2
        AND k.pid = ${backendPid} AND k.classid = (${schemaKey}::int8 & 4294967295)::oid AND k.objid = ${lockId}::int8::oid)`
  const liveLeader = sql`${heldBy(sql`l.backend_pid`, sql`l.lock_id`)}`

  const processList = () =>
    sql<ProcessRow>`SELECT p.*, coalesce((SELECT array_agg(l.role ORDER BY l.role) FROM ${leaders} l
        WHERE l.process_id = p.id AND ${liveLeader}), '{}'::text[]) AS leads
      FROM ${processes} p ORDER BY p.started_at`

  /**
   * On the leader's own connection: whether it holds the role's session lock, taking it when
   * free. Taken once per session (not stacked): a held lock is only checked.
   */
  const leaderTryLock = (lockId: number) =>
    sql<{ readonly locked: boolean; readonly backend_pid: number }>`SELECT pg_backend_pid() AS backend_pid,
      CASE WHEN ${heldBy(sql`pg_backend_pid()`, lockId)} THEN true
        ELSE pg_try_advisory_lock(${schemaKey}, ${lockId}) END AS locked`

  /** Records the holder of a role's lock (run by the new leader right after it took the lock). */
  const leaderRecord = (
    leader: { readonly role: string; readonly lockId: number; readonly processId: string },
    who: { readonly host: string; readonly pid: number; readonly backendPid: number },
    now: Date | null
  ) =>
    sql`INSERT INTO ${leaders} (role, lock_id, process_id, host, pid, backend_pid, acquired_at)
      VALUES (${leader.role}, ${leader.lockId}, ${leader.processId}, ${who.host}, ${who.pid}, ${who.backendPid}, ${NOW(now)})
      ON CONFLICT (role) DO UPDATE SET lock_id = excluded.lock_id, process_id = excluded.process_id,
        host = excluded.host, pid = excluded.pid, backend_pid = excluded.backend_pid, acquired_at = excluded.acquired_at`

  /** Every recorded leader and whether it leads now (never the processes table: it may be locked). */
  const leaderList = () =>
    sql<LeaderRow>`SELECT l.role, l.process_id, l.backend_pid, l.host, l.pid, l.acquired_at, ${liveLeader} AS live
      FROM ${leaders} l ORDER BY l.role`

  // Consumer priority: each ranked capsule's process holds a shared session lock keyed
  // (hashtext('<schema>/consumer/<queue>'), priority); a consumer is outranked while a lock of a
  // higher priority on its queue is granted in this database (its holder's session is alive).
  // pg_locks shows the int4 key as an oid (unsigned): read back as signed for the comparison.
  const rankKey = (queue: string) => sql`hashtext(${`${schema}/consumer/${queue}`})`

  /** Whether this session holds the rank's shared lock, taking it when it does not (not stacked). */
  const rankLock = (queue: string, priority: number) =>
    sql<{ readonly backend_pid: number }>`SELECT pg_backend_pid() AS backend_pid,
      CASE WHEN EXISTS (SELECT 1 FROM pg_locks k WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 2
          AND k.pid = pg_backend_pid() AND k.mode = 'ShareLock'
          AND k.classid = (${rankKey(queue)}::int8 & 4294967295)::oid AND k.objid = (${priority}::int8 & 4294967295)::oid)
        THEN true
        ELSE (SELECT true FROM pg_advisory_lock_shared(${rankKey(queue)}, ${priority}::int4)) END AS held`

  /** The highest priority a live session holds on the queue, if any (every database's lock of this one). */
  const rankTop = (queue: string) =>
    sql<{
      readonly top: number | null
    }>`SELECT max(k.objid::int8 - CASE WHEN k.objid::int8 >= 2147483648 THEN 4294967296 ELSE 0 END)::int4 AS top
      FROM pg_locks k WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 2
        AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND k.classid = (${rankKey(queue)}::int8 & 4294967295)::oid`

  return {
    rankLock,
    rankTop,
    processRegister,
    processBeat,
    processTouch,
    processDelete,
    processListStale,
    processList,
    leaderTryLock,
    leaderRecord,
    leaderList
  }
}
