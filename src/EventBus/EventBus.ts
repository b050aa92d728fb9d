/**
 * The event bus: publish a routing key and a payload once; every subscription whose pattern
 * matches gets a job message (`pgbus.event`) on its queue, written in ONE statement in the
 * caller's transaction. Subscriptions live in a table, so a publisher that does not load the
 * handlers routes correctly; consumers are ordinary workers (see `Consumer.ts`).
 *
 * @since 0.1.0
 */
import { Clock, Context, Duration, Effect, Layer, Metric, Option, Schema, Semaphore } from "effect"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { PgBusConfig, type PgBusConfigShape } from "../Config.ts"
import { type DatabaseError, serverError, statementNow, toDatabaseError } from "../Database.ts"
import * as Input from "../Input.ts"
import { JobClient, physicalQueueOf, servedQueues, TRACEPARENT } from "../Job/JobClient.ts"
import {
  checkFairShare,
  type FairTag,
  fairFields,
  type InvalidFairShare,
  resolveFairShare
} from "../Queue/FairShare.ts"
import { type QueueError, QueueNotFound } from "../Queue/QueueError.ts"
import { type CreateOptions, QueueStore } from "../Queue/QueueStore.ts"
import {
  CurrentAttributes,
  EVENT_JOB,
  type EventEnvelope,
  FairShare,
  type FairShareInput,
  type PublishedEvent,
  type PublishOptions
} from "./Envelope.ts"
import {
  InvalidEventPayload,
  InvalidRoutingKey,
  InvalidSubscriberDefinition,
  type PublishError,
  type RegisterError
} from "./EventBusError.ts"
import { type FanOutTarget, makeEventBusSql, type SubscriptionRow } from "./EventBusSql.ts"
import type { AnySubscriber } from "./Subscription.ts"
import * as Topic from "./Topic.ts"

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
export {
  type AnySubscriber,
  type SubscribeOptions,
  type Subscriber,
  type SubscriberServices,
  subscribe
} from "./Subscription.ts"

const PUBLISH_OPTION_KEYS = ["headers", "delay", "at", "eventId"] as const
const EVENT_INPUT_KEYS = [...PUBLISH_OPTION_KEYS, "routingKey", "payload"] as const

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

/** Events published (each counted once, whatever its fan-out). */
export const eventsPublished = Metric.counter("pgbus_events_published_total", {
  description: "events published"
})

/** Messages written to subscriber queues by publishes (one per matching queue per event). */
export const eventDeliveries = Metric.counter("pgbus_event_deliveries_total", {
  description: "event messages written to subscriber queues"
})

/** How long a publisher trusts its copy of the subscriptions table. */
export const SUBSCRIPTION_CACHE_TTL = Duration.seconds(1)

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

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

/**
 * The fair-share tag of an event: from `EventBus.FairShare` when provided, else from the
 * config's `eventFairShare`; none when neither is set. A bad answer fails with `InvalidFairShare`.
 */
export const eventFairShare = (
  config: PgBusConfigShape,
  event: FairShareInput
): Effect.Effect<FairTag | undefined, InvalidFairShare> =>
  Effect.flatMap(FairShare, (provided) => {
    const resolver = provided ?? config.eventFairShare
    if (resolver === undefined) return Effect.succeed(undefined)
    return resolveFairShare(`event ${event.routingKey}`, () => resolver(event))
  })

/** A tag carried by an outbox entry (checked at write; one written by hand that breaks the rules is dropped). */
const relayedFairShare = (context: PrepareContext): FairTag | undefined => {
  if (context.fairKey === undefined) return undefined
  const checked = checkFairShare([context.fairKey, context.fairWeight ?? 1])
  return checked._tag === "Ok" ? checked.tag : undefined
}

/** How the bus creates a subscriber queue: with the fair index when `eventFairShare` is set. */
export const subscriberQueueOptions = (config: PgBusConfigShape): CreateOptions => ({
  fairIndex: config.eventFairShare !== undefined
})

const traceHeaders: Effect.Effect<Record<string, string>> = Effect.map(Effect.option(Effect.currentSpan), (span) =>
  Option.match(span, {
    onNone: () => ({}),
    onSome: (s) => ({ [TRACEPARENT]: `00-${s.traceId}-${s.spanId}-${s.sampled ? "01" : "00"}` })
  })
)

/**
 * Builds a publisher on one database: validation, routing through the (briefly cached)
 * subscriptions table, the fan-out statement, registration. `EventBus.layer` builds one on the
 * app's database; the outbox relay builds one on the bus's.
 */
