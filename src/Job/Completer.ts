/**
 * The completer: the one owner of a delivery's outcome. It decides the outcome (`decide` and
 * `beforeRun`, pure, from the exit, the attempt and the job's retry policy) and applies it: a
 * retry records the failure and hides the message for its backoff, a dead letter moves the
 * message to `<queue>_dlq` with a block naming the job's own limit, an interrupted run gives
 * the message back, and batch members end (failed after their dead-letter, completed after
 * their archive). Successes are archived by the worker in batches (by its next claim or its
 * flusher), which then hands them to `archived`.
 *
 * @since 0.1.0
 */
import { Cause, Duration, Effect, Exit, Fiber, Option, Random } from "effect"
import { retryTransient } from "../Database.ts"
import {
  type DeadLetterReason,
  encodeFailure,
  type Failure,
  type Message,
  READ_COUNT_LIMIT,
  receiptOf
} from "../Queue/Message.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import { BATCH_ID_HEADER, type MemberOutcome, outcomesOf } from "./BatchMembership.ts"
import { isLimited } from "./ConcurrencyLimit.ts"
import { type Debouncer, debounceKeyOfMessage } from "./Debounce.ts"
import { DuplicateJob, JobSnoozed } from "./JobError.ts"
import { type JobRegistry, jobOf } from "./RegisteredJob.ts"
import { backoffDelayMs, isExhausted, isLastAttempt, type ResolvedRetryPolicy } from "./Retry.ts"
import { keyOfMessage, type UniqueKeys } from "./Uniqueness.ts"

/** Header of an archived job message holding its result (its output encoded with the job's `success` Schema). */
export const RESULT_HEADER = "pgbus_result"

/** Header of an archived job message that was discarded: the failure that discarded it. */
export const DISCARDED_HEADER = "pgbus_discarded"

/**
 * What becomes of a delivered message.
 *
 * @category models
 */
export type Outcome =
  /**
   * The handler succeeded: archive the message (with `result`, the output encoded with the
   * job's `success` Schema, when it declares one).
   */
  | {
      readonly _tag: "Succeeded"
      readonly result?: unknown
      /** Still settling (`Settling.ts`): the slot is free, the message acknowledged once this commits. */
      readonly settle?: Effect.Effect<void, unknown> | undefined
    }
  /** The attempt failed: record it and deliver again after `delayMs`. */
  | { readonly _tag: "Retry"; readonly delayMs: number; readonly failure: Failure }
  /**
   * No attempt is left (or the delivery is past the limit): move to the dead-letter queue.
   * `maxRetries` is the job's own policy's, written into the block.
   */
  | {
      readonly _tag: "DeadLetter"
      readonly failure: Failure | undefined
      readonly maxRetries: number
      /** Why, when it is not that the retries were used up. */
      readonly reason?: DeadLetterReason | undefined
    }
  /** The run was interrupted (shutdown past the drain timeout): give the message back. */
  | { readonly _tag: "Abandoned" }
  /** A typed error the job's `discardOn` names: archive the message with a `discarded` mark, no retry, no DLQ. */
  | { readonly _tag: "Discarded"; readonly failure: Failure }
  /**
   * A debounced delivery that a later enqueue of its key replaced: archived without running,
   * with a discarded mark whose error class is `Superseded` (its awaiters get `JobDiscarded`).
   */
  | { readonly _tag: "Superseded" }
  /** The handler snoozed (`Job.snooze`): back in the queue after `delayMs`, the attempt not counted. */
  | { readonly _tag: "Snoozed"; readonly delayMs: number }

/** A failure as recorded: class (a typed error's `_tag`, else its name), message, stack. */
export const failureOf = (cause: Cause.Cause<unknown>, attempt: number): Failure => {
  const error = Cause.squash(cause)
  if (typeof error === "object" && error !== null) {
    const e = error as { readonly _tag?: unknown; readonly name?: unknown; readonly message?: unknown; stack?: unknown }
    const errorClass = typeof e._tag === "string" ? e._tag : typeof e.name === "string" ? e.name : "Error"
    const message = typeof e.message === "string" && e.message !== "" ? e.message : safeString(error)
    return { errorClass, message, stack: typeof e.stack === "string" ? e.stack : undefined, attempt }
  }
  return { errorClass: typeof error, message: safeString(error), attempt }
}

