/**
 * The event bus: publish a routing key and a payload once; every subscription whose pattern
 * matches gets a job message (`pgbus.event`) on its queue, written in ONE statement in the
 * caller's transaction. Subscriptions live in a table, so a publisher that does not load the
 * handlers routes correctly; consumers are ordinary workers (see `Consumer.ts`).
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig, type PgBusConfigShape } from "../Config.ts"
import type { DatabaseError } from "../Database.ts"
import * as Input from "../Input.ts"
import { JobClient } from "../Job/JobClient.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import { type CreateOptions, QueueStore } from "../Queue/QueueStore.ts"
import { CurrentAttributes, type PublishedEvent, type PublishOptions } from "./Envelope.ts"
import { InvalidEventPayload, type InvalidRoutingKey, type PublishError, type RegisterError } from "./EventBusError.ts"
import { makeSendEvents } from "./EventFanOut.ts"
import { makePrepareEvent, PUBLISH_OPTION_KEYS } from "./EventPreparation.ts"
import { makePublisherContext } from "./PublisherContext.ts"
import type { AnySubscriber } from "./Subscription.ts"
import { makeSubscriptionCache } from "./SubscriptionCache.ts"
import { makeSubscriptionTable } from "./SubscriptionTable.ts"

export {
  CurrentAttributes,
  EVENT_JOB,
  type Event,
  FairShare,
  type FairShareInput,
  type FairShareKey,
  type PublishedEvent,
  type PublishOptions
} from "./Envelope.ts"
export { eventDeliveries, eventsPublished } from "./EventFanOut.ts"
export { eventFairShare } from "./EventPreparation.ts"
export {
  type AnySubscriber,
  type SubscribeOptions,
  type Subscriber,
  type SubscriberServices,
  subscribe
} from "./Subscription.ts"
export { SUBSCRIPTION_CACHE_TTL } from "./SubscriptionCache.ts"

/** One event of `publishMany`. */
export interface EventInput extends PublishOptions {
  readonly routingKey: string
  /** A JSON value (already encoded when the event has a Schema). */
  readonly payload: unknown
}

/**
 * A stored subscription.
 *
 * @category models
 */
export interface Subscription {
  /** The subscriber's name. */
  readonly name: string
  readonly pattern: string
  readonly queue: string
  readonly registeredAt: Date
}

/** An event validated and serialised, ready for the fan-out statement. */
export interface PreparedEvent {
  readonly eventId: string
  readonly routingKey: string
  /** The job message's JSON text. */
  readonly message: string
  readonly delayMs: number
  readonly at: Date | null
}

/** Where a relay takes what a direct publish takes from the current context. */
export interface PrepareContext {
  readonly attributes?: Readonly<Record<string, unknown>> | undefined
  readonly fairKey?: string | undefined
  readonly fairWeight?: number | undefined
}

/** What the publisher runs on: the bus's database, queue store and queue creation. */
export interface PublisherDeps {
  readonly config: PgBusConfigShape
  readonly sql: SqlClient.SqlClient
  readonly store: QueueStore["Service"]
  readonly ensureQueue: (queue: string) => Effect.Effect<void, QueueError>
}

/** How the bus creates a subscriber queue: with the fair index when `eventFairShare` is set. */
export const subscriberQueueOptions = (config: PgBusConfigShape): CreateOptions => ({
  fairIndex: config.eventFairShare !== undefined
})

/**
 * Builds a publisher on one database: validation, routing through the (briefly cached)
 * subscriptions table, the fan-out statement, registration. `EventBus.layer` builds one on the
 * app's database; the outbox relay builds one on the bus's.
 */
export const makePublisher = (deps: PublisherDeps) =>
  Effect.gen(function* () {
    const context = makePublisherContext(deps)
    const cache = yield* makeSubscriptionCache(context)
    const prepare = makePrepareEvent(deps.config)
    const send = makeSendEvents(context, cache)
    const { register, subscriptions, unsubscribe } = makeSubscriptionTable(context, cache)
    const { routes, invalidate } = cache

    const publishMany = (inputs: Iterable<EventInput>) =>
      Effect.gen(function* () {
        if (inputs === null || typeof inputs !== "object" || !(Symbol.iterator in inputs)) {
          return yield* new InvalidEventPayload({ routingKey: "", issue: "the events must be an iterable (an array)" })
        }
        const prepared = yield* Effect.forEach(inputs, (input) => prepare(input))
        return yield* send(prepared)
      }).pipe(Effect.withSpan("pgbus.event.publish_many", {}, { captureStackTrace: false }))

    const publish = (routingKey: string, payload: unknown, options?: PublishOptions) =>
      Effect.gen(function* () {
        const problem = Input.optionsProblem(options, PUBLISH_OPTION_KEYS, "publish options")
        if (problem !== undefined)
          return yield* new InvalidEventPayload({ routingKey: String(routingKey), issue: problem })
        const prepared = yield* prepare({ ...options, routingKey, payload })
        const [published] = yield* send([prepared])
        return published!
      }).pipe(
        Effect.withSpan(
          "pgbus.event.publish",
          { attributes: { routing_key: routingKey } },
          { captureStackTrace: false }
        )
      )

    return { prepare, send, publish, publishMany, routes, register, subscriptions, unsubscribe, invalidate }
  })

/** A publisher on one database. */
export type Publisher = Effect.Success<ReturnType<typeof makePublisher>>

/**
 * The publisher on the app's database, shared by `EventBus` and the outbox relay so that one
 * process has one copy of the subscriptions (a registration here is seen at once by both).
 *
 * @category services
 */
