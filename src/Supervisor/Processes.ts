/**
 * The processes table: supervisors register, beat, and are reaped when silent. Reaping a dead
 * process releases the messages it had claimed at once (fast recovery), instead of waiting a
 * whole visibility timeout.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Layer, Metric } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../Config.ts"
import { type DatabaseError, statementNow, toDatabaseError } from "../Database.ts"
import { makeUniqueKeys } from "../Job/Uniqueness.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import { type BeatFigures, type LeaderRow, makeProcessSql, type ProcessRow } from "./ProcessSql.ts"

/** What a process registers. */
export interface ProcessInfo {
  readonly id: string
  readonly pid: number
  readonly host: string
  readonly roles: ReadonlyArray<string>
  readonly capsules: ReadonlyArray<{
    readonly name: string
    readonly queues: ReadonlyArray<string>
    readonly concurrency: number
    readonly consumerPriority?: number | undefined
    readonly singleActiveConsumer?: boolean | undefined
  }>
  readonly capacity: number
  readonly appRevision: string | undefined
  readonly version: string
}

/** What one reap found and did. */
export interface ReapReport {
  readonly deadProcesses: ReadonlyArray<string>
  readonly released: ReadonlyArray<{ readonly queue: string; readonly released: number }>
  /** `whileExecuting` uniqueness keys held by runs of the dead processes, released. */
  readonly uniqueKeysReleased?: number | undefined
}

/** Messages made visible again because the process holding them died. */
export const recoveredMessages = Metric.counter("pgbus_recovered_messages_total", {
  description: "messages released at once because the process that claimed them stopped beating"
})

/**
 * The processes service.
 *
 * @category services
 */
export class Processes extends Context.Service<
  Processes,
  {
    readonly register: (info: ProcessInfo) => Effect.Effect<void, DatabaseError>
    /** Records a beat and the process's figures; false if the row is gone (this process was taken for dead). */
    readonly beat: (id: string, figures: BeatFigures) => Effect.Effect<boolean, DatabaseError>
    /** Records a beat of another process (a child whose event loop is blocked), without its figures; false if the row is gone. */
    readonly touch: (id: string) => Effect.Effect<boolean, DatabaseError>
    readonly unregister: (id: string) => Effect.Effect<void, DatabaseError>
    readonly list: Effect.Effect<ReadonlyArray<ProcessRow>, DatabaseError>
    /** The recorded leader of each maintenance role, and whether it still holds the role's lock. */
    readonly leaders: Effect.Effect<ReadonlyArray<LeaderRow>, DatabaseError>
    /** Finds processes silent past the threshold, releases their claims, deletes them. */
    readonly reapStale: Effect.Effect<ReapReport, DatabaseError | QueueError>
    /**
     * Releases the claims of processes known to be dead (a child process that exited without
     * draining: its parent saw it go) and deletes their rows, without waiting for the threshold.
     */
    readonly releaseDead: (ids: ReadonlyArray<string>) => Effect.Effect<ReapReport, DatabaseError | QueueError>
  }
>()("effect-pgbus/Processes") {
  static readonly layer: Layer.Layer<Processes, never, PgBusConfig | SqlClient.SqlClient | QueueStore> = Layer.effect(
    Processes,
    Effect.gen(function* () {
      const config = yield* PgBusConfig
      const sql = yield* SqlClient.SqlClient
      const store = yield* QueueStore
      const statements = makeProcessSql(sql, config.schema)
      const uniqueKeys = makeUniqueKeys(sql, config.schema, store)
      const thresholdMs = Duration.toMillis(config.staleProcessThreshold)

      const register = (info: ProcessInfo) =>
        Effect.flatMap(statementNow, (now) =>
          statements.processRegister(
            {
              id: info.id,
              pid: info.pid,
              host: info.host,
              roles: info.roles,
              capsules: JSON.stringify(info.capsules),
              busy: 0,
              capacity: info.capacity,
              app_revision: info.appRevision ?? null,
              version: info.version
            },
            now
          )
        ).pipe(Effect.asVoid, Effect.mapError(toDatabaseError("register process")))

      const beat = (id: string, figures: BeatFigures) =>
        Effect.flatMap(statementNow, (now) => statements.processBeat(id, figures, now)).pipe(
          Effect.map((rows) => rows.length > 0),
          Effect.mapError(toDatabaseError("process heartbeat"))
        )

      const touch = (id: string) =>
        Effect.flatMap(statementNow, (now) => statements.processTouch(id, now)).pipe(
          Effect.map((rows) => rows.length > 0),
          Effect.mapError(toDatabaseError("child process heartbeat"))
        )

      const unregister = (id: string) =>
        statements.processDelete([id]).pipe(Effect.asVoid, Effect.mapError(toDatabaseError("unregister process")))

      /** Releases the claims and uniqueness keys of dead processes, deletes their rows. */
      const release = (ids: ReadonlyArray<string>) =>
        Effect.gen(function* () {
          const released = yield* store.releaseClaimsOf(ids)
          const uniqueKeysReleased = yield* uniqueKeys.releaseHeldBy(ids)
          yield* statements.processDelete(ids).pipe(Effect.mapError(toDatabaseError("delete dead processes")))
          const total = released.reduce((n, r) => n + r.released, 0)
          if (total > 0) yield* Metric.update(recoveredMessages, total)
          return { deadProcesses: ids, released, uniqueKeysReleased } satisfies ReapReport
        })

      const reapStale = Effect.gen(function* () {
        const now = yield* statementNow
        const stale = yield* statements
          .processListStale(thresholdMs, now)
          .pipe(Effect.mapError(toDatabaseError("find stale processes")))
        if (stale.length === 0) return { deadProcesses: [], released: [] } satisfies ReapReport
        const ids = stale.map((p) => p.id)
        const report = yield* release(ids)
        const total = report.released.reduce((n, r) => n + r.released, 0)
        yield* Effect.logWarning(
          `pgbus: ${ids.length} process(es) stopped beating (${stale.map((p) => `${p.host}:${p.pid}`).join(", ")}); released ${total} claimed message(s)`
        )
        return report
      })

      return Processes.of({
        register,
        beat,
        touch,
        unregister,
        list: statements.processList().pipe(Effect.mapError(toDatabaseError("list processes"))),
        leaders: statements.leaderList().pipe(Effect.mapError(toDatabaseError("list maintenance leaders"))),
        reapStale,
        releaseDead: release
      })
    })
  )
}
