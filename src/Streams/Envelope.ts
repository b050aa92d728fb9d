/**
 * A broadcast as stored in the stream queue (a durable one) or carried by a NOTIFY (an
 * ephemeral one), and its SSE frame. `data` is the payload already encoded by its Schema; the
 * SSE `data:` line is its JSON.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { Sse } from "effect/encoding"

/** The message field that names the stream: the key the stream queue is indexed by. */
export const STREAM_FIELD = "stream"

/** Payload prefix of an ephemeral broadcast's NOTIFY (a colon: never a queue name). */
export const EPHEMERAL_PREFIX = "stream:"

/** Event names the library itself sends (`pgbus:connected`, `pgbus:gap`, `pgbus:presence`). */
export const RESERVED_EVENT_PREFIX = "pgbus:"

/** The SSE event of a broadcast that names none. */
export const DEFAULT_EVENT = "message"

/**
 * A typed SSE event name: a letter, then up to 63 letters, digits, `_`, `.`, `:` or `-`, not
 * starting with `pgbus:`.
 *
 * @category schemas
 */
export const EventName = Schema.String.check(
  Schema.makeFilter<string>(
    (s) =>
      (/^[A-Za-z][A-Za-z0-9_.:-]{0,63}$/.test(s) && !s.startsWith(RESERVED_EVENT_PREFIX)) ||
      "must be a letter then up to 63 letters, digits, _ . : or -, and not start with pgbus:"
  )
)

/**
 * A broadcast as stored: the stream, the event, the encoded payload and the delivery rules.
 *
 * @category schemas
 */
export const Envelope = Schema.Struct({
  stream: Schema.String,
  event: Schema.optionalKey(Schema.String),
  data: Schema.Unknown,
  exclude: Schema.optionalKey(Schema.String),
  visibleTo: Schema.optionalKey(Schema.String)
})
export type Envelope = typeof Envelope.Type

const decodeEnvelope = Schema.decodeUnknownOption(Envelope)
const decodeEnvelopeJson = Schema.decodeUnknownOption(Schema.fromJsonString(Envelope))

/** An envelope read back from the queue or a NOTIFY; none when it is not one. */
export const readEnvelope = (u: unknown) => decodeEnvelope(u)

/** The NOTIFY payload of an ephemeral broadcast. */
export const ephemeralPayload = (envelope: Envelope): string => EPHEMERAL_PREFIX + JSON.stringify(envelope)

/** The envelope of an ephemeral NOTIFY payload. */
export const readEphemeral = (payload: string) => decodeEnvelopeJson(payload.slice(EPHEMERAL_PREFIX.length))

const encoder = new TextEncoder()

/** One SSE frame as bytes. */
export const frame = (event: string, data: string, id?: string): Uint8Array =>
  encoder.encode(Sse.encoder.write({ _tag: "Event", event, id, data }))

/** An SSE comment (a heartbeat). */
export const comment = (text: string): Uint8Array => encoder.encode(`: ${text}\n\n`)

/** The SSE `retry:` line: how long a native EventSource waits before it reconnects. */
export const retry = (ms: number): Uint8Array => encoder.encode(`retry: ${ms}\n\n`)
