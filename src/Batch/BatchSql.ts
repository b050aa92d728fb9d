/**
 * Every SQL statement on the batch tables: `batches` (the counters, the callbacks) and
 * `batch_executions` (one row per member not yet terminal). Each statement that moves the
 * counters also inserts or deletes the rows they count, so that
 * `total_jobs = rows + completed_jobs + failed_jobs` holds at every commit. A batch finishes in
 * the statement that makes `completed_jobs + failed_jobs = total_jobs` with no enqueue block
 * open: the counters live on the batch row, which every such statement locks, so of two
 * members finishing at once the second sees the first's counts and exactly one finishes it.
 *
 * Time: every statement takes `$now` and uses `coalesce($now, now())`.
 *
 * @since 0.1.0
 */
import { PgTypes } from "@effect/sql-pg"
import { Result } from "effect"
import type { SqlClient } from "effect/sql"

/** A batch row. */
export interface BatchRow {
  readonly id: string
  readonly description: string | null
  readonly properties: unknown
  readonly status: "pending" | "finished"
  readonly total_jobs: bigint
  readonly completed_jobs: bigint
  readonly failed_jobs: bigint
  readonly open_blocks: number
  readonly on_finish: unknown
  readonly on_success: unknown
  readonly on_failure: unknown
  readonly created_at: Date
  readonly last_enqueued_at: Date
  readonly finished_at: Date | null
  readonly callbacks_enqueued_at: Date | null
}

/** An execution row, as the sweep reads it. */
export interface ExecutionRow {
  readonly id: bigint
  readonly batch_id: string
  readonly queue: string
  readonly msg_id: bigint
  /** Older than the stall threshold (an unsent row may be un-counted). */
  readonly stale: boolean
}

/** What a member's end does to its batch's counters. */
export type ExecutionOutcome = "completed" | "failed" | "uncounted"

/** What a batch's callbacks are stored as. */
export interface CallbackColumns {
  readonly onFinish: string | null
  readonly onSuccess: string | null
  readonly onFailure: string | null
}

const typedArray = (values: ReadonlyArray<unknown>, oid: number): unknown =>
  Result.getOrThrow(PgTypes.array(values, oid))

const ROW = `id, description, properties, status, total_jobs, completed_jobs, failed_jobs, open_blocks,
  on_finish, on_success, on_failure, created_at, last_enqueued_at, finished_at, callbacks_enqueued_at`

/**
 * Builds the statements for one schema. Each function returns an Effect running one
 * statement, so that it joins the caller's transaction when one is open.
 */
