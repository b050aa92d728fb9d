/**
 * Operators' controls over a whole queue: pause, resume, purge (on each priority sub-queue of
 * the name), and the ordering keys kept blocked after their head was dead-lettered.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { Change, Deps } from "../Deps.ts"
import { NotFound } from "../OperationsError.ts"
import { fromQueueError } from "./QueueErrors.ts"
import type { QueueSummaries } from "./Summaries.ts"

/** Pause, resume, purge, and blocked ordering keys. */
export const makeQueueControls = (deps: Deps, summaries: QueueSummaries) => {
  const { store, states } = deps
  const { targetsOf, queue } = summaries

  /** Pauses a queue: no worker of any process claims from it within a second; what runs, runs on. */
  const pauseQueue = (name: string, change: Change & { readonly until?: Date | undefined }) =>
    Effect.gen(function* () {
      const { targets } = yield* targetsOf(name)
      yield* Effect.forEach(targets, (q) => states.pause(q.name, change).pipe(Effect.mapError(fromQueueError(q.name))))
      return yield* queue(name)
    })

  /** Resumes a paused queue and wakes its workers. */
  const resumeQueue = (name: string, change: Change) =>
    Effect.gen(function* () {
      const { targets } = yield* targetsOf(name)
      yield* Effect.forEach(targets, (q) => states.resume(q.name, change).pipe(Effect.mapError(fromQueueError(q.name))))
      return yield* queue(name)
    })

  /** Deletes every message of a queue (not its archive, not its dead letters); how many. */
  const purgeQueue = (name: string, change: Change) =>
    Effect.gen(function* () {
      const { targets } = yield* targetsOf(name)
      const purged = yield* Effect.forEach(targets, (q) =>
        store.purge(q.name).pipe(Effect.mapError(fromQueueError(q.name)))
      )
      const total = purged.reduce((n, p) => n + p, 0)
      yield* Effect.logWarning(
        `pgbus: queue ${name} purged by ${change.actor}: ${total} message(s) deleted${change.reason ? ` (${change.reason})` : ""}`
      )
      return { queue: name, purged: total }
    })

  /** The ordering keys of a queue kept blocked after their head was dead-lettered (`onDeadLetter: "block"`). */
  const blockedKeys = (queueName: string) =>
    store.outcomes.blockedKeys(queueName).pipe(
      Effect.map((keys) =>
        keys.map((k) => ({
          key: k.key,
          id: String(k.msgId),
          deadLetterId: k.deadLetterId === undefined ? null : String(k.deadLetterId),
          blockedAt: k.blockedAt
        }))
      ),
      Effect.mapError(fromQueueError(queueName))
    )

  /** Releases a blocked ordering key: its next job becomes the head. NotFound when it is not blocked. */
  const releaseKey = (queueName: string, key: string, change: Change) =>
    Effect.gen(function* () {
      const released = yield* store.outcomes.releaseKey(queueName, key).pipe(Effect.mapError(fromQueueError(queueName)))
      if (!released) return yield* new NotFound({ kind: "blocked key", id: `${queueName}:${key}` })
      yield* Effect.logInfo(
        `pgbus: ordering key ${key} of ${queueName} released by ${change.actor}${change.reason ? ` (${change.reason})` : ""}`
      )
      return { queue: queueName, key, released: true }
    })

  return { pauseQueue, resumeQueue, purgeQueue, blockedKeys, releaseKey }
}
