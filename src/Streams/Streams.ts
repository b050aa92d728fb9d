/**
 * Real-time streams over Server-Sent Events, backed by the queues: a broadcast made inside a
 * transaction reaches browsers only if it commits, and a client that reconnects gets what it
 * missed, in order, once. One hub per process reads the stream queue and fans out to every
 * connection; mount `routes` in any Effect HTTP app.
 *
 * ```ts
 * const StreamsLive = Streams.layer({ secrets: [secret] }).pipe(Layer.provideMerge(PgBus.layer()))
 * const App = Layer.mergeAll(MyRoutes, Streams.routes({ authorize }))
 * HttpRouter.serve(App).pipe(Layer.provide(StreamsLive), Layer.provide(NodeHttpServer.layer(createServer, { port })))
 *
 * yield* Streams.broadcast("room:42", { text: "hi" })          // in your transaction: sent at commit
 * const tag = yield* Streams.sourceElement("room:42")            // <pgbus-stream-source ...> for the page
 * ```
 *
 * @since 0.1.0
 */
import { Effect, Layer } from "effect"
import type { SqlClient } from "effect/sql"
import type { ConfigurationError, PgBusConfig } from "../Config.ts"
import type { Notifier } from "../Queue/Notifier.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import { type BroadcastOptions, StreamBroadcaster } from "./Broadcaster.ts"
import * as Cursor from "./Cursor.ts"
import { StreamHub } from "./Hub.ts"
import { StreamPresence } from "./Presence.ts"
import { StreamRetention } from "./Retention.ts"
import { StreamSigner } from "./StreamSigner.ts"
import { StreamsConfig, type StreamsOptions } from "./StreamsConfig.ts"

export { type BroadcastOptions, type BroadcastReceipt, StreamBroadcaster } from "./Broadcaster.ts"
export { type AuthorizeDecision, CONNECTED_EVENT, type RoutesOptions, routes } from "./Endpoint.ts"
export { StreamHub, TooManyConnections } from "./Hub.ts"
export { PRESENCE_EVENT, type PresenceMember, StreamPresence } from "./Presence.ts"
export { GAP_EVENT, MAX_REPLAY_COUNT } from "./Replay.ts"
export { type RetentionReport, StreamRetention } from "./Retention.ts"
export { StreamSigner } from "./StreamSigner.ts"
export {
  type PresenceChange,
  type PresenceMemberInput,
  type StreamContext,
  StreamsConfig,
  type StreamsOptions
} from "./StreamsConfig.ts"

/** What `layer` provides. */
export type Streams = StreamsConfig | StreamBroadcaster | StreamSigner | StreamHub | StreamPresence | StreamRetention

/** What the streams layers need: `PgBus.layer` provides all of it. */
export type Requirements = PgBusConfig | QueueStore | Notifier | SqlClient.SqlClient

/**
 * Streams for a process that serves SSE: the broadcaster, the signer (needs a secret), the
 * hub, presence and the retention sweep. Reads `PGBUS_STREAMS_*`, then `options`.
 *
 * @category layers
 */
export const layer = (
  options: StreamsOptions = {}
): Layer.Layer<Streams, ConfigurationError | QueueError, Requirements> => {
  const config = StreamsConfig.layer(options)
  const broadcaster = StreamBroadcaster.layer.pipe(Layer.provideMerge(config))
  const services = Layer.mergeAll(StreamSigner.layer, StreamHub.layer, StreamPresence.layer, StreamRetention.layer)
  return services.pipe(Layer.provideMerge(broadcaster))
}

/**
 * Streams for a process that only broadcasts (a worker): the broadcaster and presence, no hub,
 * no endpoint, no secret needed.
 *
 * @category layers
 */
export const layerBroadcaster = (
  options: StreamsOptions = {}
): Layer.Layer<StreamsConfig | StreamBroadcaster | StreamPresence, ConfigurationError | QueueError, Requirements> => {
  const broadcaster = StreamBroadcaster.layer.pipe(Layer.provideMerge(StreamsConfig.layer(options)))
  return StreamPresence.layer.pipe(Layer.provideMerge(broadcaster))
}

/** Broadcasts a JSON payload to a stream (joins the caller's transaction: sent at commit). */
export const broadcast = (stream: string, data: unknown, options?: BroadcastOptions) =>
  StreamBroadcaster.use((b) => b.broadcast(stream, data, options))

/** The signed form of a stream name, for the SSE URL (`?stream=`). */
export const signedName = (stream: string) => StreamSigner.use((s) => s.sign(stream))

/**
 * The position after every broadcast committed so far, for a page to embed as its client's
 * starting point (`after`): take it before reading the page's data, and a broadcast committed
 * between the render and the subscribe is replayed.
 */
export const watermark = StreamHub.use((hub) => Effect.map(hub.watermark, Cursor.format))

const escapeAttribute = (s: string): string =>
  s.replaceAll("&", "&amp;").replaceAll('"', "&quot;").replaceAll("<", "&lt;").replaceAll(">", "&gt;")

/**
 * The `<pgbus-stream-source>` element for a page: the endpoint, the signed name and the
 * render-time watermark (load `<path>/client.js` as a module once per page).
 */
export const sourceElement = (
  stream: string,
  options: {
    readonly path?: string | undefined
    readonly replay?: number | "all" | undefined
    readonly presence?: boolean | undefined
    readonly id?: string | undefined
  } = {}
) =>
  Effect.gen(function* () {
    const signed = yield* signedName(stream)
    const after = yield* watermark
    const attributes: Array<[string, string]> = [
      ["src", options.path ?? "/pgbus/streams"],
      ["signed-stream-name", signed],
      ...(options.replay === undefined ? [["after", after] as [string, string]] : []),
      ...(options.replay !== undefined ? [["replay", String(options.replay)] as [string, string]] : []),
      ...(options.presence === true ? [["presence", ""] as [string, string]] : []),
      ...(options.id !== undefined ? [["id", options.id] as [string, string]] : [])
    ]
    return `<pgbus-stream-source ${attributes.map(([k, v]) => `${k}="${escapeAttribute(v)}"`).join(" ")}></pgbus-stream-source>`
  })

/** Presence of a stream: join and leave by hand, list and count. */
export const presence = (stream: string) => ({
  join: (member: Parameters<StreamPresence["Service"]["join"]>[1]) => StreamPresence.use((p) => p.join(stream, member)),
  leave: (memberId: string) => StreamPresence.use((p) => p.leave(stream, memberId)),
  members: StreamPresence.use((p) => p.members(stream)),
  count: StreamPresence.use((p) => p.count(stream))
})
