/**
 * Retention of durable broadcasts. Each is stored with its stream's retention as its `vt`
 * (its expiry), so the sweep deletes by the queue's vt index without matching patterns in SQL;
 * a change of retention applies to broadcasts sent after it. Per stream the highest id deleted
 * is kept (`stream_trims`), so that a client resuming from an older position is told it missed
 * some (`pgbus:gap`). Safe when several processes sweep at once.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../Config.ts"
import { type DatabaseError, statementNow, toDatabaseError } from "../Database.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import { STREAM_FIELD } from "./Envelope.ts"
import { StreamsConfig } from "./StreamsConfig.ts"
import { makeStreamsSql } from "./StreamsSql.ts"

/** Trim marks are kept this long after their last trim (a client holding an older position gets no gap report). */
export const TRIM_MARK_RETENTION = Duration.days(7)

const BATCH = 5_000

/** What one sweep deleted: broadcasts per stream. */
export interface RetentionReport {
  readonly deleted: number
  readonly streams: ReadonlyArray<{ readonly stream: string; readonly deleted: number; readonly through: bigint }>
}

/**
 * The retention service.
 *
 * @category services
 */
export class StreamRetention extends Context.Service<
  StreamRetention,
  {
    /** Deletes the broadcasts past their retention and records each stream's trim mark. */
    readonly runOnce: Effect.Effect<RetentionReport, QueueError | DatabaseError>
    /** The highest id of a stream that retention deleted, if any. */
    readonly trimmedThrough: (stream: string) => Effect.Effect<bigint | undefined, DatabaseError>
  }
>()("effect-pgbus/StreamRetention") {
  /** Retention, swept every `retentionSweepInterval` by this process. */
  static readonly layer: Layer.Layer<
    StreamRetention,
    never,
    StreamsConfig | PgBusConfig | SqlClient.SqlClient | QueueStore
  > = Layer.effect(
    StreamRetention,
    Effect.gen(function* () {
      const config = yield* StreamsConfig
      const pgbus = yield* PgBusConfig
      const sql = yield* SqlClient.SqlClient
      const store = yield* QueueStore
      const statements = makeStreamsSql(sql, pgbus.schema)

      const runOnce = Effect.gen(function* () {
        const perStream = new Map<string, { deleted: number; through: bigint }>()
        let deleted = 0
        while (true) {
          const rows = yield* store.feed.deleteExpired(config.queue, STREAM_FIELD, BATCH)
          const named = rows.filter((r): r is typeof r & { key: string } => r.key !== undefined)
          if (named.length > 0) {
            const now = yield* statementNow
            yield* statements
              .trimRecord(
                named.map((r) => r.key),
                named.map((r) => r.maxId),
                now
              )
              .pipe(Effect.mapError(toDatabaseError("record stream trims")))
          }
          let n = 0
          for (const r of rows) {
            n += r.count
            if (r.key === undefined) continue
            const seen = perStream.get(r.key)
            perStream.set(r.key, {
              deleted: (seen?.deleted ?? 0) + r.count,
              through: seen !== undefined && seen.through > r.maxId ? seen.through : r.maxId
            })
          }
          deleted += n
          if (n < BATCH) break
        }
        const now = yield* statementNow
        yield* statements
          .trimDeleteOlderThan(Duration.toMillis(TRIM_MARK_RETENTION), now)
          .pipe(Effect.mapError(toDatabaseError("delete old stream trims")))
        return {
          deleted,
          streams: [...perStream].map(([stream, s]) => ({ stream, ...s }))
        } satisfies RetentionReport
      }).pipe(Effect.withSpan("Streams.retention"))

      const trimmedThrough = (stream: string) =>
        statements.trimGet(stream).pipe(
          Effect.map(([row]) => row?.trimmed_through),
          Effect.mapError(toDatabaseError(`read the trim mark of ${stream}`))
        )

      yield* Effect.gen(function* () {
        while (true) {
          yield* Effect.sleep(config.retentionSweepInterval)
          yield* runOnce.pipe(
            Effect.catchCause((cause) => Effect.logWarning("pgbus streams: the retention sweep failed", cause))
          )
        }
      }).pipe(Effect.forkScoped)

      return StreamRetention.of({ runOnce, trimmedThrough })
    })
  )
}
