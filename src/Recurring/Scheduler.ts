/**
 * The recurring scheduler: syncs the code's tasks to the database and fires their due slots.
 * The supervisor runs it on the one process that leads the scheduler role; a fire is a ledger
 * row unique on (task, slot) and the job's message, in one transaction, so two schedulers at
 * once (a leader change, a deploy) still fire a slot once.
 *
 * @since 0.1.0
 */
import { Context, Cron, Duration, Effect, Layer, Metric, Result, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../Config.ts"
import { DatabaseError, statementNow, toDatabaseError, withTransaction } from "../Database.ts"
import { StorableText } from "../Input.ts"
import { JobClient, physicalQueueOf } from "../Job/JobClient.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import { WorkflowClient } from "../Workflow/Client.ts"
import type { RecurringTask, WorkflowTask } from "./Recurring.ts"
import { InvalidRecurringTask, UnknownRecurringTask, WorkflowScheduleNotLoaded } from "./RecurringError.ts"
import { type FiredBy, type ManualFireRow, makeRecurringSql, type TaskRow } from "./RecurringSql.ts"
import { type CatchUp, dueSlots } from "./Schedule.ts"

/** The header a recurring job's message carries: which task and which slot. */
export const RECURRING_HEADER = "pgbus_recurring"

/** Jobs enqueued by recurring tasks (scheduled and run-now), by task. */
export const recurringEnqueued = Metric.counter("pgbus_recurring_enqueued", {
  description: "jobs enqueued by recurring tasks, by task"
})

/** One fire: the task, its slot, where its job went (or the workflow run it started, or skipped). */
export interface Fire {
  readonly task: string
  readonly runAt: Date
  readonly queue: string
  /** The job's message (0 for a workflow's slot). */
  readonly msgId: bigint
  /** The run a workflow's slot started. */
  readonly runId?: string | undefined
  /** A singleton workflow's slot skipped: the run holding the slot. */
  readonly skippedFor?: string | undefined
}

/** What one tick did. */
export interface TickReport {
  readonly fired: ReadonlyArray<Fire>
  /** Slots another scheduler had fired already. */
  readonly alreadyFired: number
  /** Tasks whose fire failed this tick (their due slots are tried again at the next). */
  readonly failed: ReadonlyArray<{ readonly task: string; readonly reason: string }>
}

/** What a sync wrote. */
export interface SyncReport {
  readonly synced: ReadonlyArray<string>
  /** Definitions deleted because the code no longer has them. */
  readonly removed: ReadonlyArray<string>
}

/** A reason's bound, as the workflow verbs' (the API's and MCP's `reason`). */
export const REASON_MAX = 500

/**
 * Who fires a task by hand, and why, as a run-now takes them: an actor of 1 to 1000 characters
 * (the API's is `api:` and its `authorize` hook's) and a reason of at most `REASON_MAX` (blank:
 * none), both text PostgreSQL can store.
 */
export const RunNowCaller = Schema.Struct({
  actor: StorableText.check(Schema.isMinLength(1), Schema.isMaxLength(1000)),
  reason: Schema.optional(StorableText.check(Schema.isMaxLength(REASON_MAX)))
})
export type RunNowCaller = typeof RunNowCaller.Type

/** A task's latest manual fire: when, who fired it and why (null: recorded without them). */
export interface ManualFire {
  readonly runAt: Date
  readonly actor: string | null
  readonly reason: string | null
}

/** A fire in the ledger: scheduled, or run now by `actor` for `reason` (null for a scheduled one). */
export interface Execution {
  readonly runAt: Date
  readonly manual: boolean
  readonly queue: string
  /** The job's message (null for a workflow's schedule, or a fire that started nothing). */
  readonly msgId: bigint | null
  readonly createdAt: Date
  readonly actor: string | null
  readonly reason: string | null
}

/** A task as `pgbus recurring list` shows it. */
export interface TaskSummary {
  readonly key: string
  readonly schedule: string
  readonly cron: string
  readonly timeZone: string
  /** `job` (enqueues `job`) or `workflow` (a workflow's schedule: `job` names the workflow). */
  readonly kind: "job" | "workflow"
  readonly job: string
  readonly queue: string
  readonly description: string | null
  readonly catchUp: CatchUp
  readonly activeSince: Date
  readonly lastRunAt: Date | null
  /** The next slot after now; null when the stored cron cannot be read. */
  readonly nextRunAt: Date | null
  readonly fires: number
  /** Its latest manual fire (run-now), or null when none is in the ledger. */
  readonly lastManual: ManualFire | null
}

/** A scheduling session: its ticks remember the previous one (slots after it are on time). */
export interface SchedulerSession {
  readonly runOnce: Effect.Effect<TickReport, DatabaseError>
}

/** A stored task as the lists show it, its next fire from `now`. */
const summaryOf = (
  row: TaskRow & ManualFireRow & { readonly last_run_at: Date | null; readonly fires: bigint },
  now: Date
) => {
  const cron = Cron.parse(row.cron, row.time_zone)
  return {
    key: row.key,
    schedule: row.schedule,
    cron: row.cron,
    timeZone: row.time_zone,
    kind: row.kind,
    job: row.job,
    queue: row.queue,
    description: row.description,
    catchUp: row.catch_up as CatchUp,
    activeSince: row.active_since,
    lastRunAt: row.last_run_at,
    nextRunAt: Result.isSuccess(cron) ? Cron.next(cron.success, now) : null,
    fires: Number(row.fires),
    lastManual:
      row.last_manual_run_at === null
        ? null
        : { runAt: row.last_manual_run_at, actor: row.last_manual_actor, reason: row.last_manual_reason }
  } satisfies TaskSummary
}

/** A run-now's caller, decoded before the transaction: a bad one writes nothing. */
const callerOf = (key: string, actor: string | undefined, reason: string | undefined) =>
  actor === undefined && reason === undefined
    ? Effect.succeed(null)
    : Schema.decodeUnknownEffect(RunNowCaller)({ actor: actor ?? "", reason }).pipe(
        Effect.map((c): FiredBy => ({ actor: c.actor, reason: c.reason?.trim() ? c.reason.trim() : null })),
        Effect.mapError((error) => new InvalidRecurringTask({ task: key, reason: `run-now caller: ${error.message}` }))
      )

/**
 * The recurring scheduler service.
 *
 * @category services
 */
export class RecurringScheduler extends Context.Service<
  RecurringScheduler,
  {
    /** Writes the tasks' definitions (a changed schedule is active from now) and deletes the others. */
    readonly sync: (tasks: ReadonlyArray<RecurringTask>) => Effect.Effect<SyncReport, DatabaseError>
    /** Syncs, then gives a session whose `runOnce` fires the due slots (its first tick applies catch-up). */
    readonly session: (tasks: ReadonlyArray<RecurringTask>) => Effect.Effect<SchedulerSession, DatabaseError>
    /**
     * Enqueues a task's job now from its stored definition (a manual fire, recorded in the ledger).
     * A workflow's schedule starts its run from the app's task of that key (`options.tasks`): the
     * stored row lacks the payload's Schema and the singleton flag. `actor` and `reason` (checked
     * as `RunNowCaller`; a bad one fails with InvalidRecurringTask, nothing written) are the
     * caller's, recorded on the ledger row.
     */
    readonly runNow: (
      key: string,
      options?: {
        readonly tasks?: ReadonlyArray<RecurringTask> | undefined
        readonly actor?: string | undefined
        readonly reason?: string | undefined
      }
    ) => Effect.Effect<
      Fire,
      UnknownRecurringTask | InvalidRecurringTask | WorkflowScheduleNotLoaded | DatabaseError | QueueError
    >
    /** Every stored task with its last and next fire. */
    readonly list: Effect.Effect<ReadonlyArray<TaskSummary>, DatabaseError>
    /** A task's fires in the ledger, newest first, at most `limit` (none for an unknown key). */
    readonly executions: (key: string, limit: number) => Effect.Effect<ReadonlyArray<Execution>, DatabaseError>
    /** Deletes ledger rows past the retention (each task's latest scheduled fire stays). */
    readonly purge: Effect.Effect<number, DatabaseError>
  }
>()("effect-pgbus/RecurringScheduler") {
  static readonly layer: Layer.Layer<
    RecurringScheduler,
    never,
    PgBusConfig | SqlClient.SqlClient | JobClient | QueueStore | WorkflowClient
  > = Layer.effect(
    RecurringScheduler,
    Effect.gen(function* () {
      const config = yield* PgBusConfig
      const sql = yield* SqlClient.SqlClient
      const client = yield* JobClient
      const store = yield* QueueStore
      const statements = makeRecurringSql(sql, config.schema)
      const workflows = yield* WorkflowClient
      const queueOf = (task: RecurringTask) =>
        task.kind === "job"
          ? physicalQueueOf(config, task.job, { queue: task.queue })
          : (task.workflow.queue ?? config.workflowQueue)
      const targetOf = (task: RecurringTask) => (task.kind === "job" ? task.job.name : task.workflow.name)

      const sync = (tasks: ReadonlyArray<RecurringTask>) =>
        Effect.gen(function* () {
          const now = yield* statementNow
          for (const task of tasks) {
            yield* statements.taskUpsert(
              {
                key: task.key,
                schedule: task.schedule.schedule,
                cron: task.schedule.cron,
                timeZone: task.schedule.timeZone,
                kind: task.kind,
                job: targetOf(task),
                queue: queueOf(task),
                payload: task.encodedPayload,
                description: task.description ?? null,
                catchUp: task.catchUp,
                catchUpLimit: task.catchUpLimit
              },
              now
            )
          }
          const removed = yield* statements.taskDeleteOthers(tasks.map((t) => t.key))
          return { synced: tasks.map((t) => t.key), removed: removed.map((r) => r.key) } satisfies SyncReport
        }).pipe((effect) => withTransaction(sql, effect), Effect.mapError(toDatabaseError("sync recurring tasks")))

      // A workflow's slot: the ledger row and the run commit together. A singleton whose slot a
      // run holds skips the fire (seed 004's overlap rule): the ledger row stays, the slot is done.
      // A manual fire (run-now) records the statement's now as its slot, marked manual.
      const startScheduled = (task: WorkflowTask, slot: Date | null, now: Date | null, by: FiredBy | null) =>
        Effect.gen(function* () {
          const [row] = yield* statements
            .executionInsert(task.key, slot, slot === null, queueOf(task), now, by)
            .pipe(Effect.mapError(toDatabaseError("record a recurring fire")))
          if (row === undefined) return undefined
          const runAt = row.run_at
          const started = yield* workflows
            .start(task.workflow, task.payload, {
              scheduledFor: runAt,
              idempotencyKey: `schedule:${slot === null ? "manual:" : ""}${runAt.toISOString()}`,
              // a run-now's run names who fired it in its own audit trail, as the ledger does
              actor: slot === null ? (by?.actor ?? "schedule:run-now") : "schedule",
              reason: `${slot === null ? "run now, " : ""}slot ${runAt.toISOString()}${by?.reason ? `: ${by.reason}` : ""}`
            })
            .pipe(
              Effect.map((handle) => ({ runId: handle.id, skippedFor: undefined })),
              Effect.catchTag("SingletonRunInProgress", (e) =>
                Effect.succeed({ runId: undefined, skippedFor: e.holder.id })
              ),
              Effect.mapError((e) =>
                e._tag === "InvalidWorkflowPayload" || e._tag === "AlreadyRunning"
                  ? new DatabaseError({
                      operation: `start workflow ${task.workflow.name} on its schedule`,
                      reason: "refused",
                      detail: e.message,
                      retryable: false
                    })
                  : e
              )
            )
          return { task: task.key, runAt, queue: queueOf(task), msgId: 0n, ...started } satisfies Fire
        })

      // The ledger row first: a second scheduler's insert of the same slot waits on it and
      // then finds it, so only one enqueue commits.
      const fire = (task: RecurringTask, runAt: Date, now: Date | null) =>
        withTransaction(
          sql,
          Effect.gen(function* () {
            if (task.kind === "workflow") return yield* startScheduled(task, runAt, now, null)
            const queue = queueOf(task)
            const [row] = yield* statements
              .executionInsert(task.key, runAt, false, queue, now, null)
              .pipe(Effect.mapError(toDatabaseError("record a recurring fire")))
            if (row === undefined) return undefined
            const ref = yield* client.enqueue(task.job, task.payload, {
              queue: task.queue,
              headers: { [RECURRING_HEADER]: { task: task.key, run_at: runAt.toISOString() } }
            })
            yield* statements
              .executionSetMessage(task.key, runAt, ref.msgId)
              .pipe(Effect.mapError(toDatabaseError("record a recurring fire")))
            return { task: task.key, runAt, queue: ref.queue, msgId: ref.msgId } satisfies Fire
          })
        ).pipe(Effect.mapError((e) => (e._tag === "SqlError" ? toDatabaseError("fire a recurring task")(e) : e)))

      const session = (tasks: ReadonlyArray<RecurringTask>) =>
        Effect.gen(function* () {
          yield* sync(tasks)
          // each task's previous successful tick: slots after it came due while this ran (a
          // task whose fire failed keeps its own, so its slots stay on time for the next tick)
          const sinceOf = new Map<string, Date>()
          const runOnce = Effect.gen(function* () {
            const bound = yield* statementNow
            const [clock] = yield* statements
              .recurringNow(bound)
              .pipe(Effect.mapError(toDatabaseError("read the clock")))
            const now = clock!.now
            const starts = yield* statements
              .taskStarts(tasks.map((t) => t.key))
              .pipe(Effect.mapError(toDatabaseError("read recurring tasks")))
            const fired: Array<Fire> = []
            const failed: Array<{ readonly task: string; readonly reason: string }> = []
            let alreadyFired = 0
            for (const task of tasks) {
              const start = starts.find((s) => s.key === task.key)
              if (start === undefined) continue
              const after =
                start.last_run_at !== null && start.last_run_at > start.active_since
                  ? start.last_run_at
                  : start.active_since
              const slots = dueSlots(task.schedule.parsed, {
                after,
                since: sinceOf.get(task.key),
                now,
                catchUp: task.catchUp,
                limit: task.catchUpLimit
              })
              const outcome = yield* Effect.result(
                Effect.forEach(slots, (slot) =>
                  Effect.flatMap(fire(task, slot, bound), (done: Fire | undefined) => {
                    if (done === undefined) {
                      alreadyFired++
                      return Effect.void
                    }
                    fired.push(done)
                    if (done.skippedFor !== undefined) {
                      return Effect.logInfo(
                        `pgbus.recurring.skip: ${task.key} slot ${slot.toISOString()}: singleton run ${done.skippedFor} holds the slot`
                      )
                    }
                    return Metric.update(Metric.withAttributes(recurringEnqueued, { task: task.key }), 1).pipe(
                      Effect.andThen(
                        Effect.logInfo(
                          done.runId === undefined
                            ? `pgbus.recurring.enqueue: ${task.key} (${task.schedule.schedule}) slot ${slot.toISOString()} -> ${targetOf(task)} ${done.queue}:${done.msgId}`
                            : `pgbus.recurring.start: ${task.key} (${task.schedule.schedule}) slot ${slot.toISOString()} -> run ${done.runId}`
                        )
                      )
                    )
                  })
                )
              )
              // one task's failure (a database error, a refused enqueue) does not hold up the others
              if (Result.isFailure(outcome)) {
                failed.push({ task: task.key, reason: outcome.failure.message })
                yield* Effect.logWarning(`pgbus: recurring task ${task.key} could not fire: ${outcome.failure.message}`)
              } else sinceOf.set(task.key, now)
            }
            return { fired, alreadyFired, failed } satisfies TickReport
          })
          return { runOnce } satisfies SchedulerSession
        })

      const runNow = (
        key: string,
        options?: {
          readonly tasks?: ReadonlyArray<RecurringTask> | undefined
          readonly actor?: string | undefined
          readonly reason?: string | undefined
        }
      ) => Effect.flatMap(callerOf(key, options?.actor, options?.reason), (by) => runNowBy(key, options?.tasks, by))

      const runNowBy = (key: string, tasks: ReadonlyArray<RecurringTask> | undefined, by: FiredBy | null) =>
        withTransaction(
          sql,
          Effect.gen(function* () {
            const now = yield* statementNow
            const [task] = yield* statements
              .taskFind(key)
              .pipe(Effect.mapError(toDatabaseError("find a recurring task")))
            if (task === undefined) return yield* new UnknownRecurringTask({ task: key })
            // the stored row lacks what a start needs (the payload Schema, singleton): the app's task has it
            if (task.kind === "workflow") {
              const loaded = tasks?.find((t): t is WorkflowTask => t.key === key && t.kind === "workflow")
              if (loaded === undefined) return yield* new WorkflowScheduleNotLoaded({ task: key, workflow: task.job })
              const fired = yield* startScheduled(loaded, null, now, by)
              if (fired === undefined) return yield* Effect.die(new Error("two run-now fires at one instant"))
              return fired
            }
            const [row] = yield* statements
              .executionInsert(key, null, true, task.queue, now, by)
              .pipe(Effect.mapError(toDatabaseError("record a recurring fire")))
            if (row === undefined) return yield* Effect.die(new Error("two run-now fires at one instant"))
            yield* client.ensureQueue(task.queue)
            const msgId = yield* store.send(
              task.queue,
              { job: task.job, payload: task.payload },
              { headers: { [RECURRING_HEADER]: { task: key, run_at: row.run_at.toISOString(), manual: true } } }
            )
            yield* statements
              .executionSetMessage(key, row.run_at, msgId)
              .pipe(Effect.mapError(toDatabaseError("record a recurring fire")))
            yield* Metric.update(Metric.withAttributes(recurringEnqueued, { task: key }), 1)
            return { task: key, runAt: row.run_at, queue: task.queue, msgId } satisfies Fire
          })
        ).pipe(Effect.mapError((e) => (e._tag === "SqlError" ? toDatabaseError("run a recurring task now")(e) : e)))

      const list = Effect.gen(function* () {
        const [clock] = yield* statements.recurringNow(yield* statementNow)
        const rows = yield* statements.taskList()
        return rows.map((r) => summaryOf(r, clock!.now))
      }).pipe(Effect.mapError(toDatabaseError("list recurring tasks")))

      const executions = (key: string, limit: number) =>
        statements.executionList(key, limit).pipe(
          Effect.map((rows) =>
            rows.map(
              (r): Execution => ({
                runAt: r.run_at,
                manual: r.manual,
                queue: r.queue,
                msgId: r.msg_id,
                createdAt: r.created_at,
                actor: r.actor,
                reason: r.reason
              })
            )
          ),
          Effect.mapError(toDatabaseError("list a recurring task's fires"))
        )

      const purge = Effect.flatMap(statementNow, (now) =>
        statements.executionsDeleteOld(Duration.toMillis(config.recurringExecutionRetention), now)
      ).pipe(
        Effect.map((rows) => rows.length),
        Effect.mapError(toDatabaseError("recurring ledger retention"))
      )

      return RecurringScheduler.of({ sync, session, runNow, list, executions, purge })
    })
  )
}
