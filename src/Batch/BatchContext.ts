/**
 * The batch service's shared context: the services its parts run on (config, client, queue
 * store, job client), the statements, and the small helpers over them (error mapping, the
 * all-or-nothing wrapper, a row's figures).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { PgBusConfig } from "../Config.ts"
import { toDatabaseError, withTransaction } from "../Database.ts"
import { JobClient } from "../Job/JobClient.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import type { BatchInfo } from "./Batch.ts"
import { AlreadyFinished, BatchNotFound } from "./BatchError.ts"
import { type BatchRow, makeBatchSql } from "./BatchSql.ts"

/** Rows a sweep or a bulk end reads (and batches it repairs) per statement. */
export const SWEEP_PAGE = 1_000

/** Whether a value is a plain JSON object (not an array, not a class instance). */
export const isPlainObject = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u) && Object.getPrototypeOf(u) === Object.prototype

/** A row's figures as the API gives them. */
export const infoOf = (row: BatchRow): BatchInfo => {
  const total = Number(row.total_jobs)
  const completed = Number(row.completed_jobs)
  const failed = Number(row.failed_jobs)
  const finished = row.status === "finished"
  return {
    id: row.id,
    description: row.description ?? undefined,
    properties: isPlainObject(row.properties) ? row.properties : {},
    status: row.status,
    totalJobs: total,
    completedJobs: completed,
    failedJobs: failed,
    pendingJobs: total - completed - failed,
    progressPercentage: total === 0 ? (finished ? 100 : 0) : Math.round(((completed + failed) / total) * 10_000) / 100,
    finished,
    createdAt: row.created_at,
    finishedAt: row.finished_at ?? undefined
  }
}

/** Builds the shared context of the batch service's parts. */
export const makeBatchContext = Effect.gen(function* () {
  const config = yield* PgBusConfig
  const sql = yield* SqlClient.SqlClient
  const store = yield* QueueStore
  const client = yield* JobClient
  const statements = makeBatchSql(sql, config.schema)
  const db =
    (operation: string) =>
    <A, R>(effect: Effect.Effect<A, SqlError, R>) =>
      Effect.mapError(effect, toDatabaseError(operation))

  // All or nothing: a transaction, or a savepoint inside the caller's (which may carry on
  // after a failure here without committing half of it).
  const transactional = <A, E, R>(operation: string, effect: Effect.Effect<A, E, R>) =>
    withTransaction(sql, effect).pipe(
      Effect.catchIf(
        (e): e is SqlError => typeof e === "object" && e !== null && "_tag" in e && e._tag === "SqlError",
        (e) => Effect.fail(toDatabaseError(operation)(e))
      )
    )

  /** Why a guarded statement found no pending batch. */
  const notJoinable = (id: string) =>
    Effect.flatMap(statements.batchGet(id).pipe(db("find batch")), (rows) =>
      Effect.fail(rows.length === 0 ? new BatchNotFound({ batchId: id }) : new AlreadyFinished({ batchId: id }))
    )

  return { config, sql, store, client, statements, db, transactional, notJoinable }
})

/** What every part of the batch service runs on. */
export type BatchContext = Effect.Success<typeof makeBatchContext>
