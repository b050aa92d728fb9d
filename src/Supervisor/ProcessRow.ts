/**
 * This process's row in the processes table: registered at boot, beaten with its figures,
 * deleted at shutdown; and the reaping of other processes' stale rows, held back after this
 * process's own trouble reaching the database.
 *
 * @since 0.1.0
 */
import os from "node:os"
import { Clock, Duration, Effect, type Scope } from "effect"
import type { PgBusConfigShape } from "../Config.ts"
import { type DatabaseError, retryTransient } from "../Database.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import { VERSION } from "../version.ts"
import type { Capsule } from "./Capsule.ts"
import type { Processes, ProcessInfo } from "./Processes.ts"
import type { WorkerStats } from "./Worker.ts"

/** What this process's row needs. */
export interface ProcessRowDeps {
  readonly config: PgBusConfigShape
  readonly processes: Processes["Service"]
  readonly processId: string
  readonly roles: ReadonlyArray<string>
  /** The capsules run in this process. */
  readonly local: ReadonlyArray<Capsule>
  readonly capacity: number
  readonly stats: ReadonlyArray<WorkerStats>
  /** repeatMaintenance, quiet while the connection breaker is open. */
  readonly maintain: <A, E>(name: string, task: Effect.Effect<A, E>, every: Duration.Duration) => Effect.Effect<never>
}

/** The row this process registers. */
const registrationOf = (deps: ProcessRowDeps): ProcessInfo => ({
  id: deps.processId,
  pid: process.pid,
  host: os.hostname(),
  roles: deps.roles,
  capsules: deps.local.map((c) => ({
    name: c.name,
    queues: c.queues,
    concurrency: c.concurrency,
    ...(c.consumerPriority === undefined ? {} : { consumerPriority: c.consumerPriority }),
    ...(c.singleActiveConsumer === true ? { singleActiveConsumer: true } : {})
  })),
  capacity: deps.capacity,
  appRevision: deps.config.appRevision,
  version: VERSION
})

/**
 * Registers this process (deleted when the scope closes), forks its heartbeat, and returns the
 * reaping of stale processes for the dispatcher.
 */
export const keepProcessRow = (
  deps: ProcessRowDeps
): Effect.Effect<Effect.Effect<void, DatabaseError | QueueError>, DatabaseError, Scope.Scope> =>
  Effect.gen(function* () {
    const { config, processes, processId, stats, capacity } = deps
    const registration = registrationOf(deps)
    // a database restarting while the supervisor boots is waited for (a minute at most)
    yield* retryTransient(processes.register(registration))
    yield* Effect.addFinalizer(() =>
      processes.unregister(processId).pipe(
        Effect.catch((e) => Effect.logWarning("pgbus: could not unregister the process", e)),
        Effect.andThen(Effect.logInfo("[pgbus] stopped"))
      )
    )

    // After this process failed to reach the database (a beat or a reap failed), the others may
    // have failed too and missed their beats: it reaps again only once it has reached the database
    // for a whole stale threshold, by when a live process has beaten. Otherwise, after an outage
    // longer than the threshold, every process would take the others for dead and run their jobs.
    let troubleAt: number | undefined
    const noteTrouble = Effect.map(Clock.currentTimeMillis, (now) => {
      troubleAt = now
    })
    const reapStale = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      if (troubleAt !== undefined && now - troubleAt < Duration.toMillis(config.staleProcessThreshold)) return
      yield* processes.reapStale.pipe(Effect.tapError(() => noteTrouble))
    })

    // jobs/s over the interval since the previous beat
    let lastBeat = { at: yield* Clock.currentTimeMillis, finished: 0 }
    const beatFigures = Effect.map(Clock.currentTimeMillis, (at) => {
      const succeeded = stats.reduce((n, s) => n + s.succeeded, 0)
      const failed = stats.reduce((n, s) => n + s.retried + s.deadLettered, 0)
      const finished = succeeded + failed
      const seconds = (at - lastBeat.at) / 1000
      const jobsPerSecond = seconds > 0 ? (finished - lastBeat.finished) / seconds : 0
      lastBeat = { at, finished }
      const busy = stats.reduce((n, s) => n + s.running, 0)
      return { busy, capacity, succeeded, failed, jobsPerSecond }
    })

    // the first beat one interval after the registration, which wrote the same figures
    yield* Effect.forkScoped(
      Effect.andThen(
        Effect.sleep(config.processHeartbeatInterval),
        deps.maintain(
          "process heartbeat",
          Effect.gen(function* () {
            const alive = yield* Effect.flatMap(beatFigures, (figures) => processes.beat(processId, figures)).pipe(
              Effect.tapError(() => noteTrouble)
            )
            if (!alive) {
              yield* Effect.logError(
                "pgbus: this process was taken for dead (no beat within the stale threshold); its claims were released; registering again"
              )
              // without its row, its later claims would not be recovered if it died
              yield* processes.register(registration)
            }
          }),
          config.processHeartbeatInterval
        )
      )
    )
    return reapStale
  })