export class EventPublisher extends Context.Service<EventPublisher, Publisher>()("effect-pgbus/EventPublisher") {
  /** The publisher on the app's database. */
  static readonly layer: Layer.Layer<
    EventPublisher,
    never,
    PgBusConfig | SqlClient.SqlClient | QueueStore | JobClient
  > = Layer.effect(
    EventPublisher,
    Effect.gen(function* () {
      const config = yield* PgBusConfig
      const sql = yield* SqlClient.SqlClient
      const store = yield* QueueStore
      const jobs = yield* JobClient
      const options = subscriberQueueOptions(config)
      return yield* makePublisher({ config, sql, store, ensureQueue: (queue) => jobs.ensureQueue(queue, options) })
    })
  )
}

/**
 * The event bus service: publishing, routing, registration.
 *
 * @category services
 */
export class EventBus extends Context.Service<
  EventBus,
  {
    /** Publishes one event (joins the caller's transaction); `payload` is a JSON value. */
    readonly publish: (
      routingKey: string,
      payload: unknown,
      options?: PublishOptions
    ) => Effect.Effect<PublishedEvent, PublishError>
    /** Publishes many events in one statement, in order. */
    readonly publishMany: (events: Iterable<EventInput>) => Effect.Effect<ReadonlyArray<PublishedEvent>, PublishError>
    /** The subscriber queues a routing key reaches now (subscriptions cached for a second). */
    readonly routes: (routingKey: string) => Effect.Effect<ReadonlyArray<string>, InvalidRoutingKey | DatabaseError>
    /** Stores subscribers' subscriptions (by name: a renamed pattern or queue is rebound) and creates their queues. */
    readonly register: (subscribers: ReadonlyArray<AnySubscriber>) => Effect.Effect<void, RegisterError>
    /** Every stored subscription. */
    readonly subscriptions: Effect.Effect<ReadonlyArray<Subscription>, DatabaseError>
    /** Deletes a subscriber's subscription (a handler removed from the code); false if there was none. */
    readonly unsubscribe: (name: string) => Effect.Effect<boolean, DatabaseError>
  }
>()("effect-pgbus/EventBus") {
  /** The event bus on the app's database. */
  static readonly layer: Layer.Layer<EventBus, never, PgBusConfig | SqlClient.SqlClient | QueueStore | JobClient> =
    Layer.effect(
      EventBus,
      Effect.map(EventPublisher, (publisher) =>
        EventBus.of({
          publish: publisher.publish,
          publishMany: publisher.publishMany,
          routes: publisher.routes,
          register: publisher.register,
          subscriptions: publisher.subscriptions,
          unsubscribe: publisher.unsubscribe
        })
      )
    ).pipe(Layer.provide(EventPublisher.layer))
}

/** A declared event (`Event.make`) as `publish` needs it: its key and Schema. */
export interface PublishableEvent<P> {
  readonly routingKey: string
  readonly payload: Schema.ConstraintCodec<P, unknown>
}

/** Encodes a declared event's payload with its Schema; a failure writes nothing. */
export const encodePayload = <P>(event: PublishableEvent<P>, payload: P): Effect.Effect<unknown, InvalidEventPayload> =>
  Schema.encodeEffect(event.payload)(payload).pipe(
    Effect.mapError((error) => new InvalidEventPayload({ routingKey: event.routingKey, issue: error.message }))
  )

/**
 * Publishes an event in the caller's transaction: a routing key and a JSON payload, or a
 * declared event (`Event.make`) and a payload its Schema encodes.
 */
export const publish: {
  <P>(
    event: PublishableEvent<P>,
    payload: P,
    options?: PublishOptions
  ): Effect.Effect<PublishedEvent, PublishError, EventBus>
  (
    routingKey: string,
    payload: unknown,
    options?: PublishOptions
  ): Effect.Effect<PublishedEvent, PublishError, EventBus>
} = (
  target: string | PublishableEvent<unknown>,
  payload: unknown,
  options?: PublishOptions
): Effect.Effect<PublishedEvent, PublishError, EventBus> =>
  typeof target === "string"
    ? EventBus.use((bus) => bus.publish(target, payload, options))
    : Effect.flatMap(encodePayload(target, payload), (encoded) =>
        EventBus.use((bus) => bus.publish(target.routingKey, encoded, options))
      )

/** Publishes many events (JSON payloads) in one statement. */
export const publishMany = (
  events: Iterable<EventInput>
): Effect.Effect<ReadonlyArray<PublishedEvent>, PublishError, EventBus> =>
  EventBus.use((bus) => bus.publishMany(events))

/** Registers subscribers outside a `Registry` (a publisher-only process that knows the handlers' queues). */
export const register = (subscribers: ReadonlyArray<AnySubscriber>): Effect.Effect<void, RegisterError, EventBus> =>
  EventBus.use((bus) => bus.register(subscribers))

/** Every stored subscription (what publishers route by). */
export const subscriptions: Effect.Effect<ReadonlyArray<Subscription>, DatabaseError, EventBus> = EventBus.use(
  (bus) => bus.subscriptions
)

/** Deletes a subscriber's stored subscription (a handler removed from the code); false if there was none. */
export const unsubscribe = (name: string): Effect.Effect<boolean, DatabaseError, EventBus> =>
  EventBus.use((bus) => bus.unsubscribe(name))

/** Runs `effect` with these attributes added to the current ones: publishes inside carry them to handlers. */
export const withAttributes =
  (attributes: Readonly<Record<string, unknown>>) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.flatMap(CurrentAttributes, (current) =>
      Effect.provideService(effect, CurrentAttributes, { ...current, ...attributes })
    )
