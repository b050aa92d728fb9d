/**
 * Registered jobs, the job layer's port on the registry: what the executor and the completer
 * read of the process's registry (`src/Registry.ts`, which sits above the features and fills
 * it), and the registration of user jobs (checked definitions, decoders, captured services).
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Exit, Schema } from "effect"
import type { PgBusConfigShape } from "../Config.ts"
import type { DeadLetterSource, Message } from "../Queue/Message.ts"
import type { ReadClaim } from "../Queue/QueueRows.ts"
import { type AnyJob, type JobContext, validateDefinition } from "./Job.ts"
import { InvalidJobDefinition, InvalidResult, PayloadDecodeError } from "./JobError.ts"
import { type ResolvedRetryPolicy, resolvePolicy, withErrorRules } from "./Retry.ts"

/** A job ready to run in this process. */
export interface RegisteredJob {
  readonly job: AnyJob
  readonly policy: ResolvedRetryPolicy
  /** Decodes a stored payload with the job's Schema. */
  readonly decode: (payload: unknown) => Effect.Effect<unknown, PayloadDecodeError>
  /** Runs the handler; its services come from `provide`, around the whole delivery. */
  readonly run: (payload: unknown, context: JobContext["Service"]) => Effect.Effect<unknown, unknown>
  /**
   * Provides the services the handler needs (the registry's, merged once per executor context),
   * then `also`'s additions (a delivery's own services) in the same context update.
   */
  readonly provide: <A, E>(
    effect: Effect.Effect<A, E>,
    also?: (context: Context.Context<never>) => Context.Context<never>
  ) => Effect.Effect<A, E>
  /** Encodes the handler's output with the job's `success` Schema (absent: no result is kept). */
  readonly encodeResult?: ((output: unknown) => Effect.Effect<unknown, InvalidResult>) | undefined
  /** Who a dead letter's block names as its mover (default `worker`; event deliveries: `consumer`). */
  readonly deadLetterSource?: DeadLetterSource | undefined
  /**
   * Its message's archive is not its outcome (a workflow step's outcome is committed with the
   * step): a claim that archives only such messages may commit without waiting for the WAL flush.
   */
  readonly archiveIsLease?: boolean | undefined
  /**
   * Its message is deleted when it succeeds, not archived: its outcome is recorded elsewhere
   * (a workflow step's, in its run's rows and audit trail), so an archive row would be a copy
   * written once and deleted again by `cleanupArchive`.
   */
  readonly deleteOnSuccess?: boolean | undefined
  /**
   * The claim a worker's plain read of a queue (the capsule's name of it) makes, in its own
   * statement, for this job's messages it delivers to an executor at once (a woken workflow
   * step's claim); undefined: none for that queue.
   */
  readonly readClaim?: ((logical: string) => ReadClaim | undefined) | undefined
}

/**
 * The registry as the job layer reads it: the registered jobs by name, the library's own
 * included. `Registry` (in `src/Registry.ts`) is one.
 *
 * @category models
 */
export interface JobRegistry {
  readonly jobs: ReadonlyMap<string, RegisteredJob>
}

/** Whether a stored message is a job envelope: what `Schema.is(Envelope)` checks, by hand (it runs per delivery). */
const isEnvelope = (u: unknown): u is { readonly job: string; readonly payload?: unknown } =>
  typeof u === "object" && u !== null && !Array.isArray(u) && typeof (u as { job?: unknown }).job === "string"

/** Finds the job a message names (undefined when the message is not a job envelope). */
export const jobOf = (
  registry: JobRegistry,
  message: Message
): { readonly name: string; readonly registered: RegisteredJob | undefined; readonly payload: unknown } => {
  const envelope = message.message
  if (!isEnvelope(envelope)) return { name: "(not a job envelope)", registered: undefined, payload: undefined }
  return { name: envelope.job, registered: registry.jobs.get(envelope.job), payload: envelope.payload }
}

/** The name of the job a message names, as `jobOf` gives it, without the lookup (per ended delivery). */
export const jobNameOf = (message: Message): string =>
  isEnvelope(message.message) ? message.message.job : "(not a job envelope)"

/**
 * Provides `services` through a cache of merged contexts: an executor runs every delivery in
 * the same context, so the merge (a copy of the whole context, then a new fiber cache) is done
 * once per executor context rather than per job.
 */
export const cachedProvide = (services: Context.Context<never>) => {
  const merged = new WeakMap<Context.Context<never>, Context.Context<never>>()
  const withServices = (context: Context.Context<never>) => {
    let out = merged.get(context)
    if (out === undefined) {
      out = Context.merge(context, services)
      merged.set(context, out)
    }
    return out
  }
  return <A, E>(
    effect: Effect.Effect<A, E>,
    also?: (context: Context.Context<never>) => Context.Context<never>
  ): Effect.Effect<A, E> =>
    Effect.updateContext(effect, also === undefined ? withServices : (context) => also(withServices(context)))
}

/**
 * The encoder of a job's output: its `success` Schema's encoded form, refused when it is not
 * JSON or over `limit` bytes (the result rides in the archived message's headers).
 */
