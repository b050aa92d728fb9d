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
import { randomUUID } from "node:crypto"
import { Clock, Context, Duration, Effect, Layer, Metric, Schema, Semaphore } from "effect"
import { Notifier, pollDelay } from "../Queue/Notifier.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import { type CloseReason, Connection, type LiveRow } from "./Connection.ts"
import * as Cursor from "./Cursor.ts"
import {
  comment,
  DEFAULT_EVENT,
  type Envelope,
  EPHEMERAL_PREFIX,
  frame,
  readEnvelope,
  readEphemeral,
  STREAM_FIELD
} from "./Envelope.ts"
import { type StreamContext, StreamsConfig } from "./StreamsConfig.ts"

/** A hole older than this is given up even if some transaction of its time still runs. */
export const MAX_HOLE_AGE_MS = 5 * 60_000

/** Most holes the hub tracks (a larger gap keeps only its newest ids). */
export const MAX_HOLES = 1_000

/** How long after a hole is seen the transactions it waits for are taken (its inserter has its xid by then). */
const HOLE_SETTLE_MS = 50

const READ_LIMIT = 500
const MAX_ID = 9_223_372_036_854_775_807n
const TAIL_SPAN = 256
/** Above this many streams with connections, the feed brings every message rather than a list of keys. */
const MAX_KEYS = 500

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

/** `pgbus_stream_connections`: open SSE connections of this process. */
export const connectionsGauge = Metric.gauge("pgbus_stream_connections", { description: "open SSE stream connections" })
/** `pgbus_stream_evictions_total`: connections closed by the server, by reason (deadline, buffer, idle). */
export const evictionsTotal = Metric.counter("pgbus_stream_evictions_total", {
  description: "SSE connections closed by the server"
})
/** `pgbus_stream_frames_total`: broadcast frames handed to connections. */
export const framesTotal = Metric.counter("pgbus_stream_frames_total", {
  description: "broadcast frames queued for SSE connections"
})

