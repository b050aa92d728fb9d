/**
 * A queue's optional read indexes, built on demand on a populated queue: the fair read's
 * (`q_<queue>_fair_idx`) and the ordered read's (`q_<queue>_order_idx`), CONCURRENTLY so that
 * writes go on. Their statements are QueueRegistrySql's and QueueOrderSql's.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { SqlError } from "effect/sql/SqlError"
import { serverError } from "../Database.ts"
import type { QueueError } from "./QueueError.ts"
import type * as QueueName from "./QueueName.ts"
import type { makeQueueOrderSql } from "./QueueOrderSql.ts"
import type { makeQueueSql } from "./QueueSql.ts"

/**
 * What `ensureFairIndex` found or did: the index was there (`ready`), was built now (`built`),
 * is being built by another session (`building`), or is INVALID (a build was interrupted) and
 * must be dropped by hand with `drop` before it is built again.
 */
export type FairIndexStatus =
  | { readonly _tag: "ready" }
  | { readonly _tag: "built" }
  | { readonly _tag: "building" }
  | { readonly _tag: "invalid"; readonly drop: string }

/** What the index builders need from the queue store. */
export interface QueueIndexesDeps {
  readonly statements: ReturnType<typeof makeQueueSql>
  readonly orderStatements: ReturnType<typeof makeQueueOrderSql>
  readonly validateName: (queue: string) => Effect.Effect<QueueName.QueueName, QueueError>
  readonly fail: (operation: string, queue: string) => (error: SqlError) => QueueError
}

/** Makes the queue store's `ensureFairIndex` and `ensureOrderIndex`. */
export const makeQueueIndexes = ({ statements, orderStatements, validateName, fail }: QueueIndexesDeps) => {
  const ensureFairIndex = (queue: string) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const state = statements
        .queueFairIndexState(name.physical)
        .pipe(Effect.mapError(fail("inspect the fair index of", queue)))
      const classify = (row: { readonly valid: boolean; readonly building: boolean }): FairIndexStatus =>
        row.valid
          ? { _tag: "ready" }
          : row.building
            ? { _tag: "building" }
            : { _tag: "invalid", drop: statements.fairIndexDropStatement(name.physical) }
      const [found] = yield* state
      if (found !== undefined) return classify(found)
      yield* statements.queueCreateFairIndexConcurrently(name.physical).pipe(
        // another session created it between the look and the build: its state says the rest
        Effect.catchIf(
          (error) => serverError(error).code === "42P07" || serverError(error).code === "23505",
          () => Effect.void
        ),
        Effect.mapError(fail("build the fair index of", queue))
      )
      const [after] = yield* state
      if (after === undefined || after.valid) return { _tag: "built" } satisfies FairIndexStatus
      return classify(after)
    }).pipe(Effect.withSpan("QueueStore.ensureFairIndex", { attributes: { queue } }))

  const ensureOrderIndex = (queue: string): Effect.Effect<"ready" | "built" | "invalid", QueueError> =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const [found] = yield* orderStatements
        .queueOrderIndexExists(name.physical)
        .pipe(Effect.mapError(fail("inspect the order index of", queue)))
      if (found !== undefined) return found.valid ? "ready" : "invalid"
      yield* orderStatements.queueCreateOrderIndexConcurrently(name.physical).pipe(
        // another session built it meanwhile
        Effect.catchIf(
          (error) => serverError(error).code === "42P07" || serverError(error).code === "23505",
          () => Effect.void
        ),
        Effect.mapError(fail("build the order index of", queue))
      )
      return "built"
    }).pipe(Effect.withSpan("QueueStore.ensureOrderIndex", { attributes: { queue } }))

  return { ensureFairIndex, ensureOrderIndex }
}
