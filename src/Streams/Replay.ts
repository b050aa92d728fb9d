/**
 * The replay a connection gets when it opens: from the position it resumes at (`Last-Event-ID`,
 * or a page's watermark given as `after`), the last N broadcasts, or everything retained. It
 * covers what the hub will not deliver live: broadcasts of the stream up to the hub's position
 * at registration, skipping the hub's holes (those arrive live if they commit). A position
 * older than what retention deleted gets a `pgbus:gap` event first.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Metric } from "effect"
import type { DatabaseError } from "../Database.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import type { Connection } from "./Connection.ts"
import * as Cursor from "./Cursor.ts"
import { DEFAULT_EVENT, frame, readEnvelope, STREAM_FIELD } from "./Envelope.ts"

/** Where a connection's replay starts. */
export type ReplayMode =
  | { readonly _tag: "resume"; readonly position: Cursor.Position }
  | { readonly _tag: "last"; readonly count: number }
  | { readonly _tag: "all" }
  | { readonly _tag: "none" }

/** Most broadcasts `replay=N` may ask for. */
export const MAX_REPLAY_COUNT = 10_000

/** The event a client whose position is older than retention gets first. */
export const GAP_EVENT = "pgbus:gap"

const PAGE = 500

/** `pgbus_stream_replayed_total`: broadcasts written to connections by their connect replay. */
export const replayedTotal = Metric.counter("pgbus_stream_replayed_total", {
  description: "broadcasts replayed to SSE connections when they opened"
})
/** `pgbus_stream_gaps_total`: connections told that retention deleted broadcasts they missed. */
export const gapsTotal = Metric.counter("pgbus_stream_gaps_total", {
  description: "SSE connections that resumed from a position older than retention"
})

/** What the replay needs. */
export interface ReplayContext {
  readonly store: QueueStore["Service"]
  readonly queue: string
  readonly passes: (connection: Connection, visibleTo: string | undefined) => boolean
  readonly trimmedThrough: (stream: string) => Effect.Effect<bigint | undefined, DatabaseError>
}

/** Writes a connection's replay; returns the position the connection is at after it. */
export const replay = (
  context: ReplayContext,
  connection: Connection,
  mode: ReplayMode,
  hub: Cursor.Position
): Effect.Effect<Cursor.Position, QueueError | DatabaseError> =>
  Effect.gen(function* () {
    const stream = connection.stream
    let from: Cursor.Position
    switch (mode._tag) {
      case "none":
        return hub
      case "resume": {
        from = mode.position
        const trimmed = yield* context.trimmedThrough(stream)
        // past the cursor only: a hole of the position is far likelier a rolled-back id than a
        // broadcast that committed late and then expired before the client came back
        if (trimmed !== undefined && trimmed > from.cursor) {
          const now = yield* Clock.currentTimeMillis
          connection.push(
            frame(GAP_EVENT, JSON.stringify({ cursor: Cursor.format(from), trimmedThrough: `${trimmed}` })),
            now
          )
          yield* Metric.update(gapsTotal, 1)
        }
        break
      }
      case "all":
        from = Cursor.start
        break
      case "last": {
        const rows = yield* context.store.feed.readKey(context.queue, {
          field: STREAM_FIELD,
          key: stream,
          after: 0n,
          upTo: hub.cursor,
          ids: [],
          skip: hub.holes,
          limit: mode.count,
          newest: true
        })
        const first = rows[0]
        if (first === undefined) return hub
        from = { cursor: first.msgId - 1n, holes: [] }
        break
      }
    }
    let after = from.cursor
    let ids = from.holes
    let position = from
    let replayed = 0
    while (true) {
      const rows = yield* context.store.feed.readKey(context.queue, {
        field: STREAM_FIELD,
        key: stream,
        after,
        upTo: hub.cursor,
        ids,
        skip: hub.holes,
        limit: PAGE
      })
      const now = yield* Clock.currentTimeMillis
      for (const row of rows) {
        const envelope = readEnvelope(row.message)
        position = Cursor.merge(position, {
          cursor: row.msgId,
          holes: hub.holes.filter((h) => h < row.msgId)
        })
        if (envelope._tag === "None" || !context.passes(connection, envelope.value.visibleTo)) continue
        const data = JSON.stringify(envelope.value.data) ?? "null"
        connection.push(frame(envelope.value.event ?? DEFAULT_EVENT, data, Cursor.frameId(row.msgId, position)), now)
        replayed++
      }
      if (rows.length < PAGE || connection.closed !== undefined) break
      after = rows[rows.length - 1]!.msgId
      ids = []
      // a page at a time, as the socket takes it
      yield* connection.drained
    }
    if (replayed > 0) yield* Metric.update(replayedTotal, replayed)
    return Cursor.merge(position, hub)
  })