export const resultEncoder = (
  job: string,
  schema: Schema.ConstraintCodec<unknown, unknown>,
  limit: number
): ((output: unknown) => Effect.Effect<unknown, InvalidResult>) => {
  const encode = Schema.encodeUnknownEffect(schema)
  return (output) =>
    encode(output).pipe(
      Effect.mapError((error) => new InvalidResult({ job, issue: error.message })),
      Effect.flatMap((encoded) => {
        let text: string | undefined
        try {
          text = JSON.stringify(encoded)
        } catch {
          text = undefined
        }
        if (text === undefined) return Effect.fail(new InvalidResult({ job, issue: "the encoded output is not JSON" }))
        const size = Buffer.byteLength(text, "utf8")
        return size > limit
          ? Effect.fail(new InvalidResult({ job, issue: `the encoded output is ${size} bytes, over ${limit}` }))
          : Effect.succeed(encoded)
      })
    )
}

/**
 * Registers user jobs: checks each definition and builds its decoder and retry policy; their
 * handlers' services come from `provide`. Fails with `InvalidJobDefinition` for two jobs with
 * one name or a bad definition.
 */
export const registerJobs = (
  config: PgBusConfigShape,
  jobs: ReadonlyArray<AnyJob>,
  provide: RegisteredJob["provide"]
): Effect.Effect<Map<string, RegisteredJob>, InvalidJobDefinition> =>
  Effect.gen(function* () {
    const byName = new Map<string, RegisteredJob>()
    for (const job of jobs) {
      if (byName.has(job.name)) {
        return yield* new InvalidJobDefinition({ job: job.name, reason: "two jobs are registered with this name" })
      }
      const invalid = validateDefinition(job.name, {
        payload: job.payload,
        success: job.success,
        queue: job.queue,
        priority: job.priority,
        retry: job.retry,
        timeout: job.timeout,
        ...(job.unique === undefined
          ? {}
          : {
              unique: {
                key: job.unique.key as ((payload: unknown) => string) | undefined,
                strategy: job.unique.strategy,
                onConflict: job.unique.onConflict,
                ...(job.unique.forMs === undefined ? {} : { for: Duration.millis(job.unique.forMs) })
              }
            }),
        ...(job.limit === undefined
          ? {}
          : {
              limit: {
                to: job.limit.to,
                key: job.limit.key as ((payload: unknown) => string) | undefined,
                onConflict: job.limit.onConflict,
                ...(job.limit.leaseMs === undefined ? {} : { duration: Duration.millis(job.limit.leaseMs) })
              }
            }),
        ...(job.rate === undefined
          ? {}
          : {
              rate: {
                limit: job.rate.limit,
                period: Duration.millis(job.rate.periodMs),
                key: job.rate.key as ((payload: unknown) => string) | undefined
              }
            }),
        ...(job.debounce === undefined
          ? {}
          : {
              debounce: {
                key: job.debounce.key as ((payload: unknown) => string) | undefined,
                period: Duration.millis(job.debounce.periodMs),
                ...(job.debounce.maxWaitMs === undefined ? {} : { maxWait: Duration.millis(job.debounce.maxWaitMs) })
              }
            }),
        discardOn: job.discardOn,
        deadLetterOn: job.deadLetterOn,
        orderKey: job.orderKey as ((payload: unknown) => string | undefined) | undefined,
        onDeadLetter: job.onDeadLetter
      })
      if (invalid !== undefined) return yield* new InvalidJobDefinition({ job: job.name, reason: invalid })
      const decodePayload = Schema.decodeUnknownEffect(job.payload)
      const decodeSync = Schema.decodeUnknownExit(job.payload)
      byName.set(job.name, {
        job,
        policy: withErrorRules(resolvePolicy(config, job.retry), job),
        decode: (payload) => {
          // synchronously when it succeeds (an Exit is an Effect); a failure or an
          // asynchronous schema takes the Effect path, which reports it as before
          const exit = decodeSync(payload)
          return Exit.isSuccess(exit)
            ? Exit.succeed(exit.value)
            : decodePayload(payload).pipe(
                Effect.mapError((error) => new PayloadDecodeError({ job: job.name, issue: error.message }))
              )
        },
        // the requirements are met by `provide`, which wraps the delivery
        run: job.handler as RegisteredJob["run"],
        provide,
        ...(job.success === undefined
          ? {}
          : { encodeResult: resultEncoder(job.name, job.success, config.maxPayloadSize) })
      })
    }
    const mixed = orderedWithLimits(config, jobs)
    if (mixed !== undefined) return yield* new InvalidJobDefinition(mixed)
    return byName
  })

/**
 * An ordered job and a limited or rate-limited one on the same queue: its workers read it with
 * one claim statement, which cannot keep both the order and the limits (not supported yet).
 */
const orderedWithLimits = (
  config: PgBusConfigShape,
  jobs: ReadonlyArray<AnyJob>
): { readonly job: string; readonly reason: string } | undefined => {
  const queueOf = (job: AnyJob) => job.queue ?? config.defaultQueue
  const ordered = new Map<string, string>()
  for (const job of jobs) if (job.orderKey !== undefined) ordered.set(queueOf(job), job.name)
  for (const job of jobs) {
    if (job.limit === undefined && job.rate === undefined) continue
    const other = ordered.get(queueOf(job))
    if (other !== undefined) {
      return {
        job: job.name,
        reason: `its queue ${queueOf(job)} also has the ordered job ${other}: a queue cannot be both ordered and limited (put one of them on another queue)`
      }
    }
  }
  return undefined
}
