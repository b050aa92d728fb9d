/**
 * The errors of the event bus and the outbox, each documented with when it happens.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { DatabaseError } from "../Database.ts"
import type { InvalidFairShare } from "../Queue/FairShare.ts"
import type { QueueError } from "../Queue/QueueError.ts"

export { InvalidFairShare } from "../Queue/FairShare.ts"

/**
 * A routing key is empty, too long, has an empty segment or a wildcard. Raised before any SQL
 * (and thrown by `Event.make`, where the mistake is in code).
 *
 * @category errors
 */
export class InvalidRoutingKey extends Schema.TaggedError<InvalidRoutingKey>()("InvalidRoutingKey", {
  routingKey: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid routing key ${JSON.stringify(this.routingKey.slice(0, 80))}: ${this.reason}`
  }
}

/**
 * An event's payload, headers or attributes do not encode (with the event's Schema, or as
 * JSON), or the envelope is over `maxPayloadSize`. Nothing was written.
 *
 * @category errors
 */
export class InvalidEventPayload extends Schema.TaggedError<InvalidEventPayload>()("InvalidEventPayload", {
  routingKey: Schema.String,
  issue: Schema.String
}) {
  override get message(): string {
    return `invalid payload for event ${this.routingKey}: ${this.issue}`
  }
}

/**
 * A subscriber definition is invalid (bad pattern, queue or option; thrown by
 * `EventBus.subscribe`), or two registered subscribers share a name (a failure of the
 * `Registry` layer).
 *
 * @category errors
 */
export class InvalidSubscriberDefinition extends Schema.TaggedError<InvalidSubscriberDefinition>()(
  "InvalidSubscriberDefinition",
  { subscriber: Schema.String, reason: Schema.String }
) {
  override get message(): string {
    return `invalid subscriber ${this.subscriber}: ${this.reason}`
  }
}

/**
 * A delivered event's payload does not decode with its subscriber's Schema (recorded as the
 * failure of the delivery: retried, then dead-lettered).
 *
 * @category errors
 */
export class EventPayloadDecodeError extends Schema.TaggedError<EventPayloadDecodeError>()("EventPayloadDecodeError", {
  subscriber: Schema.String,
  routingKey: Schema.String,
  issue: Schema.String
}) {
  override get message(): string {
    return `event ${this.routingKey} does not decode for subscriber ${this.subscriber}: ${this.issue}`
  }
}

/**
 * An idempotent subscriber met a pending claim on the event whose holder is still beating (it
 * runs the handler elsewhere right now), and the holder was still running after one claim
 * window of waiting. The handler was not run; the delivery is retried after the backoff, when
 * the claim is completed (the event is then skipped as done) or gone quiet (the handler runs).
 *
 * @category errors
 */
export class EventClaimOwned extends Schema.TaggedError<EventClaimOwned>()("EventClaimOwned", {
  subscriber: Schema.String,
  eventId: Schema.String,
  claimAgeMs: Schema.Number
}) {
  override get message(): string {
    return `event ${this.eventId} is being handled by ${this.subscriber} elsewhere (claim ${Math.round(this.claimAgeMs)} ms old)`
  }
}

/** Errors of a publish (`InvalidFairShare` only with a fair-share resolver). */
export type PublishError = InvalidRoutingKey | InvalidEventPayload | InvalidFairShare | QueueError

/** Errors of registering subscribers. */
export type RegisterError = InvalidSubscriberDefinition | QueueError

export { DatabaseError }
