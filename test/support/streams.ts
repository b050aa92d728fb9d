/** Helpers for stream tests: PgBus + Streams on a fresh database, an HTTP server, a Node SSE client. */

import * as http from "node:http"
import { createServer } from "node:http"
import { NodeHttpServer } from "@effect/platform-node"
import { Context, type Duration, Effect, Exit, Layer, Scope } from "effect"
import { HttpRouter, HttpServer } from "effect/http"
import type { PgBusConfigInput } from "../../src/Config.ts"
import * as Streams from "../../src/Streams/Streams.ts"
import type { StreamsOptions } from "../../src/Streams/StreamsConfig.ts"
import { eventually } from "./jobs.ts"
import * as TestDatabase from "./TestDatabase.ts"

/** The signing secret of the tests. */
export const SECRET = "test-secret-0123456789abcdef"

/** PgBus and Streams on a fresh database. */
export const layer = (streams: StreamsOptions = {}, pgbus: PgBusConfigInput = {}) =>
  Streams.layer({ secrets: [SECRET], ...streams }).pipe(Layer.provideMerge(TestDatabase.layer(pgbus)), Layer.orDie)

/**
 * Serves the streams routes (and `extra` routes) with the services of the current context, on
 * `port` (default: a free one), until the scope closes; returns the base URL.
 */
export const serve = (
  options: {
    readonly routes?: Streams.RoutesOptions<never>
    readonly extra?: Layer.Layer<never, never, HttpRouter.HttpRouter>
    readonly port?: number
  } = {}
) =>
  Effect.gen(function* () {
    const services = yield* Effect.context<Streams.Streams | Streams.Requirements>()
    const app = Layer.mergeAll(Streams.routes(options.routes), options.extra ?? Layer.empty)
    const server = HttpRouter.serve(app, { disableLogger: true, disableListenLog: true }).pipe(
      Layer.provide(Layer.succeedContext(services)),
      Layer.provideMerge(NodeHttpServer.layer(createServer, { port: options.port ?? 0, host: "127.0.0.1" }))
    )
    const built = yield* Layer.build(server)
    const address = Context.get(built, HttpServer.HttpServer).address
    if (address._tag === "UnixPathAddress") return yield* Effect.die(new Error("expected a TCP address"))
    return { url: `http://127.0.0.1:${address.port}`, port: address.port }
  })

/** A frame as the test client saw it, with when it arrived (performance.now()). */
export interface Received {
  readonly event: string
  readonly id: string | undefined
  readonly data: string
  readonly at: number
}

/** A Node SSE client (one socket, no agent). */
export interface SseClient {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  readonly body: () => string
  readonly events: Array<Received>
  readonly comments: () => number
  readonly ended: () => boolean
  /** Stops reading the socket (a client that stalls). */
  readonly pause: () => void
  readonly close: () => void
  /** The broadcast frames (not the library's own `pgbus:` events). */
  readonly broadcasts: () => ReadonlyArray<Received>
}

/** Opens an SSE request; resolves once the status line arrived. Closed when the scope closes. */
export const openSse = (url: string, headers: Record<string, string> = {}) =>
  Effect.acquireRelease(
    Effect.callback<SseClient>((resume) => {
      const request = http.get(url, { agent: false, headers: { accept: "text/event-stream", ...headers } }, (res) => {
        const events: Array<Received> = []
        let raw = ""
        let comments = 0
        let ended = false
        // frames as sent: an `id` only when the frame has its own id line (unlike EventSource's lastEventId)
        let pending = ""
        res.setEncoding("utf8")
        res.on("data", (chunk: string) => {
          raw += chunk
          pending += chunk
          const blocks = pending.split("\n\n")
          pending = blocks.pop() ?? ""
          const at = performance.now()
          for (const block of blocks) {
            let event = "message"
            let id: string | undefined
            let data: string | undefined
            for (const line of block.split("\n")) {
              if (line.startsWith(":")) comments++
              else if (line.startsWith("event: ")) event = line.slice(7)
              else if (line.startsWith("id: ")) id = line.slice(4)
              else if (line.startsWith("data: "))
                data = data === undefined ? line.slice(6) : `${data}\n${line.slice(6)}`
            }
            if (data !== undefined) events.push({ event, id, data, at })
          }
        })
        const end = () => {
          ended = true
        }
        res.on("end", end)
        res.on("close", end)
        res.on("error", end)
        resume(
          Effect.succeed({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: () => raw,
            events,
            comments: () => comments,
            ended: () => ended,
            pause: () => {
              res.pause()
              res.socket?.pause()
            },
            close: () => request.destroy(),
            broadcasts: () => events.filter((e) => !e.event.startsWith("pgbus:"))
          })
        )
      })
      request.on("error", (error) => resume(Effect.die(error)))
    }),
    (client) => Effect.sync(() => client.close())
  )

