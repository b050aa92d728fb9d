/**
 * The transactional outbox: `Outbox.publish(queue, payload)`, `Outbox.publishEvent(key, payload)`
 * and `Outbox.enqueue(job, payload)` write a row in the caller's transaction (the app's
 * database), and a poller relays committed rows to the bus: the same database by default, or
 * the one `busDatabaseUrl` names. Rows are claimed with `FOR UPDATE SKIP LOCKED`, so pollers
 * never relay one entry twice; an entry that fails stays for the next cycle.
 *
 * @since 0.1.0
 */
import { Context, type Duration, Effect, Layer } from "effect"
import type { SqlClient } from "effect/sql"
import type { PgBusConfig } from "../Config.ts"
import type { DatabaseError } from "../Database.ts"
import type { Job } from "../Job/Job.ts"
import type { EnqueueOptions, JobClient } from "../Job/JobClient.ts"
import type { InvalidPayload } from "../Job/JobError.ts"
import type { InvalidFairShare } from "../Queue/FairShare.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import { EventPublisher, encodePayload, type PublishableEvent } from "./EventBus.ts"
import type { InvalidEventPayload, InvalidRoutingKey } from "./EventBusError.ts"
import { makeOutboxContext } from "./OutboxContext.ts"
import { makeOutboxRelay } from "./OutboxRelay.ts"
import { makeOutboxRetention } from "./OutboxRetention.ts"
import { makeOutboxWrites } from "./OutboxWrites.ts"

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

export { outboxFailures, outboxPublished } from "./OutboxRelay.ts"

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
      const context = yield* makeOutboxContext
      const writes = makeOutboxWrites(context)
      const relay = makeOutboxRelay(context)
      const retention = makeOutboxRetention(context)
      const pending = context.statements.outboxPending().pipe(
        context.db("count outbox entries"),
        Effect.map((rows) => rows[0]?.n ?? 0)
      )
      const pollerRole: Effect.Effect<void> = context.config.outboxEnabled
        ? Effect.all([relay.relayLoop, retention.purgeLoop], { concurrency: "unbounded", discard: true }).pipe(
            Effect.annotateLogs({ role: "outbox" })
          )
        : Effect.void

      return Outbox.of({
        publish: writes.publishToQueue,
        publishEvent: writes.publishEvent,
        enqueue: writes.enqueue as Outbox["Service"]["enqueue"],
        runOnce: relay.runOnce,
        purge: retention.purge,
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
