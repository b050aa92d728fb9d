/**
 * Queue states: pausing and resuming queues. A paused queue keeps its messages and takes new
 * ones; no worker of any process claims from it. Each process reads the paused set twice a
 * second (one statement, shared by its workers, started by the first worker that asks), so a
 * pause takes hold within a second everywhere; a resume also wakes the queue's readers.
 *
 * Keyed by physical queue: a queue with priority sub-queues is paused sub-queue by sub-queue
 * (`Operations` does that for the operator's logical name).
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Latch, Layer, Schedule } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../Config.ts"
import { serverError, statementNow, toDatabaseError, unlessUnreachable } from "../Database.ts"
import { Notifier } from "./Notifier.ts"
import { type QueueError, QueueNotFound } from "./QueueError.ts"
import * as QueueName from "./QueueName.ts"
import { makeQueueStateSql } from "./QueueStateSql.ts"

/** How often each process reads the paused set. */
export const PAUSED_REFRESH = Duration.millis(500)

/** A queue's operator state. */
export interface QueueState {
  /** The queue as the app names it. */
  readonly queue: string
  readonly paused: boolean
  readonly pausedAt: Date | undefined
  /** When the pause ends by itself; undefined: until resumed. */
  readonly pausedUntil: Date | undefined
  readonly reason: string | undefined
  readonly actor: string
  readonly updatedAt: Date
  /** Circuit-breaker trips in a row (0: none since the last reset). */
  readonly breakerTrips: number
}

/** Who acts and why. */
export interface StateChange {
  readonly actor: string
  readonly reason?: string | undefined
}

/** What workers read: whether a physical queue is paused, as of the last refresh. */
export interface PausedQueues {
  readonly isPaused: (physicalQueue: string) => boolean
  /** Whether any queue is paused (a check per job costs nothing while none is). */
  readonly any: () => boolean
}

/**
 * The queue states service.
 *
 * @category services
 */
export class QueueStates extends Context.Service<
  QueueStates,
  {
    /** Pauses a queue (until `until`, else until resumed); `changed` is false when it was already paused. */
    readonly pause: (
      queue: string,
      change: StateChange & { readonly until?: Date | undefined }
    ) => Effect.Effect<{ readonly changed: boolean; readonly state: QueueState }, QueueError>
    /** Resumes a queue; `changed` is false when it was not paused. */
    readonly resume: (queue: string, change: StateChange) => Effect.Effect<{ readonly changed: boolean }, QueueError>
    /**
     * The per-queue circuit breaker's trip: pauses a queue that is not paused now for the
     * backoff (`base` doubled at each trip in a row, at most `max`; see `QueueStateSql`).
     * `undefined`: it was paused already.
     */
    readonly trip: (
      queue: string,
      backoff: { readonly base: Duration.Duration; readonly max: Duration.Duration; readonly reason: string }
    ) => Effect.Effect<{ readonly until: Date; readonly trips: number } | undefined, QueueError>
    /** Every queue's state row (paused or not). */
    readonly list: Effect.Effect<ReadonlyArray<QueueState>, QueueError>
    /** The paused set of this process, read now and kept fresh from then on (shared by every caller). */
    readonly watch: Effect.Effect<PausedQueues>
  }
