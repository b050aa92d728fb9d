/**
 * Dead letters for operators, across every dead-letter queue: listed with filters (queue, error
 * class), shown, retried (back on the origin queue) or discarded, one at a time or in bulk on a
 * filter (at most 500 a call). An id is `<dlq>:<msg_id>`.
 *
 * @since 0.1.0
 */
import { Effect, Option, Schema } from "effect"
import { toDatabaseError } from "../Database.ts"
import { DEAD_LETTER_HEADER, DeadLetterBlock } from "../Queue/Message.ts"
import type { DeadLetterRow } from "../Queue/QueueQuerySql.ts"
import type { QueueInfo } from "../Queue/QueueStore.ts"
import {
  BULK_LIMIT,
  type Change,
  count,
  type Deps,
  decodeCursor,
  encodeCursor,
  iso,
  messageId,
  pageSize,
  type View
} from "./Deps.ts"
import type { BulkResult, DeadLetterDetail, DeadLetterPage, DeadLetterSummary } from "./Model.ts"
import { InvalidRequest, NotFound, type OperationsError } from "./OperationsError.ts"
import { fromQueueError, jobNameOf } from "./Queues.ts"
import { payloadView, textView } from "./Redact.ts"

/** Filters of a dead-letter listing or bulk verb. */
export interface DeadLetterFilter {
  /** A dead-letter queue, or the queue it serves. */
  readonly queue?: string | undefined
  /** The recorded error class. */
  readonly errorClass?: string | undefined
}

const decodeBlock = Schema.decodeUnknownOption(DeadLetterBlock)

const blockOf = (headers: unknown): DeadLetterBlock | undefined =>
  typeof headers === "object" && headers !== null
    ? Option.getOrUndefined(decodeBlock((headers as Record<string, unknown>)[DEAD_LETTER_HEADER]))
    : undefined

/** Parses `<dlq>:<msg_id>`. */
const parseId = (id: string) => {
  const match = /^([a-z][a-z0-9_]*):(\d{1,19})$/.exec(id.trim())
  if (!match)
    return Effect.fail(
      new InvalidRequest({ reason: `invalid dead-letter id ${JSON.stringify(id)}: expected <dlq>:<msg_id>` })
    )
  return Effect.map(messageId(match[2]!), (msgId) => ({ queue: match[1]!, msgId }))
}

