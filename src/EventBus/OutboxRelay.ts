/**
 * The outbox relay: one cycle claims a batch of committed entries (`FOR UPDATE SKIP LOCKED`),
 * sends them to the bus and marks them published, entry by entry when a group fails; the
 * loop repeats it while the poller role runs.
 *
 * @since 0.1.0
 */
import { Cause, Effect, Metric } from "effect"
import { statementNow, withTransaction } from "../Database.ts"
import type { BatchEntry } from "../Queue/QueueStore.ts"
import type { PreparedEvent } from "./EventBus.ts"
import type { OutboxReport } from "./Outbox.ts"
import { isObject, type OutboxContext } from "./OutboxContext.ts"
import type { OutboxRow } from "./OutboxSql.ts"

/** Outbox entries relayed to the bus. */
export const outboxPublished = Metric.counter("pgbus_outbox_published_total", {
  description: "outbox entries relayed to the bus"
})

/** Outbox relay attempts that failed (the entry stays for the next cycle). */
export const outboxFailures = Metric.counter("pgbus_outbox_failures_total", {
  description: "outbox entries that failed to relay (retried next cycle)"
})

const describe = (error: unknown): string => {
  if (typeof error === "object" && error !== null && "message" in error && typeof error.message === "string") {
    const tag = "_tag" in error && typeof error._tag === "string" ? `${error._tag}: ` : ""
    return `${tag}${error.message}`.slice(0, 1_000)
  }
  return String(error).slice(0, 1_000)
}

/** Builds the relay's cycle (`runOnce`) and its loop over the outbox's context. */
export const makeOutboxRelay = ({ config, sql, statements, db, bus }: OutboxContext) => {
  /** Runs a relay step in a savepoint when the bus is this database (its inserts roll back on failure). */
  const atomically = <A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A, unknown> =>
    bus.sameDatabase ? withTransaction(sql, effect) : effect

  const prepareEvent = (row: OutboxRow) =>
    bus.publisher.prepare(
      {
        routingKey: row.routing_key ?? "",
        payload: row.payload,
        ...(isObject(row.headers) ? { headers: row.headers } : {}),
        ...(row.event_id !== null ? { eventId: row.event_id } : {}),
        ...(row.deliver_at !== null ? { at: row.deliver_at } : {})
      },
      {
        attributes: isObject(row.context) ? row.context : {},
        fairKey: row.fair_key ?? undefined,
        fairWeight: row.fair_weight ?? undefined
      }
    )

  const sendEvents = (rows: ReadonlyArray<OutboxRow>) =>
    Effect.gen(function* () {
      const prepared: Array<PreparedEvent> = []
      for (const row of rows) prepared.push(yield* prepareEvent(row))
      yield* bus.publisher.send(prepared)
    })

  const sendToQueue = (queue: string, rows: ReadonlyArray<OutboxRow>) =>
    Effect.gen(function* () {
      yield* bus.ensureQueue(queue)
      const entries: Array<BatchEntry> = rows.map((row) => ({
        message: row.payload,
        ...(isObject(row.headers) ? { headers: row.headers } : {}),
        ...(row.deliver_at !== null ? { at: row.deliver_at } : {})
      }))
      yield* bus.store.sendBatch(queue, entries)
    })

  /**
   * Relays a group in one statement; if that fails, entry by entry, so one bad entry does
   * not hold back the rest. Returns the ids sent and the failures.
   */
  const relayGroup = (
    rows: ReadonlyArray<OutboxRow>,
    send: (rows: ReadonlyArray<OutboxRow>) => Effect.Effect<void, unknown>
  ) =>
    Effect.gen(function* () {
      const whole = yield* Effect.result(atomically(send(rows)))
      if (whole._tag === "Success")
        return { sent: rows.map((r) => r.id), failed: [] as Array<{ id: bigint; error: string }> }
      if (rows.length === 1) return { sent: [], failed: [{ id: rows[0]!.id, error: describe(whole.failure) }] }
      const sent: Array<bigint> = []
      const failed: Array<{ id: bigint; error: string }> = []
      for (const row of rows) {
        const one = yield* Effect.result(atomically(send([row])))
        if (one._tag === "Success") sent.push(row.id)
        else failed.push({ id: row.id, error: describe(one.failure) })
      }
      return { sent, failed }
    })

  const runOnce = withTransaction(
    sql,
    Effect.gen(function* () {
      const rows = yield* statements.outboxClaim(config.outboxBatchSize)
      if (rows.length === 0) return { claimed: 0, published: 0, failed: [] } satisfies OutboxReport
      const events = rows.filter((r) => r.kind === "event")
      const byQueue = new Map<string, Array<OutboxRow>>()
      for (const row of rows) {
        if (row.kind !== "queue" || row.queue === null) continue
        const list = byQueue.get(row.queue)
        if (list) list.push(row)
        else byQueue.set(row.queue, [row])
      }
      const sent: Array<bigint> = []
      const failed: Array<{ id: bigint; error: string }> = []
      if (events.length > 0) {
        const result = yield* relayGroup(events, sendEvents)
        sent.push(...result.sent)
        failed.push(...result.failed)
      }
      for (const [queue, list] of byQueue) {
        const result = yield* relayGroup(list, (group) => sendToQueue(queue, group))
        sent.push(...result.sent)
        failed.push(...result.failed)
      }
      const now = yield* statementNow
      if (sent.length > 0) yield* statements.outboxMarkPublished(sent, now)
      for (const f of failed) yield* statements.outboxRecordFailure(f.id, f.error, now)
      return { claimed: rows.length, published: sent.length, failed } satisfies OutboxReport
    })
  ).pipe(
    db("relay outbox"),
    Effect.tap((report) =>
      Effect.all([
        Metric.update(outboxPublished, report.published),
        Metric.update(outboxFailures, report.failed.length),
        report.failed.length === 0
          ? Effect.void
          : Effect.logWarning(
              `pgbus: ${report.failed.length} outbox entr${report.failed.length === 1 ? "y" : "ies"} failed to relay, retrying next cycle: ${report.failed
                .slice(0, 3)
                .map((f) => `#${f.id} ${f.error}`)
                .join("; ")}`
            )
      ])
    ),
    Effect.withSpan("pgbus.outbox.run_once", {}, { captureStackTrace: false })
  )

  const relayLoop = Effect.gen(function* () {
    while (true) {
      // any failure, a defect too, is logged and the next cycle polls again: the role never
      // ends while the supervisor runs (as the dispatcher's maintenance loops)
      const report = yield* runOnce.pipe(
        Effect.catchCause((cause) =>
          Cause.hasInterruptsOnly(cause)
            ? Effect.interrupt
            : Effect.as(Effect.logWarning("pgbus: outbox poll failed, retrying", Cause.pretty(cause)), {
                claimed: 0,
                published: 0,
                failed: []
              } satisfies OutboxReport)
        )
      )
      // a full batch means more may be waiting: poll again at once
      if (report.claimed < config.outboxBatchSize || report.failed.length > 0) {
        yield* Effect.sleep(config.outboxPollInterval)
      }
    }
  })

  return { runOnce, relayLoop }
}
