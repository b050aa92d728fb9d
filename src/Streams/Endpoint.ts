/**
 * The SSE endpoint, as routes for the app's own `HttpRouter`: `GET <path>?stream=<signed name>`
 * opens a stream, `GET <path>/client.js` serves the browser client. A request is decoded and
 * checked before anything is opened: a malformed parameter or `Last-Event-ID` gets 400, an
 * unsigned or tampered stream name and a refusal of the authorize hook get 403, a process at
 * `maxConnections` gets 503 with `Retry-After`. Then the response starts at once; the replay,
 * the presence seat and the `pgbus:connected` event follow on it.
 *
 * @since 0.1.0
 */
import { NodeFileSystem } from "@effect/platform-node"
import { Clock, Duration, Effect, FileSystem, Option, Schema } from "effect"
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http"
import { QueueStore } from "../Queue/QueueStore.ts"
import type { Connection } from "./Connection.ts"
import * as Cursor from "./Cursor.ts"
import { frame, retry } from "./Envelope.ts"
import { StreamHub } from "./Hub.ts"
import { StreamPresence } from "./Presence.ts"
import { MAX_REPLAY_COUNT, type ReplayMode, replay } from "./Replay.ts"
import { StreamRetention } from "./Retention.ts"
import { StreamSigner } from "./StreamSigner.ts"
import { hasPresence, type StreamContext, StreamsConfig } from "./StreamsConfig.ts"

/** The event that tells a client its connection id (for `exclude`) once its replay is written. */
export const CONNECTED_EVENT = "pgbus:connected"

/** How long a native EventSource waits before reconnecting (the bundled client has its own backoff). */
export const RETRY_MS = 1_000

/**
 * What the authorize hook decides: `false` refuses (403), `true` admits with no context, and
 * `{ context }` admits with a context (the user, say) that audience filters and presence read.
 */
export type AuthorizeDecision = boolean | { readonly context: StreamContext }

/** The options of `routes`. */
export interface RoutesOptions<R> {
  /** Where the endpoint is mounted (default `/pgbus/streams`); the client is at `<path>/client.js`. */
  readonly path?: `/${string}` | undefined
  /**
   * Decides per request and stream whether it may be read, and with which context. Without a
   * hook every signed name is readable, with no context. A failing hook answers 500.
   */
  readonly authorize?:
    | ((input: {
        readonly stream: string
        readonly request: HttpServerRequest.HttpServerRequest
      }) => Effect.Effect<AuthorizeDecision, unknown, R>)
    | undefined
}

const Query = Schema.Struct({
  stream: Schema.String.check(Schema.isMaxLength(512)),
  replay: Schema.optionalKey(
    Schema.String.check(
      Schema.makeFilter<string>(
        (s) =>
          s === "all" ||
          s === "watermark" ||
          (/^\d{1,5}$/.test(s) && Number(s) >= 1 && Number(s) <= MAX_REPLAY_COUNT) ||
          `must be all, watermark or a count from 1 to ${MAX_REPLAY_COUNT}`
      )
    )
  ),
  after: Schema.optionalKey(Schema.String.check(Schema.isMaxLength(2_000))),
  seat: Schema.optionalKey(
    Schema.String.check(
      Schema.makeFilter<string>((s) => /^[A-Za-z0-9_-]{1,64}$/.test(s) || "must be 1 to 64 letters, digits, _ or -")
    )
  )
})
const decodeQuery = Schema.decodeUnknownEffect(Query)

const badRequest = (message: string) => HttpServerResponse.jsonUnsafe({ error: message }, { status: 400 })
const forbidden = HttpServerResponse.jsonUnsafe({ error: "forbidden" }, { status: 403 })

const readPosition = (text: string, what: string) => {
  const position = Cursor.parse(text)
  return Option.isSome(position)
    ? Effect.succeed(position.value)
    : Effect.fail(badRequest(`${what} is not a stream position`))
}

/** The replay a request asks for: `Last-Event-ID` (a reconnect) wins, then `after`, then `replay`. */
const replayMode = (
  query: typeof Query.Type,
  lastEventId: string | undefined
): Effect.Effect<ReplayMode, HttpServerResponse.HttpServerResponse> => {
  if (lastEventId !== undefined && lastEventId !== "") {
    return Effect.map(readPosition(lastEventId, "Last-Event-ID"), (position) => ({ _tag: "resume", position }))
  }
  if (query.after !== undefined) {
    return Effect.map(readPosition(query.after, "after"), (position) => ({ _tag: "resume", position }))
  }
  if (query.replay === "all") return Effect.succeed({ _tag: "all" })
  if (query.replay !== undefined && query.replay !== "watermark") {
    return Effect.succeed({ _tag: "last", count: Number(query.replay) })
  }
  return Effect.succeed({ _tag: "none" })
}

const clientFile = new URL("./client/pgbus-stream.js", import.meta.url).pathname

/**
 * The SSE endpoint and the browser client as routes of the app's `HttpRouter`.
 *
 * @category layers
 */
