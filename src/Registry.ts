/**
 * The registry: the job definitions, workflows and event subscribers a process runs, with the
 * services their code needs captured when the layer is built, so that the supervisor's type
 * says what it needs. It sits above the features: user jobs are registered by the job layer,
 * workflows and their internal jobs by `Workflow/Registration.ts`, subscribers and the event
 * job by `EventBus/Consumer.ts`; the job layer reads it through its port (`Job/RegisteredJob.ts`).
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, Result } from "effect"
import { PgBusConfig } from "./Config.ts"
import { type RegisteredEvents, registerSubscribers } from "./EventBus/Consumer.ts"
import { EVENT_JOB } from "./EventBus/Envelope.ts"
import type { RegisterError } from "./EventBus/EventBusError.ts"
import { type AnySubscriber, isSubscriber } from "./EventBus/Subscription.ts"
import type { AnyJob } from "./Job/Job.ts"
import { InvalidJobDefinition } from "./Job/JobError.ts"
import { cachedProvide, type JobRegistry, type RegisteredJob, registerJobs } from "./Job/RegisteredJob.ts"
import { fromWorkflow, isRecurring, type RecurringTask } from "./Recurring/Recurring.ts"
import { InvalidRecurringTask } from "./Recurring/RecurringError.ts"
import { type RegisteredWorkflow, WorkflowRunner } from "./Workflow/Engine.ts"
import { registerWorkflows } from "./Workflow/Registration.ts"
import type { WorkflowRuntime } from "./Workflow/Runtime.ts"
import { type AnyWorkflow, isWorkflow } from "./Workflow/Workflow.ts"
import type { InvalidWorkflowDefinition } from "./Workflow/WorkflowError.ts"

/** What `Registry.layer` takes: jobs, workflows, event subscribers and recurring tasks. */
export type Registrable = AnyJob | AnyWorkflow | AnySubscriber | RecurringTask

/** The services a list of jobs, workflows and subscribers needs (recurring tasks need none). */
export type JobsRequirements<Jobs extends ReadonlyArray<Registrable>> = {
  readonly [K in keyof Jobs]: Jobs[K] extends {
    readonly handler: (...args: never) => Effect.Effect<unknown, unknown, infer R>
  }
    ? R
    : Jobs[K] extends { readonly body: (...args: never) => Effect.Effect<unknown, unknown, infer R> }
      ? Exclude<R, WorkflowRuntime>
      : never
}[number]

/** Adds a feature's own jobs under their reserved names; a user job holding one of them fails. */
const reserve = (byName: Map<string, RegisteredJob>, internal: ReadonlyArray<RegisteredJob>, owner: string) =>
  Effect.gen(function* () {
    for (const { job } of internal) {
      if (byName.has(job.name)) {
        return yield* new InvalidJobDefinition({ job: job.name, reason: `the name is reserved for ${owner}` })
      }
    }
    for (const registered of internal) byName.set(registered.job.name, registered)
  })

/**
 * The registry service.
 *
 * @category services
 */
export class Registry extends Context.Service<
  Registry,
  // `jobs`: the registered jobs by name, the library's own included (the job layer's port)
  JobRegistry & {
    /** The queues the registered jobs and workflows use (their own or the defaults), deduplicated. */
    readonly queues: ReadonlyArray<string>
    /** Who uses each queue of the app's own jobs and workflows (`job SendWelcome`, `workflow Order`). */
    readonly queueUsers?: ReadonlyMap<string, ReadonlyArray<string>> | undefined
    /** Registered workflows by name. */
    readonly workflows: ReadonlyMap<string, RegisteredWorkflow>
    /** Registered event subscribers and their consumer queues. */
    readonly events?: RegisteredEvents | undefined
    /** Recurring tasks, fired by the scheduler's leader. */
    readonly recurring?: ReadonlyArray<RecurringTask> | undefined
  }
