/**
 * The supervisor's side of the connection breaker (`internal/ConnectionBreaker.ts`): one log line
 * when the breaker opens and one when it closes (an outage costs two lines, not one per worker
 * per poll), the half-open probes while it is open, and the state the readiness verdict reports.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect } from "effect"
import { PgBusConfig, type PgBusConfigShape } from "../Config.ts"
import { breakerOf, DatabaseError, probeDatabase } from "../Database.ts"
import type { BreakerChange } from "../internal/ConnectionBreaker.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"

/** The `reason` of the error a read fails with at once while the connection breaker is open. */
export const BREAKER_OPEN = "ConnectionBreakerOpen"

/** Whether an error is a read refused by the open connection breaker. */
export const isBreakerOpen = (error: unknown): boolean =>
  error instanceof DatabaseError && error.reason === BREAKER_OPEN

/**
 * The queue store as the workers see it: while the connection breaker is open its reads fail at
 * once, taking no connection (not retryable: no claim was made, so none is released). Every
 * other operation (archives, heartbeats, outcomes, enqueues) goes to the database as usual.
 */
export const gateReads = (store: QueueStore["Service"], config: PgBusConfigShape): QueueStore["Service"] => {
  const breaker = breakerOf(config)
  const refused = (operation: string) =>
    new DatabaseError({
      operation,
      reason: BREAKER_OPEN,
      detail: "the connection breaker is open: the database is unreachable; reads resume when a probe succeeds",
      retryable: false
    })
  return {
    ...store,
    read: (queue, options) => (breaker.isOpen() ? Effect.fail(refused("read")) : store.read(queue, options)),
    archiveAndRead: (queue, done, options) =>
      breaker.isOpen() ? Effect.fail(refused("read")) : store.archiveAndRead(queue, done, options),
    readWithPoll: (queue, options) =>
      breaker.isOpen() ? Effect.fail(refused("read")) : store.readWithPoll(queue, options)
  }
}

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
      const ok = yield* probeDatabase
      // a probe that failed before it opened a socket told the breaker nothing: tell it, so
      // that the next probe is scheduled
      if (!ok && breaker.isOpen() && breaker.nextProbeAt() === undefined) breaker.failed()
      continue
    }
    const now = yield* Clock.currentTimeMillis
    const wait = Math.max(10, Math.min((breaker.nextProbeAt() ?? now + 1000) - now, 1000))
    yield* Effect.raceFirst(breaker.changed.await, Effect.sleep(Duration.millis(wait)))
  }
})
