/**
 * Members' ends: recording archives and dead-letters against their batches (finishing a
 * batch and sending its callbacks when its last member ends), and ending a batch's members
 * without running them (test helpers, operators).
 *
 * @since 0.1.0
 */
import { Cause, Effect } from "effect"
import { statementNow } from "../Database.ts"
import type { MemberOutcome } from "../Job/BatchMembership.ts"
import type { BatchCallbacks } from "./BatchCallbacks.ts"
import { type BatchContext, SWEEP_PAGE } from "./BatchContext.ts"
import type { BatchCreation } from "./BatchCreate.ts"
import type { ExecutionOutcome } from "./BatchSql.ts"

/** Groups items by batch, in batch id order (one batch row locked at a time, always in that order). */
export const byBatch = <T extends { readonly batchId: string }>(items: ReadonlyArray<T>): Array<[string, Array<T>]> => {
  const groups = new Map<string, Array<T>>()
  for (const item of items) {
    const list = groups.get(item.batchId)
    if (list) list.push(item)
    else groups.set(item.batchId, [item])
  }
  // one batch row at a time, in id order: two workers never lock two batches in opposite orders
  return [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
}

/** Builds the recording of members' ends over the batch context. */
export const makeBatchOutcomes = (
  { store, statements, db }: BatchContext,
  { sendCallbacks }: BatchCallbacks,
  { find }: Pick<BatchCreation, "find">
) => {
  /** Records ends of one batch's members; true when this call finished the batch. */
  const recordBatch = (batchId: string, ends: ReadonlyArray<{ execution: bigint; outcome: ExecutionOutcome }>) =>
    Effect.gen(function* () {
      const now = yield* statementNow
      const [row] = yield* statements
        .batchRecordOutcomes(
          batchId,
          ends.map((e) => e.execution),
          ends.map((e) => e.outcome),
          now
        )
        .pipe(db("record batch outcomes"))
      if (row?.status !== "finished") return false
      yield* sendCallbacks(batchId)
      return true
    })

  const recordOutcomes = (outcomes: ReadonlyArray<MemberOutcome>) =>
    Effect.forEach(
      byBatch(outcomes),
      ([batchId, ends]) =>
        recordBatch(batchId, ends).pipe(
          Effect.catchCause((cause) =>
            Effect.logWarning(
              `pgbus: recording the end of ${ends.length} member(s) of batch ${batchId} failed; the batch sweep will repair it`,
              Cause.pretty(cause)
            )
          )
        ),
      { discard: true }
    ).pipe(Effect.withSpan("pgbus.batch.record", {}, { captureStackTrace: false }))

  const endMembers = (id: string, outcome: MemberOutcome["outcome"]) =>
    Effect.gen(function* () {
      yield* find(id)
      let ended = 0
      let finished = false
      let after = 0n
      while (true) {
        const rows = yield* statements.batchExecutionsOf(id, after, SWEEP_PAGE).pipe(db("read batch members"))
        if (rows.length === 0) break
        after = rows[rows.length - 1]!.id
        if (outcome === "completed") {
          const byQueue = new Map<string, Array<bigint>>()
          for (const row of rows) byQueue.set(row.queue, [...(byQueue.get(row.queue) ?? []), row.msg_id])
          for (const [queue, ids] of byQueue) yield* store.archive(queue, ids)
        } else {
          for (const row of rows) {
            yield* store.moveToDeadLetter(row.queue, row.msg_id, { source: "operator", reason: "manual" })
          }
        }
        ended += rows.length
        const done = yield* recordBatch(
          id,
          rows.map((r) => ({ execution: r.id, outcome }))
        )
        finished ||= done
      }
      return { ended, finished }
    }).pipe(Effect.withSpan("pgbus.batch.endMembers", { attributes: { batch_id: id } }, { captureStackTrace: false }))

  return { recordBatch, recordOutcomes, endMembers }
}

/** The recording of members' ends. */
export type BatchOutcomes = ReturnType<typeof makeBatchOutcomes>
