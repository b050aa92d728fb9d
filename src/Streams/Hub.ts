/**
 * The hub: one per process. It reads the stream queue as a feed (woken by the process's one
 * LISTEN connection, polling as the backstop) and fans every broadcast out to the connections
 * of its stream in one synchronous pass, so no connection waits for another and the database
 * sees one reader per process however many clients are connected. Ephemeral broadcasts arrive
 * as NOTIFY payloads and fan out the same way, without an id.
 *
 * Ids are handed out at insert, not at commit, so the hub keeps the ids it saw missing below its
 * cursor (holes) and reads them again until they appear (a late commit, delivered then) or are
 * known never to: a hole is given up once every transaction that was running a moment after it
 * was first seen has ended (or after `MAX_HOLE_AGE_MS`).
 *
 * @since 0.1.0
 */
import { Clock, Context, Duration, Effect, Layer, Metric } from "effect"
import { Notifier, pollDelay } from "../Queue/Notifier.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import type { Connection } from "./Connection.ts"
import type * as Cursor from "./Cursor.ts"
import { EPHEMERAL_PREFIX } from "./Envelope.ts"
import { makeHubConnections, type TooManyConnections } from "./HubConnections.ts"
import { makeHubFanOut } from "./HubFanOut.ts"
import { makeHubFeed } from "./HubFeed.ts"
import { connectionsGauge, makeHubState, positionOf } from "./HubState.ts"
import { type StreamContext, StreamsConfig } from "./StreamsConfig.ts"

export { TooManyConnections } from "./HubConnections.ts"
export { MAX_HOLE_AGE_MS, MAX_HOLES } from "./HubFeed.ts"
export { connectionsGauge, evictionsTotal, framesTotal } from "./HubState.ts"

/** What `register` gives the endpoint. */
export interface Registration {
  readonly connection: Connection
  /** The hub's position at registration: every later broadcast reaches the connection live. */
  readonly hub: Cursor.Position
}

/**
 * The hub service.
 *
 * @category services
 */
export class StreamHub extends Context.Service<
  StreamHub,
  {
    /** The hub's position (starting it if needed). */
    readonly position: Effect.Effect<Cursor.Position, QueueError>
    /**
     * A page's watermark: the hub's position once it has read every broadcast committed before
     * the call (take it before reading the page's data: what commits in between is replayed).
     */
    readonly watermark: Effect.Effect<Cursor.Position, QueueError>
    /**
     * Registers a connection (its live rows are held until `finishReplay`); unregister it when
     * the request ends. Without `position` it starts at the hub's (nothing to replay).
     */
    readonly register: (input: {
      readonly stream: string
      readonly context: StreamContext
      readonly position: Cursor.Position | undefined
      /** Read the feed first, so that the hub's position includes everything committed before the call. */
      readonly catchUp: boolean
      readonly abort: () => void
    }) => Effect.Effect<Registration, TooManyConnections | QueueError>
    /** Removes a connection. */
    readonly unregister: (connection: Connection) => Effect.Effect<void>
    /** Whether a connection's context passes an audience filter (an unknown filter passes nobody). */
    readonly passes: (connection: Connection, visibleTo: string | undefined) => boolean
    /** Open connections. */
    readonly count: Effect.Effect<number>
    /** Reads the feed now (tests; the hub also does on every wake-up). */
    readonly poll: Effect.Effect<void, QueueError>
    /** Runs the per-connection checks now: write deadlines, idle timeout, heartbeats (tests). */
    readonly tick: Effect.Effect<void>
    /**
     * Ends every connection (their clients reconnect, to another process) and refuses new ones
     * with 503: the HTTP server waits for open responses when it stops, and an SSE response
     * never ends on its own. Done on SIGTERM and SIGINT unless `closeOnSignal` is false.
     */
    readonly closeAll: Effect.Effect<void>
  }
>()("effect-pgbus/StreamHub") {
  /** The hub of this process. */
  static readonly layer: Layer.Layer<StreamHub, QueueError, StreamsConfig | QueueStore | Notifier> = Layer.effect(
    StreamHub,
    Effect.gen(function* () {
      const config = yield* StreamsConfig
      const store = yield* QueueStore
      const notifier = yield* Notifier
      const physical = (yield* store.validateName(config.queue)).physical
      const clock = yield* Clock.Clock
      const state = makeHubState()
      const fanOut = makeHubFanOut(config, clock, state)
      const feed = yield* makeHubFeed(config, store, state, fanOut)
      const connections = makeHubConnections(config, state, fanOut, feed)
      const positionNow = () => positionOf(state)

      // the feed loop: woken by the stream queue's NOTIFY; polls as the backstop, faster while holes wait
      const wakeups = yield* notifier.subscribe([physical])
      yield* notifier.onPayload(EPHEMERAL_PREFIX, fanOut.onEphemeral)
      const backstop = Duration.seconds(1)
      yield* Effect.gen(function* () {
        while (true) {
          yield* feed.ensureStarted.pipe(
            Effect.andThen(feed.poll),
            Effect.catchCause((cause) =>
              Effect.logWarning("pgbus streams: reading the stream queue failed; trying again", cause)
            )
          )
          const status = yield* notifier.status
          const wait = state.holes.size > 0 || !state.started ? Duration.millis(100) : pollDelay(status, backstop)
          yield* wakeups.await(wait)
        }
      }).pipe(Effect.forkScoped)

      yield* connections.tick.pipe(
        Effect.andThen(Effect.sleep(connections.tickEvery)),
        Effect.forever,
        Effect.forkScoped
      )

      yield* Effect.addFinalizer(() => Effect.sync(connections.closeAllNow))
      if (config.closeOnSignal) yield* connections.closeOnSignals
      yield* Metric.update(connectionsGauge, 0)

      return StreamHub.of({
        position: Effect.map(feed.ensureStarted, positionNow),
        watermark: feed.ensureStarted.pipe(Effect.andThen(feed.poll), Effect.map(positionNow)),
        register: connections.register,
        unregister: connections.unregister,
        passes: fanOut.passes,
        count: Effect.sync(() => state.total),
        poll: feed.ensureStarted.pipe(Effect.andThen(feed.poll)),
        tick: connections.tick,
        closeAll: Effect.sync(connections.closeAllNow)
      })
    })
  )
}