const safeString = (u: unknown): string => {
  try {
    return typeof u === "string" ? u : (JSON.stringify(u) ?? String(u))
  } catch {
    return String(u)
  }
}

/** The ordering key a message carries (`pgbus_order_key`), if any. */
const orderKeyOf = (m: Message): string | undefined => {
  const key =
    typeof m.message === "object" && m.message !== null
      ? (m.message as { readonly pgbus_order_key?: unknown }).pgbus_order_key
      : undefined
  return typeof key === "string" ? key : undefined
}

const tagOf = (error: unknown): string | undefined => {
  const tag = typeof error === "object" && error !== null ? (error as { readonly _tag?: unknown })._tag : undefined
  return typeof tag === "string" ? tag : undefined
}

/**
 * Decides a delivery's outcome from the run's exit: success archives, interruption gives the
 * message back, a failure retries with backoff until the last allowed attempt, then
 * dead-letters. A typed error named by the job's `discardOn` discards it, by `deadLetterOn`
 * dead-letters it at once; `Job.snooze` snoozes it. Pure: `random` in [0, 1) spreads the delay.
 */
export const decide = (
  exit: Exit.Exit<unknown, unknown>,
  attempt: number,
  policy: ResolvedRetryPolicy,
  random: number
): Outcome => {
  if (Exit.isSuccess(exit)) return { _tag: "Succeeded" }
  if (Cause.hasInterruptsOnly(exit.cause)) return { _tag: "Abandoned" }
  // per-error rules see typed failures only (a defect is always retried)
  const error = Cause.findErrorOption(exit.cause)
  if (Option.isSome(error) && error.value instanceof JobSnoozed)
    return { _tag: "Snoozed", delayMs: error.value.delayMs }
  const failure = failureOf(exit.cause, attempt)
  const tag = Option.isSome(error) ? tagOf(error.value) : undefined
  if (tag !== undefined && policy.discardOn?.has(tag)) return { _tag: "Discarded", failure }
  if (tag !== undefined && policy.deadLetterOn?.has(tag)) {
    return { _tag: "DeadLetter", failure, maxRetries: policy.maxRetries }
  }
  if (isLastAttempt(policy, attempt)) return { _tag: "DeadLetter", failure, maxRetries: policy.maxRetries }
  return { _tag: "Retry", delayMs: backoffDelayMs(policy, attempt, random), failure }
}

/**
 * The outcome of a delivery before it runs: a dead letter when it is past the policy's limit
 * (delivered again without a recorded verdict: the process running it died), else none.
 */
export const beforeRun = (policy: ResolvedRetryPolicy, readCt: number): Outcome | undefined =>
  readCt >= READ_COUNT_LIMIT
    ? {
        _tag: "DeadLetter",
        // a row no claim can count further (its read_ct at int4's maximum) never runs again,
        // whatever the policy: it would be claimed without end
        failure: {
          errorClass: "ReadCountLimit",
          message: `the message's read count reached ${READ_COUNT_LIMIT}: no further delivery can be counted`,
          attempt: readCt
        },
        maxRetries: policy.maxRetries,
        reason: "read_count_limit"
      }
    : isExhausted(policy, readCt)
      ? { _tag: "DeadLetter", failure: undefined, maxRetries: policy.maxRetries }
      : undefined

/**
 * Whether a claim may archive a success in its own statement: not a batch member nor a unique
 * job (those end, or release their key, after their archive). A limited job may: the claim that
 * archives it counts its slot free at once (a flush instead wakes the readers).
 */
export const archivableByClaim = (m: Message): boolean =>
  m.headers[BATCH_ID_HEADER] === undefined && keyOfMessage(m) === undefined

/**
 * Runs the first delivery of a debounced job only if its message is still its key's last (which
 * closes the key's window); a superseded one is archived without running. Later deliveries (a
 * retry of the one that ran) and other jobs run as they are.
 */
