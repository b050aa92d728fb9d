/**
 * Recurring tasks (seed 002): a job enqueued on a schedule. Declared in code with
 * `Recurring.make(key, { schedule, job, payload })` and registered beside the jobs
 * (`Registry.layer([CleanupJob, Recurring.make("cleanup", ...)])`); the scheduler's leader fires
 * them, once per slot across the cluster.
 *
 * @since 0.1.0
 */
import { readFile } from "node:fs/promises"
import { Effect, Exit, Result, Schema } from "effect"
import type { AnyJob, Job } from "../Job/Job.ts"
import * as QueueName from "../Queue/QueueName.ts"
import type { AnyWorkflow } from "../Workflow/Workflow.ts"
import { InvalidRecurringTask } from "./RecurringError.ts"
import { type CatchUp, type ParsedSchedule, parseSchedule } from "./Schedule.ts"

export type { CatchUp } from "./Schedule.ts"

/** The options of `Recurring.make`. */
export interface RecurringOptions<P> {
  /** Cron (5 fields, or 6 with seconds), a macro (`@daily`) or a phrase ("every day at 2am"). */
  readonly schedule: string
  /** The job to enqueue. */
  readonly job: Job<string, P, unknown, unknown, unknown>
  /** Its payload (checked against the job's Schema here). */
  readonly payload: P
  /** Another queue than the job's own. */
  readonly queue?: string | undefined
  /** What the task is for (shown by `pgbus recurring list`). */
  readonly description?: string | undefined
  /** IANA time zone of the schedule (default UTC; a zone at the end of the schedule also works). */
  readonly timezone?: string | undefined
  /** Slots missed while no scheduler ran: fire the newest (`one`, default), `none`, or `all`. */
  readonly catchUp?: CatchUp | undefined
  /** With `catchUp: "all"`: fire at most this many missed slots, the newest (default 100). */
  readonly catchUpLimit?: number | undefined
}

const TypeId = "~effect-pgbus/Recurring"

/**
 * A recurring task, checked: a job enqueued on a schedule, or (`kind: "workflow"`) a workflow's
 * own schedule, which starts a run per slot (`fromWorkflow`).
 *
 * @category models
 */
export type RecurringTask = JobTask | WorkflowTask

/**
 * A recurring task that enqueues a job.
 *
 * @category models
 */
export interface JobTask extends TaskFields {
  readonly kind: "job"
  readonly job: Job<string, unknown, unknown, unknown, unknown>
}

/**
 * A workflow's schedule: each slot starts a run (its body sees the slot as `run.schedule`); a
 * singleton workflow's slot that finds a run holding the slot is skipped.
 *
 * @category models
 */
export interface WorkflowTask extends TaskFields {
  readonly kind: "workflow"
  readonly workflow: AnyWorkflow
}

/** What every recurring task has. */
export interface TaskFields {
  readonly [TypeId]: typeof TypeId
  readonly key: string
  readonly schedule: ParsedSchedule
  /** The payload as given, and as the job's (workflow's) Schema encodes it (what the ledger's definition stores). */
  readonly payload: unknown
  readonly encodedPayload: unknown
  readonly queue: string | undefined
  readonly description: string | undefined
  readonly catchUp: CatchUp
  readonly catchUpLimit: number
}

/** Whether a value is a recurring task. */
export const isRecurring = (u: unknown): u is RecurringTask => typeof u === "object" && u !== null && TypeId in u

const KEY = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/
const OPTIONS = new Set(["schedule", "job", "payload", "queue", "description", "timezone", "catchUp", "catchUpLimit"])

/** Checks a task's definition: the task, or why it is wrong. */
export const check = <P>(key: string, options: RecurringOptions<P>): Result.Result<JobTask, InvalidRecurringTask> => {
  const invalid = (reason: string) => Result.fail(new InvalidRecurringTask({ task: String(key), reason }))
  if (typeof key !== "string" || !KEY.test(key)) {
    return invalid("the key must start with a letter or digit and use letters, digits, _ . : - (at most 128)")
  }
  for (const option of Object.keys(options)) if (!OPTIONS.has(option)) return invalid(`unknown option ${option}`)
  if (typeof options.schedule !== "string") return invalid("schedule must be a string")
  if (typeof options.job !== "object" || options.job === null || typeof options.job.name !== "string") {
    return invalid("job must be a job definition (Job.make)")
  }
  if (options.queue !== undefined && !/^[a-z][a-z0-9_]*$/.test(options.queue)) {
    return invalid(`queue ${JSON.stringify(options.queue)} must use lowercase letters, digits and underscores`)
  }
  if (options.queue?.endsWith(QueueName.DEAD_LETTER_SUFFIX))
    return invalid("a task cannot enqueue on a dead-letter queue")
  const catchUp = options.catchUp ?? "one"
  if (!["one", "none", "all"].includes(catchUp)) return invalid(`catchUp must be "one", "none" or "all"`)
  const limit = options.catchUpLimit ?? 100
  if (!Number.isInteger(limit) || limit < 1 || limit > 10_000)
    return invalid("catchUpLimit must be an integer, 1 to 10000")
  if (options.description !== undefined && typeof options.description !== "string") {
    return invalid("description must be a string")
  }
  const schedule = parseSchedule(options.schedule, options.timezone)
  if (Result.isFailure(schedule)) return invalid(schedule.failure)
  const encoded = Schema.encodeExit(options.job.payload)(options.payload)
  if (!Exit.isSuccess(encoded)) return invalid(`the payload does not fit job ${options.job.name}'s Schema`)
  return Result.succeed({
    [TypeId]: TypeId,
    kind: "job",
    key,
    schedule: schedule.success,
    job: options.job as Job<string, unknown, unknown, unknown, unknown>,
    payload: options.payload,
    encodedPayload: encoded.value,
    queue: options.queue,
    description: options.description,
    catchUp,
    catchUpLimit: limit
  })
}