/** Polls until `check` (a synchronous look at a client) holds, at most `timeout`; `what` may describe the state. */
export const waitFor = (what: string | (() => string), check: () => boolean, timeout: Duration.Input = "10 seconds") =>
  eventually(typeof what === "string" ? what : "the condition", Effect.sync(check), timeout).pipe(
    Effect.catchDefect((defect) =>
      Effect.die(typeof what === "string" ? defect : new Error(`timed out waiting for: ${what()}`))
    )
  )

export { eventually }

/** The stream URL for a stream name (signed with the test secret). */
export const streamUrl = (base: string, stream: string, query: Record<string, string> = {}) =>
  Effect.map(Streams.signedName(stream), (signed) => {
    const url = new URL(`${base}/pgbus/streams`)
    url.searchParams.set("stream", signed)
    for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v)
    return url.toString()
  })

/** Waits a bounded while for the connected event (the replay is written before it). */
export const connected = (client: SseClient) =>
  waitFor("pgbus:connected", () => client.events.some((e) => e.event === "pgbus:connected"))

/** A streams web process of its own (hub, services, HTTP server) over the test's PgBus, until `stop`. */
export interface StreamsServer {
  readonly url: string
  readonly port: number
  /** Its streams services. */
  readonly context: Context.Context<Streams.Streams | Streams.Requirements>
  /** Stops the HTTP server and the streams services (open connections end), as a process that exits. */
  readonly stop: Effect.Effect<void>
}

/** Starts a streams server over the PgBus of the current context; stopped at the latest when the scope closes. */
export const startServer = (
  options: {
    readonly streams?: StreamsOptions
    readonly routes?: Streams.RoutesOptions<never>
    readonly extra?: Layer.Layer<never, never, HttpRouter.HttpRouter | Streams.Streams>
    readonly port?: number
  } = {}
) =>
  Effect.gen(function* () {
    const pgbus = yield* Effect.context<Streams.Requirements>()
    const scope = yield* Scope.make()
    const stop = Effect.suspend(() => {
      const hub = Context.getOption(context, Streams.StreamHub)
      return hub._tag === "Some" ? hub.value.closeAll : Effect.void
    }).pipe(Effect.andThen(Scope.close(scope, Exit.void)))
    let context: Context.Context<Streams.Streams> = Context.empty() as Context.Context<Streams.Streams>
    yield* Effect.addFinalizer(() => stop)
    const streams = Streams.layer({ secrets: [SECRET], ...options.streams }).pipe(Layer.orDie)
    context = yield* Layer.buildWithScope(streams, scope).pipe(Effect.provide(pgbus))
    const app = Layer.mergeAll(Streams.routes(options.routes), options.extra ?? Layer.empty)
    const server = HttpRouter.serve(app, { disableLogger: true, disableListenLog: true }).pipe(
      Layer.provide(Layer.succeedContext(Context.merge(pgbus, context))),
      Layer.provideMerge(NodeHttpServer.layer(createServer, { port: options.port ?? 0, host: "127.0.0.1" }))
    )
    const built = yield* Layer.buildWithScope(server, scope).pipe(Effect.orDie)
    const address = Context.get(built, HttpServer.HttpServer).address
    if (address._tag === "UnixPathAddress") return yield* Effect.die(new Error("expected a TCP address"))
    return {
      url: `http://127.0.0.1:${address.port}`,
      port: address.port,
      context: Context.merge(pgbus, context),
      // as on SIGTERM: the open responses end, then the server and the services stop
      stop
    } satisfies StreamsServer
  })

/** A broadcasting process without a hub (a worker), over the PgBus of the current context. */
export const broadcasterContext = Effect.gen(function* () {
  const pgbus = yield* Effect.context<Streams.Requirements>()
  return yield* Layer.build(Streams.layerBroadcaster({})).pipe(Effect.provide(pgbus), Effect.orDie)
})
