/**
 * The executor: runs one delivered job message and decides what becomes of it. Running is
 * effectful (decode, handler under a span and a timeout); deciding is one pure function,
 * `decide`, from (exit, attempt, policy) to an outcome.
 *
 * @since 0.1.0
 */
import { Cause, Duration, Effect, Exit, Random, Tracer } from "effect"
import type { Failure, Message } from "../Queue/Message.ts"
import { JobContext } from "./Job.ts"
import { type Envelope, linkedSpan } from "./JobClient.ts"
import { JobTimeout, PayloadDecodeError, UnknownJob } from "./JobError.ts"
import type { RegisteredJob, Registry } from "./Registry.ts"
import { backoffDelayMs, isExhausted, isLastAttempt, type ResolvedRetryPolicy } from "./Retry.ts"

/**
 * What becomes of a delivered message.
 *
 * @category models
 */
export type Outcome =
  /** The handler succeeded: archive the message. */
  | { readonly _tag: "Succeeded" }
  /** The attempt failed: record it and deliver again after `delayMs`. */
  | { readonly _tag: "Retry"; readonly delayMs: number; readonly failure: Failure }
  /**
   * No attempt is left (or the delivery is past the limit): move to the dead-letter queue.
   * `maxRetries` is the job's own policy's, written into the block.
   */
  | { readonly _tag: "DeadLetter"; readonly failure: Failure | undefined; readonly maxRetries: number }
  /** The run was interrupted (shutdown past the drain timeout): give the message back. */
  | { readonly _tag: "Abandoned" }

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

/**
 * Decides a delivery's outcome from the run's exit: success archives, interruption gives the
 * message back, a failure retries with backoff until the last allowed attempt, then
 * dead-letters. Pure: `random` in [0, 1) spreads the delay.
 */
export const decide = (
  exit: Exit.Exit<unknown, unknown>,
  attempt: number,
  policy: ResolvedRetryPolicy,
  random: number
): Outcome => {
  if (Exit.isSuccess(exit)) return { _tag: "Succeeded" }
  if (Cause.hasInterruptsOnly(exit.cause)) return { _tag: "Abandoned" }
  const failure = failureOf(exit.cause, attempt)
  if (isLastAttempt(policy, attempt)) return { _tag: "DeadLetter", failure, maxRetries: policy.maxRetries }
  return { _tag: "Retry", delayMs: backoffDelayMs(policy, attempt, random), failure }
}

/** Whether a stored message is a job envelope: what `Schema.is(Envelope)` checks, by hand (it runs per delivery). */
const isEnvelope = (u: unknown): u is Envelope =>
  typeof u === "object" && u !== null && !Array.isArray(u) && typeof (u as { job?: unknown }).job === "string"

/** Finds the job a message names (undefined when the message is not a job envelope). */
export const jobOf = (
  registry: Registry["Service"],
  message: Message
): { readonly name: string; readonly registered: RegisteredJob | undefined; readonly payload: unknown } => {
  const envelope = message.message
  if (!isEnvelope(envelope)) return { name: "(not a job envelope)", registered: undefined, payload: undefined }
  return { name: envelope.job, registered: registry.jobs.get(envelope.job), payload: envelope.payload }
}

const succeeded: Effect.Effect<Outcome> = Effect.succeed({ _tag: "Succeeded" })

/**
 * Runs one delivered message and returns its outcome. Never fails: an unknown job, a payload
 * that no longer decodes, a typed failure, a defect and a timeout are all failures of the
 * delivery, retried and then dead-lettered by the policy.
 */
export const execute = (
  registry: Registry["Service"],
  defaultPolicy: ResolvedRetryPolicy,
  message: Message
): Effect.Effect<Outcome> => {
  const { name, registered, payload } = jobOf(registry, message)
  const policy = registered?.policy ?? defaultPolicy
  if (isExhausted(policy, message.readCt)) {
    // delivered past the limit without a recorded verdict (the process running it died)
    return Effect.succeed({ _tag: "DeadLetter", failure: undefined, maxRetries: policy.maxRetries })
  }
  const run: Effect.Effect<unknown, unknown> =
    registered === undefined
      ? payload === undefined && name === "(not a job envelope)"
        ? Effect.fail(new PayloadDecodeError({ job: name, issue: "the message is not a job envelope" }))
        : Effect.fail(new UnknownJob({ job: name, queue: message.queue }))
      : Effect.flatMap(registered.decode(payload), (decoded): Effect.Effect<unknown, unknown> => {
          const context: JobContext["Service"] = {
            job: name,
            queue: message.queue,
            msgId: message.msgId,
            attempt: message.readCt,
            enqueuedAt: message.enqueuedAt,
            headers: message.headers
          }
          const handler = registered.run(decoded, context).pipe(Effect.provideService(JobContext, context))
          const timeout = registered.job.timeout
          return timeout === undefined
            ? handler
            : handler.pipe(
                Effect.timeoutOrElse({
                  duration: timeout,
                  orElse: () => Effect.fail(new JobTimeout({ job: name, timeoutMs: Duration.toMillis(timeout) }))
                })
              )
        })
  // no span without a tracing backend (see hotSpan): the native tracer keeps it nowhere
  const traced = Effect.flatMap(Effect.tracer, (tracer) => {
    if (tracer === Tracer.nativeTracer) return run
    const link = linkedSpan(message.headers)
    return run.pipe(
      Effect.withSpan(
        "pgbus.job.execute",
        {
          attributes: { queue: message.queue, job: name, msg_id: String(message.msgId), attempt: message.readCt },
          ...(link ? { links: [{ span: link, attributes: { "pgbus.link": "enqueue" } }] } : {})
        },
        { captureStackTrace: false }
      )
    )
  })
  const delivery = traced.pipe(
    Effect.exit,
    Effect.flatMap((exit) =>
      // the random draw only spreads a retry's delay
      Exit.isSuccess(exit)
        ? succeeded
        : Effect.map(Random.next, (random) => decide(exit, message.readCt, policy, random))
    )
  )
  return registered === undefined ? delivery : registered.provide(delivery)
}
