/**
 * Event-bus test modes (seed 002's "Testing"): `fake` captures published events in memory and
 * writes nothing; `inline` publishes for real, captures, and runs the matching subscribers at
 * once (a drain of each queue the event reached, through the real executor); `disabled` passes
 * through to the real bus. Assertions over what a block published.
 *
 * @since 0.1.0
 */
import { Clock, Context, Effect, Layer, Option, Ref } from "effect"
import type { Batches } from "../Batch/Batch.ts"
import type { PgBusConfig } from "../Config.ts"
import type { PublishedEvent, PublishOptions } from "../EventBus/Envelope.ts"
import { EventBus } from "../EventBus/EventBus.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import { Registry } from "../Registry.ts"
import { AssertionFailed, drainQueue, matches } from "./Jobs.ts"

/** How `publish` behaves under `layerEvents`. */
export type EventMode = "fake" | "inline" | "disabled"

/** An event a test published (its payload as stored: already encoded by its Schema). */
export interface CapturedEvent {
  readonly eventId: string
  readonly routingKey: string
  readonly payload: unknown
  readonly headers: Readonly<Record<string, unknown>> | undefined
  readonly publishedAt: Date
  /** The mode it was published under. */
  readonly mode: EventMode
}

/**
 * The events captured under `fake` and `inline`, and the current mode.
 *
 * @category services
 */
export class PublishedEvents extends Context.Service<
  PublishedEvents,
  {
    readonly all: Effect.Effect<ReadonlyArray<CapturedEvent>>
    readonly clear: Effect.Effect<void>
    readonly mode: Effect.Effect<EventMode>
    readonly setMode: (mode: EventMode) => Effect.Effect<void>
  }
>()("effect-pgbus/Testing/PublishedEvents") {}

/**
 * Replaces the `EventBus` of the layer below (`PgBus.layer`) with one that follows the mode
 * (`fake` by default). `inline` needs the `Registry` of the subscribers, built below it too.
 *
 * @category layers
 */
export const layerEvents = (
  mode: EventMode = "fake"
): Layer.Layer<EventBus | PublishedEvents, never, EventBus | QueueStore | PgBusConfig | Batches> =>
  Layer.effectContext(
    Effect.gen(function* () {
      const real = yield* EventBus
      const services = yield* Effect.context<QueueStore | PgBusConfig | Batches>()
      const registry = yield* Effect.serviceOption(Registry)
      const captured = yield* Ref.make<ReadonlyArray<CapturedEvent>>([])
      const current = yield* Ref.make<EventMode>(mode)

      const capture = (routingKey: string, payload: unknown, options: PublishOptions | undefined, as: EventMode) =>
        Effect.gen(function* () {
          const publishedAt = new Date(yield* Clock.currentTimeMillis)
          const eventId = options?.eventId ?? crypto.randomUUID()
          const event: CapturedEvent = {
            eventId,
            routingKey,
            payload,
            headers: options?.headers,
            publishedAt,
            mode: as
          }
          yield* Ref.update(captured, (all) => [...all, event])
          return event
        })

      const publish = (routingKey: string, payload: unknown, options?: PublishOptions) =>
        Effect.gen(function* () {
          const now = yield* Ref.get(current)
          if (now === "disabled") return yield* real.publish(routingKey, payload, options)
          if (now === "fake") {
            const event = yield* capture(routingKey, payload, options, now)
            return { eventId: event.eventId, routingKey, publishedAt: event.publishedAt, queues: [] } as PublishedEvent
          }
          if (Option.isNone(registry)) {
            return yield* Effect.die(new Error("inline events need the Registry of the subscribers below layerEvents"))
          }
          const published = yield* real.publish(routingKey, payload, options)
          yield* capture(routingKey, payload, { ...options, eventId: published.eventId }, now)
          for (const queue of published.queues) {
            yield* drainQueue(queue).pipe(
              Effect.provideService(Registry, registry.value),
              Effect.provide(services),
              Effect.orDie
            )
          }
          return published
        })

      const bus = EventBus.of({
        ...real,
        publish,
        publishMany: (events) =>
          Effect.forEach(Array.from(events), (e) =>
            publish(e.routingKey, e.payload, {
              ...(e.headers === undefined ? {} : { headers: e.headers }),
              ...(e.delay === undefined ? {} : { delay: e.delay }),
              ...(e.at === undefined ? {} : { at: e.at }),
              ...(e.eventId === undefined ? {} : { eventId: e.eventId })
            })
          )
      })
      const events = PublishedEvents.of({
        all: Ref.get(captured),
        clear: Ref.set(captured, []),
        mode: Ref.get(current),
        setMode: (next) => Ref.set(current, next)
      })
      return Context.make(EventBus, bus).pipe(Context.add(PublishedEvents, events))
    })
  )