>()("effect-pgbus/QueueStates") {
  static readonly layer: Layer.Layer<QueueStates, never, PgBusConfig | SqlClient.SqlClient | Notifier> = Layer.effect(
    QueueStates,
    Effect.gen(function* () {
      const config = yield* PgBusConfig
      const sql = yield* SqlClient.SqlClient
      const notifier = yield* Notifier
      const statements = makeQueueStateSql(sql, config.schema, notifier.channel)
      const prefix = `${config.queuePrefix}_`

      let current: ReadonlySet<string> = new Set()

      const physicalOf = (queue: string) =>
        Effect.map(QueueName.validate(queue, config.queuePrefix), (name) => name.physical)

      const toState = (row: {
        readonly queue: string
        readonly paused: boolean
        readonly paused_at: Date | null
        readonly paused_until: Date | null
        readonly reason: string | null
        readonly actor: string
        readonly updated_at: Date
        readonly breaker_trips?: number
      }): QueueState => ({
        queue: row.queue.startsWith(prefix) ? row.queue.slice(prefix.length) : row.queue,
        paused: row.paused,
        pausedAt: row.paused ? (row.paused_at ?? undefined) : undefined,
        pausedUntil: row.paused ? (row.paused_until ?? undefined) : undefined,
        reason: row.reason ?? undefined,
        actor: row.actor,
        updatedAt: row.updated_at,
        breakerTrips: row.breaker_trips ?? 0
      })

      const pause = (queue: string, change: StateChange & { readonly until?: Date | undefined }) =>
        Effect.gen(function* () {
          const physical = yield* physicalOf(queue)
          const now = yield* statementNow
          const [row] = yield* statements
            .queueStatePause({
              queue: physical,
              until: change.until ?? null,
              reason: change.reason ?? null,
              actor: change.actor,
              now
            })
            .pipe(
              Effect.mapError((error) =>
                serverError(error).code === "23503" ? new QueueNotFound({ queue }) : toDatabaseError("pause")(error)
              )
            )
          yield* Effect.logInfo(
            `pgbus: queue ${queue} paused by ${change.actor}${change.reason ? `: ${change.reason}` : ""}`
          )
          return { changed: !row!.was_paused, state: toState(row!) }
        })

      const resume = (queue: string, change: StateChange) =>
        Effect.gen(function* () {
          const physical = yield* physicalOf(queue)
          const now = yield* statementNow
          const rows = yield* statements
            .queueStateResume({ queue: physical, reason: change.reason ?? null, actor: change.actor, now })
            .pipe(Effect.mapError(toDatabaseError("resume")))
          if (rows.length === 0) return { changed: false }
          const next = new Set(current)
          next.delete(physical)
          current = next
          yield* notifier.wake(physical)
          yield* Effect.logInfo(
            `pgbus: queue ${queue} resumed by ${change.actor}${change.reason ? `: ${change.reason}` : ""}`
          )
          return { changed: true }
        })

      const trip: QueueStates["Service"]["trip"] = (queue, backoff) =>
        Effect.gen(function* () {
          const physical = yield* physicalOf(queue)
          const now = yield* statementNow
          const [row] = yield* statements
            .queueStateTrip({
              queue: physical,
              baseMs: Duration.toMillis(backoff.base),
              maxMs: Duration.toMillis(backoff.max),
              reason: backoff.reason,
              now
            })
            .pipe(
              Effect.mapError((error) =>
                serverError(error).code === "23503" ? new QueueNotFound({ queue }) : toDatabaseError("trip")(error)
              )
            )
          if (row === undefined) return undefined
          // this process stops claiming at once; the others at their next refresh
          current = new Set([...current, physical])
          return { until: row.paused_until, trips: row.breaker_trips }
        })

      const list = Effect.flatMap(statementNow, (now) => statements.queueStatesAll(now)).pipe(
        Effect.map((rows) => rows.map(toState)),
        Effect.mapError(toDatabaseError("list queue states"))
      )

      // The refresher runs in the layer's scope from the first watch on (a web process that never
      // runs a worker never polls). A failed read keeps the last set: a database blip neither
      // pauses nor resumes anything.
      const started = Latch.makeUnsafe(false)
      let watching = false
      const refresh = Effect.flatMap(statementNow, (now) => statements.queueStatesPaused(now)).pipe(
        Effect.flatMap((rows) =>
          Effect.sync(() => {
            current = new Set(rows.map((r) => r.queue))
          })
        ),
        Effect.catch((error) =>
          unlessUnreachable(config, Effect.logWarning("pgbus: reading paused queues failed", error))
        )
      )
      yield* started.await.pipe(
        Effect.andThen(Effect.sleep(PAUSED_REFRESH)),
        Effect.andThen(refresh.pipe(Effect.repeat(Schedule.spaced(PAUSED_REFRESH)))),
        Effect.forkScoped
      )
      const view: PausedQueues = { isPaused: (queue) => current.has(queue), any: () => current.size > 0 }
      const watch = Effect.suspend(() => {
        if (watching) return Effect.succeed(view)
        watching = true
        return refresh.pipe(Effect.andThen(started.open), Effect.as(view))
      })

      return QueueStates.of({ pause, resume, trip, list, watch })
    })
  )
}