interface Hole {
  readonly seenAt: number
  /** The transactions running a moment after it was seen: once all ended, it will never commit. */
  wait: ReadonlyArray<string> | undefined
}

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
      const limits = {
        writeDeadlineMs: Duration.toMillis(config.writeDeadline),
        maxBufferedBytes: config.maxBufferedBytes
      }
      const heartbeatMs = Duration.toMillis(config.heartbeatInterval)
      const idleMs = Duration.toMillis(config.idleTimeout)

      const clock = yield* Clock.Clock
      const byStream = new Map<string, Set<Connection>>()
      let total = 0
      let cursor = 0n
      const holes = new Map<bigint, Hole>()
      let started = false
      // audience filters named by broadcasts but not configured here: logged once each
      const unknownFilters = new Set<string>()
      const warned = new Set<string>()
      const warnUnknownFilters = Effect.suspend(() => {
        const fresh = [...unknownFilters].filter((name) => !warned.has(name))
        for (const name of fresh) warned.add(name)
        return Effect.forEach(
          fresh,
          (name) => Effect.logWarning(`pgbus streams: no filter named ${name}; its broadcasts reach nobody`),
          { discard: true }
        )
      })

      const positionNow = (): Cursor.Position => ({
        cursor,
        holes: [...holes.keys()].sort(Cursor.compare)
      })

      const passes = (connection: Connection, visibleTo: string | undefined): boolean => {
        if (visibleTo === undefined) return true
        const filter = config.filters[visibleTo]
        if (filter === undefined) {
          unknownFilters.add(visibleTo)
          return false
        }
        return filter(connection.context) === true
      }

      // closes found while fanning out (a connection past its limits), counted on the next poll or tick
      const closes: Array<CloseReason> = []
      const countCloses = Effect.suspend(() => {
        const reasons = closes.splice(0)
        return Effect.forEach(
          reasons,
          (reason) => Metric.update(evictionsTotal.pipe(Metric.withAttributes({ reason })), 1),
          {
            discard: true
          }
        )
      })

      const fanOut = (stream: string, deliver: (connection: Connection) => void) => {
        const connections = byStream.get(stream)
        if (connections === undefined) return 0
        let n = 0
        for (const connection of connections) {
          if (connection.closed !== undefined) continue
          deliver(connection)
          if (connection.closed !== undefined) closes.push(connection.closed)
          else n++
        }
        return n
      }

      const liveRow = (msgId: bigint, envelope: Envelope): LiveRow => {
        const position = positionNow()
        const event = envelope.event ?? DEFAULT_EVENT
        const data = JSON.stringify(envelope.data) ?? "null"
        return {
          msgId,
          event,
          data,
          exclude: envelope.exclude,
          visibleTo: envelope.visibleTo,
          position,
          frame: frame(event, data, Cursor.frameId(msgId, position))
        }
      }

      const deliverRow = (row: LiveRow, stream: string, now: number) =>
        fanOut(stream, (connection) => {
          if (row.exclude === connection.id || !passes(connection, row.visibleTo)) return
          connection.offer(row, now)
        })

      // Moves the cursor over one row of the feed (a late commit fills its hole).
      const advance = (msgId: bigint, now: number): boolean => {
        if (holes.delete(msgId)) return true
        if (msgId <= cursor) return false
        const gap = msgId - cursor - 1n
        const from = gap > BigInt(MAX_HOLES) ? msgId - BigInt(MAX_HOLES) : cursor + 1n
        for (let id = from; id < msgId; id++) holes.set(id, { seenAt: now, wait: undefined })
        cursor = msgId
        return true
      }

      // Which holes may be given up, judged before the read that could still find them.
      const settleHoles = (now: number) =>
        Effect.gen(function* () {
          if (holes.size === 0) return new Set<bigint>()
          const waiting = new Set<string>()
          for (const hole of holes.values()) for (const x of hole.wait ?? []) waiting.add(x)
          const { inProgress, running } = yield* store.feed.transactions([...waiting])
          const over = new Set<bigint>()
          for (const [id, hole] of holes) {
            if (now - hole.seenAt > MAX_HOLE_AGE_MS) over.add(id)
            else if (hole.wait !== undefined) {
              if (hole.wait.every((x) => !running.has(x))) over.add(id)
            } else if (now - hole.seenAt >= HOLE_SETTLE_MS) hole.wait = inProgress
          }
          return over
        })

      // one read of the feed at a time: the loop's, and a watermark's catch-up
      const reading = yield* Semaphore.make(1)
      const poll = Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const over = yield* settleHoles(now)
        let more = true
        while (more) {
          const streams = [...byStream.keys()]
          const rows = yield* store.feed.readAfter(config.queue, {
            field: STREAM_FIELD,
            after: cursor,
            ids: [...holes.keys()],
            keys: streams.length > MAX_KEYS ? "all" : streams,
            limit: READ_LIMIT
          })
          const after = cursor
          more = rows.filter((r) => r.msgId > after).length >= READ_LIMIT
          // a stream that got its first connection while the read was in flight: its messages were not brought
          const unread = rows.filter((r) => r.message === undefined && r.key !== undefined && byStream.has(r.key))
          const fetched =
            unread.length === 0
              ? new Map<bigint, unknown>()
              : new Map(
                  (yield* store.feed.readAfter(config.queue, {
                    field: STREAM_FIELD,
                    after: MAX_ID,
                    ids: unread.map((r) => r.msgId),
                    keys: "all",
                    limit: 1
                  })).map((r) => [r.msgId, r.message])
                )
          let frames = 0
          for (const row of rows) {
            if (!advance(row.msgId, now) || row.key === undefined) continue
            const message = row.message ?? fetched.get(row.msgId)
            if (message === undefined) continue
            const envelope = readEnvelope(message)
            if (envelope._tag === "None") continue
            frames += deliverRow(liveRow(row.msgId, envelope.value), row.key, now)
          }
          if (frames > 0) yield* Metric.update(framesTotal, frames)
        }
        for (const id of over) holes.delete(id)
        yield* warnUnknownFilters
        yield* countCloses
      }).pipe(reading.withPermit)

      const ensureStarted = Effect.suspend(() => {
        if (started) return Effect.void
        return Effect.gen(function* () {
          const now = yield* Clock.currentTimeMillis
          const tail = yield* store.feed.tail(config.queue, TAIL_SPAN)
          if (started) return
          started = true
          cursor = tail.last
          for (const id of tail.missing) holes.set(id, { seenAt: now, wait: undefined })
        })
      })

      const onEphemeral = (payload: string) => {
        const envelope = readEphemeral(payload)
        if (envelope._tag === "None") return
        const e = envelope.value
        const bytes = frame(e.event ?? DEFAULT_EVENT, JSON.stringify(e.data) ?? "null")
        const now = clock.currentTimeMillisUnsafe()
        fanOut(e.stream, (connection) => {
          if (e.exclude === connection.id || !passes(connection, e.visibleTo)) return
          connection.push(bytes, now)
        })
      }

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

      // the feed loop: woken by the stream queue's NOTIFY; polls as the backstop, faster while holes wait
      const wakeups = yield* notifier.subscribe([physical])
      yield* notifier.onPayload(EPHEMERAL_PREFIX, onEphemeral)
      const backstop = Duration.seconds(1)
      yield* Effect.gen(function* () {
        while (true) {
          yield* ensureStarted.pipe(
            Effect.andThen(poll),
            Effect.catchCause((cause) =>
              Effect.logWarning("pgbus streams: reading the stream queue failed; trying again", cause)
            )
          )
          const status = yield* notifier.status
          const wait = holes.size > 0 || !started ? Duration.millis(100) : pollDelay(status, backstop)
          yield* wakeups.await(wait)
        }
      }).pipe(Effect.forkScoped)

      const tickEvery = Duration.min(Duration.seconds(1), Duration.millis(Math.max(50, heartbeatMs)))
      yield* tick.pipe(Effect.andThen(Effect.sleep(tickEvery)), Effect.forever, Effect.forkScoped)

      let closing = false
      const closeAllNow = () => {
        closing = true
        for (const connections of byStream.values()) for (const c of connections) c.close("shutdown")
      }
      yield* Effect.addFinalizer(() => Effect.sync(closeAllNow))
      if (config.closeOnSignal) {
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
      }
      yield* Metric.update(connectionsGauge, 0)

      const register = (input: {
        readonly stream: string
        readonly context: StreamContext
        readonly position: Cursor.Position | undefined
        readonly catchUp: boolean
        readonly abort: () => void
      }) =>
        Effect.gen(function* () {
          if (closing || total >= config.maxConnections) {
            return yield* new TooManyConnections({ limit: config.maxConnections })
          }
          yield* ensureStarted
          if (input.catchUp) yield* poll
          const now = yield* Clock.currentTimeMillis
          if (total >= config.maxConnections) return yield* new TooManyConnections({ limit: config.maxConnections })
          const hub = positionNow()
          const connection = new Connection(
            randomUUID(),
            input.stream,
            input.context,
            input.position === undefined
              ? { position: hub, synced: true }
              : { position: input.position, synced: false },
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
          total++
          yield* Metric.update(connectionsGauge, total)
          return { connection, hub } satisfies Registration
        })

      const unregister = (connection: Connection) =>
        Effect.suspend(() => {
          const set = byStream.get(connection.stream)
          if (set === undefined || !set.delete(connection)) return Effect.void
          if (set.size === 0) byStream.delete(connection.stream)
          total--
          return Metric.update(connectionsGauge, total)
        })

      return StreamHub.of({
        position: Effect.map(ensureStarted, positionNow),
        watermark: ensureStarted.pipe(Effect.andThen(poll), Effect.map(positionNow)),
        register,
        unregister,
        passes,
        count: Effect.sync(() => total),
        poll: ensureStarted.pipe(Effect.andThen(poll)),
        tick,
        closeAll: Effect.sync(closeAllNow)
      })
    })
  )
}
