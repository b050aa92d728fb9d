/**
 * Awaiting a job's outcome: its result (kept with the archived message when the job declares a
 * `success` Schema), or the typed failure of a dead-lettered or discarded job. One look at where
 * the message is, then a wait for the NOTIFY its outcome sends (one LISTEN handler per process,
 * registered on first use), with the polling interval as the backstop for a lost notification.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Latch, Option, Schema, Scope } from "effect"
import type { FailureRecord } from "../Queue/Message.ts"
import { type Notifier, pollDelay } from "../Queue/Notifier.ts"
import { OUTCOME_PREFIX, type StoredOutcome } from "../Queue/QueueOutcomes.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import type { AnyJob } from "./Job.ts"
import { JobDeadLettered, JobDiscarded, JobResultTimeout, JobResultUnavailable, type ResultError } from "./JobError.ts"
import type { JobRef } from "./JobRef.ts"

/** How long `awaitResult` waits. */
export interface AwaitOptions {
  /** Gives up with `JobResultTimeout` after this long (default: waits until the job ends). */
  readonly timeout?: Duration.Input | undefined
}

/** What the awaiter needs. */
export interface ResultAwaiterDeps {
  readonly store: QueueStore["Service"]
  readonly notifier: Notifier["Service"]
  /** The scope the process-wide LISTEN handler lives in (the job client's layer). */
  readonly scope: Scope.Scope
  readonly pollingInterval: Duration.Duration
}

const text = (u: unknown): string | undefined => (typeof u === "string" ? u : undefined)
const field = (u: unknown, key: string): unknown =>
  typeof u === "object" && u !== null ? (u as Record<string, unknown>)[key] : undefined

/** Makes the awaiter of job results. */
export const makeResultAwaiter = ({ store, notifier, scope, pollingInterval }: ResultAwaiterDeps) => {
  const waiters = new Map<string, Set<Latch.Latch>>()
  let listening = false
  const onOutcome = (payload: string) => {
    for (const latch of waiters.get(payload.slice(OUTCOME_PREFIX.length)) ?? []) latch.openUnsafe()
  }
  const listen = Effect.suspend(() => {
    if (listening) return Effect.void
    listening = true
    return notifier.onPayload(OUTCOME_PREFIX, onOutcome).pipe(Scope.provide(scope))
  })

  const interpret = <A>(job: AnyJob, ref: JobRef, found: StoredOutcome): Effect.Effect<A, ResultError> => {
    switch (found._tag) {
      case "Queued":
        return Effect.die("unreachable: a queued job has no outcome yet")
      case "Missing":
        return Effect.fail(new JobResultUnavailable({ job: job.name, id: ref.id, reason: "missing" }))
      case "Dead":
        return Effect.fail(
          new JobDeadLettered({
            job: job.name,
            id: ref.id,
            attempts:
              typeof field(found.block, "attempts") === "number"
                ? (field(found.block, "attempts") as number)
                : undefined,
            errorClass: text(field(found.block, "error_class")),
            errorMessage: text(field(found.block, "error_message"))
          })
        )
      case "Archived": {
        if (found.discarded !== undefined && found.discarded !== null) {
          const record = found.discarded as Partial<FailureRecord>
          return Effect.fail(
            new JobDiscarded({
              job: job.name,
              id: ref.id,
              errorClass: text(record.error_class),
              errorMessage: text(record.error_message)
            })
          )
        }
        if (job.success === undefined || Option.isNone(found.result)) {
          return Effect.fail(new JobResultUnavailable({ job: job.name, id: ref.id, reason: "not_kept" }))
        }
        return Schema.decodeUnknownEffect(job.success)(found.result.value).pipe(
          Effect.map((a) => a as A),
          Effect.mapError(
            (error) => new JobResultUnavailable({ job: job.name, id: ref.id, reason: "not_kept", issue: error.message })
          )
        )
      }
    }
  }

  /** Waits for a job's outcome (see `AwaitOptions`). */
  const awaitResult = <A>(job: AnyJob, ref: JobRef, options?: AwaitOptions): Effect.Effect<A, ResultError> => {
    const wait = Effect.gen(function* () {
      const name = yield* store.validateName(ref.queue)
      const key = `${name.physical}:${ref.msgId}`
      yield* listen
      const latch = Latch.makeUnsafe(false)
      return yield* Effect.acquireUseRelease(
        Effect.sync(() => {
          const set = waiters.get(key) ?? new Set()
          set.add(latch)
          waiters.set(key, set)
        }),
        () =>
          Effect.gen(function* () {
            while (true) {
              // closed before the look: a NOTIFY landing after it opens the latch again
              latch.closeUnsafe()
              const found = yield* store.outcomes.find(ref.queue, ref.msgId)
              if (found._tag !== "Queued") return yield* interpret<A>(job, ref, found)
              const backstop = pollDelay(yield* notifier.status, pollingInterval)
              yield* Effect.timeoutOption(latch.await, backstop)
            }
          }),
        () =>
          Effect.sync(() => {
            const set = waiters.get(key)
            set?.delete(latch)
            if (set?.size === 0) waiters.delete(key)
          })
      )
    })
    if (options?.timeout === undefined) return wait
    const timeout = Duration.fromInputUnsafe(options.timeout)
    return wait.pipe(
      Effect.timeoutOrElse({
        duration: timeout,
        orElse: () =>
          Effect.fail(new JobResultTimeout({ job: job.name, id: ref.id, timeoutMs: Duration.toMillis(timeout) }))
      })
    )
  }

  return { awaitResult }
}
