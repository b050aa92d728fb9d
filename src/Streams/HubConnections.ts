/**
 * The hub's connections: registering and removing them (bounded by `maxConnections`), the
 * per-connection checks of every tick (write deadline, idle timeout, heartbeat), and closing
 * them all at shutdown or on SIGTERM/SIGINT.
 *
 * @since 0.1.0
 */
import { randomUUID } from "node:crypto"
import { Clock, Duration, Effect, Metric, Schema } from "effect"
import { type CloseReason, Connection } from "./Connection.ts"
import type * as Cursor from "./Cursor.ts"
import { comment } from "./Envelope.ts"
import type { Registration } from "./Hub.ts"
import type { HubFanOut } from "./HubFanOut.ts"
import type { HubFeed } from "./HubFeed.ts"
import { connectionsGauge, type HubState, positionOf } from "./HubState.ts"
import type { StreamContext, StreamsConfigShape } from "./StreamsConfig.ts"

/**
 * Connecting failed because the process has `maxConnections` connections already (503).
 *
 * @category errors
 */
export class TooManyConnections extends Schema.TaggedError<TooManyConnections>()("TooManyConnections", {
  limit: Schema.Number
}) {
  override get message(): string {
    return `the process serves its maximum of ${this.limit} stream connections`
  }
}

/** Builds the connections' register, unregister, checks and close over the hub's state. */
export const makeHubConnections = (
  config: StreamsConfigShape,
  state: HubState,
  { countCloses }: Pick<HubFanOut, "countCloses">,
  { ensureStarted, poll }: HubFeed
) => {
  const { byStream, closes } = state
  const limits = {
    writeDeadlineMs: Duration.toMillis(config.writeDeadline),
    maxBufferedBytes: config.maxBufferedBytes
  }
  const heartbeatMs = Duration.toMillis(config.heartbeatInterval)
  const idleMs = Duration.toMillis(config.idleTimeout)
  /** How often the hub runs `tick`: at most a second, at least 50 ms, no longer than the heartbeat. */
  const tickEvery = Duration.min(Duration.seconds(1), Duration.millis(Math.max(50, heartbeatMs)))

  const closeWith = (connection: Connection, reason: CloseReason, evict: boolean) => {
    if (evict) connection.evict(reason)
    else connection.close(reason)
    closes.push(reason)
  }

  const heartbeat = comment("heartbeat")
  const tick = Effect.gen(function* () {
    const now = yield* Clock.currentTimeMillis
    for (const connections of byStream.values()) {
      for (const connection of connections) {
        if (connection.closed !== undefined) continue
        if (connection.isLate(now)) closeWith(connection, "deadline", true)
        else if (now - connection.lastDataAt > idleMs) closeWith(connection, "idle", false)
        else if (now - connection.lastWriteAt >= heartbeatMs) connection.push(heartbeat, now)
      }
    }
    yield* countCloses
  })

  const closeAllNow = () => {
    state.closing = true
    for (const connections of byStream.values()) for (const c of connections) c.close("shutdown")
  }

  /** Closes every connection on SIGTERM and SIGINT, while the scope lasts. */
  const closeOnSignals = Effect.gen(function* () {
    // Runs before the runtime's own handler interrupts the app, so that the HTTP server's
    // close finds no SSE response open. Alone on the signal, it re-raises it once removed:
    // a process without another handler must still stop on Ctrl-C.
    const onSignal = (signal: NodeJS.Signals) => {
      closeAllNow()
      if (process.listenerCount(signal) === 1) {
        process.off(signal, onSignal)
        process.kill(process.pid, signal)
      }
    }
    yield* Effect.acquireRelease(
      Effect.sync(() => {
        for (const signal of ["SIGTERM", "SIGINT"] as const) process.prependListener(signal, onSignal)
      }),
      () =>
        Effect.sync(() => {
          for (const signal of ["SIGTERM", "SIGINT"] as const) process.off(signal, onSignal)
        })
    )
  })

  const register = (input: {
    readonly stream: string
    readonly context: StreamContext
    readonly position: Cursor.Position | undefined
    readonly catchUp: boolean
    readonly abort: () => void
  }) =>
    Effect.gen(function* () {
      if (state.closing || state.total >= config.maxConnections) {
        return yield* new TooManyConnections({ limit: config.maxConnections })
      }
      yield* ensureStarted
      if (input.catchUp) yield* poll
      const now = yield* Clock.currentTimeMillis
      if (state.total >= config.maxConnections) return yield* new TooManyConnections({ limit: config.maxConnections })
      const hub = positionOf(state)
      const connection = new Connection(
        randomUUID(),
        input.stream,
        input.context,
        input.position === undefined ? { position: hub, synced: true } : { position: input.position, synced: false },
        limits,
        input.abort,
        now
      )
      let set = byStream.get(input.stream)
      if (set === undefined) {
        set = new Set()
        byStream.set(input.stream, set)
      }
      set.add(connection)
      state.total++
      yield* Metric.update(connectionsGauge, state.total)
      return { connection, hub } satisfies Registration
    })

  const unregister = (connection: Connection) =>
    Effect.suspend(() => {
      const set = byStream.get(connection.stream)
      if (set === undefined || !set.delete(connection)) return Effect.void
      if (set.size === 0) byStream.delete(connection.stream)
      state.total--
      return Metric.update(connectionsGauge, state.total)
    })

  return { register, unregister, tick, tickEvery, closeAllNow, closeOnSignals }
}