export const runDebounced = (
  debouncer: Debouncer,
  registry: JobRegistry,
  m: Message,
  policy: ResolvedRetryPolicy,
  run: Effect.Effect<Outcome>
): Effect.Effect<Outcome> => {
  const key = debounceKeyOfMessage(m)
  if (key === undefined || m.readCt !== 1) return run
  const { name, registered } = jobOf(registry, m)
  if (registered?.job.debounce === undefined) return run
  return debouncer.close(name, key, m).pipe(
    Effect.matchEffect({
      onFailure: (error) => Effect.map(Random.next, (random) => decide(Exit.fail(error), m.readCt, policy, random)),
      onSuccess: (last): Effect.Effect<Outcome> => (last ? run : Effect.succeed({ _tag: "Superseded" }))
    })
  )
}

/**
 * Runs a delivery of a `whileExecuting` job under its key: taken before the run, released after
 * it however it ends. A key held by another message's run: `reject` fails the delivery with
 * `DuplicateJob` (retried by the job's policy), `discard` and `log` archive it without running.
 * Other deliveries run as they are.
 */
export const runExclusive = (
  uniqueKeys: UniqueKeys,
  registry: JobRegistry,
  m: Message,
  holder: string,
  policy: ResolvedRetryPolicy,
  run: Effect.Effect<Outcome>
): Effect.Effect<Outcome> => {
  const key = keyOfMessage(m)
  if (key === undefined) return run
  const { name, registered } = jobOf(registry, m)
  const spec = registered?.job.unique
  if (spec === undefined || spec.strategy !== "whileExecuting") return run
  const refused = (cause: Cause.Cause<unknown>) =>
    Effect.map(Random.next, (random) => decide(Exit.failCause(cause), m.readCt, policy, random))
  return uniqueKeys.acquireRun(name, key, m, holder).pipe(
    Effect.matchEffect({
      // the key could not be looked at: the delivery fails and is retried like every other failure
      onFailure: (error) => refused(Cause.fail(error)),
      onSuccess: (acquired): Effect.Effect<Outcome> => {
        if (acquired) {
          return Effect.ensuring(
            run,
            uniqueKeys
              .release([m])
              .pipe(Effect.catch((error) => Effect.logWarning("pgbus: releasing a uniqueness key failed", error)))
          )
        }
        const dropped: Effect.Effect<Outcome> = Effect.succeed({ _tag: "Succeeded" })
        return spec.onConflict === "reject"
          ? refused(Cause.fail(new DuplicateJob({ job: name, key, holder: "" })))
          : spec.onConflict === "log"
            ? Effect.logWarning(`pgbus: job ${name} not run: another run holds its key`).pipe(
                Effect.annotateLogs({ queue: m.queue, msg_id: String(m.msgId), unique_key: key }),
                Effect.andThen(dropped)
              )
            : dropped
      }
    })
  )
}

/** What a completer needs. */
export interface CompleterDeps {
  readonly store: QueueStore["Service"]
  readonly registry: JobRegistry
  /** Records the end of batch members after their archive or dead-letter (never fails). */
  readonly recordBatchOutcomes?: ((outcomes: ReadonlyArray<MemberOutcome>) => Effect.Effect<void>) | undefined
  /** Releases unique jobs' keys after their archive or dead-letter. */
  readonly uniqueKeys?: UniqueKeys | undefined
}

/**
 * Applies outcomes for a worker.
 *
 * @category models
 */
export interface Completer {
  /**
   * Applies a retry, a dead letter, an abandon, or a success that keeps a result (archived at
   * once, with it, waking its awaiters); never fails (a write that fails is logged, the message
   * left to its visibility).
   */
  readonly complete: (message: Message, outcome: Outcome) => Effect.Effect<void>
  /** Ends the batch members among successes just archived. */
  readonly archived: (messages: ReadonlyArray<Message>) => Effect.Effect<void>
}

