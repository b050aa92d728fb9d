/** What the batch tests share: a batch's counters and execution rows in one snapshot. */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/** The counters and the execution rows of a batch, read in one statement (one snapshot). */
export const snapshot = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{
      readonly total: bigint
      readonly completed: bigint
      readonly failed: bigint
      readonly rows: bigint
      readonly status: string
    }>`SELECT b.total_jobs AS total, b.completed_jobs AS completed, b.failed_jobs AS failed, b.status,
        (SELECT count(*) FROM pgbus.batch_executions e WHERE e.batch_id = b.id) AS rows
      FROM pgbus.batches b WHERE b.id = ${id}::uuid`.pipe(
      Effect.map(([row]) => ({
        total: Number(row!.total),
        completed: Number(row!.completed),
        failed: Number(row!.failed),
        rows: Number(row!.rows),
        status: row!.status
      }))
    )
  ).pipe(Effect.orDie)
