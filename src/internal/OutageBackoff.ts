/**
 * Backoff for a long-running loop that belongs to one outage. An `Effect.retry` around a loop
 * that never ends keeps its schedule's state for the life of the process: the n-th failure
 * in a day waits as long as the n-th failure in a row. Here a success resets the count, so a
 * brief connection loss after hours of work pauses the loop for the first delay only.
 */
import { Duration, Effect, Random } from "effect"

/** The count of failures in a row and the pause each one gets. */
export interface OutageBackoff {
  /** Records a success: the next failure starts a new outage at the first delay. */
  readonly succeeded: () => void
  /** Records a failure; the pause before the next try (`first × 2^(n-1)`, capped, jittered when asked). */
  readonly failed: Effect.Effect<Duration.Duration>
}

/** A backoff of `first` doubling to `cap`; `jitter` spreads each pause over 80%..120%. */
export const make = (first: Duration.Input, cap: Duration.Input, jitter = false): OutageBackoff => {
  const firstMs = Duration.toMillis(Duration.fromInputUnsafe(first))
  const capMs = Duration.toMillis(Duration.fromInputUnsafe(cap))
  let failures = 0
  return {
    succeeded: () => {
      failures = 0
    },
    failed: Effect.suspend(() => {
      failures++
      const ms = Math.min(firstMs * 2 ** Math.min(failures - 1, 30), capMs)
      return jitter
        ? Effect.map(Random.nextBetween(0.8, 1.2), (f) => Duration.millis(Math.round(ms * f)))
        : Effect.succeed(Duration.millis(ms))
    })
  }
}

/**
 * Runs `loop` until it succeeds (it returns when its work is over); after each failure calls
 * `onFailure` with the error and the pause, pauses, and runs it again. `loop` calls the
 * backoff's `succeeded` at each success of its own, so that each outage starts afresh.
 */
export const retryLoop = <A, E, R, R2>(
  loop: Effect.Effect<A, E, R>,
  backoff: OutageBackoff,
  onFailure: (error: E, pause: Duration.Duration) => Effect.Effect<void, never, R2>
): Effect.Effect<A, never, R | R2> =>
  Effect.gen(function* () {
    while (true) {
      const result = yield* Effect.result(loop)
      if (result._tag === "Success") return result.success
      const pause = yield* backoff.failed
      yield* onFailure(result.failure, pause)
      yield* Effect.sleep(pause)
    }
  })
