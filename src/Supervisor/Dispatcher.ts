/**
 * The dispatcher role's loops (the workflow and batch sweeps, reaping dead processes, retention,
 * the outbox poller) and the scheduler leader's work: maintenance tasks repeated on a schedule,
 * each run only while this process leads its role (see Leader.ts).
 *
 * @since 0.1.0
 */
import { Cause, Duration, Effect, Schedule, Semaphore } from "effect"
import type { BatchSweepReport } from "../Batch/Batch.ts"
import type { PgBusConfigShape } from "../Config.ts"
import * as JobStats from "../Job/JobStats.ts"
import type { RecurringTask } from "../Recurring/Recurring.ts"
import type { RecurringScheduler } from "../Recurring/Scheduler.ts"
import type { SweepReport } from "../Workflow/Engine.ts"

/** Archive retention runs at most this often. */
const ARCHIVE_CLEANUP_EVERY = Duration.hours(1)

/** The uniqueness reaper (keys whose message is gone) runs this often. */
const UNIQUE_KEY_REAP_EVERY = Duration.minutes(1)

/**
 * At most this many of the dispatcher's maintenance tasks run at once in a process (their first
 * round, all due at boot, used to fire a dozen statements at once beside the workers' claims);
 * two so that a task that walks a whole table (an archive of millions of rows: minutes) holds
 * one and the workflow sweep and reaping keep the other (see `maintenanceLanes`).
 */
export const MAINTENANCE_PERMITS = 2

/**
 * The permits of the dispatcher's maintenance. `bounded`: the workflow sweep and reaping, whose
 * rounds are a few statements of bounded size, seconds apart. `walk`: the tasks that page
 * through a whole table (the batch sweep, the uniqueness reaper, the retentions), minutes to an
 * hour apart; they also take a lane of one among themselves, so one permit is always left to
 * the bounded tasks: the workflow sweep and reaping wait at most for each other's round, never
 * for a walk.
 */
export const maintenanceLanes = Effect.gen(function* () {
  const permits = yield* Semaphore.make(MAINTENANCE_PERMITS)
  const walkLane = yield* Semaphore.make(1)
  return {
    bounded: <A, E, R>(task: Effect.Effect<A, E, R>) => permits.withPermits(1)(task),
    walk: <A, E, R>(task: Effect.Effect<A, E, R>) => walkLane.withPermits(1)(permits.withPermits(1)(task))
  }
})

/** Runs a maintenance task repeatedly; a failure is logged and the next tick tries again. */
export const repeatMaintenance = <A, E>(
  name: string,
  task: Effect.Effect<A, E>,
  every: Duration.Duration,
  quiet: () => boolean = () => false
) =>
  task.pipe(
    // while the connection breaker is open the outage was logged once: no line per tick
    Effect.catchCause((cause) =>
      quiet() ? Effect.void : Effect.logWarning(`pgbus: ${name} failed`, Cause.pretty(cause))
    ),
    Effect.repeat(Schedule.spaced(every)),
    Effect.forever
  )

/**
 * The scheduler leader's work: sync the tasks, then fire due slots every tick and apply the
 * ledger's retention hourly; a failed start is tried again after a tick.
 */
export const runScheduler = (
  scheduler: RecurringScheduler["Service"],
  tasks: ReadonlyArray<RecurringTask>,
  every: Duration.Duration
): Effect.Effect<void> =>
  Effect.flatMap(scheduler.session(tasks), (session) =>
    Effect.all(
      [
        repeatMaintenance("recurring scheduler", session.runOnce, every),
        repeatMaintenance(
          "recurring ledger retention",
          Effect.flatMap(scheduler.purge, (n) =>
            n === 0 ? Effect.void : Effect.logInfo(`pgbus: recurring ledger retention deleted ${n} fire(s)`)
          ),
          ARCHIVE_CLEANUP_EVERY
        )
      ],
      { concurrency: "unbounded", discard: true }
    )
  ).pipe(
    Effect.catchCause((cause) =>
      Effect.logWarning("pgbus: the recurring scheduler could not start", Cause.pretty(cause)).pipe(
        Effect.andThen(Effect.sleep(every))
      )
    ),
    Effect.forever
  )

/** A maintenance task as the dispatcher reads it: its outcome (logged) and any failure (logged). */
type Task<A> = Effect.Effect<A, unknown>

