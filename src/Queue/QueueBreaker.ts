/**
 * The per-queue circuit breaker (seed 002, "Circuit breaker"): a queue whose jobs fail over and
 * over pauses itself, so that a broken dependency does not burn every process retrying. Each
 * process counts the failed deliveries of each queue in a row (a success starts again); at
 * `circuitBreakerThreshold` it trips: the pause is written to `queue_states` (see
 * `QueueStates.trip`), so every process honours it within a second, and it ends by itself after
 * the backoff (`circuitBreakerBackoff`, doubled at each trip in a row, to
 * `circuitBreakerBackoffMax`). An operator's pause is never replaced; `pgbus queues resume`
 * ends a breaker's pause early. Logged and counted (`pgbus_queue_circuit_breaker_trips_total`).
 *
 * @since 0.1.0
 */
import { Context, Effect, Metric } from "effect"
import type { PgBusConfigShape } from "../Config.ts"
import type { QueueStates } from "./QueueStates.ts"

/** What the executor tells the breaker after each delivery that ended with a verdict. */
export interface QueueBreakerShape {
  /** A failed delivery (a retry or a dead letter): counted; the count at the threshold trips the queue. */
  readonly failed: (queue: string) => Effect.Effect<void>
  /** A succeeded delivery: the queue's count starts again (synchronous: it runs for every success). */
  readonly succeeded: (queue: string) => void
}

/**
 * The breaker of this process's workers (none outside a supervisor).
 *
 * @category references
 */
export const QueueBreaker = Context.Reference<QueueBreakerShape | undefined>("effect-pgbus/QueueBreaker", {
  defaultValue: () => undefined
})

/** Trips of the per-queue circuit breaker, by queue. */
export const breakerTrips = Metric.counter("pgbus_queue_circuit_breaker_trips_total", {
  description: "times the circuit breaker paused a queue after failures in a row"
})

/** The queues the breaker never pauses (a priority sub-queue goes with its queue). */
const exemptions = (text: string) => {
  const names = new Set(
    text
      .split(",")
      .map((q) => q.trim())
      .filter((q) => q !== "")
  )
  return (queue: string) => names.has(queue) || names.has(queue.replace(/_p\d+$/, ""))
}

/** The breaker of a process, from the config; it trips through `states`. */
export const makeQueueBreaker = (config: PgBusConfigShape, states: QueueStates["Service"]): QueueBreakerShape => {
  const threshold = config.circuitBreakerThreshold
  const exempt = exemptions(config.circuitBreakerExempt)
  const failures = new Map<string, number>()
  const trip = (queue: string) =>
    states
      .trip(queue, {
        base: config.circuitBreakerBackoff,
        max: config.circuitBreakerBackoffMax,
        reason: `${threshold} failed deliveries in a row`
      })
      .pipe(
        Effect.flatMap((tripped) =>
          tripped === undefined
            ? Effect.void
            : Effect.logWarning(
                `pgbus: circuit breaker paused queue ${queue} until ${tripped.until.toISOString()} after ${threshold} failed deliveries in a row (trip ${tripped.trips}${tripped.trips > 1 ? ", backoff doubled" : ""}); it resumes by itself, or with \`pgbus queues resume ${queue}\``
              ).pipe(
                Effect.annotateLogs({ queue, trips: tripped.trips }),
                Effect.andThen(Metric.update(breakerTrips.pipe(Metric.withAttributes({ queue })), 1))
              )
        ),
        Effect.catch((error) => Effect.logWarning(`pgbus: the circuit breaker could not pause queue ${queue}`, error))
      )
  // without a threshold there is nothing to count: a constant, per delivery
  if (threshold === undefined) return { failed: () => Effect.void, succeeded: () => {} }
  return {
    // a success is plain code, not an Effect: it is one map lookup, on every delivery
    succeeded: (queue) => {
      if (failures.size > 0) failures.delete(queue)
    },
    failed: (queue) =>
      Effect.suspend(() => {
        if (exempt(queue)) return Effect.void
        const n = (failures.get(queue) ?? 0) + 1
        if (n < threshold) {
          failures.set(queue, n)
          return Effect.void
        }
        failures.delete(queue)
        return trip(queue)
      })
  }
}