export const makeBatchSql = (sql: SqlClient.SqlClient, schema: string) => {
  const batches = sql(`${schema}.batches`)
  const executions = sql(`${schema}.batch_executions`)
  const columns = sql.literal(ROW)
  const NOW = (now: Date | null) => sql`coalesce(${now}::timestamptz, now())`
  const ago = (ms: number, now: Date | null) => sql`${NOW(now)} - ${PgTypes.float8(ms)} * interval '1 millisecond'`

  const batchInsert = (p: {
    readonly id: string
    readonly description: string | null
    readonly properties: string
    readonly callbacks: CallbackColumns
    readonly now: Date | null
  }) =>
    sql<BatchRow>`INSERT INTO ${batches}
        (id, description, properties, on_finish, on_success, on_failure, created_at, last_enqueued_at)
      VALUES (${p.id}::uuid, ${p.description}, ${p.properties}::jsonb, ${p.callbacks.onFinish}::jsonb,
              ${p.callbacks.onSuccess}::jsonb, ${p.callbacks.onFailure}::jsonb, ${NOW(p.now)}, ${NOW(p.now)})
      RETURNING ${columns}`

  const batchGet = (id: string) => sql<BatchRow>`SELECT ${columns} FROM ${batches} WHERE id = ${id}::uuid`

  /** Opens an enqueue block: the batch cannot finish until it closes. Nothing when finished. */
  const batchOpenBlock = (id: string, now: Date | null) =>
    sql<{ readonly id: string }>`UPDATE ${batches}
      SET open_blocks = open_blocks + 1, last_enqueued_at = ${NOW(now)}
      WHERE id = ${id}::uuid AND status = 'pending'
      RETURNING id`

  /** Closes an enqueue block; the last one out finishes a batch whose members are all done. */
  const batchCloseBlock = (id: string, now: Date | null) =>
    sql<{ readonly status: "pending" | "finished" }>`UPDATE ${batches}
      SET open_blocks = open_blocks - 1,
          status = CASE WHEN open_blocks = 1 AND completed_jobs + failed_jobs = total_jobs
                        THEN 'finished' ELSE status END,
          finished_at = CASE WHEN open_blocks = 1 AND completed_jobs + failed_jobs = total_jobs
                             THEN ${NOW(now)} ELSE finished_at END
      WHERE id = ${id}::uuid AND status = 'pending' AND open_blocks > 0
      RETURNING status`

  /**
   * Joins `n` members: counts them, guarded on an unfinished batch (no row back: finished or
   * unknown), and reserves their execution ids, to carry in the messages' headers. Their rows
   * are written with the message ids, in the same transaction.
   */
  const batchJoin = (id: string, n: number, now: Date | null) =>
    sql<{ readonly id: bigint }>`WITH b AS (
        UPDATE ${batches} SET total_jobs = total_jobs + ${n}, last_enqueued_at = ${NOW(now)}
        WHERE id = ${id}::uuid AND status = 'pending'
        RETURNING id)
      SELECT nextval(${`${schema}.batch_execution_ids`}::regclass) AS id FROM b CROSS JOIN generate_series(1, ${n})`

  /** Writes the execution rows of sent members (ids from `batchJoin`). */
  const batchExecutionsInsert = (
    batchId: string,
    queue: string,
    ids: ReadonlyArray<bigint>,
    msgIds: ReadonlyArray<bigint>,
    now: Date | null
  ) =>
    sql`INSERT INTO ${executions} (id, batch_id, queue, msg_id, created_at)
      SELECT u.id, ${batchId}::uuid, ${queue}, u.msg_id, ${NOW(now)}
      FROM unnest(${typedArray(ids, PgTypes.OID.int8)}::int8[], ${typedArray(msgIds, PgTypes.OID.int8)}::int8[])
        AS u(id, msg_id)`

  /**
   * Ends members of one batch: deletes their execution rows and moves the counters by the
   * rows actually deleted (a second report of the same member changes nothing). Returns the
   * batch's new status when a row was deleted; `finished` means this statement finished it.
   */
  const batchRecordOutcomes = (
    batchId: string,
    ids: ReadonlyArray<bigint>,
    outcomes: ReadonlyArray<ExecutionOutcome>,
    now: Date | null
  ) => {
    // the counters add up with this statement's members and no block is open: done
    const finishing = sql`b.open_blocks = 0
      AND b.completed_jobs + c.ok + b.failed_jobs + c.bad = b.total_jobs - c.gone`
    return sql<{ readonly status: "pending" | "finished" }>`WITH d AS (
        DELETE FROM ${executions} e
        USING unnest(${typedArray(ids, PgTypes.OID.int8)}::int8[], ${typedArray(outcomes, PgTypes.OID.text)}::text[])
          AS u(id, outcome)
        WHERE e.id = u.id AND e.batch_id = ${batchId}::uuid
        RETURNING u.outcome),
      c AS (
        SELECT count(*) FILTER (WHERE outcome = 'completed') AS ok,
               count(*) FILTER (WHERE outcome = 'failed') AS bad,
               count(*) FILTER (WHERE outcome = 'uncounted') AS gone
        FROM d)
      UPDATE ${batches} b
      SET completed_jobs = b.completed_jobs + c.ok,
          failed_jobs = b.failed_jobs + c.bad,
          total_jobs = b.total_jobs - c.gone,
          status = CASE WHEN ${finishing} THEN 'finished' ELSE b.status END,
          finished_at = CASE WHEN ${finishing} THEN ${NOW(now)} ELSE b.finished_at END
      FROM c
      WHERE b.id = ${batchId}::uuid AND b.status = 'pending' AND c.ok + c.bad + c.gone > 0
      RETURNING b.status`
  }

  /** Execution rows of pending batches after `afterId`, in id order (the sweep's pages). */
  const batchExecutionsPending = (afterId: bigint, limit: number, staleMs: number, now: Date | null) =>
    sql<ExecutionRow>`SELECT e.id, e.batch_id, e.queue, e.msg_id, e.created_at < ${ago(staleMs, now)} AS stale
      FROM ${executions} e JOIN ${batches} b ON b.id = e.batch_id AND b.status = 'pending'
      WHERE e.id > ${afterId}
      ORDER BY e.id
      LIMIT ${limit}`

  /** One batch's execution rows after `afterId`, in id order. */
  const batchExecutionsOf = (batchId: string, afterId: bigint, limit: number) =>
    sql<{ readonly id: bigint; readonly queue: string; readonly msg_id: bigint }>`SELECT id, queue, msg_id
      FROM ${executions} WHERE batch_id = ${batchId}::uuid AND id > ${afterId}
      ORDER BY id LIMIT ${limit}`

  /**
   * Repairs pending batches with no new member for the stall threshold whose enqueue blocks
   * never closed (their process died) or whose counters add up (made and never entered):
   * the blocks are closed and a batch whose members are all done finishes.
   */
  const batchesRepairStalled = (stallMs: number, limit: number, now: Date | null) =>
    sql<{ readonly id: string; readonly status: "pending" | "finished" }>`WITH s AS (
        SELECT id FROM ${batches}
        WHERE status = 'pending' AND last_enqueued_at < ${ago(stallMs, now)}
          AND (open_blocks > 0 OR completed_jobs + failed_jobs = total_jobs)
        ORDER BY last_enqueued_at
        LIMIT ${limit}
        FOR UPDATE SKIP LOCKED)
      UPDATE ${batches} b
      SET open_blocks = 0,
          status = CASE WHEN b.completed_jobs + b.failed_jobs = b.total_jobs THEN 'finished' ELSE 'pending' END,
          finished_at = CASE WHEN b.completed_jobs + b.failed_jobs = b.total_jobs THEN ${NOW(now)} END
      FROM s WHERE b.id = s.id
      RETURNING b.id, b.status`

  /** Finished batches whose callbacks were not sent yet. */
  const batchesCallbacksDue = (limit: number) =>
    sql<{ readonly id: string }>`SELECT id FROM ${batches}
      WHERE status = 'finished' AND callbacks_enqueued_at IS NULL
      ORDER BY finished_at LIMIT ${limit}`

  /** Claims a finished batch's callbacks (once: the caller sends them in the same transaction). */
  const batchClaimCallbacks = (id: string, now: Date | null) =>
    sql<BatchRow>`UPDATE ${batches} SET callbacks_enqueued_at = ${NOW(now)}
      WHERE id = ${id}::uuid AND status = 'finished' AND callbacks_enqueued_at IS NULL
      RETURNING ${columns}`

  /** Deletes finished batches older than the retention (and any row left of them). */
  const batchesDeleteFinished = (retentionMs: number, limit: number, now: Date | null) =>
    sql<{ readonly n: bigint }>`WITH d AS (
        DELETE FROM ${batches} WHERE id IN (
          SELECT id FROM ${batches}
          WHERE status = 'finished' AND finished_at < ${ago(retentionMs, now)}
          LIMIT ${limit})
        RETURNING id),
      strays AS (DELETE FROM ${executions} WHERE batch_id IN (SELECT id FROM d) RETURNING 1)
      SELECT count(*) AS n FROM d`

  return {
    batchInsert,
    batchGet,
    batchOpenBlock,
    batchCloseBlock,
    batchJoin,
    batchExecutionsInsert,
    batchRecordOutcomes,
    batchExecutionsPending,
    batchExecutionsOf,
    batchesRepairStalled,
    batchesCallbacksDue,
    batchClaimCallbacks,
    batchesDeleteFinished
  }
}

/** The statements of one schema. */
export type BatchSql = ReturnType<typeof makeBatchSql>