>()("effect-pgbus/Registry") {
  /**
   * A registry of jobs, workflows, subscribers and recurring tasks. Fails with
   * `InvalidJobDefinition` for two jobs with one name or a bad definition, `InvalidRecurringTask`
   * for two tasks with one key. Its requirements are the union of the handlers' requirements.
   */
  static readonly layer = <const Jobs extends ReadonlyArray<Registrable>>(
    definitions: Jobs
  ): Layer.Layer<
    Registry,
    InvalidJobDefinition | InvalidWorkflowDefinition | RegisterError | InvalidRecurringTask,
    JobsRequirements<Jobs> | PgBusConfig | WorkflowRunner
  > =>
    Layer.effect(
      Registry,
      Effect.gen(function* () {
        const config = yield* PgBusConfig
        const runner = yield* WorkflowRunner
        const services = (yield* Effect.context<JobsRequirements<Jobs>>()) as Context.Context<never>
        const jobs: Array<AnyJob> = []
        const workflowDefinitions: Array<AnyWorkflow> = []
        const subscribers: Array<AnySubscriber> = []
        const recurring: Array<RecurringTask> = []
        for (const definition of definitions) {
          if (isRecurring(definition)) {
            if (recurring.some((t) => t.key === definition.key)) {
              return yield* new InvalidRecurringTask({
                task: definition.key,
                reason: "two recurring tasks have this key"
              })
            }
            recurring.push(definition)
          } else if (isSubscriber(definition)) subscribers.push(definition)
          else if (isWorkflow(definition)) workflowDefinitions.push(definition)
          else jobs.push(definition)
        }
        for (const task of recurring) {
          if (task.kind !== "job") continue
          // a task's job is run by the registry's handler: a job given only inside a task would be
          // enqueued by the scheduler and then fail as UnknownJob on every fire
          if (!jobs.some((job) => job === task.job || job.name === task.job.name)) {
            return yield* new InvalidRecurringTask({
              task: task.key,
              reason: `its job ${task.job.name} is not registered: list ${task.job.name} beside the task in Registry.layer`
            })
          }
        }
        // a workflow's schedule is a recurring task of its own (key `workflow:<name>`)
        for (const definition of workflowDefinitions) {
          const task = fromWorkflow(definition)
          if (Result.isFailure(task)) return yield* task.failure
          if (task.success === undefined) continue
          if (recurring.some((t) => t.key === task.success!.key)) {
            return yield* new InvalidRecurringTask({
              task: task.success.key,
              reason: "two recurring tasks have this key"
            })
          }
          recurring.push(task.success)
        }
        const workflows = yield* registerWorkflows(config, runner, workflowDefinitions, services)
        const byName = yield* registerJobs(config, jobs, cachedProvide(services))
        yield* reserve(byName, workflows.jobs, "workflows")
        // checked before the subscribers are registered: registering stores their subscriptions
        if (byName.has(EVENT_JOB)) {
          return yield* new InvalidJobDefinition({ job: EVENT_JOB, reason: "the name is reserved for events" })
        }
        // event messages are jobs of their own, dispatched to the subscribers of their queue
        const events = yield* registerSubscribers(config, subscribers, services)
        byName.set(EVENT_JOB, events.job)
        const queues = [
          ...new Set([
            ...jobs.map((job) => job.queue ?? config.defaultQueue),
            ...[...workflows.workflows.values()].map((w) => w.workflow.queue ?? config.workflowQueue),
            ...events.consumers.map((c) => c.queue),
            ...recurring.flatMap((task) => (task.queue === undefined ? [] : [task.queue]))
          ])
        ]
        const queueUsers = new Map<string, Array<string>>()
        const use = (queue: string, user: string) => queueUsers.set(queue, [...(queueUsers.get(queue) ?? []), user])
        for (const job of jobs) use(job.queue ?? config.defaultQueue, `job ${job.name}`)
        for (const w of workflows.workflows.values())
          use(w.workflow.queue ?? config.workflowQueue, `workflow ${w.workflow.name}`)
        for (const task of recurring) if (task.queue !== undefined) use(task.queue, `recurring task ${task.key}`)
        return Registry.of({ jobs: byName, queues, queueUsers, workflows: workflows.workflows, events, recurring })
      })
    )
}
