/**
 * The supervisor's side of the connection breaker (`internal/ConnectionBreaker.ts`): one log line
 * when the breaker opens and one when it closes (an outage costs two lines, not one per worker
 * per poll), the half-open probes while it is open, and the state the readiness verdict reports.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect } from "effect"
import { PgBusConfig } from "../Config.ts"
import { breakerOf, probeDatabase } from "../Database.ts"
import type { BreakerChange } from "../internal/ConnectionBreaker.ts"

/** What readiness says about the database. */
export interface DatabaseState {
  /** `ok`, or `unreachable` while the connection breaker is open. */
  readonly database: "ok" | "unreachable"
  /** While open: since when (ISO). */
  readonly unreachableSince?: string | undefined
}

/** The database's state for readiness, from this process's breaker (no database read). */
export const databaseState: Effect.Effect<DatabaseState, never, PgBusConfig> = Effect.map(PgBusConfig, (config) => {
  const openedAt = breakerOf(config).openedAt()
  return openedAt === undefined
    ? { database: "ok" }
    : { database: "unreachable", unreachableSince: new Date(openedAt).toISOString() }
})

const logChange = (target: string, change: BreakerChange) =>
  change._tag === "Opened"
    ? Effect.logWarning(
        `[pgbus] database unreachable: connection breaker open after ${change.failures} failed connection attempts to ${target}; reads fail fast, first probe in ${change.nextProbeMs} ms`
      )
    : Effect.logInfo(
        `[pgbus] database reachable again: connection breaker closed after ${Duration.format(Duration.millis(change.openForMs))}`
      )

/** Logs the breaker's changes and probes while it is open, until interrupted. */
export const watchConnection: Effect.Effect<never, never, PgBusConfig> = Effect.gen(function* () {
  const config = yield* PgBusConfig
  const breaker = breakerOf(config)
  // changes from before this watcher started (another supervisor of the process logged them)
  breaker.takeChanges()
  while (true) {
    yield* breaker.changed.close
    for (const change of breaker.takeChanges()) yield* logChange(breaker.target, change)
    if (!breaker.isOpen()) {
      yield* breaker.changed.await
      continue
    }
    if (breaker.takeProbe()) {
      yield* probeDatabase
      continue
    }
    const now = yield* Clock.currentTimeMillis
    const wait = Math.max(10, Math.min((breaker.nextProbeAt() ?? now + 1000) - now, 1000))
    yield* Effect.raceFirst(breaker.changed.await, Effect.sleep(Duration.millis(wait)))
  }
})