/**
 * Defines a recurring task. Throws `InvalidRecurringTask` at definition time for a bad key,
 * schedule, time zone, payload or option (a mistake in code, found when the module loads, like
 * `Job.make`); `check` gives the same answer as a value.
 */
export const make = <P>(key: string, options: RecurringOptions<P>): JobTask => {
  const task = check(key, options)
  if (Result.isFailure(task)) throw task.failure
  return task.success
}

/** The key of a workflow's schedule among the recurring tasks. */
export const workflowTaskKey = (workflow: string): string => `workflow:${workflow}`

/**
 * The recurring task of a workflow's schedule (its key `workflow:<name>`), or undefined when
 * the workflow has none. The registry makes one for each scheduled workflow it registers.
 */
export const fromWorkflow = (workflow: AnyWorkflow): Result.Result<WorkflowTask | undefined, InvalidRecurringTask> => {
  const schedule = workflow.schedule
  if (schedule === undefined) return Result.succeed(undefined)
  const key = workflowTaskKey(workflow.name)
  const encoded = Schema.encodeUnknownExit(workflow.payload)(schedule.payload)
  if (!Exit.isSuccess(encoded)) {
    return Result.fail(
      new InvalidRecurringTask({ task: key, reason: "the schedule's payload does not fit the workflow's Schema" })
    )
  }
  return Result.succeed({
    [TypeId]: TypeId,
    kind: "workflow",
    key,
    schedule: schedule.parsed,
    workflow,
    payload: schedule.payload,
    encodedPayload: encoded.value,
    queue: workflow.queue,
    description: `workflow ${workflow.name}'s schedule`,
    catchUp: "one",
    catchUpLimit: 1
  })
}

/** One task as a file declares it: the job by name (one of those given), the rest as in code. */
const FileTask = Schema.Struct({
  schedule: Schema.String,
  job: Schema.String,
  payload: Schema.optionalKey(Schema.Unknown),
  queue: Schema.optionalKey(Schema.String),
  description: Schema.optionalKey(Schema.String),
  timezone: Schema.optionalKey(Schema.String),
  catchUp: Schema.optionalKey(Schema.Literals(["one", "none", "all"])),
  catchUpLimit: Schema.optionalKey(Schema.Number)
})
const FileTasks = Schema.Record(Schema.String, FileTask)

/**
 * Tasks declared as data (`{ key: { schedule, job: "JobName", payload, queue?, ... } }`, e.g. a
 * parsed JSON file), their jobs found by name among `jobs`; the payload is decoded with the job's
 * Schema. Fails with `InvalidRecurringTask` naming the first bad task; nothing is written.
 */
export const fromRecord = (
  record: unknown,
  jobs: ReadonlyArray<AnyJob>
): Effect.Effect<ReadonlyArray<JobTask>, InvalidRecurringTask> =>
  Effect.gen(function* () {
    const tasks = yield* Schema.decodeUnknownEffect(FileTasks)(record).pipe(
      Effect.mapError((error) => new InvalidRecurringTask({ task: "(file)", reason: error.message }))
    )
    const out: Array<JobTask> = []
    for (const [key, declared] of Object.entries(tasks)) {
      const job = jobs.find((j) => j.name === declared.job) as
        | Job<string, unknown, unknown, unknown, unknown>
        | undefined
      if (job === undefined) {
        return yield* new InvalidRecurringTask({
          task: key,
          reason: `job ${declared.job} is not among the jobs given (${jobs.map((j) => j.name).join(", ") || "none"})`
        })
      }
      const payload = yield* Schema.decodeUnknownEffect(job.payload)(declared.payload ?? {}).pipe(
        Effect.mapError(
          () => new InvalidRecurringTask({ task: key, reason: `the payload does not fit job ${job.name}'s Schema` })
        )
      )
      const { job: _name, payload: _payload, ...rest } = declared
      const task = check(key, { ...rest, job, payload })
      if (Result.isFailure(task)) return yield* task.failure
      out.push(task.success)
    }
    return out
  })

/** Tasks from a JSON file (see `fromRecord`); a file that cannot be read or parsed fails the same way. */
export const fromFile = (
  path: string,
  jobs: ReadonlyArray<AnyJob>
): Effect.Effect<ReadonlyArray<JobTask>, InvalidRecurringTask> =>
  Effect.tryPromise({
    try: () => readFile(path, "utf8").then((text) => JSON.parse(text) as unknown),
    catch: (error) =>
      new InvalidRecurringTask({
        task: `(file ${path})`,
        reason: error instanceof Error ? error.message : String(error)
      })
  }).pipe(Effect.flatMap((record) => fromRecord(record, jobs)))
