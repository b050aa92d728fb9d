/**
 * The indexes a worker's reads need, built at its start when missing (CONCURRENTLY: writes go
 * on), one at a time: the order index of queues read in order, the fair index of fair queues.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { QueueStore } from "../../Queue/QueueStore.ts"

/** Builds the order index of queues read in order (CONCURRENTLY: writes go on), one at a time. */
export const ensureOrderIndexes = (store: QueueStore["Service"], queues: ReadonlyArray<string>) =>
  Effect.forEach(
    queues,
    (queue) =>
      store.ensureOrderIndex(queue).pipe(
        Effect.flatMap((status) =>
          status === "built"
            ? Effect.logInfo(`pgbus: built the order index of queue ${queue}`)
            : status === "invalid"
              ? Effect.logError(
                  `pgbus: the order index of queue ${queue} is INVALID (an interrupted build); ordered reads of it scan the table. Drop it (DROP INDEX CONCURRENTLY) and restart a worker to build it again`
                )
              : Effect.void
        ),
        Effect.catch((error) =>
          Effect.logWarning(`pgbus: could not build the order index of queue ${queue}`, error).pipe(
            Effect.annotateLogs({ queue })
          )
        )
      ),
    { discard: true }
  )

/**
 * Builds the fair index of queues served fairly that lack it (CONCURRENTLY: writes go on), one
 * at a time. An INVALID index (an interrupted build) is left alone: the log says how to drop it.
 */
export const ensureFairIndexes = (store: QueueStore["Service"], queues: ReadonlyArray<string>) =>
  Effect.forEach(
    queues,
    (queue) =>
      store.ensureFairIndex(queue).pipe(
        Effect.flatMap((status) =>
          status._tag === "built"
            ? Effect.logInfo(`pgbus: built the fair-share index of queue ${queue}`)
            : status._tag === "building"
              ? Effect.logInfo(`pgbus: the fair-share index of queue ${queue} is being built by another session`)
              : status._tag === "invalid"
                ? Effect.logError(
                    `pgbus: the fair-share index of queue ${queue} is INVALID (an interrupted build); fair reads of it scan the table until it is rebuilt. Run: ${status.drop} and restart a worker to build it again`
                  )
                : Effect.void
        ),
        Effect.catch((error) =>
          Effect.logWarning(`pgbus: could not build the fair-share index of queue ${queue}`, error)
        ),
        Effect.annotateLogs({ queue })
      ),
    { discard: true }
  )
