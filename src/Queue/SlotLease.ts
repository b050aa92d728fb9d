/**
 * The lease of a claim: how long a claimed message stays invisible unless its holder's
 * heartbeat renews it. A plain message's lease is the visibility timeout; a job with a
 * concurrency limit may set its own (`limit.duration`, carried in its envelope as
 * `pgbus_limit_lease_ms`), since its claim is also its key's slot: a slot of a holder that went
 * silent comes back after the lease, not sooner. A lease is never shorter than two heartbeats,
 * so that a live holder's first beat always lands before it lapses.
 *
 * @since 0.1.0
 */
import { Duration } from "effect"
import { MAX_DURATION_MS } from "../Input.ts"
import type { Message } from "./Message.ts"

/** The envelope field carrying a limited job's slot lease in milliseconds (`limit.duration`). */
export const LIMIT_LEASE_FIELD = "pgbus_limit_lease_ms"

/** The visibility settings a lease depends on (a subset of the configuration). */
export interface LeaseSettings {
  readonly visibilityTimeout: Duration.Duration
  readonly visibilityHeartbeatInterval?: Duration.Duration | undefined
}

/** The visibility heartbeat's interval: `visibilityHeartbeatInterval`, or a third of the visibility timeout. */
export const heartbeatIntervalMs = (settings: LeaseSettings): number =>
  settings.visibilityHeartbeatInterval === undefined
    ? Math.max(1, Duration.toMillis(settings.visibilityTimeout) / 3)
    : Duration.toMillis(settings.visibilityHeartbeatInterval)

/** The shortest lease a `limit.duration` gets: two heartbeat intervals (a shorter one is raised to it). */
export const leaseFloorMs = (settings: LeaseSettings): number => 2 * heartbeatIntervalMs(settings)

/** A limited job's own lease as its envelope carries it, or undefined (the visibility timeout applies). */
export const leaseOfMessage = (m: Pick<Message, "message">): number | undefined => {
  const envelope = m.message
  if (typeof envelope !== "object" || envelope === null) return undefined
  const ms = (envelope as { readonly [LIMIT_LEASE_FIELD]?: unknown })[LIMIT_LEASE_FIELD]
  return typeof ms === "number" && Number.isFinite(ms) && ms > 0 ? ms : undefined
}

/** How long a claim (or a heartbeat) of `m` keeps it invisible: its own lease raised to the floor, else `visibilityMs`. */
export const claimLeaseMs = (m: Pick<Message, "message">, visibilityMs: number, floorMs: number): number => {
  const own = leaseOfMessage(m)
  return own === undefined ? visibilityMs : Math.min(Math.max(own, floorMs), MAX_DURATION_MS)
}
