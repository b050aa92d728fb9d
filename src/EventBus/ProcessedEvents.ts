/**
 * Idempotent handlers: each `(event_id, handler)` is claimed in `processed_events` before the
 * handler runs and stamped completed after, so a second delivery of a completed event is
 * skipped, a claim whose holder still beats is left alone, and a claim gone quiet (its process
 * died mid-handler) is run again. Completed ids are cached in memory to skip the round trip.
 *
 * @since 0.1.0
 */
import os from "node:os"
import { Context, Duration, Effect, Exit, Layer, Metric, Schedule } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../Config.ts"
import { type DatabaseError, retryTransient, statementNow, toDatabaseError } from "../Database.ts"
import { EventClaimOwned } from "./EventBusError.ts"
import { makeEventBusSql } from "./EventBusSql.ts"

/**
 * What a claim found.
 *
 * @category models
 */
export type ClaimOutcome =
  /** The claim is ours: run the handler. `takenOver` when it replaced a claim gone quiet. */
  | { readonly _tag: "Claimed"; readonly takenOver: boolean }
  /** The handler already completed this event. */
  | { readonly _tag: "Completed" }
  /** A live holder runs it now; `ageMs` since its last heartbeat. */
  | { readonly _tag: "Owned"; readonly ageMs: number }

/** What an idempotent run did. */
export type IdempotentRun<A> =
  | { readonly _tag: "Ran"; readonly value: A }
  | { readonly _tag: "Skipped"; readonly reason: "completed" }

/** Deliveries whose handler was skipped, by subscriber and reason (`completed`, `owned`). */
export const eventsSkipped = Metric.counter("pgbus_event_skipped_total", {
  description: "idempotent handlers skipped: the event was completed already, or a live holder owned it"
})

/** How many completed `(event, handler)` pairs the in-memory cache remembers. */
const CACHE_SIZE = 100_000

/** Rows the purge deletes per statement. */
const PURGE_BATCH = 5_000

/**
 * The processed-events service.
 *
 * @category services
 */
export class ProcessedEvents extends Context.Service<
  ProcessedEvents,
  {
    /** This process's name on its claims. */
    readonly holder: string
    /** Phase one: claims `(eventId, handler)` unless it is completed or held by a live holder. */
    readonly claim: (eventId: string, handler: string) => Effect.Effect<ClaimOutcome, DatabaseError>
    /** Phase two: stamps our claim completed; false if it was taken over meanwhile. */
    readonly complete: (eventId: string, handler: string) => Effect.Effect<boolean, DatabaseError>
    /** Drops our pending claim (the handler failed), so a retry runs at once. */
    readonly release: (eventId: string, handler: string) => Effect.Effect<void, DatabaseError>
    /**
     * Runs `effect` at most once per `(eventId, handler)`: skipped when completed (the cache
     * first); when a live holder runs it, waits up to one claim window for it to complete
     * (skipped) or go quiet (run here), else fails with `EventClaimOwned`; otherwise runs it
     * under a heartbeated claim, completed on success and released on failure or interruption.
     */
    readonly run: <A, E, R>(
      eventId: string,
      handler: string,
      effect: Effect.Effect<A, E, R>
    ) => Effect.Effect<IdempotentRun<A>, E | EventClaimOwned | DatabaseError, R>
    /** Refreshes the heartbeat of every claim this process runs; returns how many. */
    readonly heartbeat: Effect.Effect<number, DatabaseError>
    /** Deletes records older than `idempotencyTtl` (none when it is unset); returns how many. */
    readonly purge: Effect.Effect<number, DatabaseError>
  }
