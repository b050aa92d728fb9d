/**
 * The hub's fan-out: a broadcast handed to every connection of its stream that its audience
 * filter passes, in one synchronous pass (no connection waits for another); persistent rows
 * with their position, ephemeral ones (NOTIFY payloads) without an id.
 *
 * @since 0.1.0
 */
import { type Clock, Effect, Metric } from "effect"
import type { Connection, LiveRow } from "./Connection.ts"
import * as Cursor from "./Cursor.ts"
import { DEFAULT_EVENT, type Envelope, frame, readEphemeral } from "./Envelope.ts"
import { evictionsTotal, type HubState, positionOf } from "./HubState.ts"
import type { StreamsConfigShape } from "./StreamsConfig.ts"

/** Builds the fan-out over the hub's state. */
export const makeHubFanOut = (config: StreamsConfigShape, clock: Clock.Clock, state: HubState) => {
  const { byStream, closes, unknownFilters, warned } = state

  const warnUnknownFilters = Effect.suspend(() => {
    const fresh = [...unknownFilters].filter((name) => !warned.has(name))
    for (const name of fresh) warned.add(name)
    return Effect.forEach(
      fresh,
      (name) => Effect.logWarning(`pgbus streams: no filter named ${name}; its broadcasts reach nobody`),
      { discard: true }
    )
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
    const position = positionOf(state)
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

  return { passes, warnUnknownFilters, countCloses, liveRow, deliverRow, onEphemeral }
}

/** The hub's fan-out. */
export type HubFanOut = ReturnType<typeof makeHubFanOut>