/** Runs `effect` under another mode, then restores the one before. */
export const withEventMode =
  (mode: EventMode) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R | PublishedEvents> =>
    Effect.flatMap(PublishedEvents, (events) =>
      Effect.acquireUseRelease(
        Effect.tap(events.mode, () => events.setMode(mode)),
        () => effect,
        (before) => events.setMode(before)
      )
    )

/** Every event captured so far, oldest first. */
export const published: Effect.Effect<ReadonlyArray<CapturedEvent>, never, PublishedEvents> = Effect.flatMap(
  PublishedEvents,
  (events) => events.all
)

/** Forgets the captured events. */
export const clearPublished: Effect.Effect<void, never, PublishedEvents> = Effect.flatMap(
  PublishedEvents,
  (events) => events.clear
)

/** Which published events an assertion looks for: a routing key (or a declared event) and a payload that holds `payload`. */
export interface EventMatch {
  readonly routingKey?: string | { readonly routingKey: string } | undefined
  readonly payload?: unknown
}

const keyOf = (match: EventMatch) =>
  typeof match.routingKey === "object" ? match.routingKey.routingKey : match.routingKey

const select = (events: ReadonlyArray<CapturedEvent>, match: EventMatch) =>
  events.filter(
    (e) =>
      (keyOf(match) === undefined || e.routingKey === keyOf(match)) &&
      (match.payload === undefined || matches(e.payload, match.payload))
  )

const describe = (match: EventMatch, count?: number) =>
  `${count ?? "at least 1"} event(s)${keyOf(match) ? ` ${keyOf(match)}` : ""}${match.payload === undefined ? "" : ` with ${JSON.stringify(match.payload)}`}`

/** What `effect` published (captured while it ran). */
const during = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const events = yield* PublishedEvents
    const before = (yield* events.all).length
    const value = yield* effect
    return { value, events: (yield* events.all).slice(before) }
  })

/**
 * Runs `effect` and fails with `AssertionFailed` unless it published events that match (exactly
 * `count` of them, when given).
 */
export const assertPublished =
  (match: EventMatch & { readonly count?: number }) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | AssertionFailed, R | PublishedEvents> =>
    Effect.flatMap(during(effect), ({ value, events }) => {
      const found = select(events, match)
      const ok = match.count === undefined ? found.length > 0 : found.length === match.count
      return ok
        ? Effect.succeed(value)
        : Effect.fail(
            new AssertionFailed({
              expected: `${describe(match, match.count)} published`,
              found: `${found.length} matching of ${events.length}: ${events.map((e) => e.routingKey).join(", ") || "(none)"}`
            })
          )
    })

/** Runs `effect` and fails with `AssertionFailed` if it published an event that matches. */
export const assertNotPublished =
  (match: EventMatch) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | AssertionFailed, R | PublishedEvents> =>
    Effect.flatMap(during(effect), ({ value, events }) => {
      const found = select(events, match)
      return found.length === 0
        ? Effect.succeed(value)
        : Effect.fail(
            new AssertionFailed({
              expected: `no ${describe(match).replace(/^at least 1 /, "")} published`,
              found: JSON.stringify(found.map((e) => ({ routingKey: e.routingKey, payload: e.payload })))
            })
          )
    })
