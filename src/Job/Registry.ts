/**
 * The registry: the job definitions a process can run, with the services their handlers need
 * captured when the layer is built, so that the supervisor's type says what it needs.
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, Schema } from "effect"
import { PgBusConfig } from "../Config.ts"
import { type AnyJob, type JobContext, validateDefinition } from "./Job.ts"
import { InvalidJobDefinition, PayloadDecodeError } from "./JobError.ts"
import { type ResolvedRetryPolicy, resolvePolicy } from "./Retry.ts"

/** A job ready to run in this process. */
export interface RegisteredJob {
  readonly job: AnyJob
  readonly policy: ResolvedRetryPolicy
  /** Decodes a stored payload with the job's Schema. */
  readonly decode: (payload: unknown) => Effect.Effect<unknown, PayloadDecodeError>
  /** Runs the handler with its services provided. */
  readonly run: (payload: unknown, context: JobContext["Service"]) => Effect.Effect<unknown, unknown>
}

/** The services a list of jobs needs. */
export type JobsRequirements<Jobs extends ReadonlyArray<AnyJob>> = {
  readonly [K in keyof Jobs]: Jobs[K] extends {
    readonly handler: (...args: never) => Effect.Effect<unknown, unknown, infer R>
  }
    ? R
    : never
}[number]

/**
 * The registry service.
 *
 * @category services
 */
export class Registry extends Context.Service<
  Registry,
  {
    /** Registered jobs by name. */
    readonly jobs: ReadonlyMap<string, RegisteredJob>
    /** The queues the registered jobs use (their own or the default), deduplicated. */
    readonly queues: ReadonlyArray<string>
  }
>()("effect-pgbus/Registry") {
  /**
   * A registry of jobs. Fails with `InvalidJobDefinition` for two jobs with one name or a bad
   * definition. Its requirements are the union of the handlers' requirements.
   */
  static readonly layer = <const Jobs extends ReadonlyArray<AnyJob>>(
    jobs: Jobs
  ): Layer.Layer<Registry, InvalidJobDefinition, JobsRequirements<Jobs> | PgBusConfig> =>
    Layer.effect(
      Registry,
      Effect.gen(function* () {
        const config = yield* PgBusConfig
        const services = yield* Effect.context<JobsRequirements<Jobs>>()
        const byName = new Map<string, RegisteredJob>()
        for (const job of jobs) {
          if (byName.has(job.name)) {
            return yield* new InvalidJobDefinition({ job: job.name, reason: "two jobs are registered with this name" })
          }
          const invalid = validateDefinition(job.name, {
            payload: job.payload,
            queue: job.queue,
            priority: job.priority,
            retry: job.retry,
            timeout: job.timeout
          })
          if (invalid !== undefined) return yield* new InvalidJobDefinition({ job: job.name, reason: invalid })
          const decodePayload = Schema.decodeUnknownEffect(job.payload)
          const handler = job.handler as (
            payload: unknown,
            context: JobContext["Service"]
          ) => Effect.Effect<unknown, unknown, JobsRequirements<Jobs>>
          byName.set(job.name, {
            job,
            policy: resolvePolicy(config, job.retry),
            decode: (payload) =>
              decodePayload(payload).pipe(
                Effect.mapError((error) => new PayloadDecodeError({ job: job.name, issue: error.message }))
              ),
            run: (payload, context) => Effect.provide(handler(payload, context), services)
          })
        }
        const queues = [...new Set(jobs.map((job) => job.queue ?? config.defaultQueue))]
        return Registry.of({ jobs: byName, queues })
      })
    )
}
