/**
 * What an event is on the wire and in a handler: the envelope stored in every subscriber
 * queue's message, the `Event` a handler receives, the publish options, and the two context
 * references that travel with an event (current attributes, fair-share key).
 *
 * @since 0.1.0
 */
import { Context, type Duration, Schema } from "effect"
import type { FairShareKey as ConfigFairShareKey, EventFairShareInput } from "../Config.ts"

/** The job name of event messages: consumers are ordinary workers running this job. */
export const EVENT_JOB = "pgbus.event"

/** Whether a stored queue message is an event (a `pgbus.event` job message), e.g. to name its dead letters' source. */
export const isEventMessage = (message: unknown): boolean =>
  typeof message === "object" && message !== null && (message as { readonly job?: unknown }).job === EVENT_JOB

/**
 * The envelope of an event, the `payload` of its job message (`{ job: "pgbus.event", payload }`).
 * Snake case on the wire, like the dead-letter block, so other languages can read it.
 *
 * @category models
 */
export const EventEnvelope = Schema.Struct({
  event_id: Schema.String.check(Schema.isUUID()),
  routing_key: Schema.String,
  /** UTC ISO 8601, from the database's clock (or the test clock). */
  published_at: Schema.String,
  headers: Schema.optionalKey(Schema.Record(Schema.String, Schema.Unknown)),
  /** The user's payload, encoded with the event's Schema when it was declared with one. */
  payload: Schema.Unknown,
  /** Current attributes captured where the event was published. */
  context: Schema.optionalKey(Schema.Record(Schema.String, Schema.Unknown)),
  /** Fair-share key (and weight) resolved at publish. */
  fair_key: Schema.optionalKey(Schema.String),
  fair_weight: Schema.optionalKey(Schema.Number)
})
export type EventEnvelope = typeof EventEnvelope.Type

/**
 * An event as a handler receives it.
 *
 * @category models
 */
export interface Event<P> {
  /** The event's id (a UUID), shared by every delivery of it: the idempotency key. */
  readonly id: string
  readonly routingKey: string
  readonly publishedAt: Date
  readonly headers: Readonly<Record<string, unknown>>
  /** The payload, decoded with the subscriber's Schema when it has one. */
  readonly payload: P
  /** The attributes captured at publish (also provided as `CurrentAttributes` while the handler runs). */
  readonly context: Readonly<Record<string, unknown>>
  /** The subscriber running this handler. */
  readonly subscriber: string
  /** The queue it was delivered on. */
  readonly queue: string
  /** Delivery number of the message, 1 for the first. */
  readonly attempt: number
}

/** When an event is delivered and what it carries besides its payload. */
export interface PublishOptions {
  /** A JSON object copied to every delivery (`event.headers`). */
  readonly headers?: Readonly<Record<string, unknown>> | undefined
  /** Deliver after this long. */
  readonly delay?: Duration.Input | undefined
  /** Deliver at this time (the scheduled form; give `delay` or `at`). */
  readonly at?: Date | undefined
  /** The event's id (a UUID). Default: a new one; relays pass the stored id so a retry keeps it. */
  readonly eventId?: string | undefined
}

/**
 * What a publish did.
 *
 * @category models
 */
export interface PublishedEvent {
  readonly eventId: string
  readonly routingKey: string
  readonly publishedAt: Date
  /** The subscriber queues it was written to (none when no subscription matched). */
  readonly queues: ReadonlyArray<string>
}

/**
 * Request context that travels with events (and jobs): a JSON object captured by every
 * publish (and by `Outbox.publishEvent` at write time) into the envelope, and provided again
 * around each handler. Set it with `EventBus.withAttributes({ tenant: "acme" })`, or typed with
 * `RequestContext.make`. Defined with the jobs' request context (`src/Job/RequestContext.ts`).
 *
 * @category references
 */
export { CurrentAttributes } from "../Job/RequestContext.ts"

/** A fair-share key, or a key with its weight; `undefined` leaves the event unkeyed. */
export type FairShareKey = ConfigFairShareKey

/** What the fair-share resolver sees: the event as it is about to be written. */
export type FairShareInput = EventFairShareInput

/**
 * Tags each event with a fair-share key at publish (e.g. the tenant), carried in the envelope
 * (`fair_key`, `fair_weight`) and beside it in the message (`pgbus_fair_key`,
 * `pgbus_fair_weight`, what the fair read uses) to every subscriber queue, never inside the
 * payload. Unset by default: then the config's `eventFairShare` applies, if any. Providing it
 * overrides that resolver for the effect it is provided to.
 *
 * @category references
 */
export const FairShare = Context.Reference<((event: FairShareInput) => FairShareKey) | undefined>(
  "effect-pgbus/EventBus/FairShare",
  { defaultValue: () => undefined }
)
