/**
 * What the child-process fixtures (supervisor-child.ts, child-capsule-app.ts) share with their
 * tests: the `child_log` table their jobs write (each start and end, by key and process), and the
 * fast timings a test's supervisor processes run with.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/** A job's start or end as a fixture logged it. */
export interface LogRow {
  readonly key: string
  readonly event: string
  readonly pid: number
  readonly at: Date
}

/** Creates the log table the fixtures' jobs write. */
export const createLog = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql`CREATE TABLE child_log (key text NOT NULL, event text NOT NULL, pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`
)

/** The rows of one event, oldest first. */
export const logRows = (event: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<LogRow>`SELECT key, event, pid, at FROM child_log WHERE event = ${event} ORDER BY at`
  ).pipe(Effect.orDie)

/** How many rows of one event. */
export const logCount = (event: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM child_log WHERE event = ${event}`
  ).pipe(
    Effect.map(([row]) => row!.n),
    Effect.orDie
  )

/**
 * A supervisor process's environment for tests: beats every 200 ms, dead after `staleSeconds`,
 * polls every 100 ms, a 30 s visibility timeout; `extra` last.
 */
export const fastEnv = (url: string, staleSeconds: string, extra: Record<string, string>) => ({
  DATABASE_URL: url,
  PGBUS_PROCESS_HEARTBEAT_INTERVAL: "0.2",
  PGBUS_STALE_PROCESS_THRESHOLD: staleSeconds,
  PGBUS_POLLING_INTERVAL: "0.1",
  PGBUS_VISIBILITY_TIMEOUT: "30",
  ...extra
})
