/**
 * Joining a batch: `batch.enqueue(effect)` opens a block (the batch cannot finish while it is
 * open), runs `effect` with the batch as the current membership, so that every job it
 * enqueues joins, and closes the block, finishing the batch when that was its last business.
 *
 * @since 0.1.0
 */
import { Cause, Effect, Exit } from "effect"
import { type DatabaseError, statementNow } from "../Database.ts"
import { BATCH_EXECUTION_HEADER, BATCH_ID_HEADER, type BatchMembership, CurrentBatch } from "../Job/BatchMembership.ts"
import type { BatchEntry } from "../Queue/QueueStore.ts"
import type { Batch } from "./Batch.ts"
import type { BatchCallbacks } from "./BatchCallbacks.ts"
import { type BatchContext, infoOf } from "./BatchContext.ts"
import type { BatchJoinError } from "./BatchError.ts"
import type { BatchRow } from "./BatchSql.ts"

/** Builds `batch.enqueue` and the batch handles that carry it. */
export const makeBatchJoin = (
  { store, statements, db, transactional, notJoinable }: BatchContext,
  { sendCallbacks }: BatchCallbacks
) => {
  // The guard, the messages and their rows commit together (see `transactional`).
  const membership = (id: string): BatchMembership => ({
    batchId: id,
    send: (queue: string, entries: ReadonlyArray<BatchEntry>) =>
      transactional(
        "join batch",
        Effect.gen(function* () {
          if (entries.length === 0) return [] as ReadonlyArray<bigint>
          const now = yield* statementNow
          // counted before the messages exist: a finished batch refuses before any send
          const joined = yield* statements.batchJoin(id, entries.length, now).pipe(db("join batch"))
          if (joined.length < entries.length) return yield* notJoinable(id)
          const executions = joined.map((r) => r.id)
          const ids = yield* store.sendBatch(
            queue,
            entries.map((entry, i) => ({
              ...entry,
              headers: { ...entry.headers, [BATCH_ID_HEADER]: id, [BATCH_EXECUTION_HEADER]: String(executions[i]) }
            }))
          )
          yield* statements.batchExecutionsInsert(id, queue, executions, ids, now).pipe(db("record batch members"))
          return ids
        })
      )
  })

  const closeBlock = (id: string) =>
    Effect.gen(function* () {
      const now = yield* statementNow
      const [row] = yield* statements.batchCloseBlock(id, now).pipe(db("close batch block"))
      if (row?.status !== "finished") return
      // the batch has finished either way: callbacks that fail to send now are sent by the sweep
      yield* sendCallbacks(id).pipe(
        Effect.catchCause((cause) =>
          Effect.logWarning(`pgbus: sending the callbacks of batch ${id} failed; the sweep will`, Cause.pretty(cause))
        )
      )
    })

  const enqueueIn =
    (id: string) =>
    <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | BatchJoinError | DatabaseError, R> =>
      Effect.uninterruptibleMask((restore) =>
        Effect.gen(function* () {
          const now = yield* statementNow
          const opened = yield* statements.batchOpenBlock(id, now).pipe(db("open batch block"))
          if (opened.length === 0) return yield* notJoinable(id)
          const exit = yield* Effect.exit(restore(Effect.provideService(effect, CurrentBatch, membership(id))))
          // closed whatever the effect did: an open block would hold the batch until the sweep
          const closed = yield* Effect.exit(closeBlock(id))
          if (Exit.isFailure(exit)) {
            if (Exit.isFailure(closed)) {
              yield* Effect.logWarning(`pgbus: closing a block of batch ${id} failed`, Cause.pretty(closed.cause))
            }
            return yield* Effect.failCause(exit.cause)
          }
          if (Exit.isFailure(closed)) return yield* Effect.failCause(closed.cause)
          return exit.value
        })
      ).pipe(Effect.withSpan("pgbus.batch.enqueue", { attributes: { batch_id: id } }, { captureStackTrace: false }))

  const handleOf = (row: BatchRow): Batch => ({ ...infoOf(row), enqueue: enqueueIn(row.id) })

  return { handleOf }
}

/** Batch handles: a row's figures and `enqueue`. */
export type BatchJoin = ReturnType<typeof makeBatchJoin>
