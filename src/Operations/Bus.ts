/**
 * The event bus, the outbox and batches for operators: subscribers with their queues' figures,
 * their handlers' processed-events records and whether a live consumer drains them; the events
 * waiting in subscriber queues; outbox entries by state; batches by status.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect } from "effect"
import type { BatchRow } from "../Batch/BatchSql.ts"
import { statementNow, toDatabaseError } from "../Database.ts"
import type { OutboxState } from "../EventBus/OutboxQuerySql.ts"
import type { makeCluster } from "./Cluster.ts"
import { serves } from "./Cluster.ts"
import {
  count,
  type Deps,
  decodeCursor,
  encodeCursor,
  iso,
  isoOrNull,
  messageId,
  pageSize,
  UUID,
  type View
} from "./Deps.ts"
import type { BatchPage, BatchView, EventsView, OutboxPage } from "./Model.ts"
import { InvalidRequest, NotFound, type OperationsError } from "./OperationsError.ts"
import type { makeQueues } from "./Queues.ts"
import { errorViewOf } from "./Queues.ts"
import { payloadView } from "./Redact.ts"

const field = (value: unknown, key: string): string | null =>
  typeof value === "object" && value !== null && typeof (value as Record<string, unknown>)[key] === "string"
    ? ((value as Record<string, unknown>)[key] as string)
    : null

const batchView = (r: BatchRow, stalled: boolean): BatchView => ({
  id: r.id,
  description: r.description,
  status: r.status,
  stalled,
  total: count(r.total_jobs),
  completed: count(r.completed_jobs),
  failed: count(r.failed_jobs),
  openBlocks: r.open_blocks,
  createdAt: iso(r.created_at),
  lastEnqueuedAt: iso(r.last_enqueued_at),
  finishedAt: isoOrNull(r.finished_at),
  callbacksSent: r.callbacks_enqueued_at !== null
})

/** The operators' event bus, outbox and batch reads. */
export const makeBus = (deps: Deps, queues: ReturnType<typeof makeQueues>, cluster: ReturnType<typeof makeCluster>) => {
  const { config, eventSql, outboxSql, batchSql, batchRows, queueSql } = deps

  /** Subscribers, and the events waiting in their queues (the oldest `limit`, optionally of one handler). */
  const events = (
    options: { readonly handler?: string | undefined; readonly limit?: number | undefined } = {},
    view: View = {}
  ): Effect.Effect<EventsView, OperationsError> =>
    Effect.gen(function* () {
      const limit = yield* pageSize(options.limit)
      const now = yield* statementNow
      const subs = yield* eventSql
        .subscriptionFigures(Duration.toMillis(config.visibilityTimeout), now)
        .pipe(Effect.mapError(toDatabaseError("read subscriptions")))
      const chosen = options.handler === undefined ? subs : subs.filter((s) => s.handler === options.handler)
      if (options.handler !== undefined && chosen.length === 0) {
        return yield* new InvalidRequest({ reason: `no subscriber ${options.handler}` })
      }
      const registered = yield* queues.registered
      const live = (yield* cluster.processes).filter((p) => p.status === "healthy")
      const subscriptions = yield* Effect.forEach(chosen, (s) =>
        Effect.gen(function* () {
          const q = registered.find((r) => r.name === s.queue)
          const dlq = registered.find((r) => r.name === `${s.queue}_dlq`)
          const f = q === undefined ? undefined : yield* queues.figuresOf(q)
          const dead = dlq === undefined ? 0 : count((yield* queues.figuresOf(dlq)).depth)
          return {
            handler: s.handler,
            pattern: s.pattern,
            queue: s.queue,
            pending: count(f?.depth),
            ready: count(f?.ready),
            running: count(f?.running),
            retrying: count(f?.retrying),
            deadLetters: dead,
            completed: count(s.completed),
            handling: count(s.handling),
            silent: count(s.silent),
            consumed: live.some((p) => serves(p, s.queue))
          }
        })
      )
      const pending: Array<EventsView["pending"][number]> = []
      const queueNames = [...new Set(chosen.map((s) => s.queue))]
      for (const name of queueNames) {
        if (pending.length >= limit) break
        const q = registered.find((r) => r.name === name)
        if (q === undefined) continue
        const rows = yield* queueSql
          .jobsList(q.physical, null, null, null, limit - pending.length, now)
          .pipe(Effect.mapError(toDatabaseError(`list events of ${name}`)))
        for (const row of rows) {
          const handler = field(row.message, "job")
          pending.push({
            queue: name,
            id: String(row.msg_id),
            eventId: field(row.message, "event_id"),
            routingKey: field(row.message, "routing_key"),
            handler,
            state: row.state,
            attempts: row.read_ct,
            enqueuedAt: iso(row.enqueued_at),
            lastError: errorViewOf(row.last_error, view.payloads === true),
            payload: payloadView((row.message as { payload?: unknown } | null)?.payload, view.payloads === true)
          })
        }
      }
      return { subscriptions, pending }
    })

  /** Outbox entries in id order, optionally of one state, with the counts by state. */
  const outbox = (
    options: {
      readonly state?: OutboxState | undefined
      readonly cursor?: string | undefined
      readonly limit?: number | undefined
    } = {},
    view: View = {}
  ): Effect.Effect<OutboxPage, OperationsError> =>
    Effect.gen(function* () {
      const limit = yield* pageSize(options.limit)
      const after = options.cursor === undefined ? null : yield* messageId((yield* decodeCursor(options.cursor, 1))[0]!)
      const rows = yield* outboxSql
        .outboxList(options.state ?? null, after, limit + 1)
        .pipe(Effect.mapError(toDatabaseError("list outbox entries")))
      const [c] = yield* Effect.flatMap(statementNow, (now) => outboxSql.outboxCounts(now)).pipe(
        Effect.mapError(toDatabaseError("count outbox entries"))
      )
      const page = rows.slice(0, limit)
      return {
        entries: page.map((r) => ({
          id: String(r.id),
          kind: r.kind,
          state: r.published_at !== null ? "published" : r.last_error !== null ? "failing" : "pending",
          target: r.kind === "queue" ? (r.queue ?? "") : (r.routing_key ?? ""),
          attempts: r.attempts,
          createdAt: iso(r.created_at),
          deliverAt: isoOrNull(r.deliver_at),
          publishedAt: isoOrNull(r.published_at),
          lastError: r.last_error === null ? null : view.payloads === true ? r.last_error : "[redacted]",
          payload: payloadView(r.payload, view.payloads === true)
        })),
        next: rows.length > limit ? encodeCursor(String(page.at(-1)!.id)) : null,
        counts: {
          pending: count(c?.pending),
          failing: count(c?.failing),
          published: count(c?.published),
          oldestPendingAgeMs: c?.oldest_pending_age_ms ?? null
        }
      }
    })

  const stallMs = Duration.toMillis(config.batchStallThreshold)

  /** Batches newest first, optionally of one status, with the counts. */
  const batches = (
    options: {
      readonly status?: "pending" | "finished" | undefined
      readonly cursor?: string | undefined
      readonly limit?: number | undefined
    } = {}
  ): Effect.Effect<BatchPage, OperationsError> =>
    Effect.gen(function* () {
      const limit = yield* pageSize(options.limit)
      const before =
        options.cursor === undefined
          ? null
          : yield* Effect.map(decodeCursor(options.cursor, 2), ([createdAt, id]) => ({
              createdAt: createdAt!,
              id: id!
            }))
      if (before !== null && !UUID.test(before.id)) return yield* new InvalidRequest({ reason: "invalid cursor" })
      const now = yield* statementNow
      const rows = yield* batchSql
        .batchList({ status: options.status ?? null, before, limit: limit + 1, stallMs, now })
        .pipe(Effect.mapError(toDatabaseError("list batches")))
      const [c] = yield* batchSql.batchCounts(stallMs, now).pipe(Effect.mapError(toDatabaseError("count batches")))
      const page = rows.slice(0, limit)
      const last = page.at(-1)
      return {
        batches: page.map((r) => batchView(r, r.stalled)),
        next: rows.length > limit && last !== undefined ? encodeCursor(last.cursor_at, last.id) : null,
        counts: { pending: count(c?.pending), stalled: count(c?.stalled), finished: count(c?.finished) }
      }
    })

  /** One batch. */
  const batch = (id: string): Effect.Effect<BatchView, OperationsError> =>
    Effect.gen(function* () {
      if (!UUID.test(id)) return yield* new NotFound({ kind: "batch", id })
      const [r] = yield* batchRows.batchGet(id).pipe(Effect.mapError(toDatabaseError("read batch")))
      if (r === undefined) return yield* new NotFound({ kind: "batch", id })
      const now = yield* Clock.currentTimeMillis
      return batchView(r, r.status === "pending" && now - r.last_enqueued_at.getTime() > stallMs)
    })

  return { events, outbox, batches, batch }
}