export const makePublisher = (deps: PublisherDeps) =>
  Effect.gen(function* () {
    const { config, sql, store, ensureQueue } = deps
    const statements = makeEventBusSql(sql, config.schema)
    const ttlMs = Duration.toMillis(SUBSCRIPTION_CACHE_TTL)
    let cache:
      | {
          readonly loadedAt: number
          readonly rows: ReadonlyArray<SubscriptionRow>
          readonly byKey: Map<string, ReadonlyArray<string>>
        }
      | undefined
    const loading = yield* Semaphore.make(1)

    const db =
      (operation: string) =>
      <A>(effect: Effect.Effect<A, SqlError>): Effect.Effect<A, DatabaseError> =>
        Effect.mapError(effect, toDatabaseError(operation))

    const invalidate = Effect.sync(() => {
      cache = undefined
    })

    const loadSubscriptions = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      if (cache !== undefined && now - cache.loadedAt < ttlMs) return cache
      return yield* loading.withPermit(
        Effect.gen(function* () {
          const again = yield* Clock.currentTimeMillis
          if (cache !== undefined && again - cache.loadedAt < ttlMs) return cache
          const rows = yield* statements.subscriptionList().pipe(db("read subscriptions"))
          cache = { loadedAt: again, rows, byKey: new Map() }
          return cache
        })
      )
    })

    /** The subscriber queues (app-facing names) a routing key reaches. */
    const queuesFor = (routingKey: string) =>
      Effect.map(loadSubscriptions, (current) => {
        const known = current.byKey.get(routingKey)
        if (known) return known
        const queues = [
          ...new Set(current.rows.filter((r) => Topic.matches(r.pattern, routingKey)).map((r) => r.queue))
        ]
        if (current.byKey.size >= 10_000) current.byKey.clear()
        current.byKey.set(routingKey, queues)
        return queues as ReadonlyArray<string>
      })

    const routes = (routingKey: string) =>
      Effect.gen(function* () {
        const problem = Topic.routingKeyProblem(routingKey)
        if (problem !== undefined) return yield* new InvalidRoutingKey({ routingKey, reason: problem })
        return yield* queuesFor(routingKey)
      })

    const prepare = (input: EventInput, context?: PrepareContext) =>
      Effect.gen(function* () {
        if (!Input.isPlainObject(input)) {
          return yield* new InvalidEventPayload({ routingKey: "", issue: "an event must be an object" })
        }
        const { routingKey } = input
        const problem = Topic.routingKeyProblem(routingKey)
        if (problem !== undefined)
          return yield* new InvalidRoutingKey({ routingKey: String(routingKey), reason: problem })
        const invalid = (issue: string) => new InvalidEventPayload({ routingKey: String(routingKey), issue })
        const options = Input.optionsProblem(input, EVENT_INPUT_KEYS, "the event")
        if (options !== undefined) return yield* invalid(options)
        if (input.payload === undefined) return yield* invalid("the payload is not JSON (undefined)")
        const payloadProblem = Input.jsonProblem(input.payload, "payload")
        if (payloadProblem !== undefined) return yield* invalid(payloadProblem)
        if (input.eventId !== undefined && !UUID.test(input.eventId)) {
          return yield* invalid("eventId must be a UUID")
        }
        if (input.headers !== undefined) {
          const headersProblem = Input.headersProblem(input.headers)
          if (headersProblem !== undefined) return yield* invalid(headersProblem)
        }
        let delayMs = 0
        if (input.delay !== undefined) {
          const ms = Input.durationMillis(input.delay)
          if (ms === undefined) return yield* invalid("delay must be a finite, non-negative duration")
          delayMs = ms
        }
        if (input.at !== undefined) {
          if (!Input.isValidDate(input.at)) return yield* invalid("at must be a Date")
          if (input.delay !== undefined) return yield* invalid("give either delay or at, not both")
        }
        const attributes = context?.attributes ?? (yield* CurrentAttributes)
        const trace = yield* traceHeaders
        const headers = { ...input.headers, ...trace }
        // a relay carries the tag resolved when the entry was written; a direct publish resolves it now
        const tag =
          context === undefined
            ? yield* eventFairShare(config, {
                routingKey,
                payload: input.payload,
                headers: input.headers ?? {},
                attributes
              })
            : relayedFairShare(context)
        const eventId = input.eventId ?? crypto.randomUUID()
        const envelope: EventEnvelope = {
          event_id: eventId,
          routing_key: routingKey,
          published_at: "",
          ...(Object.keys(headers).length > 0 ? { headers } : {}),
          payload: input.payload,
          ...(Object.keys(attributes).length > 0 ? { context: attributes } : {}),
          ...(tag !== undefined ? { fair_key: tag.key } : {}),
          ...(tag !== undefined && tag.weight !== 1 ? { fair_weight: tag.weight } : {})
        }
        // the tag also sits beside the envelope, where the fair read and its index look
        const json = Input.storableJson({ job: EVENT_JOB, payload: envelope, ...fairFields(tag) })
        if (json.problem !== undefined) {
          return yield* invalid(`the payload, headers or attributes cannot be stored: ${json.problem}`)
        }
        const message = json.text
        if (message.length * 3 > config.maxPayloadSize) {
          const size = Buffer.byteLength(message, "utf8")
          if (size > config.maxPayloadSize) {
            return yield* invalid(`the envelope is ${size} bytes, over maxPayloadSize (${config.maxPayloadSize})`)
          }
        }
        return { eventId, routingKey, message, delayMs, at: input.at ?? null } satisfies PreparedEvent
      })

    /** Writes prepared events to their subscriber queues in one statement (none if nothing matched). */
    const send = (events: ReadonlyArray<PreparedEvent>) =>
      Effect.gen(function* () {
        if (events.length === 0) return [] as ReadonlyArray<PublishedEvent>
        const perEvent: Array<ReadonlyArray<string>> = []
        const byQueue = new Map<string, Array<number>>()
        for (let i = 0; i < events.length; i++) {
          const queues = yield* queuesFor(events[i]!.routingKey)
          perEvent.push(queues)
          for (const queue of queues) {
            const list = byQueue.get(queue)
            if (list) list.push(i + 1)
            else byQueue.set(queue, [i + 1])
          }
        }
        const now = yield* statementNow
        let publishedAt: Date
        if (byQueue.size === 0) {
          const [row] = yield* statements.clockNow(now).pipe(db("read the clock"))
          publishedAt = row?.now ?? new Date(0)
        } else {
          const targets: Array<FanOutTarget> = []
          for (const [queue, ordinals] of byQueue) {
            const physicalQueue = physicalQueueOf(config, { queue, priority: undefined })
            yield* ensureQueue(physicalQueue)
            const name = yield* store.validateName(physicalQueue)
            targets.push({ physical: name.physical, ordinals })
          }
          const rows = yield* statements.eventFanOut(events, targets, store.messageCtes, now).pipe(
            Effect.mapError((error): QueueError => {
              // a queue dropped since this process created it
              if (serverError(error).code === "42P01")
                return new QueueNotFound({ queue: [...byQueue.keys()].join(",") })
              return toDatabaseError("publish events")(error)
            })
          )
          publishedAt = rows[0]?.published_at ?? new Date(0)
          yield* Metric.update(
            eventDeliveries,
            [...byQueue.values()].reduce((n, list) => n + list.length, 0)
          )
        }
        yield* Metric.update(eventsPublished, events.length)
        return events.map(
          (e, i): PublishedEvent => ({
            eventId: e.eventId,
            routingKey: e.routingKey,
            publishedAt,
            queues: perEvent[i]!
          })
        )
      })

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

    const register = (subscribers: ReadonlyArray<AnySubscriber>) =>
      Effect.gen(function* () {
        if (subscribers.length === 0) return
        const names = new Set<string>()
        for (const s of subscribers) {
          if (names.has(s.name)) {
            return yield* new InvalidSubscriberDefinition({
              subscriber: s.name,
              reason:
                s.name === s.pattern
                  ? `two subscribers are registered with this name: a subscriber without a \`name\` is named by its pattern (${s.pattern}), so two unnamed subscribers of one pattern collide; give each a \`name\` (its identity: the subscription row and idempotency records)`
                  : "two subscribers are registered with this name (give one another `name`)"
            })
          }
          names.add(s.name)
        }
        for (const queue of new Set(subscribers.map((s) => s.queue))) {
          for (const physical of servedQueues(config, queue)) yield* ensureQueue(physical)
        }
        const now = yield* statementNow
        yield* statements
          .subscriptionUpsert(
            subscribers.map((s) => ({ handler: s.name, pattern: s.pattern, queue: s.queue })),
            now
          )
          .pipe(db("register subscriptions"))
        yield* invalidate
      }).pipe(Effect.withSpan("pgbus.event.register", { attributes: { subscribers: subscribers.length } }))

    const subscriptions = statements.subscriptionList().pipe(
      db("list subscriptions"),
      Effect.map((rows) =>
        rows.map(
          (r): Subscription => ({ name: r.handler, pattern: r.pattern, queue: r.queue, registeredAt: r.registered_at })
        )
      )
    )

    // a name PostgreSQL cannot store (not a string, a NUL) names no stored subscription
    const unsubscribe = (name: string) =>
      Input.textProblem(name) !== undefined
        ? Effect.succeed(false)
        : statements.subscriptionDelete(name).pipe(
            db("delete subscription"),
            Effect.tap(() => invalidate),
            Effect.map((rows) => rows.length > 0)
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
