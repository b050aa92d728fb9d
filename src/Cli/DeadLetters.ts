/**
 * Dead letters across every dead-letter queue, as the `pgbus dlq` commands see them: the
 * `<dlq_queue>:<msg_id>` id form, resolution of an id to one message, paging, retry, purge.
 * Everything goes through `QueueStore`; no SQL here.
 *
 * @since 0.1.0
 */
import { Effect, Option } from "effect"
import type { QueueError } from "../Queue/QueueError.ts"
import { type DeadLetter, type QueueInfo, QueueStore } from "../Queue/QueueStore.ts"
import { AmbiguousDeadLetter, InvalidDeadLetterId, UnknownDeadLetter, UsageError } from "./CliError.ts"

/** A dead-letter id as written on the command line. */
export interface DeadLetterId {
  /** The dead-letter queue, when the id names one. */
  readonly queue: string | undefined
  readonly msgId: bigint
}

/** A dead letter with the queue that holds it. */
export interface Located {
  readonly dlq: QueueInfo
  readonly message: DeadLetter
}

/** One page of `dlq list`. */
export interface Page {
  readonly entries: ReadonlyArray<Located>
  readonly total: number
  readonly queues: number
  readonly page: number
  readonly pages: number
}

const MAX_INT8 = 9_223_372_036_854_775_807n

/** The printable id of a dead letter: `<dlq_queue>:<msg_id>`. */
export const formatId = (queue: string, msgId: bigint): string => `${queue}:${msgId}`

/** Parses `<dlq_queue>:<msg_id>` or a bare `<msg_id>`. */
export const parseId = (text: string): Effect.Effect<DeadLetterId, InvalidDeadLetterId> => {
  const match = /^(?:([a-z][a-z0-9_]*):)?(\d{1,19})$/.exec(text.trim())
  if (!match) {
    return Effect.fail(new InvalidDeadLetterId({ id: text, reason: "expected <dlq_queue>:<msg_id> or <msg_id>" }))
  }
  const msgId = BigInt(match[2]!)
  if (msgId < 1n || msgId > MAX_INT8) {
    return Effect.fail(new InvalidDeadLetterId({ id: text, reason: "the message id is out of range" }))
  }
  return Effect.succeed({ queue: match[1], msgId })
}

/** The dead-letter queues, by name. */
export const deadLetterQueues: Effect.Effect<ReadonlyArray<QueueInfo>, QueueError, QueueStore> = Effect.gen(
  function* () {
    const store = yield* QueueStore
    const queues = yield* store.list
    return queues.filter((q) => q.deadLetterOf !== undefined).sort((a, b) => (a.name < b.name ? -1 : 1))
  }
)

/** The depth of each queue, in order. */
const depthsOf = (queues: ReadonlyArray<QueueInfo>): Effect.Effect<ReadonlyArray<number>, QueueError, QueueStore> =>
  QueueStore.use((store) => Effect.forEach(queues, (q) => Effect.map(store.metrics(q.name), (m) => m.depth)))

/** Finds the one dead letter an id names; fails when none (or, for a bare id, several) match. */
export const resolve = (
  text: string
): Effect.Effect<Located, QueueError | InvalidDeadLetterId | UnknownDeadLetter | AmbiguousDeadLetter, QueueStore> =>
  Effect.gen(function* () {
    const store = yield* QueueStore
    const id = yield* parseId(text)
    const dlqs = yield* deadLetterQueues
    if (id.queue !== undefined) {
      const dlq = dlqs.find((q) => q.name === id.queue)
      if (dlq === undefined) {
        const served = dlqs.find((q) => q.deadLetterOf === id.queue)
        return yield* new UnknownDeadLetter({
          id: text,
          hint:
            served !== undefined
              ? `${id.queue} is not a dead-letter queue; did you mean ${formatId(served.name, id.msgId)}?`
              : `${id.queue} is not a dead-letter queue`
        })
      }
      const found = yield* store.get(dlq.name, id.msgId)
      if (Option.isNone(found)) return yield* new UnknownDeadLetter({ id: text })
      return { dlq, message: store.deadLetterOf(found.value) }
    }
    const matches: Array<Located> = []
    for (const dlq of dlqs) {
      const found = yield* store.get(dlq.name, id.msgId)
      if (Option.isSome(found)) matches.push({ dlq, message: store.deadLetterOf(found.value) })
    }
    if (matches.length === 0) return yield* new UnknownDeadLetter({ id: text })
    if (matches.length > 1) {
      return yield* new AmbiguousDeadLetter({
        id: text,
        candidates: matches.map((m) => formatId(m.dlq.name, id.msgId))
      })
    }
    return matches[0]!
  })

/** Dead letters in queue-name then id order, one page at a time, with the total. */
export const page = (pageNumber: number, perPage: number): Effect.Effect<Page, QueueError | UsageError, QueueStore> =>
  Effect.gen(function* () {
    if (!Number.isInteger(pageNumber) || pageNumber < 1) {
      return yield* new UsageError({ reason: `--page must be an integer of at least 1 (got ${pageNumber})` })
    }
    if (!Number.isInteger(perPage) || perPage < 1 || perPage > 1000) {
      return yield* new UsageError({ reason: `--per-page must be an integer from 1 to 1000 (got ${perPage})` })
    }
    const store = yield* QueueStore
    const dlqs = yield* deadLetterQueues
    const depths = yield* depthsOf(dlqs)
    const total = depths.reduce((n, d) => n + d, 0)
    const entries: Array<Located> = []
    let skip = (pageNumber - 1) * perPage
    let remaining = perPage
    for (let i = 0; i < dlqs.length && remaining > 0; i++) {
      const dlq = dlqs[i]!
      const depth = depths[i] ?? 0
      if (skip >= depth) {
        skip -= depth
        continue
      }
      // browse pages by id only, so the skipped rows of this queue are read and dropped
      const rows = yield* store.browse(dlq.name, { limit: skip + remaining })
      const taken = rows.slice(skip)
      skip = 0
      for (const row of taken) entries.push({ dlq, message: store.deadLetterOf(row) })
      remaining -= taken.length
    }
    return {
      entries,
      total,
      queues: dlqs.length,
      page: pageNumber,
      pages: Math.max(1, Math.ceil(total / perPage))
    }
  })

/** Puts every dead letter of every dead-letter queue back on its origin queue; counts per queue. */
export const retryAll: Effect.Effect<
  ReadonlyArray<{ readonly dlq: QueueInfo; readonly retried: number }>,
  QueueError,
  QueueStore
> = Effect.gen(function* () {
  const store = yield* QueueStore
  const dlqs = yield* deadLetterQueues
  return yield* Effect.forEach(dlqs, (dlq) =>
    Effect.map(store.retryDeadLetters(dlq.name, "all"), (ids) => ({ dlq, retried: ids.length }))
  )
})

/** How many dead letters the dead-letter queues hold. */
export const count: Effect.Effect<number, QueueError, QueueStore> = Effect.gen(function* () {
  const depths = yield* depthsOf(yield* deadLetterQueues)
  return depths.reduce((n, d) => n + d, 0)
})

/** Deletes every dead letter of every dead-letter queue; counts per queue. */
export const purgeAll: Effect.Effect<
  ReadonlyArray<{ readonly dlq: QueueInfo; readonly purged: number }>,
  QueueError,
  QueueStore
> = Effect.gen(function* () {
  const store = yield* QueueStore
  const dlqs = yield* deadLetterQueues
  return yield* Effect.forEach(dlqs, (dlq) => Effect.map(store.purge(dlq.name), (purged) => ({ dlq, purged })))
})
