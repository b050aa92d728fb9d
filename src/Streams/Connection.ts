/**
 * One SSE connection: the frames waiting to be written, the client's position, and the byte
 * stream that is the response body. The hub pushes frames without ever waiting (JavaScript,
 * synchronous); the body pulls them when the socket takes more. A connection whose oldest
 * waiting frame is older than the write deadline, or that holds too many bytes, is closed by
 * interrupting its request (the socket is destroyed): a client that stops reading never holds
 * up the others, and on reconnect it replays what it missed.
 *
 * @since 0.1.0
 */

import { Cause, Effect, Latch, Stream } from "effect"
import type { NonEmptyReadonlyArray } from "effect/Array"
import * as Cursor from "./Cursor.ts"
import { frame } from "./Envelope.ts"
import type { StreamContext } from "./StreamsConfig.ts"

/** A durable broadcast as the hub hands it to the connections of its stream. */
export interface LiveRow {
  readonly msgId: bigint
  readonly event: string
  /** The payload's JSON. */
  readonly data: string
  readonly exclude: string | undefined
  readonly visibleTo: string | undefined
  /** The hub's position after this row. */
  readonly position: Cursor.Position
  /** The frame for a connection in step with the hub (id: this row at the hub's position), built once. */
  readonly frame: Uint8Array
}

/** Why a connection was closed by the server. */
export type CloseReason = "deadline" | "buffer" | "idle" | "shutdown" | "error"

/** The limits a connection enforces. */
export interface ConnectionLimits {
  readonly writeDeadlineMs: number
  readonly maxBufferedBytes: number
}

/**
 * A connection. Its methods that take `now` are synchronous: the hub calls them in its fan-out
 * loop, where nothing may wait.
 */
export class Connection {
  /** Whether `position` is within the hub's: then the hub's frame (and id) is this connection's too. */
  synced: boolean
  position: Cursor.Position
  /** Live rows that arrived while the connect replay was being written. */
  private held: Array<LiveRow> | undefined = []
  private chunks: Array<Uint8Array> = []
  private bytes = 0
  private oldestAt: number | undefined = undefined
  private readonly wake = Latch.makeUnsafe(false)
  private readonly emptied = Latch.makeUnsafe(true)
  closed: CloseReason | undefined = undefined
  lastDataAt: number
  lastWriteAt: number

  constructor(
    readonly id: string,
    readonly stream: string,
    readonly context: StreamContext,
    start: { readonly position: Cursor.Position; readonly synced: boolean },
    private readonly limits: ConnectionLimits,
    /** Ends the request at once (destroys the socket); set by the endpoint. */
    private readonly abort: () => void,
    now: number
  ) {
    this.position = start.position
    this.synced = start.synced
    this.lastDataAt = now
    this.lastWriteAt = now
  }

  /** Queues bytes for the client; closes the connection instead when it is behind its limits. */
  push(bytes: Uint8Array, now: number): void {
    if (this.closed !== undefined) return
    if (this.oldestAt !== undefined && now - this.oldestAt > this.limits.writeDeadlineMs) {
      this.evict("deadline")
      return
    }
    if (this.bytes + bytes.length > this.limits.maxBufferedBytes) {
      this.evict("buffer")
      return
    }
    this.chunks.push(bytes)
    this.bytes += bytes.length
    if (this.oldestAt === undefined) this.oldestAt = now
    this.lastWriteAt = now
    this.emptied.closeUnsafe()
    this.wake.openUnsafe()
  }

  /** Offers a durable broadcast of this connection's stream (already filtered for it). */
  offer(row: LiveRow, now: number): void {
    if (this.held !== undefined) {
      this.held.push(row)
      return
    }
    if (this.synced) {
      this.position = row.position
      this.lastDataAt = now
      this.push(row.frame, now)
      return
    }
    const had = Cursor.has(this.position, row.msgId)
    this.position = Cursor.merge(this.position, row.position)
    this.synced = Cursor.equals(this.position, row.position)
    if (had) return
    this.lastDataAt = now
    this.push(frame(row.event, row.data, Cursor.frameId(row.msgId, this.position)), now)
  }

  /** Ends the connect replay: the position it reached, then the live rows held meanwhile. */
  finishReplay(position: Cursor.Position, hub: Cursor.Position, now: number): void {
    this.position = position
    // a held row is judged against its own position (the hub's when it came), not today's
    this.synced = false
    const held = this.held ?? []
    this.held = undefined
    for (const row of held) this.offer(row, now)
    if (held.length === 0) this.synced = Cursor.equals(Cursor.merge(position, hub), hub)
  }

  /** Whether the oldest waiting frame is older than the write deadline. */
  isLate(now: number): boolean {
    return this.oldestAt !== undefined && now - this.oldestAt > this.limits.writeDeadlineMs
  }

  /** Closes at once, dropping what is unwritten (the client replays it). */
  evict(reason: CloseReason): void {
    if (this.closed !== undefined) return
    this.closed = reason
    this.chunks = []
    this.bytes = 0
    this.emptied.openUnsafe()
    this.abort()
  }

  /** Ends the response after what is queued is written. */
  close(reason: CloseReason): void {
    if (this.closed !== undefined) return
    this.closed = reason
    this.wake.openUnsafe()
  }

  private take(): NonEmptyReadonlyArray<Uint8Array> {
    const out = this.chunks as unknown as NonEmptyReadonlyArray<Uint8Array>
    this.chunks = []
    this.bytes = 0
    this.oldestAt = undefined
    this.emptied.openUnsafe()
    return out
  }

  /** Waits until every queued frame was taken by the socket's writer (or the connection closed). */
  readonly drained: Effect.Effect<void> = Effect.suspend(() => this.emptied.await)

  private readonly pull: Effect.Effect<NonEmptyReadonlyArray<Uint8Array>, Cause.Done> = Effect.suspend(() => {
    if (this.chunks.length > 0) return Effect.succeed(this.take())
    if (this.closed !== undefined) return Cause.done()
    this.wake.closeUnsafe()
    return Effect.andThen(this.wake.await, this.pull)
  })

  /** The response body: every queued frame, as the socket takes them, until the connection closes. */
  readonly body: Stream.Stream<Uint8Array> = Stream.fromPull(Effect.succeed(this.pull))
}
