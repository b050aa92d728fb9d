/**
 * The hub's state, one record shared by its parts: the connections by stream, the feed's
 * cursor and holes, and what is waiting to be counted or logged. Every part runs on the
 * process's one JavaScript thread, so plain fields are enough.
 *
 * @since 0.1.0
 */
import { Metric } from "effect"
import type { CloseReason, Connection } from "./Connection.ts"
import * as Cursor from "./Cursor.ts"

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

/** An id seen missing below the cursor: read again until it appears or is known never to. */
export interface Hole {
  readonly seenAt: number
  /** The transactions running a moment after it was seen: once all ended, it will never commit. */
  wait: ReadonlyArray<string> | undefined
}

/** The hub's mutable state. */
export interface HubState {
  readonly byStream: Map<string, Set<Connection>>
  /** Open connections. */
  total: number
  /** The highest id read from the feed. */
  cursor: bigint
  readonly holes: Map<bigint, Hole>
  /** Whether the cursor was set from the feed's tail. */
  started: boolean
  /** Set by `closeAll`: new connections are refused. */
  closing: boolean
  /** Closes found while fanning out (a connection past its limits), counted on the next poll or tick. */
  readonly closes: Array<CloseReason>
  /** Audience filters named by broadcasts but not configured here: logged once each. */
  readonly unknownFilters: Set<string>
  readonly warned: Set<string>
}

/** A fresh state: no connection, not started. */
export const makeHubState = (): HubState => ({
  byStream: new Map(),
  total: 0,
  cursor: 0n,
  holes: new Map(),
  started: false,
  closing: false,
  closes: [],
  unknownFilters: new Set(),
  warned: new Set()
})

/** The hub's position now: its cursor and the holes below it. */
export const positionOf = (state: HubState): Cursor.Position => ({
  cursor: state.cursor,
  holes: [...state.holes.keys()].sort(Cursor.compare)
})
