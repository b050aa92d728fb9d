/**
 * Preparing an event for the fan-out statement: checking its routing key, payload and
 * options, and serialising its job message with the headers (trace), attributes and
 * fair-share tag it carries.
 *
 * @since 0.1.0
 */
import { Effect, Option } from "effect"
import type { PgBusConfigShape } from "../Config.ts"
import * as Input from "../Input.ts"
import { TRACEPARENT } from "../Job/JobClient.ts"
import {
  checkFairShare,
  type FairTag,
  fairFields,
  type InvalidFairShare,
  resolveFairShare
} from "../Queue/FairShare.ts"
import { CurrentAttributes, EVENT_JOB, type EventEnvelope, FairShare, type FairShareInput } from "./Envelope.ts"
import type { EventInput, PrepareContext, PreparedEvent } from "./EventBus.ts"
import { InvalidEventPayload, InvalidRoutingKey } from "./EventBusError.ts"
import * as Topic from "./Topic.ts"

/** The options `publish` takes. */
export const PUBLISH_OPTION_KEYS = ["headers", "delay", "at", "eventId"] as const
const EVENT_INPUT_KEYS = [...PUBLISH_OPTION_KEYS, "routingKey", "payload"] as const

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

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

const traceHeaders: Effect.Effect<Record<string, string>> = Effect.map(Effect.option(Effect.currentSpan), (span) =>
  Option.match(span, {
    onNone: () => ({}),
    onSome: (s) => ({ [TRACEPARENT]: `00-${s.traceId}-${s.spanId}-${s.sampled ? "01" : "00"}` })
  })
)

/** Builds the event preparation of a publisher (on the config of its database). */
export const makePrepareEvent = (config: PgBusConfigShape) => (input: EventInput, context?: PrepareContext) =>
  Effect.gen(function* () {
    if (!Input.isPlainObject(input)) {
      return yield* new InvalidEventPayload({ routingKey: "", issue: "an event must be an object" })
    }
    const { routingKey } = input
    const problem = Topic.routingKeyProblem(routingKey)
    if (problem !== undefined) return yield* new InvalidRoutingKey({ routingKey: String(routingKey), reason: problem })
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