/** What the dispatcher's loops run (the parts of the services they use). */
export interface DispatcherDeps {
  readonly config: Pick<PgBusConfigShape, "workflowSweepInterval" | "batchSweepInterval" | "dispatchInterval">
  readonly store: {
    readonly cleanupArchive: () => Task<ReadonlyArray<{ readonly queue: string; readonly deleted: number }>>
  }
  readonly sweep: { readonly runOnce: Task<Pick<SweepReport, "stalled" | "resent" | "timedOut" | "deleted">> }
  readonly batchSweep: { readonly runOnce: Task<BatchSweepReport> }
  readonly processedEvents: { readonly purge: Task<number> }
  readonly outbox: { readonly pollerRole: Effect.Effect<void> }
  readonly uniqueKeys: { readonly reap: Task<{ readonly released: number }> }
  readonly jobStatsSql: { readonly jobStatsDeleteOld: (olderThanMs: number, now: null) => Task<unknown> }
  /** Reaps stale processes (ProcessRow.ts: not right after this process's own trouble). */
  readonly reapStale: Task<void>
  /** Runs a loop while this process leads the dispatcher role, once the workers' boot ramp is over. */
  readonly afterWorkersRamp: <A, E>(loop: Effect.Effect<A, E>) => Effect.Effect<never, E>
  /** repeatMaintenance, quiet while the connection breaker is open. */
  readonly maintain: <A, E>(name: string, task: Effect.Effect<A, E>, every: Duration.Duration) => Effect.Effect<never>
}

/**
 * Forks the dispatcher's loops in the current scope, each behind `afterWorkersRamp`; their
 * rounds share the maintenance permits (`maintenanceLanes`), the outbox poller (delivery, not
 * maintenance) does not.
 */
export const forkDispatcherLoops = (deps: DispatcherDeps) =>
  Effect.gen(function* () {
    const { config, store, sweep, batchSweep, processedEvents, outbox, uniqueKeys, jobStatsSql } = deps
    const { afterWorkersRamp } = deps
    const lanes = yield* maintenanceLanes
    const maintain = <A, E>(name: string, task: Effect.Effect<A, E>, every: Duration.Duration) =>
      deps.maintain(name, lanes.bounded(task), every)
    const walk = <A, E>(name: string, task: Effect.Effect<A, E>, every: Duration.Duration = ARCHIVE_CLEANUP_EVERY) =>
      deps.maintain(name, lanes.walk(task), every)
    yield* Effect.forkScoped(
      afterWorkersRamp(
        maintain(
          "workflow sweep",
          Effect.flatMap(sweep.runOnce, (r) =>
            r.stalled + r.resent + r.timedOut + r.deleted === 0
              ? Effect.void
              : Effect.logInfo(
                  `pgbus: workflow sweep: ${r.stalled} stalled, ${r.resent} re-sent, ${r.timedOut} timed out, ${r.deleted} deleted`
                )
          ),
          config.workflowSweepInterval
        )
      )
    )
    yield* Effect.forkScoped(
      afterWorkersRamp(
        walk(
          "batch sweep",
          Effect.flatMap(batchSweep.runOnce, (r) =>
            r.recovered + r.uncounted + r.unstuck + r.callbacksSent + r.deleted === 0
              ? Effect.void
              : Effect.logInfo(
                  `pgbus: batch sweep: ${r.recovered} member end(s) recovered, ${r.uncounted} member(s) with no message un-counted, ${r.unstuck} stalled, ${r.finished} finished, ${r.callbacksSent} callback set(s) sent, ${r.deleted} deleted`
                )
          ),
          config.batchSweepInterval
        )
      )
    )
    yield* Effect.forkScoped(
      afterWorkersRamp(maintain("reaping stale processes", deps.reapStale, config.dispatchInterval))
    )
    yield* Effect.forkScoped(
      afterWorkersRamp(
        walk(
          "uniqueness key reaper",
          Effect.flatMap(uniqueKeys.reap, (r) =>
            r.released === 0
              ? Effect.void
              : Effect.logInfo(`pgbus: released ${r.released} uniqueness key(s) whose job is gone`)
          ),
          UNIQUE_KEY_REAP_EVERY
        )
      )
    )
    yield* Effect.forkScoped(
      afterWorkersRamp(
        walk(
          "processed-events retention",
          Effect.flatMap(processedEvents.purge, (n) =>
            n === 0
              ? Effect.void
              : Effect.logInfo(`pgbus: idempotency retention deleted ${n} processed-event record(s)`)
          )
        )
      )
    )
    // the outbox poller (returns at once unless outboxEnabled); pollers on several processes
    // never relay one entry twice (SKIP LOCKED)
    yield* Effect.forkScoped(afterWorkersRamp(outbox.pollerRole))
    yield* Effect.forkScoped(
      afterWorkersRamp(
        walk(
          "job statistics retention",
          jobStatsSql.jobStatsDeleteOld(Duration.toMillis(JobStats.STATS_RETENTION), null)
        )
      )
    )
    yield* Effect.forkScoped(
      afterWorkersRamp(
        walk(
          "archive retention",
          Effect.flatMap(store.cleanupArchive(), (report) =>
            report.length === 0
              ? Effect.void
              : Effect.logInfo(
                  `pgbus: archive retention deleted ${report.map((r) => `${r.deleted} from ${r.queue}`).join(", ")}`
                )
          )
        )
      )
    )
  })
