/**
 * Broadcasts: a durable one is a message in the stream queue (inserted in the caller's
 * transaction, so it reaches clients only if that commits; its NOTIFY wakes every process's
 * hub at commit; its `vt` is its expiry, the stream's retention); an ephemeral one is a NOTIFY
 * carrying the broadcast (also sent at commit, never stored: a client that reconnects does not
 * get it). A coalesced one waits in this process for its window and only the last of its
 * (stream, target) is sent; it is handed to the window after the caller's commit.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Layer, Metric, Schema, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../Config.ts"
import { DatabaseError } from "../Database.ts"
import * as Input from "../Input.ts"
import { hotSpan } from "../internal/span.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import { DEFAULT_EVENT, type Envelope, EventName, ephemeralPayload, STREAM_FIELD } from "./Envelope.ts"
import * as StreamName from "./StreamName.ts"
import { isEphemeral, retentionOf, StreamsConfig } from "./StreamsConfig.ts"
import { type BroadcastError, BroadcastTooLarge, InvalidBroadcast } from "./StreamsError.ts"

/** The window of `coalesce: true`. */
export const DEFAULT_COALESCE_MS = 50

/** What a NOTIFY payload may hold (PostgreSQL's limit is 8000 bytes; the prefix and slack stay below it). */
export const EPHEMERAL_LIMIT = 7_900

/** The options of a broadcast. */
export interface BroadcastOptions {
  /** The SSE `event:` name (default `message`). */
  readonly event?: string | undefined
  /** A connection id (from `pgbus:connected`) that must not receive it; blank or null does nothing. */
  readonly exclude?: string | null | undefined
  /** Queue-backed (true) or NOTIFY only (false); default from the stream's `ephemeral` patterns, else durable. */
  readonly durable?: boolean | undefined
  /** Only connections whose context passes this configured filter receive it. */
  readonly visibleTo?: string | undefined
  /** Sends only the last broadcast per (stream, target) within a window: true (50 ms) or milliseconds. */
  readonly coalesce?: boolean | number | undefined
  /** What a coalesced broadcast replaces (a DOM id, say): the coalescing key. */
  readonly target?: string | undefined
}

/** What a broadcast did: stored with an id, sent as a NOTIFY, or handed to a coalescing window. */
export interface BroadcastReceipt {
  readonly mode: "durable" | "ephemeral" | "coalesced"
  /** The durable broadcast's id (its SSE id). */
  readonly msgId: bigint | undefined
}

const OptionsSchema = Schema.Struct({
  event: Schema.optionalKey(Schema.UndefinedOr(EventName)),
  exclude: Schema.optionalKey(
    Schema.NullishOr(
      Schema.String.check(
        Schema.makeFilter<string>(
          (s) => s.trim() === "" || /^[A-Za-z0-9_-]{1,64}$/.test(s) || "must be a connection id (from pgbus:connected)"
        )
      )
    )
  ),
  durable: Schema.optionalKey(Schema.UndefinedOr(Schema.Boolean)),
  visibleTo: Schema.optionalKey(
    Schema.UndefinedOr(
      Schema.String.check(
        Schema.makeFilter<string>((s) => /^[A-Za-z][A-Za-z0-9_.:-]{0,63}$/.test(s) || "must name a filter")
      )
    )
  ),
  coalesce: Schema.optionalKey(
    Schema.UndefinedOr(
      Schema.Union([Schema.Boolean, Schema.Finite.check(Schema.isBetween({ minimum: 1, maximum: 60_000 }))])
    )
  ),
  target: Schema.optionalKey(Schema.UndefinedOr(Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(200))))
})

const decodeOptions = Schema.decodeUnknownEffect(OptionsSchema)

/**
 * `pgbus_stream_broadcast_count`: broadcasts sent, by mode (durable, ephemeral; coalesced ones
 * count when their window sends them).
 */
export const broadcastCount = Metric.counter("pgbus_stream_broadcast_count", { description: "stream broadcasts sent" })
const durableCount = broadcastCount.pipe(Metric.withAttributes({ mode: "durable" }))
const ephemeralCount = broadcastCount.pipe(Metric.withAttributes({ mode: "ephemeral" }))
/** `pgbus_stream_coalesced_total`: broadcasts superseded within their coalescing window (never sent). */
export const coalescedCount = Metric.counter("pgbus_stream_coalesced_total", {
  description: "stream broadcasts superseded within a coalescing window"
})

const jsonText = (value: unknown): string | undefined => {
  try {
    return JSON.stringify(value)
  } catch {
    return undefined
  }
}

const fromQueueError =
  (stream: string) =>
  (error: QueueError): BroadcastError => {
    switch (error._tag) {
      case "PayloadTooLarge":
        return new BroadcastTooLarge({ stream, size: error.size, limit: error.limit })
      case "InvalidMessage":
        return new InvalidBroadcast({ stream, reason: error.reason })
      case "DatabaseError":
        return error
      default:
        return new DatabaseError({
          operation: `broadcast to ${stream}`,
          reason: error._tag,
          detail: error.message,
          retryable: false
        })
    }
  }

/**
 * Sends broadcasts.
 *
 * @category services
 */
export class StreamBroadcaster extends Context.Service<
  StreamBroadcaster,
  {
    /** Broadcasts an already encoded (JSON) payload to a stream; see `BroadcastOptions`. */
    readonly broadcast: (
      stream: string,
      data: unknown,
      options?: BroadcastOptions
    ) => Effect.Effect<BroadcastReceipt, BroadcastError>
    /** Sends one of the library's own events (`pgbus:presence`) to a stream, ephemeral. */
    readonly announce: (stream: string, event: string, data: unknown) => Effect.Effect<void, BroadcastError>
    /** The queue that holds durable broadcasts. */
    readonly queue: string
  }
