/**
 * Typed stream events: an SSE event name and the Schema of its payload, so that a broadcast is
 * encoded (and checked) by its Schema and clients route on the name
 * (`StreamEvent.make("order-updated", OrderUpdated)`).
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import { type BroadcastOptions, type BroadcastReceipt, StreamBroadcaster } from "./Broadcaster.ts"
import { EventName } from "./Envelope.ts"
import { type BroadcastError, InvalidBroadcast } from "./StreamsError.ts"

const TypeId = "~effect-pgbus/StreamEvent"

/**
 * A typed stream event.
 *
 * @category models
 */
export interface StreamEvent<out Name extends string, in out P> {
  readonly [TypeId]: typeof TypeId
  /** The SSE `event:` name. */
  readonly name: Name
  readonly payload: Schema.ConstraintCodec<P, unknown>
  /** Broadcasts it to a stream (joins the caller's transaction); the payload is encoded with the Schema first. */
  readonly broadcast: (
    stream: string,
    payload: P,
    options?: Omit<BroadcastOptions, "event">
  ) => Effect.Effect<BroadcastReceipt, BroadcastError, StreamBroadcaster>
}

/**
 * Declares a stream event. Throws `InvalidBroadcast` for a bad name (a mistake in code, found
 * when the module loads).
 */
export const make = <const Name extends string, P>(
  name: Name,
  payload: Schema.ConstraintCodec<P, unknown>
): StreamEvent<Name, P> => {
  const checked = Schema.decodeUnknownExit(EventName)(name)
  if (checked._tag === "Failure") {
    throw new InvalidBroadcast({ stream: "*", reason: `event name ${JSON.stringify(name)} is invalid` })
  }
  const encode = Schema.encodeUnknownEffect(payload as Schema.ConstraintCodec<P, unknown, never, never>)
  return {
    [TypeId]: TypeId,
    name,
    payload,
    broadcast: (stream, value, options) =>
      encode(value).pipe(
        Effect.mapError((e) => new InvalidBroadcast({ stream, reason: `the payload does not encode: ${e.message}` })),
        Effect.flatMap((encoded) =>
          StreamBroadcaster.use((b) => b.broadcast(stream, encoded, { ...options, event: name }))
        )
      )
  }
}