>()("effect-pgbus/ProcessedEvents") {
  /**
   * The service on the configured schema, with its heartbeat fiber. Claims beat every
   * `processHeartbeatInterval` and one silent for `staleProcessThreshold` is taken for dead.
   */
  static readonly layer: Layer.Layer<ProcessedEvents, never, PgBusConfig | SqlClient.SqlClient> = Layer.effect(
    ProcessedEvents,
    Effect.gen(function* () {
      const config = yield* PgBusConfig
      const sql = yield* SqlClient.SqlClient
      const statements = makeEventBusSql(sql, config.schema)
      const holder = `${os.hostname()}:${process.pid}:${crypto.randomUUID().slice(0, 8)}`
      // Why the process heartbeat's settings and not the visibility heartbeat's: a dead
      // process's messages are released by the reaper once it is silent for
      // staleProcessThreshold, so its claims must count as quiet by the time the message is
      // delivered again. With a window of a visibility timeout (30 s) the redelivery would
      // meet a "live" claim of a dead process; with the stale threshold (10 s) and beats
      // every 2 s it meets a quiet one, or one that is quiet at the retry after.
      const windowMs = Duration.toMillis(config.staleProcessThreshold)
      const beat = config.processHeartbeatInterval
      const live = new Map<string, { readonly eventId: string; readonly handler: string }>()
      const completed = new Set<string>()
      const keyOf = (eventId: string, handler: string) => `${eventId}\u0000${handler}`
      const db = (operation: string) => Effect.mapError(toDatabaseError(operation))

      const remember = (key: string) => {
        if (completed.size >= CACHE_SIZE) {
          const oldest = completed.values().next()
          if (!oldest.done) completed.delete(oldest.value)
        }
        completed.add(key)
      }

      const claim = (eventId: string, handler: string) =>
        Effect.gen(function* () {
          const now = yield* statementNow
          const rows = yield* statements
            .processedClaim(eventId, handler, holder, windowMs, now)
            .pipe(db("claim processed event"))
          const row = rows[0]
          if (row === undefined) return { _tag: "Owned", ageMs: 0 } satisfies ClaimOutcome
          if (row.state === "claimed") return { _tag: "Claimed", takenOver: row.taken_over } satisfies ClaimOutcome
          if (row.state === "completed") return { _tag: "Completed" } satisfies ClaimOutcome
          return { _tag: "Owned", ageMs: Math.max(0, row.age_ms ?? 0) } satisfies ClaimOutcome
        })

      const complete = (eventId: string, handler: string) =>
        Effect.gen(function* () {
          const now = yield* statementNow
          const rows = yield* statements
            .processedComplete(eventId, handler, holder, now)
            .pipe(db("complete processed event"))
          return rows.length > 0
        })

      const release = (eventId: string, handler: string) =>
        statements.processedRelease(eventId, handler, holder).pipe(db("release processed event"), Effect.asVoid)

      const skipped = (handler: string, reason: "completed" | "owned") =>
        Metric.update(eventsSkipped.pipe(Metric.withAttributes({ subscriber: handler, reason })), 1)

      // The bookkeeping is uninterruptible and only the handler is not (`restore`), so an
      // interrupted handler still gives its claim up before the interruption goes on.
      const run = <A, E, R>(eventId: string, handler: string, effect: Effect.Effect<A, E, R>) =>
        Effect.uninterruptibleMask((restore) =>
          Effect.gen(function* () {
            const key = keyOf(eventId, handler)
            if (completed.has(key)) {
              yield* skipped(handler, "completed")
              return { _tag: "Skipped", reason: "completed" } as IdempotentRun<A>
            }
            let outcome = yield* claim(eventId, handler)
            if (outcome._tag === "Owned") {
              yield* skipped(handler, "owned")
              yield* Effect.logInfo("pgbus: event_skipped").pipe(
                Effect.annotateLogs({
                  reason: "owned",
                  event_id: eventId,
                  subscriber: handler,
                  claim_age_ms: Math.round(outcome.ageMs)
                })
              )
              // The holder either completes (this delivery is then done) or goes quiet (the
              // handler then runs here). Wait for that, up to one claim window at the beat's
              // pace, rather than fail at once: a retry burns an attempt, and after fast
              // recovery the first redelivery often meets the dead process's claim just before
              // it counts as quiet.
              let waitedMs = 0
              while (outcome._tag === "Owned" && waitedMs < windowMs) {
                yield* restore(Effect.sleep(beat))
                waitedMs += Duration.toMillis(beat)
                outcome = yield* claim(eventId, handler)
              }
              if (outcome._tag === "Owned") {
                return yield* new EventClaimOwned({ subscriber: handler, eventId, claimAgeMs: outcome.ageMs })
              }
            }
            switch (outcome._tag) {
              case "Completed":
                remember(key)
                yield* skipped(handler, "completed")
                yield* Effect.logDebug("pgbus: event_skipped").pipe(
                  Effect.annotateLogs({ reason: "completed", event_id: eventId, subscriber: handler })
                )
                return { _tag: "Skipped", reason: "completed" } as IdempotentRun<A>
              case "Claimed": {
                if (outcome.takenOver) {
                  yield* Effect.logWarning("pgbus: running an event again: its previous claim went quiet").pipe(
                    Effect.annotateLogs({ event_id: eventId, subscriber: handler })
                  )
                }
                live.set(key, { eventId, handler })
                const exit = yield* Effect.exit(restore(effect))
                live.delete(key)
                if (Exit.isSuccess(exit)) {
                  // the handler has run: a lost connection must not lose its completion, or the
                  // retried delivery would find the claim pending, wait for it to go quiet and run again
                  const kept = yield* retryTransient(complete(eventId, handler))
                  remember(key)
                  if (!kept) {
                    yield* Effect.logWarning(
                      "pgbus: an event's claim was taken over while its handler ran (it was silent past the window)"
                    ).pipe(Effect.annotateLogs({ event_id: eventId, subscriber: handler }))
                  }
                  return { _tag: "Ran", value: exit.value } as IdempotentRun<A>
                }
                // failed or interrupted: give the claim up so the retry does not wait for it to go quiet
                yield* release(eventId, handler).pipe(
                  Effect.catch((error) => Effect.logWarning("pgbus: releasing a claim failed", error))
                )
                return yield* Effect.failCause(exit.cause)
              }
            }
          })
        )

      const heartbeat = Effect.gen(function* () {
        if (live.size === 0) return 0
        const now = yield* statementNow
        const rows = yield* statements
          .processedHeartbeat([...live.values()], holder, now)
          .pipe(db("heartbeat processed events"))
        return rows.length
      })

      const purge = Effect.gen(function* () {
        if (config.idempotencyTtl === undefined) return 0
        const ttlMs = Duration.toMillis(config.idempotencyTtl)
        let deleted = 0
        while (true) {
          const now = yield* statementNow
          const [row] = yield* statements.processedPurge(ttlMs, PURGE_BATCH, now).pipe(db("purge processed events"))
          const n = row?.n ?? 0
          deleted += n
          if (n < PURGE_BATCH) return deleted
        }
      })

      yield* heartbeat.pipe(
        Effect.catch((error) => Effect.logWarning("pgbus: claim heartbeat failed", error)),
        Effect.repeat(Schedule.spaced(config.processHeartbeatInterval)),
        Effect.forever,
        Effect.forkScoped
      )

      return ProcessedEvents.of({ holder, claim, complete, release, run, heartbeat, purge })
    })
  )
}

/** Deletes processed-event records older than `idempotencyTtl`; for the dispatcher. */
export const purge: Effect.Effect<number, DatabaseError, ProcessedEvents> = ProcessedEvents.use((p) => p.purge)
