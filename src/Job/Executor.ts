/**
 * The executor: runs one delivered job message (decode, handler under a span and a timeout)
 * and returns its outcome, decided by the completer (`Completer.ts`), which also applies it.
 *
 * @since 0.1.0
 */
import { type Cause, Context, Duration, Effect, Exit, Metric, Random, References, Tracer } from "effect"
import type { Message } from "../Queue/Message.ts"
import { QueueBreaker, type QueueBreakerShape } from "../Queue/QueueBreaker.ts"
import { beforeRun, decide, type Outcome } from "./Completer.ts"
import { JobContext } from "./Job.ts"
import { linkedSpan } from "./JobClient.ts"
import { JobTimeout, PayloadDecodeError, UnknownJob } from "./JobError.ts"
import { type JobRegistry, jobOf } from "./RegisteredJob.ts"
import { CurrentAttributes, contextOf } from "./RequestContext.ts"
import type { ResolvedRetryPolicy } from "./Retry.ts"
import * as RunningJobs from "./RunningJobs.ts"
import { Settling } from "./Settling.ts"

export { decide, failureOf, type Outcome } from "./Completer.ts"
export { jobOf } from "./RegisteredJob.ts"

const SUCCEEDED: Outcome = { _tag: "Succeeded" }
const succeeded: Effect.Effect<Outcome> = Effect.succeed(SUCCEEDED)

/**
 * Whether a delivery with no failure recorded since the previous one is logged (the config's
 * `zombieDetection`, which the supervisor provides).
 *
 * @category references
 */
export const ZombieDetection = Context.Reference<boolean>("effect-pgbus/ZombieDetection", { defaultValue: () => true })

/** Deliveries that followed one which ended without an outcome, by queue. */
export const zombieDeliveries = Metric.counter("pgbus_zombie_deliveries_total", {
  description: "messages delivered again with no failure recorded for the previous delivery"
})

/**
 * Zombie detection (seed 002): a message read again with no failure recorded had a delivery end
 * without an outcome (a process killed or stopped mid-job, or a job past its visibility timeout);
 * such deliveries still count towards `maxRetries`, so a job killed by repeated deploys can be
 * dead-lettered without ever failing. Logged so that this is seen before it happens.
 */
const zombie = (job: string, message: Message): Effect.Effect<void> =>
  Effect.flatMap(ZombieDetection, (on) =>
    on
      ? Effect.logWarning(
          `pgbus: ${job} delivered again (read ${message.readCt} times) with no failure recorded: an earlier delivery ended without an outcome (a process killed or stopped mid-job, or the job outran its visibility timeout); these deliveries count towards maxRetries`
        ).pipe(
          Effect.annotateLogs({ job, queue: message.queue, msg_id: String(message.msgId), attempt: message.readCt }),
          Effect.andThen(Metric.update(zombieDeliveries.pipe(Metric.withAttributes({ queue: message.queue })), 1))
        )
      : Effect.void
  )

/**
 * What each outcome tells the queue's circuit breaker: a failure (a retry or a dead letter), a
 * success (the count starts again), or nothing (an abandoned, snoozed or discarded delivery: the
 * job's code did not fail, or its rules said the failure does not matter).
 */
const breakerVerdict: { readonly [K in Outcome["_tag"]]: boolean | undefined } = {
  Succeeded: false,
  Retry: true,
  DeadLetter: true,
  Abandoned: undefined,
  Discarded: undefined,
  Superseded: undefined,
  Snoozed: undefined
}

/**
 * `Effect.flatMap`, but a payload that decoded synchronously (an `Exit`, see `RegisteredJob.decode`)
 * goes straight to `f`: one step fewer per delivery. `f` only builds the handler's effect.
 */
const thenRun = <A, E, B, E2>(
  decoded: Effect.Effect<A, E>,
  f: (a: A) => Effect.Effect<B, E2>
): Effect.Effect<B, E | E2> =>
  isExitOf(decoded) && Exit.isSuccess(decoded) ? f(decoded.value) : Effect.flatMap(decoded, f)

const isExitOf = <A, E>(effect: Effect.Effect<A, E>): effect is Exit.Exit<A, E> => Exit.isExit(effect)

/**
 * Runs one delivered message and returns its outcome. Never fails: an unknown job, a payload
 * that no longer decodes, a typed failure, a defect and a timeout are all failures of the
 * delivery, retried and then dead-lettered by the policy.
 */
