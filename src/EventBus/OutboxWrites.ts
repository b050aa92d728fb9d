/**
 * Outbox writes, in the caller's transaction: a message for a queue, an event, a job. Each
 * is checked and serialised now (the request's attributes and fair-share key too) and stored
 * as one row for the relay.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option, Schema } from "effect"
import { statementNow } from "../Database.ts"
import type { Job } from "../Job/Job.ts"
import {
  type EnqueueOptions,
  jobFairShare,
  logicalQueueOf,
  physicalQueueOf,
  type TaggedEnvelope
} from "../Job/JobClient.ts"
import { InvalidPayload } from "../Job/JobError.ts"
import { fairFields } from "../Queue/FairShare.ts"
import { InvalidMessage, PayloadTooLarge } from "../Queue/QueueError.ts"
import { CurrentAttributes } from "./Envelope.ts"
import { eventFairShare } from "./EventBus.ts"
import { InvalidEventPayload, InvalidRoutingKey } from "./EventBusError.ts"
import type { OutboxEntry, OutboxEventOptions, OutboxSendOptions } from "./Outbox.ts"
import { isObject, type OutboxContext } from "./OutboxContext.ts"
import * as Topic from "./Topic.ts"

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

const jsonText = (value: unknown): string | undefined => {
  try {
    return value === undefined ? undefined : JSON.stringify(value)
  } catch {
    return undefined
  }
}

/** Builds the outbox's writes over its context. */
export const makeOutboxWrites = ({ config, store, statements, db }: OutboxContext) => {
  const headersText = (queue: string, headers: OutboxSendOptions["headers"]) => {
    if (headers === undefined) return Effect.succeed(null)
    const text = isObject(headers) ? jsonText(headers) : undefined
    return text === undefined
      ? Effect.fail(new InvalidMessage({ queue, reason: "headers must be a JSON object" }))
      : Effect.succeed(text)
  }

  const schedule = (queue: string, options: OutboxSendOptions | undefined) => {
    if (options?.at !== undefined) {
      if (!(options.at instanceof Date) || Number.isNaN(options.at.getTime())) {
        return Effect.fail(new InvalidMessage({ queue, reason: "at must be a valid Date" }))
      }
      if (options.delay !== undefined) {
        return Effect.fail(new InvalidMessage({ queue, reason: "give either delay or at, not both" }))
      }
      return Effect.succeed({ delayMs: null, at: options.at })
    }
    if (options?.delay === undefined) return Effect.succeed({ delayMs: null, at: null })
    const d = Duration.fromInput(options.delay)
    if (Option.isNone(d) || !Duration.isFinite(d.value) || Duration.isNegative(d.value)) {
      return Effect.fail(new InvalidMessage({ queue, reason: "delay must be a finite, non-negative duration" }))
    }
    return Effect.succeed({ delayMs: Duration.toMillis(d.value), at: null })
  }

  const payloadText = (queue: string, payload: unknown) => {
    const text = jsonText(payload)
    if (text === undefined) {
      return Effect.fail(
        new InvalidMessage({ queue, reason: "the message is not JSON (undefined, a function or a bigint)" })
      )
    }
    const size = Buffer.byteLength(text, "utf8")
    if (size > config.maxPayloadSize)
      return Effect.fail(new PayloadTooLarge({ queue, size, limit: config.maxPayloadSize }))
    return Effect.succeed(text)
  }

  const insert = (entry: Parameters<typeof statements.outboxInsert>[0], eventId: string | undefined) =>
    Effect.gen(function* () {
      const now = yield* statementNow
      const [row] = yield* statements.outboxInsert(entry, now).pipe(db("write outbox entry"))
      return { id: row!.id, eventId } satisfies OutboxEntry
    })

  const publishToQueue = (queue: string, payload: unknown, options?: OutboxSendOptions) =>
    Effect.gen(function* () {
      yield* store.validateName(queue)
      const text = yield* payloadText(queue, payload)
      const headers = yield* headersText(queue, options?.headers)
      const when = yield* schedule(queue, options)
      return yield* insert(
        {
          kind: "queue",
          queue,
          routingKey: null,
          eventId: null,
          payload: text,
          headers,
          context: null,
          fairKey: null,
          fairWeight: null,
          ...when
        },
        undefined
      )
    }).pipe(Effect.withSpan("pgbus.outbox.publish", { attributes: { queue } }, { captureStackTrace: false }))

  const publishEvent = (routingKey: string, payload: unknown, options?: OutboxEventOptions) =>
    Effect.gen(function* () {
      const problem = Topic.routingKeyProblem(routingKey)
      if (problem !== undefined) return yield* new InvalidRoutingKey({ routingKey, reason: problem })
      const invalid = (issue: string) => new InvalidEventPayload({ routingKey, issue })
      if (options?.eventId !== undefined && !UUID.test(options.eventId)) return yield* invalid("eventId must be a UUID")
      const text = jsonText(payload)
      if (text === undefined) return yield* invalid("the payload is not JSON (undefined, a bigint, a cycle)")
      if (Buffer.byteLength(text, "utf8") > config.maxPayloadSize) {
        return yield* invalid(`the payload is over maxPayloadSize (${config.maxPayloadSize})`)
      }
      let headers: string | null = null
      if (options?.headers !== undefined) {
        headers = isObject(options.headers) ? (jsonText(options.headers) ?? null) : null
        if (headers === null) return yield* invalid("headers must be a JSON object")
      }
      // captured here, inside the app's transaction, where the request's context is set
      const attributes = yield* CurrentAttributes
      const context = Object.keys(attributes).length > 0 ? (jsonText(attributes) ?? null) : null
      if (Object.keys(attributes).length > 0 && context === null) return yield* invalid("the attributes are not JSON")
      const tag = yield* eventFairShare(config, {
        routingKey,
        payload,
        headers: options?.headers ?? {},
        attributes
      })
      const eventId = options?.eventId ?? crypto.randomUUID()
      return yield* insert(
        {
          kind: "event",
          queue: null,
          routingKey,
          eventId,
          payload: text,
          headers,
          context,
          fairKey: tag?.key ?? null,
          fairWeight: tag === undefined || tag.weight === 1 ? null : tag.weight,
          delayMs: null,
          at: null
        },
        eventId
      )
    }).pipe(
      Effect.withSpan(
        "pgbus.outbox.publish_event",
        { attributes: { routing_key: routingKey } },
        { captureStackTrace: false }
      )
    )

  const enqueue = <P>(
    job: Job<string, P, unknown, unknown, unknown>,
    payload: P,
    options?: Omit<EnqueueOptions, "delay" | "at"> & OutboxSendOptions
  ) =>
    Effect.gen(function* () {
      const encoded = yield* Schema.encodeEffect(job.payload)(payload).pipe(
        Effect.mapError((error) => new InvalidPayload({ job: job.name, issue: error.message }))
      )
      const queue = physicalQueueOf(config, job, options)
      // resolved now, in the app's transaction, like an enqueue's
      const tag = yield* jobFairShare(config, job, payload, logicalQueueOf(config, job, options), options?.headers)
      return yield* publishToQueue(
        queue,
        { job: job.name, payload: encoded, ...fairFields(tag) } satisfies TaggedEnvelope,
        options
      )
    })

  return { publishToQueue, publishEvent, enqueue }
}