/** Makes the completer of a worker. */
export const makeCompleter = ({ store, registry, recordBatchOutcomes, uniqueKeys }: CompleterDeps): Completer => {
  // A key is released once its message is gone (a crash in between is the reaper's to repair).
  // The end of a limited job frees a slot: parked jobs of its key may be claimed now, by any
  // process (a NOTIFY, as a send's), not at the next poll.
  const wakeParked = (messages: ReadonlyArray<Message>) => {
    const queues = new Set<string>()
    for (const m of messages) if (isLimited(m)) queues.add(m.queue)
    return Effect.forEach(
      queues,
      (queue) =>
        store.wake(queue).pipe(Effect.catch((error) => Effect.logWarning("pgbus: waking a queue failed", error))),
      { discard: true }
    )
  }
  const releaseKeys = (messages: ReadonlyArray<Message>) => {
    if (uniqueKeys === undefined || !messages.some((m) => keyOfMessage(m) !== undefined)) return Effect.void
    return retryTransient(uniqueKeys.release(messages, { ifGone: true })).pipe(
      Effect.asVoid,
      Effect.catch((error) => Effect.logWarning("pgbus: releasing uniqueness keys failed (the reaper will)", error))
    )
  }

  // Batch members end in a second statement after their archive or dead-letter (a crash in
  // between is the batch sweep's to repair). The flusher waits for it, so that successes pile
  // up for the next flush (fewer, larger archives and ends: a recording fiber that did not
  // wait was about 8 % slower in bench:batches), but for a second at most: a batch row locked
  // by a long enqueue transaction must not hold up the archives. Messages of no batch cost a
  // header lookup.
  const endBatchMembers = (messages: ReadonlyArray<Message>, outcome: MemberOutcome["outcome"]) => {
    if (recordBatchOutcomes === undefined) return Effect.void
    const ends = outcomesOf(messages, outcome)
    if (ends.length === 0) return Effect.void
    return Effect.forkDetach(recordBatchOutcomes(ends)).pipe(
      Effect.flatMap((recording) => Effect.timeoutOption(Fiber.join(recording), "1 second")),
      Effect.asVoid
    )
  }

  // Awaiters of a job that keeps results wake on its outcome: the archive with the result
  // notifies in its statement, a dead letter in one of its own.
  const keepsResult = (m: Message) => jobOf(registry, m).registered?.encodeResult !== undefined
  const notifyOutcome = (m: Message) =>
    keepsResult(m)
      ? store.outcomes
          .notify(m.queue, m.msgId)
          .pipe(Effect.catch((error) => Effect.logWarning("pgbus: waking a job's awaiters failed", error)))
      : Effect.void

  const complete: Completer["complete"] = (m, outcome) =>
    Effect.andThen(applyEnd(m, outcome), isLimited(m) ? wakeParked([m]) : Effect.void)

  const applyEnd: Completer["complete"] = (m, outcome) => {
    const receipt = receiptOf(m)
    switch (outcome._tag) {
      case "Succeeded":
        return retryTransient(
          store.outcomes.archiveWith(
            m.queue,
            receipt,
            outcome.result === undefined ? {} : { [RESULT_HEADER]: outcome.result }
          )
        ).pipe(
          Effect.flatMap((archived) =>
            archived
              ? Effect.andThen(releaseKeys([m]), endBatchMembers([m], "completed"))
              : Effect.logWarning("pgbus: a succeeded job had been delivered again before its archive").pipe(
                  Effect.annotateLogs({ queue: m.queue, msg_id: String(m.msgId) })
                )
          ),
          Effect.catch((error) => Effect.logError("pgbus: archiving a job with its result failed", error))
        )
      case "Retry":
        // the outcome is known: a lost connection must not turn the backoff into a visibility timeout
        return retryTransient(
          store.recordFailure(m.queue, receipt, outcome.failure, Duration.millis(outcome.delayMs))
        ).pipe(
          Effect.tap((kept) =>
            Effect.logWarning(
              `pgbus: job failed (attempt ${m.readCt}), retrying in ${outcome.delayMs} ms: ${outcome.failure.errorClass}: ${outcome.failure.message}`
            ).pipe(
              Effect.annotateLogs({
                job: jobOf(registry, m).name,
                queue: m.queue,
                attempt: m.readCt,
                msg_id: String(m.msgId),
                claim_lost: !kept
              })
            )
          ),
          Effect.asVoid,
          Effect.catch((error) => Effect.logError("pgbus: recording a failure failed", error))
        )
      case "DeadLetter": {
        const registered = jobOf(registry, m).registered
        const options = {
          source: registered?.deadLetterSource ?? "worker",
          maxRetries: outcome.maxRetries,
          ...(outcome.reason ? { reason: outcome.reason } : {}),
          ...(outcome.failure ? { failure: outcome.failure } : {})
        } as const
        // an ordered job that blocks its key: the dead letter and the key's blocker in one transaction
        const key = registered?.job.onDeadLetter === "block" ? orderKeyOf(m) : undefined
        return retryTransient(
          key === undefined
            ? store.moveToDeadLetter(m.queue, receipt, options)
            : store.outcomes.deadLetterBlocking(m.queue, receipt, key, options)
        ).pipe(
          Effect.tap(() =>
            Effect.logError(
              `pgbus: job dead-lettered after ${m.readCt} deliveries${outcome.failure ? `: ${outcome.failure.errorClass}: ${outcome.failure.message}` : ""}`
            ).pipe(
              Effect.annotateLogs({
                job: jobOf(registry, m).name,
                queue: m.queue,
                attempt: m.readCt,
                msg_id: String(m.msgId)
              })
            )
          ),
          Effect.tap((moved) => endBatchMembers(moved._tag === "Some" ? [m] : [], "failed")),
          Effect.tap((moved) => releaseKeys(moved._tag === "Some" ? [m] : [])),
          Effect.tap((moved) => (moved._tag === "Some" ? notifyOutcome(m) : Effect.void)),
          Effect.asVoid,
          Effect.catch((error) => Effect.logError("pgbus: dead-lettering failed", error))
        )
      }
      case "Discarded":
        return retryTransient(
          store.outcomes.archiveWith(m.queue, receipt, { [DISCARDED_HEADER]: encodeFailure(outcome.failure) })
        ).pipe(
          Effect.tap((archived) =>
            Effect.logWarning(
              `pgbus: job discarded (attempt ${m.readCt}): ${outcome.failure.errorClass}: ${outcome.failure.message}`
            ).pipe(Effect.annotateLogs({ queue: m.queue, msg_id: String(m.msgId), claim_lost: !archived }))
          ),
          // a discarded member did not succeed: its batch counts it as failed
          Effect.tap((archived) => endBatchMembers(archived ? [m] : [], "failed")),
          Effect.tap((archived) => releaseKeys(archived ? [m] : [])),
          Effect.asVoid,
          Effect.catch((error) => Effect.logError("pgbus: discarding a job failed", error))
        )
      case "Superseded":
        return retryTransient(
          store.outcomes.archiveWith(m.queue, receipt, {
            [DISCARDED_HEADER]: encodeFailure({
              errorClass: "Superseded",
              message: "a later enqueue of its debounce key replaced it: it did not run",
              attempt: m.readCt
            })
          })
        ).pipe(
          // as before this outcome had its name: a batch counts a superseded member as done
          Effect.tap((archived) => endBatchMembers(archived ? [m] : [], "completed")),
          Effect.tap((archived) => releaseKeys(archived ? [m] : [])),
          Effect.tap((archived) => (archived ? notifyOutcome(m) : Effect.void)),
          Effect.asVoid,
          Effect.catch((error) => Effect.logError("pgbus: archiving a superseded job failed", error))
        )
      case "Snoozed":
        return retryTransient(store.outcomes.snooze(m.queue, receipt, outcome.delayMs)).pipe(
          Effect.tap((kept) =>
            Effect.logDebug(`pgbus: job snoozed for ${outcome.delayMs} ms`).pipe(
              Effect.annotateLogs({ queue: m.queue, msg_id: String(m.msgId), claim_lost: !kept })
            )
          ),
          Effect.asVoid,
          Effect.catch((error) => Effect.logError("pgbus: snoozing a job failed", error))
        )
      case "Abandoned":
        return store.release(m.queue, [receipt]).pipe(
          Effect.asVoid,
          Effect.catch((error) => Effect.logWarning("pgbus: giving a message back failed", error))
        )
    }
  }

  return {
    complete,
    archived: (messages) =>
      Effect.andThen(
        Effect.andThen(releaseKeys(messages), wakeParked(messages)),
        endBatchMembers(messages, "completed")
      )
  }
}