>()("effect-pgbus/StreamBroadcaster") {
  /** The broadcaster; creates the stream queue and its index when they are missing. */
  static readonly layer: Layer.Layer<
    StreamBroadcaster,
    QueueError,
    StreamsConfig | PgBusConfig | QueueStore | SqlClient.SqlClient
  > = Layer.effect(
    StreamBroadcaster,
    Effect.gen(function* () {
      const config = yield* StreamsConfig
      const pgbus = yield* PgBusConfig
      const store = yield* QueueStore
      const sql = yield* SqlClient.SqlClient
      const scope = yield* Effect.scope
      yield* store.create(config.queue)
      yield* store.feed.ensureKeyIndex(config.queue, STREAM_FIELD)

      const publish = (envelope: Envelope, durable: boolean): Effect.Effect<BroadcastReceipt, BroadcastError> =>
        Effect.gen(function* () {
          const text = jsonText(envelope)
          if (text === undefined) {
            return yield* new InvalidBroadcast({ stream: envelope.stream, reason: "the payload is not JSON" })
          }
          if (!durable) {
            const payload = ephemeralPayload(envelope)
            const size = Buffer.byteLength(payload, "utf8")
            if (size > EPHEMERAL_LIMIT) {
              return yield* new BroadcastTooLarge({ stream: envelope.stream, size, limit: EPHEMERAL_LIMIT })
            }
            const sent = yield* store.feed.notify(payload).pipe(Effect.mapError(fromQueueError(envelope.stream)))
            // without LISTEN/NOTIFY an ephemeral broadcast would reach nobody: it is stored instead
            if (sent) {
              yield* Metric.update(ephemeralCount, 1)
              return { mode: "ephemeral", msgId: undefined } satisfies BroadcastReceipt
            }
          }
          const size = Buffer.byteLength(text, "utf8")
          if (size > pgbus.maxPayloadSize) {
            return yield* new BroadcastTooLarge({ stream: envelope.stream, size, limit: pgbus.maxPayloadSize })
          }
          const msgId = yield* store
            .send(config.queue, envelope, { delay: retentionOf(config, envelope.stream) })
            .pipe(Effect.mapError(fromQueueError(envelope.stream)))
          yield* Metric.update(durableCount, 1)
          return { mode: "durable", msgId } satisfies BroadcastReceipt
        })

      const coalescer = makeCoalescer(scope, publish)

      const broadcast = (stream: string, data: unknown, options: BroadcastOptions = {}) =>
        Effect.gen(function* () {
          const name = yield* StreamName.validate(stream)
          const o = yield* decodeOptions(options).pipe(
            Effect.mapError((e) => new InvalidBroadcast({ stream: name, reason: e.message }))
          )
          // the input rules: JSON as it is stored (no function, NaN, NUL, lone surrogate, cycle)
          const problem = data === undefined ? "data: undefined is not JSON" : Input.jsonProblem(data, "data")
          if (problem !== undefined) return yield* new InvalidBroadcast({ stream: name, reason: problem })
          const exclude = typeof o.exclude === "string" && o.exclude.trim() !== "" ? o.exclude : undefined
          const envelope: Envelope = {
            stream: name,
            data,
            ...(o.event !== undefined && o.event !== DEFAULT_EVENT ? { event: o.event } : {}),
            ...(exclude !== undefined ? { exclude } : {}),
            ...(o.visibleTo !== undefined ? { visibleTo: o.visibleTo } : {})
          }
          const durable = o.durable ?? !isEphemeral(config, name)
          if (o.coalesce !== undefined && o.coalesce !== false) {
            if (o.target === undefined) {
              return yield* new InvalidBroadcast({ stream: name, reason: "coalesce needs a target (its key)" })
            }
            const windowMs = o.coalesce === true ? DEFAULT_COALESCE_MS : o.coalesce
            // handed to the window at commit: a rolled-back broadcast never enters it
            yield* sql.afterCommit(coalescer.submit(`${name}\u0000${o.target}`, envelope, durable, windowMs))
            return { mode: "coalesced", msgId: undefined } satisfies BroadcastReceipt
          }
          return yield* publish(envelope, durable)
        }).pipe(hotSpan("Streams.broadcast", { stream }))

      return StreamBroadcaster.of({
        broadcast,
        announce: (stream, event, data) => Effect.asVoid(publish({ stream, event, data }, false)),
        queue: config.queue
      })
    })
  )
}

/**
 * Trailing-edge coalescing with a fixed window: the first submit of a key sends the key's latest
 * broadcast one window later; submits meanwhile only replace it, so a steady flow is sent once
 * per window and never starved.
 */
const makeCoalescer = (
  scope: Scope.Scope,
  publish: (envelope: Envelope, durable: boolean) => Effect.Effect<BroadcastReceipt, BroadcastError>
) => {
  const pending = new Map<string, { envelope: Envelope; durable: boolean }>()
  const flush = (key: string, windowMs: number) =>
    Effect.sleep(Duration.millis(windowMs)).pipe(
      Effect.andThen(
        Effect.suspend(() => {
          const entry = pending.get(key)
          pending.delete(key)
          return entry === undefined ? Effect.void : publish(entry.envelope, entry.durable)
        })
      ),
      Effect.catchCause((cause) => Effect.logWarning("pgbus streams: a coalesced broadcast failed", cause))
    )
  return {
    submit: (key: string, envelope: Envelope, durable: boolean, windowMs: number) =>
      Effect.suspend(() => {
        const waiting = pending.has(key)
        pending.set(key, { envelope, durable })
        if (waiting) return Metric.update(coalescedCount, 1)
        return Effect.asVoid(Effect.forkIn(flush(key, windowMs), scope))
      })
  }
}
