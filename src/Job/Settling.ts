/**
 * A success still settling: a handler whose last write is in flight hands it back as its output
 * (the workflow runner's shared outcome of a run's last step), so that the worker frees the
 * delivery's slot at once and acknowledges the message only once the write has committed.
 *
 * @since 0.1.0
 */
import { Effect, Exit, Random } from "effect"
import { decide, type Outcome } from "./Completer.ts"
import type { ResolvedRetryPolicy } from "./Retry.ts"

/** A handler's output whose effect (its last write, uninterruptible) is still to be awaited. */
export class Settling {
  constructor(readonly settle: Effect.Effect<void, unknown>) {}
}

const SETTLED: Outcome = { _tag: "Succeeded" }

/**
 * Awaits a settling success: the plain success once its write committed, else the outcome its
 * failure decides (a retry, as if the handler had failed with it). Any other outcome as it is.
 */
export const settleOutcome = (
  outcome: Outcome,
  attempt: number,
  policy: ResolvedRetryPolicy
): Effect.Effect<Outcome> =>
  outcome._tag !== "Succeeded" || outcome.settle === undefined
    ? Effect.succeed(outcome)
    : Effect.matchCauseEffect(outcome.settle, {
        onFailure: (cause) =>
          Effect.map(Random.next, (random) => decide(Exit.failCause(cause), attempt, policy, random)),
        onSuccess: () => Effect.succeed(SETTLED)
      })
