/** Helpers for tests of lost database connections. */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { eventually } from "./jobs.ts"

/**
 * Locks `table` (schema-qualified) in a transaction, runs `afterLock`, waits until a statement
 * of another connection (one like `query`) waits on the lock (in flight), then terminates every other connection
 * of the database from the one holding the lock. Returns how many terminated ones were waiting.
 */
export const terminateWhileWaiting = (
  table: string,
  afterLock: Effect.Effect<void> = Effect.void,
  /** Only statements whose text is `LIKE` this count as waiting (default: any). */
  query = "%"
) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.withTransaction(
      Effect.gen(function* () {
        yield* sql`LOCK TABLE ${sql(table)} IN ACCESS EXCLUSIVE MODE`
        yield* afterLock
        yield* awaitLockWaiter(query)
        yield* sql`SELECT pg_stat_clear_snapshot()`
        // OFFSET 0 keeps the planner from calling pg_terminate_backend before the pid filter
        const rows = yield* sql<{ readonly terminated: boolean; readonly waited: boolean }>`SELECT
            pg_terminate_backend(pid) AS terminated, waited FROM (
            SELECT pid, wait_event_type = 'Lock' AS waited FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() OFFSET 0) others`
        return rows.filter((r) => r.terminated && r.waited).length
      })
    )
  )

/**
 * Waits until a statement of the database (its text LIKE `query`) waits on a lock. Run inside
 * a transaction too: pg_stat_activity is read once per transaction unless its snapshot is cleared.
 */
export const awaitLockWaiter = (query = "%") =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    eventually(
      "a statement waits on the lock",
      Effect.andThen(
        sql`SELECT pg_stat_clear_snapshot()`,
        Effect.map(
          sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE ${query}`,
          ([row]) => row!.n > 0
        )
      )
    )
  )