export const routes = <R = never>(options: RoutesOptions<R> = {}) =>
  HttpRouter.use((router) =>
    Effect.gen(function* () {
      const path = options.path ?? "/pgbus/streams"
      const config = yield* StreamsConfig
      const hub = yield* StreamHub
      const signer = yield* StreamSigner
      const presence = yield* StreamPresence
      const retention = yield* StreamRetention
      const store = yield* QueueStore
      const client = yield* Effect.flatMap(FileSystem.FileSystem, (fs) => fs.readFileString(clientFile)).pipe(
        Effect.provide(NodeFileSystem.layer),
        Effect.orDie
      )
      const replayContext = {
        store,
        queue: config.queue,
        passes: hub.passes,
        trimmedThrough: retention.trimmedThrough
      }

      // after the response started: the replay, the presence seat, then `pgbus:connected`
      const open = (connection: Connection, mode: ReplayMode, hubAt: Cursor.Position, seat: string | undefined) =>
        Effect.gen(function* () {
          const position = yield* replay(replayContext, connection, mode, hubAt)
          if (hasPresence(config, connection.stream)) {
            const member = config.presenceMember(connection.context)
            if (member !== undefined) {
              yield* presence
                .seat(connection.stream, member, connection.id, seat)
                .pipe(Effect.catchCause((cause) => Effect.logWarning("pgbus streams: presence join failed", cause)))
            }
          }
          const now = yield* Clock.currentTimeMillis
          connection.push(
            frame(
              CONNECTED_EVENT,
              JSON.stringify({
                connectionId: connection.id,
                seat: seat ?? null,
                position: Cursor.format(position),
                heartbeatMs: Duration.toMillis(config.heartbeatInterval)
              })
            ),
            now
          )
          connection.finishReplay(position, yield* hub.position, now)
        }).pipe(
          Effect.catchCause((cause) =>
            Effect.logWarning("pgbus streams: opening a connection failed; closing it", cause).pipe(
              Effect.andThen(Effect.sync(() => connection.close("error")))
            )
          )
        )

      const authorizeRequest = (stream: string, request: HttpServerRequest.HttpServerRequest) =>
        options.authorize === undefined
          ? Effect.succeed<AuthorizeDecision>(true)
          : options
              .authorize({ stream, request })
              .pipe(
                Effect.catchCause((cause) =>
                  Effect.logError("pgbus streams: the authorize hook failed", cause).pipe(
                    Effect.andThen(
                      Effect.fail(HttpServerResponse.jsonUnsafe({ error: "authorize failed" }, { status: 500 }))
                    )
                  )
                )
              )

      const unavailable = (message: string) =>
        HttpServerResponse.jsonUnsafe({ error: message }, { status: 503, headers: { "retry-after": "5" } })

      // registered and unregistered as one resource: an interruption cannot leak a slot
      const registerConnection = (input: Parameters<typeof hub.register>[0]) =>
        Effect.acquireRelease(hub.register(input), ({ connection }) =>
          hub
            .unregister(connection)
            .pipe(
              Effect.andThen(
                presence
                  .unseat(connection.id)
                  .pipe(Effect.catchCause((cause) => Effect.logWarning("pgbus streams: presence leave failed", cause)))
              )
            )
        ).pipe(
          Effect.catch((e) =>
            e._tag === "TooManyConnections"
              ? Effect.fail(unavailable(e.message))
              : Effect.logError("pgbus streams: registering a connection failed", e).pipe(
                  Effect.andThen(Effect.fail(unavailable("unavailable")))
                )
          )
        )

      const handler = Effect.gen(function* () {
        const request = yield* HttpServerRequest.HttpServerRequest
        const url = new URL(request.url, "http://localhost")
        const query = yield* decodeQuery(Object.fromEntries(url.searchParams)).pipe(
          Effect.mapError((e) => badRequest(e.message))
        )
        const mode = yield* replayMode(query, request.headers["last-event-id"])
        const stream = yield* signer.verify(query.stream).pipe(Effect.mapError(() => forbidden))
        const decision = yield* authorizeRequest(stream, request)
        if (decision === false) return yield* Effect.fail(forbidden)
        const fiber = yield* Effect.withFiber((f) => Effect.succeed(f))
        const { connection, hub: hubAt } = yield* registerConnection({
          stream,
          context: decision === true ? undefined : decision.context,
          // the replay sets it
          position: mode._tag === "none" ? undefined : Cursor.start,
          // "the last N": of everything committed now, not of what the hub has read so far
          catchUp: mode._tag === "last",
          abort: () => fiber.interruptUnsafe()
        })
        connection.push(retry(RETRY_MS), yield* Clock.currentTimeMillis)
        yield* Effect.forkScoped(open(connection, mode, hubAt, query.seat), { startImmediately: true })
        return HttpServerResponse.stream(connection.body, {
          contentType: "text/event-stream",
          headers: { "cache-control": "no-cache, no-transform", "x-accel-buffering": "no" }
        })
      }).pipe(Effect.catch((response: HttpServerResponse.HttpServerResponse) => Effect.succeed(response)))

      yield* router.add("GET", path, handler)
      yield* router.add(
        "GET",
        `${path}/client.js`,
        HttpServerResponse.text(client, {
          contentType: "text/javascript; charset=utf-8",
          headers: { "cache-control": "public, max-age=300" }
        })
      )
    })
  )
