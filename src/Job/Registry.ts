/**
 * The registry: the job definitions a process can run, with the services their handlers need
 * captured when the layer is built, so that the supervisor's type says what it needs.
 *
 * @since 0.1.0
 */
import { Context, Effect, Exit, Layer, Schema } from "effect"
import { Finished as BatchFinished } from "../Batch/Batch.ts"
import { PgBusConfig } from "../Config.ts"
import { type RegisteredEvents, registerSubscribers } from "../EventBus/Consumer.ts"
import { EVENT_JOB } from "../EventBus/Envelope.ts"
import type { RegisterError } from "../EventBus/EventBusError.ts"
import { type AnySubscriber, isSubscriber } from "../EventBus/Subscription.ts"
import { type RegisteredWorkflow, StepMessage, WorkflowRunner } from "../Workflow/Engine.ts"
import { type AnyWorkflow, isWorkflow } from "../Workflow/Workflow.ts"
import { InvalidWorkflowDefinition } from "../Workflow/WorkflowError.ts"
import { FAN_OUT_JOB, STEP_JOB } from "../Workflow/WorkflowSql.ts"
import { internalJob } from "./InternalJob.ts"
import { type AnyJob, type JobContext, validateDefinition } from "./Job.ts"
import { InvalidJobDefinition, PayloadDecodeError } from "./JobError.ts"
import { type ResolvedRetryPolicy, resolvePolicy } from "./Retry.ts"

/** A job ready to run in this process. */
export interface RegisteredJob {
  readonly job: AnyJob
  readonly policy: ResolvedRetryPolicy
  /** Decodes a stored payload with the job's Schema. */
  readonly decode: (payload: unknown) => Effect.Effect<unknown, PayloadDecodeError>
  /** Runs the handler; its services come from `provide`, around the whole delivery. */
  readonly run: (payload: unknown, context: JobContext["Service"]) => Effect.Effect<unknown, unknown>
  /** Provides the services the handler needs (the registry's, merged once per executor context). */
  readonly provide: <A, E>(effect: Effect.Effect<A, E>) => Effect.Effect<A, E>
}

/**
 * Provides `services` through a cache of merged contexts: an executor runs every delivery in
 * the same context, so the merge (a copy of the whole context, then a new fiber cache) is done
 * once per executor context rather than per job.
 */
const cachedProvide = (services: Context.Context<never>) => {
  const merged = new WeakMap<Context.Context<never>, Context.Context<never>>()
  const withServices = (context: Context.Context<never>) => {
    let out = merged.get(context)
    if (out === undefined) {
      out = Context.merge(context, services)
      merged.set(context, out)
    }
    return out
  }
  return <A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A, E> => Effect.updateContext(effect, withServices)
}

/** The services a list of jobs, workflows and subscribers needs. */
export type JobsRequirements<Jobs extends ReadonlyArray<AnyJob | AnyWorkflow | AnySubscriber>> = {
  readonly [K in keyof Jobs]: Jobs[K] extends {
    readonly handler: (...args: never) => Effect.Effect<unknown, unknown, infer R>
  }
    ? R
    : Jobs[K] extends { readonly body: (...args: never) => Effect.Effect<unknown, unknown, infer R> }
      ? Exclude<R, import("../Workflow/Runtime.ts").WorkflowRuntime>
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
    /** The queues the registered jobs and workflows use (their own or the defaults), deduplicated. */
    readonly queues: ReadonlyArray<string>
    /** Registered workflows by name. */
    readonly workflows: ReadonlyMap<string, RegisteredWorkflow>
    /** Registered event subscribers and their consumer queues. */
    readonly events?: RegisteredEvents | undefined
  }
>()("effect-pgbus/Registry") {
  /**
   * A registry of jobs. Fails with `InvalidJobDefinition` for two jobs with one name or a bad
   * definition. Its requirements are the union of the handlers' requirements.
   */
  static readonly layer = <const Jobs extends ReadonlyArray<AnyJob | AnyWorkflow | AnySubscriber>>(
    definitions: Jobs
  ): Layer.Layer<
    Registry,
    InvalidJobDefinition | InvalidWorkflowDefinition | RegisterError,
    JobsRequirements<Jobs> | PgBusConfig | WorkflowRunner
  > =>
    Layer.effect(
      Registry,
      Effect.gen(function* () {
        const config = yield* PgBusConfig
        const runner = yield* WorkflowRunner
        const services = yield* Effect.context<JobsRequirements<Jobs>>()
        const provide = cachedProvide(services as Context.Context<never>)
        const byName = new Map<string, RegisteredJob>()
        const workflows = new Map<string, RegisteredWorkflow>()
        const jobs: Array<AnyJob> = []
        const subscribers: Array<AnySubscriber> = []
        for (const definition of definitions) {
          if (isSubscriber(definition)) subscribers.push(definition)
          else if (isWorkflow(definition)) {
            if (workflows.has(definition.name)) {
              return yield* new InvalidWorkflowDefinition({
                workflow: definition.name,
                reason: "two workflows are registered with this name"
              })
            }
            workflows.set(definition.name, {
              workflow: definition,
              provide: (effect) => Effect.provide(effect, services) as never
            })
          } else jobs.push(definition)
        }
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
          const decodeSync = Schema.decodeUnknownExit(job.payload)
          const handler = job.handler as (
            payload: unknown,
            context: JobContext["Service"]
          ) => Effect.Effect<unknown, unknown, JobsRequirements<Jobs>>
          byName.set(job.name, {
            job,
            policy: resolvePolicy(config, job.retry),
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
            run: handler as RegisteredJob["run"],
            provide
          })
        }
        for (const reserved of [STEP_JOB, FAN_OUT_JOB]) {
          if (byName.has(reserved)) {
            return yield* new InvalidJobDefinition({ job: reserved, reason: "the name is reserved for workflows" })
          }
        }
        // workflow step messages are jobs of their own, run by the workflow runner
        byName.set(
          STEP_JOB,
          internalJob(config, STEP_JOB, StepMessage, config.workflowQueue, (payload, context) =>
            runner.execute(workflows, payload, { attempt: context.attempt, msgId: context.msgId })
          )
        )
        // a fan-out batch's callback resumes the step waiting on it
        byName.set(
          FAN_OUT_JOB,
          internalJob(config, FAN_OUT_JOB, BatchFinished, config.workflowQueue, (payload) =>
            runner.fanOutFinished(payload)
          )
        )
        // event messages are jobs of their own, dispatched to the subscribers of their queue
        if (byName.has(EVENT_JOB)) {
          return yield* new InvalidJobDefinition({ job: EVENT_JOB, reason: "the name is reserved for events" })
        }
        const events = yield* registerSubscribers(config, subscribers, services as never)
        byName.set(EVENT_JOB, events.job)
        const queues = [
          ...new Set([
            ...jobs.map((job) => job.queue ?? config.defaultQueue),
            ...[...workflows.values()].map((w) => w.workflow.queue ?? config.workflowQueue),
            ...events.consumers.map((c) => c.queue)
          ])
        ]
        return Registry.of({ jobs: byName, queues, workflows, events })
      })
    )
}
