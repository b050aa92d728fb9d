/**
 * Declared events: a routing key and the Schema of its payload, so that publishing and
 * subscribing are typed end to end (`Event.make("orders.created", OrderCreated)`).
 *
 * @since 0.1.0
 */
import { Effect, type Schema } from "effect"
import type { PublishedEvent, PublishOptions } from "./Envelope.ts"
import { EventBus, encodePayload } from "./EventBus.ts"
import { InvalidRoutingKey, type PublishError } from "./EventBusError.ts"
import * as Topic from "./Topic.ts"

export type { Event, PublishedEvent, PublishOptions } from "./Envelope.ts"

const TypeId = "~effect-pgbus/EventDefinition"

/**
 * A declared event.
 *
 * @category models
 */
export interface EventDefinition<out K extends string, in out P> {
  readonly [TypeId]: typeof TypeId
  readonly routingKey: K
  readonly payload: Schema.ConstraintCodec<P, unknown>
  /** Publishes it (joins the caller's transaction); the payload is encoded with the Schema first. */
  readonly publish: (payload: P, options?: PublishOptions) => Effect.Effect<PublishedEvent, PublishError, EventBus>
}

/** Whether a value is a declared event. */
export const isEventDefinition = (u: unknown): u is EventDefinition<string, unknown> =>
  typeof u === "object" && u !== null && TypeId in u

/**
 * Declares an event. Throws `InvalidRoutingKey` for a bad key (a mistake in code, found when
 * the module loads).
 */
export const make = <const K extends string, P>(
  routingKey: K,
  payload: Schema.ConstraintCodec<P, unknown>
): EventDefinition<K, P> => {
  const problem = Topic.routingKeyProblem(routingKey)
  if (problem !== undefined) throw new InvalidRoutingKey({ routingKey, reason: problem })
  const definition: EventDefinition<K, P> = {
    [TypeId]: TypeId,
    routingKey,
    payload,
    publish: (value, options) =>
      Effect.flatMap(encodePayload(definition, value), (encoded) =>
        EventBus.use((bus) => bus.publish(routingKey, encoded, options))
      )
  }
  return definition
}
