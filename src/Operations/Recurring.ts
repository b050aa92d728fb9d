/**
 * Recurring tasks on the operations surface: every stored task with its schedule, what it fires,
 * its last and next fire (what `pgbus recurring list` prints), and firing one now through the
 * scheduler's `runNow` (a manual fire in the ledger, with who fired it and why; its schedule is
 * unchanged), also logged; a task's fires in the ledger, each run-now's actor and reason with it.
 *
 * @since 0.1.0
 */
import { Effect, Option } from "effect"
import type { Execution, Fire, TaskSummary } from "../Recurring/Scheduler.ts"
import { type Change, type Deps, iso, pageSize } from "./Deps.ts"
import type { RecurringExecutionView, RecurringFireView, RecurringTaskView } from "./Model.ts"
import { InvalidRequest, NotFound, type OperationsError } from "./OperationsError.ts"
import { fromQueueError } from "./Queues.ts"

/** A stored task as the JSON API and MCP answer it (times ISO 8601, absent values null). */
export const recurringTaskView = (t: TaskSummary): RecurringTaskView => ({
  key: t.key,
  schedule: t.schedule,
  cron: t.cron,
  timeZone: t.timeZone,
  kind: t.kind,
  job: t.kind === "job" ? t.job : null,
  workflow: t.kind === "workflow" ? t.job : null,
  queue: t.queue,
  description: t.description,
  catchUp: t.catchUp,
  activeSince: t.activeSince.toISOString(),
  lastRunAt: t.lastRunAt?.toISOString() ?? null,
  nextRunAt: t.nextRunAt?.toISOString() ?? null,
  fires: t.fires,
  lastManualRun:
    t.lastManual === null
      ? null
      : { runAt: t.lastManual.runAt.toISOString(), actor: t.lastManual.actor, reason: t.lastManual.reason }
})

/** A fire in the ledger as the JSON API answers it. */
export const recurringExecutionView = (e: Execution): RecurringExecutionView => ({
  runAt: iso(e.runAt),
  manual: e.manual,
  queue: e.queue,
  messageId: e.msgId === null ? null : `${e.queue}:${e.msgId}`,
  createdAt: iso(e.createdAt),
  actor: e.actor,
  reason: e.reason
})

/** What a manual fire did, in words. */
export const describeFire = (fire: Fire): string => {
  if (fire.skippedFor !== undefined) {
    return `skipped ${fire.task}: run ${fire.skippedFor} holds its singleton workflow's slot`
  }
  if (fire.runId !== undefined) return `started ${fire.task} now as run ${fire.runId} on ${fire.queue}`
  return `enqueued ${fire.task} now as ${fire.queue}:${fire.msgId}`
}

/** A manual fire as the JSON API and MCP answer it. */
export const recurringFireView = (fire: Fire): RecurringFireView => ({
  task: fire.task,
  runAt: fire.runAt.toISOString(),
  queue: fire.queue,
  messageId: fire.runId === undefined && fire.skippedFor === undefined ? `${fire.queue}:${fire.msgId}` : null,
  runId: fire.runId ?? null,
  skippedFor: fire.skippedFor ?? null,
  summary: describeFire(fire)
})

/** Builds the recurring-task operations. */
export const makeRecurring = (deps: Deps) => {
  const { recurring, registry } = deps

  /** Every stored task, by key, with its last and next fire. */
  const recurringTasks: Effect.Effect<ReadonlyArray<TaskSummary>, OperationsError> = recurring.list

  /**
   * Fires a task now from its stored definition: its job is enqueued (or, for a workflow's
   * schedule, its run started from this process's registered definition), recorded in the
   * ledger as a manual fire; its schedule is unchanged.
   */
  const runRecurringNow = (key: string, change: Change): Effect.Effect<Fire, OperationsError> =>
    Effect.gen(function* () {
      if (key.trim() === "" || key.length > 256) {
        return yield* new InvalidRequest({ reason: "a recurring task's key is required (at most 256 characters)" })
      }
      // the stored row of a workflow's schedule lacks the payload Schema and singleton flag: the
      // registered workflow's task has them
      const tasks = Option.match(registry, { onNone: () => undefined, onSome: (r) => r.recurring })
      const fire = yield* recurring.runNow(key, { tasks, actor: change.actor, reason: change.reason }).pipe(
        Effect.mapError((error): OperationsError => {
          switch (error._tag) {
            case "UnknownRecurringTask":
              return new NotFound({ kind: "recurring task", id: key })
            case "WorkflowScheduleNotLoaded":
              return new InvalidRequest({
                reason: `recurring task ${key} starts workflow ${error.workflow}, which is not registered in this process: serve this surface with the app's Registry layer (Registry.layer([..., ${error.workflow}])), or run pgbus recurring run-now ${key} --app MODULE`
              })
            case "InvalidRecurringTask":
              return new InvalidRequest({ reason: error.message })
            case "DatabaseError":
              return error
            case "QueueNotFound":
              return fromQueueError(error.queue)(error)
            default:
              return fromQueueError(key)(error)
          }
        })
      )
      yield* Effect.logWarning(
        `pgbus: recurring task ${key} run now by ${change.actor}${change.reason ? ` (${change.reason})` : ""}: ${describeFire(fire)}`
      )
      return fire
    })

  /** A stored task and its fires in the ledger, newest first (`limit`: 1 to 500, default 50). */
  const recurringExecutions = (
    key: string,
    limit?: number
  ): Effect.Effect<{ readonly task: TaskSummary; readonly executions: ReadonlyArray<Execution> }, OperationsError> =>
    Effect.gen(function* () {
      const size = yield* pageSize(limit)
      const task = (yield* recurring.list).find((t) => t.key === key)
      if (task === undefined) return yield* new NotFound({ kind: "recurring task", id: key })
      return { task, executions: yield* recurring.executions(key, size) }
    })

  return { recurringTasks, runRecurringNow, recurringExecutions }
}
