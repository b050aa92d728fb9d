/**
 * The transactional outbox: `Outbox.publish(queue, payload)`, `Outbox.publishEvent(key, payload)`
 * and `Outbox.enqueue(job, payload)` write a row in the caller's transaction (the app's
 * database), and a poller relays committed rows to the bus: the same database by default, or
 * the one `busDatabaseUrl` names. Rows are claimed with `FOR UPDATE SKIP LOCKED`, so pollers
 * never relay one entry twice; an entry that fails stays for the next cycle.
 *
 * @since 0.1.0
 */
import { Cause, Context, Duration, Effect, Layer, Metric, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { effectivePoolSize, PgBusConfig, type PgBusConfigShape } from "../Config.ts"
import * as Database from "../Database.ts"
import { type DatabaseError, statementNow, toDatabaseError, withTransaction } from "../Database.ts"
import type { Job } from "../Job/Job.ts"
import {
  type EnqueueOptions,
  JobClient,
  jobFairShare,
  logicalQueueOf,
  physicalQueueOf,
  type TaggedEnvelope
} from "../Job/JobClient.ts"
import { InvalidPayload } from "../Job/JobError.ts"
import { fairFields, type InvalidFairShare } from "../Queue/FairShare.ts"
import { Notifier } from "../Queue/Notifier.ts"
import { InvalidMessage, PayloadTooLarge, type QueueError } from "../Queue/QueueError.ts"
import { type BatchEntry, QueueStore } from "../Queue/QueueStore.ts"
import { CurrentAttributes } from "./Envelope.ts"
import {
  EventPublisher,
  encodePayload,
  eventFairShare,
  makePublisher,
  type PreparedEvent,
  type PublishableEvent,
  type Publisher,
  subscriberQueueOptions
} from "./EventBus.ts"
import { InvalidEventPayload, InvalidRoutingKey } from "./EventBusError.ts"
import { makeOutboxSql, type OutboxRow } from "./OutboxSql.ts"
import * as Topic from "./Topic.ts"

/** Options of an outbox write to a queue. */
export interface OutboxSendOptions {
  /** A JSON object stored as the message's headers. */
  readonly headers?: Readonly<Record<string, unknown>> | undefined
  /** Visible on the bus this long after the write (an absolute time is stored). */
  readonly delay?: Duration.Input | undefined
  /** Visible on the bus at this time. */
  readonly at?: Date | undefined
}

/** Options of an outbox event. */
export interface OutboxEventOptions {
  /** A JSON object copied to every delivery. */
  readonly headers?: Readonly<Record<string, unknown>> | undefined
  /** The event's id (a UUID); default a new one, kept across relays. */
  readonly eventId?: string | undefined
}

/**
 * A written entry.
 *
 * @category models
 */
export interface OutboxEntry {
  readonly id: bigint
  /** For events: the id every delivery will carry. */
  readonly eventId: string | undefined
}

/**
 * What one poll cycle did.
 *
 * @category models
 */
export interface OutboxReport {
  readonly claimed: number
  readonly published: number
  /** Entries that failed this cycle; they stay for the next one. */
  readonly failed: ReadonlyArray<{ readonly id: bigint; readonly error: string }>
}

/** Errors of an outbox write. */
export type OutboxWriteError = InvalidRoutingKey | InvalidEventPayload | InvalidPayload | InvalidFairShare | QueueError

/** Outbox entries relayed to the bus. */
export const outboxPublished = Metric.counter("pgbus_outbox_published_total", {
  description: "outbox entries relayed to the bus"
})

/** Outbox relay attempts that failed (the entry stays for the next cycle). */
export const outboxFailures = Metric.counter("pgbus_outbox_failures_total", {
  description: "outbox entries that failed to relay (retried next cycle)"
})

/** Published entries are purged at most this often. */
const PURGE_EVERY = Duration.minutes(10)
const PURGE_BATCH = 5_000

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

const isObject = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

const jsonText = (value: unknown): string | undefined => {
  try {
    return value === undefined ? undefined : JSON.stringify(value)
  } catch {
    return undefined
  }
}

const describe = (error: unknown): string => {
  if (typeof error === "object" && error !== null && "message" in error && typeof error.message === "string") {
    const tag = "_tag" in error && typeof error._tag === "string" ? `${error._tag}: ` : ""
    return `${tag}${error.message}`.slice(0, 1_000)
  }
  return String(error).slice(0, 1_000)
}

/** Where relayed entries go: a publisher and a queue store on the bus's database. */
interface Bus {
  readonly sameDatabase: boolean
  readonly publisher: Publisher
  readonly store: QueueStore["Service"]
  readonly ensureQueue: (queue: string) => Effect.Effect<void, QueueError>
}

/**
 * The services on the bus's own database, built apart (`Layer.fresh`) so that nothing is
 * shared with the app's pool. Its notifier opens no LISTEN connection: the relay only sends.
 */
const busLayer = (config: PgBusConfigShape, url: NonNullable<PgBusConfigShape["busDatabaseUrl"]>) =>
  Layer.fresh(
    JobClient.layer.pipe(
      Layer.provideMerge(QueueStore.layer),
      Layer.provideMerge(Notifier.layer),
      Layer.provideMerge(Database.layer),
      Layer.provideMerge(
        Layer.succeed(PgBusConfig, {
          ...config,
          databaseUrl: url,
          busDatabaseUrl: undefined,
          poolSize: Math.min(effectivePoolSize(config), 4)
        })
      )
    )
  )

/**
 * The outbox service.
 *
 * @category services
 */
export class Outbox extends Context.Service<
  Outbox,
  {
    /** Writes a message for `queue` in the caller's transaction. */
    readonly publish: (
      queue: string,
      payload: unknown,
      options?: OutboxSendOptions
    ) => Effect.Effect<OutboxEntry, OutboxWriteError>
    /** Writes an event in the caller's transaction (attributes and fair-share key captured now). */
    readonly publishEvent: (
      routingKey: string,
      payload: unknown,
      options?: OutboxEventOptions
    ) => Effect.Effect<OutboxEntry, OutboxWriteError>
    /** Writes a job in the caller's transaction (relayed to its queue like `Job.enqueue`). */
    readonly enqueue: <P>(
      job: Job<string, P, unknown, unknown, unknown>,
      payload: P,
      options?: Omit<EnqueueOptions, "delay" | "at"> & OutboxSendOptions
    ) => Effect.Effect<OutboxEntry, OutboxWriteError>
    /** One poll cycle: claims a batch, relays it, marks it published. */
    readonly runOnce: Effect.Effect<OutboxReport, DatabaseError>
    /** Deletes entries published longer than `outboxRetention` ago; returns how many. */
    readonly purge: Effect.Effect<number, DatabaseError>
    /** Entries not yet published. */
    readonly pending: Effect.Effect<number, DatabaseError>
    /**
     * The poller: runs `runOnce` every `outboxPollInterval` (at once again after a full batch)
     * and the purge every ten minutes, while `outboxEnabled`; returns at once when it is off.
     */
    readonly pollerRole: Effect.Effect<void>
  }
>()("effect-pgbus/Outbox") {
  /** The outbox on the app's database, relaying to the bus (the same database unless `busDatabaseUrl`). */
  static readonly layer: Layer.Layer<
    Outbox,
    DatabaseError,
    PgBusConfig | SqlClient.SqlClient | QueueStore | JobClient
  > = Layer.effect(
    Outbox,
    Effect.gen(function* () {
      const config = yield* PgBusConfig
      const sql = yield* SqlClient.SqlClient
      const store = yield* QueueStore
      const jobs = yield* JobClient
      const statements = makeOutboxSql(sql, config.schema)
      const db = (operation: string) => Effect.mapError(toDatabaseError(operation))

      // the same database: the process's one publisher, whose routing cache sees this
      // process's registrations at once
      const shared = yield* EventPublisher
      const bus: Bus = yield* config.busDatabaseUrl === undefined
        ? Effect.succeed({ sameDatabase: true, publisher: shared, store, ensureQueue: jobs.ensureQueue })
        : Effect.gen(function* () {
            const context = yield* Layer.build(busLayer(config, config.busDatabaseUrl!))
            const busConfig = Context.get(context, PgBusConfig)
            const busStore = Context.get(context, QueueStore)
            const busJobs = Context.get(context, JobClient)
            const subscriberQueues = subscriberQueueOptions(busConfig)
            const publisher = yield* makePublisher({
              config: busConfig,
              sql: Context.get(context, SqlClient.SqlClient),
              store: busStore,
              ensureQueue: (queue) => busJobs.ensureQueue(queue, subscriberQueues)
            })
            return { sameDatabase: false, publisher, store: busStore, ensureQueue: busJobs.ensureQueue }
          })

      // ---- writes (the app's transaction) -----------------------------------------------------

      const headersText = (queue: string, headers: OutboxSendOptions["headers"]) => {
        if (headers === undefined) return Effect.succeed(null)
        const text = isObject(headers) ? jsonText(headers) : undefined
        return text === undefined
          ? Effect.fail(new InvalidMessage({ queue, reason: "headers must be a JSON object" }))
          : Effect.succeed(text)
      }

      const schedule = (queue: string, options: OutboxSendOptions | undefined) => {
        if (options?.at !== undefined) {
          if (!(options.at instanceof Date) || Number.isNaN(options.at.getTime())) {
            return Effect.fail(new InvalidMessage({ queue, reason: "at must be a valid Date" }))
          }
          if (options.delay !== undefined) {
            return Effect.fail(new InvalidMessage({ queue, reason: "give either delay or at, not both" }))
          }
          return Effect.succeed({ delayMs: null, at: options.at })
        }
        if (options?.delay === undefined) return Effect.succeed({ delayMs: null, at: null })
        const d = Duration.fromInput(options.delay)
        if (Option.isNone(d) || !Duration.isFinite(d.value) || Duration.isNegative(d.value)) {
          return Effect.fail(new InvalidMessage({ queue, reason: "delay must be a finite, non-negative duration" }))
        }
        return Effect.succeed({ delayMs: Duration.toMillis(d.value), at: null })
      }

      const payloadText = (queue: string, payload: unknown) => {
        const text = jsonText(payload)
        if (text === undefined) {
          return Effect.fail(
            new InvalidMessage({ queue, reason: "the message is not JSON (undefined, a function or a bigint)" })
          )
        }
        const size = Buffer.byteLength(text, "utf8")
        if (size > config.maxPayloadSize)
          return Effect.fail(new PayloadTooLarge({ queue, size, limit: config.maxPayloadSize }))
        return Effect.succeed(text)
      }

      const insert = (entry: Parameters<typeof statements.outboxInsert>[0], eventId: string | undefined) =>
        Effect.gen(function* () {
          const now = yield* statementNow
          const [row] = yield* statements.outboxInsert(entry, now).pipe(db("write outbox entry"))
          return { id: row!.id, eventId } satisfies OutboxEntry
        })

      const publishToQueue = (queue: string, payload: unknown, options?: OutboxSendOptions) =>
        Effect.gen(function* () {
          yield* store.validateName(queue)
          const text = yield* payloadText(queue, payload)
          const headers = yield* headersText(queue, options?.headers)
          const when = yield* schedule(queue, options)
          return yield* insert(
            {
              kind: "queue",
              queue,
              routingKey: null,
              eventId: null,
              payload: text,
              headers,
              context: null,
              fairKey: null,
              fairWeight: null,
              ...when
            },
            undefined
          )
        }).pipe(Effect.withSpan("pgbus.outbox.publish", { attributes: { queue } }, { captureStackTrace: false }))

      const publishEvent = (routingKey: string, payload: unknown, options?: OutboxEventOptions) =>
        Effect.gen(function* () {
          const problem = Topic.routingKeyProblem(routingKey)
          if (problem !== undefined) return yield* new InvalidRoutingKey({ routingKey, reason: problem })
          const invalid = (issue: string) => new InvalidEventPayload({ routingKey, issue })
          if (options?.eventId !== undefined && !UUID.test(options.eventId))
            return yield* invalid("eventId must be a UUID")
          const text = jsonText(payload)
          if (text === undefined) return yield* invalid("the payload is not JSON (undefined, a bigint, a cycle)")
          if (Buffer.byteLength(text, "utf8") > config.maxPayloadSize) {
            return yield* invalid(`the payload is over maxPayloadSize (${config.maxPayloadSize})`)
          }
          let headers: string | null = null
          if (options?.headers !== undefined) {
            headers = isObject(options.headers) ? (jsonText(options.headers) ?? null) : null
            if (headers === null) return yield* invalid("headers must be a JSON object")
          }
          // captured here, inside the app's transaction, where the request's context is set
          const attributes = yield* CurrentAttributes
          const context = Object.keys(attributes).length > 0 ? (jsonText(attributes) ?? null) : null
          if (Object.keys(attributes).length > 0 && context === null)
            return yield* invalid("the attributes are not JSON")
          const tag = yield* eventFairShare(config, {
            routingKey,
            payload,
            headers: options?.headers ?? {},
            attributes
          })
          const eventId = options?.eventId ?? crypto.randomUUID()
          return yield* insert(
            {
              kind: "event",
              queue: null,
              routingKey,
              eventId,
              payload: text,
              headers,
              context,
              fairKey: tag?.key ?? null,
              fairWeight: tag === undefined || tag.weight === 1 ? null : tag.weight,
              delayMs: null,
              at: null
            },
            eventId
          )
        }).pipe(
          Effect.withSpan(
            "pgbus.outbox.publish_event",
            { attributes: { routing_key: routingKey } },
            { captureStackTrace: false }
          )
        )

      const enqueue = <P>(
        job: Job<string, P, unknown, unknown, unknown>,
        payload: P,
        options?: Omit<EnqueueOptions, "delay" | "at"> & OutboxSendOptions
      ) =>
        Effect.gen(function* () {
          const encoded = yield* Schema.encodeEffect(job.payload)(payload).pipe(
            Effect.mapError((error) => new InvalidPayload({ job: job.name, issue: error.message }))
          )
          const queue = physicalQueueOf(config, job, options)
          // resolved now, in the app's transaction, like an enqueue's
          const tag = yield* jobFairShare(config, job, payload, logicalQueueOf(config, job, options), options?.headers)
          return yield* publishToQueue(
            queue,
            { job: job.name, payload: encoded, ...fairFields(tag) } satisfies TaggedEnvelope,
            options
          )
        })

      // ---- relay ------------------------------------------------------------------------------

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

      const purge = Effect.gen(function* () {
        if (config.outboxRetention === undefined) return 0
        const retentionMs = Duration.toMillis(config.outboxRetention)
        let deleted = 0
        while (true) {
          const now = yield* statementNow
          const [row] = yield* statements.outboxPurge(retentionMs, PURGE_BATCH, now).pipe(db("purge outbox"))
          const n = row?.n ?? 0
          deleted += n
          if (n < PURGE_BATCH) return deleted
        }
      })

      const pending = statements.outboxPending().pipe(
        db("count outbox entries"),
        Effect.map((rows) => rows[0]?.n ?? 0)
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

      const purgeLoop = purge.pipe(
        Effect.tap((n) => (n > 0 ? Effect.logInfo(`pgbus: outbox retention deleted ${n} entries`) : Effect.void)),
        Effect.catchCause((cause) =>
          Cause.hasInterruptsOnly(cause)
            ? Effect.interrupt
            : Effect.logWarning("pgbus: outbox purge failed", Cause.pretty(cause))
        ),
        Effect.andThen(Effect.sleep(PURGE_EVERY)),
        Effect.forever
      )

      const pollerRole: Effect.Effect<void> = config.outboxEnabled
        ? Effect.all([relayLoop, purgeLoop], { concurrency: "unbounded", discard: true }).pipe(
            Effect.annotateLogs({ role: "outbox" })
          )
        : Effect.void

      return Outbox.of({
        publish: publishToQueue,
        publishEvent,
        enqueue: enqueue as Outbox["Service"]["enqueue"],
        runOnce,
        purge,
        pending,
        pollerRole
      })
    })
  ).pipe(Layer.provide(EventPublisher.layer))
}

/** Writes a message for `queue` in the caller's transaction, relayed by the poller. */
export const publish = (
  queue: string,
  payload: unknown,
  options?: OutboxSendOptions
): Effect.Effect<OutboxEntry, OutboxWriteError, Outbox> => Outbox.use((o) => o.publish(queue, payload, options))

/** Writes an event (a routing key and a JSON payload, or a declared event) in the caller's transaction. */
export const publishEvent: {
  <P>(
    event: PublishableEvent<P>,
    payload: P,
    options?: OutboxEventOptions
  ): Effect.Effect<OutboxEntry, OutboxWriteError, Outbox>
  (
    routingKey: string,
    payload: unknown,
    options?: OutboxEventOptions
  ): Effect.Effect<OutboxEntry, OutboxWriteError, Outbox>
} = (
  target: string | PublishableEvent<unknown>,
  payload: unknown,
  options?: OutboxEventOptions
): Effect.Effect<OutboxEntry, OutboxWriteError, Outbox> =>
  typeof target === "string"
    ? Outbox.use((o) => o.publishEvent(target, payload, options))
    : Effect.flatMap(encodePayload(target, payload), (encoded) =>
        Outbox.use((o) => o.publishEvent(target.routingKey, encoded, options))
      )

/** Writes a job in the caller's transaction, relayed to its queue by the poller. */
export const enqueue = <P>(
  job: Job<string, P, unknown, unknown, unknown>,
  payload: P,
  options?: Omit<EnqueueOptions, "delay" | "at"> & OutboxSendOptions
): Effect.Effect<OutboxEntry, OutboxWriteError, Outbox> => Outbox.use((o) => o.enqueue(job, payload, options))

/** One poll cycle (tests, the CLI). */
export const runOnce: Effect.Effect<OutboxReport, DatabaseError, Outbox> = Outbox.use((o) => o.runOnce)

/** Deletes published entries past the retention. */
export const purge: Effect.Effect<number, DatabaseError, Outbox> = Outbox.use((o) => o.purge)

/** The poller role for the supervisor: repeats `runOnce` while `outboxEnabled`. */
export const pollerRole: Effect.Effect<void, never, Outbox> = Outbox.use((o) => o.pollerRole)