/** The operators' dead-letter operations. */
export const makeDeadLetters = (deps: Deps, registered: Effect.Effect<ReadonlyArray<QueueInfo>, OperationsError>) => {
  const { store, queueSql } = deps

  /** The dead-letter queues a filter selects, by name. */
  const dlqsOf = (filter: DeadLetterFilter) =>
    Effect.gen(function* () {
      const all = yield* registered
      const dlqs = all.filter((q) => q.deadLetterOf !== undefined).sort((a, b) => (a.name < b.name ? -1 : 1))
      if (filter.queue === undefined) return dlqs
      const chosen = dlqs.filter((q) => q.name === filter.queue || q.name === `${filter.queue}_dlq`)
      if (chosen.length === 0) return yield* new NotFound({ kind: "queue", id: filter.queue })
      return chosen
    })

  const originOf = (dlq: QueueInfo) => (dlq.name.endsWith("_dlq") ? dlq.name.slice(0, -4) : null)

  const summaryOf = (dlq: QueueInfo, row: DeadLetterRow, payloads: boolean): DeadLetterSummary => {
    const block = blockOf(row.headers)
    return {
      id: `${dlq.name}:${row.msg_id}`,
      queue: dlq.name,
      origin: originOf(dlq),
      job: jobNameOf(row.message),
      attempts: block?.attempts ?? row.read_ct,
      enqueuedAt: iso(row.enqueued_at),
      deadLetteredAt: block?.dead_lettered_at ?? null,
      reason: block?.reason ?? null,
      errorClass: block?.error_class ?? null,
      errorMessage: textView(block?.error_message, payloads),
      retriesFromDlq: block?.retries_from_dlq ?? 0
    }
  }

  /** Dead letters in queue then id order, with the filter's total. */
  const deadLetters = (
    filter: DeadLetterFilter & { readonly cursor?: string | undefined; readonly limit?: number | undefined },
    view: View = {}
  ): Effect.Effect<DeadLetterPage, OperationsError> =>
    Effect.gen(function* () {
      const limit = yield* pageSize(filter.limit)
      const dlqs = yield* dlqsOf(filter)
      const errorClass = filter.errorClass ?? null
      const from = filter.cursor === undefined ? undefined : yield* decodeCursor(filter.cursor, 2)
      const afterId = from === undefined ? null : yield* messageId(from[1]!)
      const entries: Array<DeadLetterSummary> = []
      let total = 0
      let more = false
      for (const dlq of dlqs) {
        const [n] = yield* queueSql
          .deadLettersCount(dlq.physical, errorClass)
          .pipe(Effect.mapError(toDatabaseError(`read dead letters of ${dlq.name}`)))
        total += count(n?.n)
        if (from !== undefined && dlq.name < from[0]!) continue
        const want = limit + 1 - entries.length
        if (want <= 0) continue
        const rows = yield* queueSql
          .deadLettersList(dlq.physical, errorClass, from !== undefined && dlq.name === from[0] ? afterId : null, want)
          .pipe(Effect.mapError(toDatabaseError(`read dead letters of ${dlq.name}`)))
        for (const row of rows) entries.push(summaryOf(dlq, row, view.payloads === true))
      }
      if (entries.length > limit) {
        entries.length = limit
        more = true
      }
      const last = entries.at(-1)
      return {
        deadLetters: entries,
        next: more && last !== undefined ? encodeCursor(last.queue, last.id.split(":")[1]!) : null,
        total
      }
    })

  /** Finds the dead-letter queue of an id. */
  const locate = (id: string) =>
    Effect.gen(function* () {
      const { queue, msgId } = yield* parseId(id)
      const dlqs = yield* dlqsOf({})
      const dlq = dlqs.find((q) => q.name === queue)
      if (dlq === undefined) return yield* new NotFound({ kind: "dead letter", id })
      return { dlq, msgId }
    })

  /** One dead letter with its payload, headers and backtrace. */
  const deadLetter = (id: string, view: View = {}): Effect.Effect<DeadLetterDetail, OperationsError> =>
    Effect.gen(function* () {
      const { dlq, msgId } = yield* locate(id)
      const found = yield* store.get(dlq.name, msgId).pipe(Effect.mapError(fromQueueError(dlq.name)))
      if (Option.isNone(found)) return yield* new NotFound({ kind: "dead letter", id })
      const m = found.value
      const payloads = view.payloads === true
      const row: DeadLetterRow = {
        msg_id: m.msgId,
        read_ct: m.readCt,
        enqueued_at: m.enqueuedAt,
        message: m.message,
        headers: m.headers
      }
      const { [DEAD_LETTER_HEADER]: _block, ...headers } = m.headers
      return {
        ...summaryOf(dlq, row, payloads),
        backtrace: textView(blockOf(m.headers)?.backtrace, payloads),
        payload: payloadView(m.message, payloads),
        headers: payloadView(headers, payloads)
      }
    })

  const logAction = (what: string, change: Change, n: number) =>
    Effect.logInfo(`pgbus: ${what} ${n} dead letter(s) by ${change.actor}${change.reason ? `: ${change.reason}` : ""}`)

  /** Puts one dead letter back on its origin queue; its new message id. */
  const retryDeadLetter = (id: string, change: Change) =>
    Effect.gen(function* () {
      const { dlq, msgId } = yield* locate(id)
      const [newId] = yield* store.retryDeadLetters(dlq.name, [msgId]).pipe(Effect.mapError(fromQueueError(dlq.name)))
      if (newId === undefined) return yield* new NotFound({ kind: "dead letter", id })
      yield* logAction("retried", change, 1)
      return { id, queue: originOf(dlq) ?? dlq.name, messageId: String(newId) }
    })

  /** Deletes one dead letter. */
  const discardDeadLetter = (id: string, change: Change) =>
    Effect.gen(function* () {
      const { dlq, msgId } = yield* locate(id)
      const deleted = yield* store.delete(dlq.name, [msgId]).pipe(Effect.mapError(fromQueueError(dlq.name)))
      if (deleted === 0) return yield* new NotFound({ kind: "dead letter", id })
      yield* logAction("discarded", change, 1)
      return { id, discarded: true }
    })

  /** The targets of a bulk verb: explicit ids (at most 500), or the filter's first 500. */
  const targetsOf = (target: DeadLetterFilter & { readonly ids?: ReadonlyArray<string> | undefined }) =>
    Effect.gen(function* () {
      if (target.ids !== undefined) {
        if (target.ids.length > BULK_LIMIT) {
          return yield* new InvalidRequest({
            reason: `at most ${BULK_LIMIT} dead letters per call (got ${target.ids.length}); split the call or use a filter`
          })
        }
        const dlqs = yield* dlqsOf({})
        const byQueue = new Map<QueueInfo, Array<bigint>>()
        let unknown = 0
        for (const id of target.ids) {
          const { queue, msgId } = yield* parseId(id)
          const dlq = dlqs.find((q) => q.name === queue)
          if (dlq === undefined) unknown++
          else byQueue.set(dlq, [...(byQueue.get(dlq) ?? []), msgId])
        }
        return { byQueue, requested: target.ids.length, capped: false, unknown }
      }
      const dlqs = yield* dlqsOf(target)
      const byQueue = new Map<QueueInfo, Array<bigint>>()
      let found = 0
      for (const dlq of dlqs) {
        if (found > BULK_LIMIT) break
        const rows = yield* queueSql
          .deadLettersList(dlq.physical, target.errorClass ?? null, null, BULK_LIMIT + 1 - found)
          .pipe(Effect.mapError(toDatabaseError(`read dead letters of ${dlq.name}`)))
        if (rows.length > 0)
          byQueue.set(
            dlq,
            rows.map((r) => r.msg_id)
          )
        found += rows.length
      }
      const capped = found > BULK_LIMIT
      if (capped) {
        // drop the one past the cap (it only told that there are more)
        const last = [...byQueue.keys()].at(-1)!
        byQueue.get(last)!.pop()
      }
      return { byQueue, requested: Math.min(found, BULK_LIMIT), capped, unknown: 0 }
    })

  const bulk = (
    verb: "retry" | "discard",
    target: DeadLetterFilter & { readonly ids?: ReadonlyArray<string> | undefined },
    change: Change
  ): Effect.Effect<BulkResult, OperationsError> =>
    Effect.gen(function* () {
      const { byQueue, requested, capped, unknown } = yield* targetsOf(target)
      let moved = 0
      for (const [dlq, ids] of byQueue) {
        moved +=
          verb === "retry"
            ? (yield* store.retryDeadLetters(dlq.name, ids).pipe(Effect.mapError(fromQueueError(dlq.name)))).length
            : yield* store.delete(dlq.name, ids).pipe(Effect.mapError(fromQueueError(dlq.name)))
      }
      const alreadyMovedOn = requested - moved
      yield* logAction(verb === "retry" ? "retried" : "discarded", change, moved)
      const done = verb === "retry" ? "Retried" : "Discarded"
      return {
        requested,
        moved,
        alreadyMovedOn,
        failed: 0,
        capped,
        summary: `${done} ${moved}${alreadyMovedOn > 0 ? `; ${alreadyMovedOn} had already moved on` : ""}${unknown > 0 ? ` (${unknown} in no dead-letter queue)` : ""}${capped ? `; more match: call again` : ""}`
      }
    })

  return {
    deadLetters,
    deadLetter,
    retryDeadLetter,
    discardDeadLetter,
    retryDeadLetters: (target: Parameters<typeof bulk>[1], change: Change) => bulk("retry", target, change),
    discardDeadLetters: (target: Parameters<typeof bulk>[1], change: Change) => bulk("discard", target, change)
  }
}
