/**
 * The errors of recurring tasks.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * A recurring task's definition is wrong: a bad key, a schedule that is neither cron nor a known
 * phrase (or never fires), an unknown time zone, a payload its job's Schema refuses, a bad
 * catch-up, or two tasks with one key. Raised where the task is defined; nothing is written.
 *
 * @category errors
 */
export class InvalidRecurringTask extends Schema.TaggedError<InvalidRecurringTask>()("InvalidRecurringTask", {
  task: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `recurring task ${this.task}: ${this.reason}`
  }
}

/**
 * No recurring task has this key in the database (the scheduler's leader has not synced it, or
 * it was removed from the code).
 *
 * @category errors
 */
export class UnknownRecurringTask extends Schema.TaggedError<UnknownRecurringTask>()("UnknownRecurringTask", {
  task: Schema.String
}) {
  override get message(): string {
    return `no recurring task ${this.task}`
  }
}

/**
 * `runNow` of a workflow's schedule (`workflow:<name>`) without the workflow's definition: the
 * stored task lacks what a start needs (the payload's Schema, the singleton flag), so the run is
 * started from the app's own task. Give the app's tasks (`runNow(key, { tasks })`; on the command
 * line, `pgbus recurring run-now --app MODULE` or PGBUS_APP). Nothing is written.
 *
 * @category errors
 */
export class WorkflowScheduleNotLoaded extends Schema.TaggedError<WorkflowScheduleNotLoaded>()(
  "WorkflowScheduleNotLoaded",
  { task: Schema.String, workflow: Schema.String }
) {
  override get message(): string {
    return `recurring task ${this.task} starts workflow ${this.workflow}, whose definition is not loaded here: load the app that defines it (pgbus recurring run-now ${this.task} --app MODULE, or PGBUS_APP) or pass its tasks to runNow`
  }
}