export const execute = (
  registry: JobRegistry,
  defaultPolicy: ResolvedRetryPolicy,
  message: Message
): Effect.Effect<Outcome> => {
  const { name, registered, payload } = jobOf(registry, message)
  const policy = registered?.policy ?? defaultPolicy
  const exhausted = beforeRun(policy, message.readCt)
  if (exhausted !== undefined) return Effect.succeed(exhausted)
  const jobContext: JobContext["Service"] = {
    job: name,
    queue: message.queue,
    msgId: message.msgId,
    attempt: message.readCt,
    enqueuedAt: message.enqueuedAt,
    headers: message.headers
  }
  const run: Effect.Effect<unknown, unknown> =
    registered === undefined
      ? payload === undefined && name === "(not a job envelope)"
        ? Effect.fail(new PayloadDecodeError({ job: name, issue: "the message is not a job envelope" }))
        : Effect.fail(new UnknownJob({ job: name, queue: message.queue }))
      : thenRun(registered.decode(payload), (decoded): Effect.Effect<unknown, unknown> => {
          const ran = registered.run(decoded, jobContext)
          // the output is encoded inside the attempt: one that cannot be kept fails it
          const encodeResult = registered.encodeResult
          const handler = encodeResult === undefined ? ran : Effect.flatMap(ran, (output) => encodeResult(output))
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
  // One fiber read for the tracer and the breaker; the handler is recorded in `RunningJobs` (for
  // the event-loop watchdog to name) in real time (`performance.now()`, as the watchdog measures
  // the loop's lateness). Per delivery, so no more steps than these.
  const delivery = Effect.withFiber((fiber) => {
    const breaker = fiber.getRef(QueueBreaker)
    const tracer = fiber.getRef(Tracer.Tracer)
    const entry = RunningJobs.started(name, message.queue, message.msgId, performance.now())
    const watched = Effect.ensuring(
      run,
      Effect.sync(() => RunningJobs.finished(entry, performance.now()))
    )
    // no span without a tracing backend (see hotSpan): the native tracer keeps it nowhere
    const traced = tracer === Tracer.nativeTracer ? watched : withExecuteSpan(watched, name, message)
    // one step for both ends (an interruption skips it, as it skipped `Effect.exit`'s)
    return matchBoth(
      traced,
      // the random draw only spreads a retry's delay
      (cause) =>
        Effect.flatMap(Random.next, (random) =>
          toBreaker(breaker, message.queue, decide(Exit.failCause(cause), message.readCt, policy, random))
        ),
      (value) => {
        if (value instanceof Settling) {
          const settling: Outcome = { _tag: "Succeeded", settle: value.settle }
          return breaker === undefined ? Effect.succeed(settling) : toBreaker(breaker, message.queue, settling)
        }
        if (registered?.encodeResult === undefined) {
          return breaker === undefined ? succeeded : toBreaker(breaker, message.queue, SUCCEEDED)
        }
        return toBreaker(breaker, message.queue, { _tag: "Succeeded", result: value })
      }
    )
  })
  const started =
    message.readCt > 1 && message.lastError === undefined ? Effect.andThen(zombie(name, message), delivery) : delivery
  if (registered === undefined) return started
  // the JobContext, the request context captured at enqueue (kept in the headers across retries
  // and the DLQ) and the log annotations (every line of the delivery names its job) are added in
  // the same context update as the registry's services: one context switch per delivery
  const attributes = contextOf(message.headers)
  return registered.provide(started, (services) => {
    const withJob = Context.add(Context.add(services, JobContext, jobContext), References.CurrentLogAnnotations, {
      ...Context.get(services, References.CurrentLogAnnotations),
      job: name,
      queue: message.queue,
      attempt: message.readCt,
      msg_id: String(message.msgId)
    })
    return attributes === undefined ? withJob : Context.add(withJob, CurrentAttributes, attributes)
  })
}

/**
 * `Effect.matchCauseEffect` with its handlers as arguments: a delivery's handlers are closures of
 * their own, and as arrow functions in an object literal a keep-names build (tsx, esbuild) gives
 * each a name with `Object.defineProperty` at every delivery (about 1 us a job in W1).
 */
const matchBoth = <A, E, B, E2, C, E3>(
  self: Effect.Effect<A, E>,
  onFailure: (cause: Cause.Cause<E>) => Effect.Effect<B, E2>,
  onSuccess: (value: A) => Effect.Effect<C, E3>
): Effect.Effect<B | C, E2 | E3> => Effect.matchCauseEffect(self, { onFailure, onSuccess })

/** The delivery under its `pgbus.job.execute` span, linked to the enqueue's. */
const withExecuteSpan = <A, E>(run: Effect.Effect<A, E>, name: string, message: Message): Effect.Effect<A, E> => {
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
}

/** Tells the queue's circuit breaker (when the supervisor runs one) how a delivery ended; returns the outcome. */
const toBreaker = (breaker: QueueBreakerShape | undefined, queue: string, outcome: Outcome): Effect.Effect<Outcome> => {
  const failed = breakerVerdict[outcome._tag]
  if (breaker === undefined || failed === undefined) return Effect.succeed(outcome)
  if (failed) return Effect.as(breaker.failed(queue), outcome)
  // a success resets the count synchronously: no step of its own per delivery
  breaker.succeeded(queue)
  return outcome === SUCCEEDED ? succeeded : Effect.succeed(outcome)
}
