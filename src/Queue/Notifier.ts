/**
 * The notifier: ONE LISTEN connection per process, opened on first use, that turns the
 * NOTIFY sent with every committed send into wake-ups for the readers of that queue.
 * Notifications are hints: readers keep polling as the backstop, and poll fast while the
 * connection is down (notifications sent meanwhile are lost, so every reconnect wakes all).
 *
 * @since 0.1.0
 */
import { PgClient } from "@effect/sql-pg"
import { Context, Duration, Effect, Latch, Layer, Queue, Ref, type Scope } from "effect"
import { PgBusConfig } from "../Config.ts"
import { dedicatedClient, unlessUnreachable } from "../Database.ts"
import * as OutageBackoff from "../internal/OutageBackoff.ts"
import type { Message } from "./Message.ts"

/** What the notifier is doing: off by config, not yet needed, listening, or reconnecting. */
export type NotifierStatus = "disabled" | "idle" | "listening" | "reconnecting"

/** A reader's wake-ups for a set of physical queues; wake-ups coalesce until awaited. */
export interface Wakeups {
  /** Waits for a wake-up (true) or the timeout (false); returns at once if one is pending. */
  readonly await: (timeout: Duration.Duration) => Effect.Effect<boolean>
  /**
   * Waits for the next wake-up, with no timeout (the caller wakes itself to poll); returns at
   * once if one is pending. No race is forked, so a NOTIFY reaches the waiter in one hop.
   */
  readonly next: Effect.Effect<void>
  /** Wakes this subscriber from inside the process (a worker whose slot freed). */
  readonly wake: () => void
}

/**
 * Room a reader of this process reserved for one message that a sender of this process inserts
 * already claimed for it (local dispatch: no NOTIFY, no read). Exactly one of `deliver` (after
 * the sender's commit) or `cancel` (it rolled back, or sent nothing) must follow.
 */
export interface LocalSlot {
  /** Recorded as the message's `claimed_by`. */
  readonly claimedBy: string
  /** The message's visibility from its insert, as a read would set it. */
  readonly visibilityMs: number
  /**
   * Hands the committed, claimed message to the reader; false when it does not take it (it is
   * draining, or, for a workflow step, has no free executor for it) and gives it back, after
   * `beforeGiveBack` (a woken step releases its claim first, so the message's next delivery
   * finds the step free). Given back unread, as no job saw it; as read when `beforeGiveBack`
   * failed, so that its next delivery repairs what the message still holds (a stalled step).
   */
  readonly deliver: (message: Message, beforeGiveBack?: Effect.Effect<void, unknown>) => Effect.Effect<boolean>
  /** Gives the room back. */
  readonly cancel: () => void
}

/**
 * What a local send asks of the reader. `inOrder`: the message must not overtake older ones of
 * its queue (a job), so only a reader that has drained its queues takes it; without it (a woken
 * workflow step, already due) a reader of one queue takes it while that queue has more.
 */
export interface LocalRequest {
  readonly inOrder: boolean
  /** The job the message runs, or the workflow of the step: a reader whose process does not have it registered offers no slot. */
  readonly runs: { readonly job: string } | { readonly workflow: string }
}

/** A reader that takes messages claimed for it at send time: `reserve` says whether it has room now. */
export interface LocalReader {
  readonly reserve: (physicalQueue: string, request: LocalRequest) => LocalSlot | undefined
}

interface Subscriber {
  readonly queues: ReadonlySet<string> | "all"
  readonly latch: Latch.Latch
  pending: boolean
}

/** Backoff between LISTEN reconnects over one outage: 50 ms doubling, capped at one second, jittered. */
const reconnectBackoff = () => OutageBackoff.make("50 millis", "1 second", true)

/** Notification payload that wakes every reader (sent after a reconnect). */
export const WAKE_ALL = "*"

/** The wake-up channel of a schema. */
export const channelName = (schema: string): string => `${schema}_wakeup`

/**
 * The notifier service.
 *
 * @category services
 */
export class Notifier extends Context.Service<
  Notifier,
  {
    /** Channel the queue store notifies on; empty when LISTEN/NOTIFY is off. */
    readonly channel: string
    /** Registers interest in physical queues (or all) until the scope closes. */
    readonly subscribe: (
      queues: ReadonlyArray<string> | "all"
    ) => Effect.Effect<Wakeups, never, import("effect").Scope.Scope>
    /** Current state of the LISTEN connection. */
    readonly status: Effect.Effect<NotifierStatus>
    /** Wakes subscribers of a queue in this process (used by local senders and tests). */
    readonly wake: (physicalQueue: string) => Effect.Effect<void>
    /** Registers a reader of physical queues for local dispatch until the scope closes. */
    readonly offerLocal: (queues: ReadonlyArray<string>, reader: LocalReader) => Effect.Effect<void, never, Scope.Scope>
    /** Room for one message of a queue at a reader of this process, if one has it now. */
    readonly reserveLocal: (physicalQueue: string, request: LocalRequest) => LocalSlot | undefined
    /** Whether a reader of this process offers a queue for local dispatch, free slots or not. */
    readonly hasLocalReader: (physicalQueue: string) => boolean
    /** Counts of notifications and reconnects, for tests and metrics. */
    readonly stats: Effect.Effect<{ readonly received: number; readonly connects: number }>
    /**
     * Hands notifications whose payload starts with `prefix` (never a queue name: give one with
     * a character queue names lack, such as `:`) to `handler` instead of waking readers, until
     * the scope closes; starts listening. Streams' ephemeral broadcasts ride on this.
     */
    readonly onPayload: (prefix: string, handler: (payload: string) => void) => Effect.Effect<void, never, Scope.Scope>
  }
>()("effect-pgbus/Notifier") {
  /** The notifier of this process, listening on the configured schema's channel. */
  static readonly layer: Layer.Layer<Notifier, never, PgBusConfig | PgClient.PgClient> = Layer.effect(
    Notifier,
    Effect.gen(function* () {
      const config = yield* PgBusConfig
      const pg = yield* PgClient.PgClient
      const channel = config.listenNotify ? channelName(config.schema) : ""
      const subscribers = new Set<Subscriber>()
      const localReaders = new Set<{ readonly queues: ReadonlySet<string>; readonly reader: LocalReader }>()
      const status = yield* Ref.make<NotifierStatus>(config.listenNotify ? "idle" : "disabled")
      const counts = { received: 0, connects: 0 }
      const started = Latch.makeUnsafe(false)
      const payloadHandlers = new Set<{ readonly prefix: string; readonly handler: (payload: string) => void }>()

      const deliver = (queue: string) => {
        for (const h of payloadHandlers) {
          if (queue.startsWith(h.prefix)) {
            h.handler(queue)
            return
          }
        }
        for (const s of subscribers) {
          if (queue === WAKE_ALL || s.queues === "all" || s.queues.has(queue)) {
            s.pending = true
            s.latch.openUnsafe()
          }
        }
      }

      const reconnects = reconnectBackoff()
      // Through a transaction-mode pooler LISTEN does not survive the transaction: the listener
      // then has a connection of its own to the server itself (a new one per reconnect), with no
      // statement timeout (it waits, it does not query).
      const listener =
        config.directDatabaseUrl === undefined
          ? Effect.succeed(pg)
          : dedicatedClient("effect-pgbus listen", { statementTimeout: false })
      const listenOnce = Effect.scoped(
        Effect.gen(function* () {
          const inbox = yield* Effect.flatMap(listener, (client) => client.listen(channel))
          // listening again ends the outage: the next loss starts at the first delay
          reconnects.succeeded()
          counts.connects++
          yield* Ref.set(status, "listening")
          // notifications sent while we were not listening are lost: wake everyone to poll once
          deliver(WAKE_ALL)
          while (true) {
            const n = yield* Queue.take(inbox)
            counts.received++
            deliver(n.payload)
          }
        })
      )

      if (config.listenNotify) {
        yield* started.await.pipe(
          Effect.andThen(
            OutageBackoff.retryLoop(listenOnce, reconnects, (error, pause) =>
              Ref.set(status, "reconnecting").pipe(
                Effect.andThen(
                  // while the connection breaker is open the outage was logged once
                  unlessUnreachable(
                    config,
                    Effect.logWarning(
                      `pgbus notifier: LISTEN connection lost, polling fast, reconnecting in ${Duration.toMillis(pause)} ms`,
                      error
                    ).pipe(Effect.annotateLogs({ retryInMs: Duration.toMillis(pause) }))
                  )
                )
              )
            )
          ),
          Effect.forkScoped
        )
      }

      const subscribe = (queues: ReadonlyArray<string> | "all") =>
        Effect.acquireRelease(
          Effect.sync(() => {
            const subscriber: Subscriber = {
              queues: queues === "all" ? "all" : new Set(queues),
              latch: Latch.makeUnsafe(false),
              pending: false
            }
            subscribers.add(subscriber)
            started.openUnsafe()
            return subscriber
          }),
          (subscriber) => Effect.sync(() => subscribers.delete(subscriber))
        ).pipe(
          Effect.map(
            (subscriber): Wakeups => ({
              wake: () => {
                subscriber.pending = true
                subscriber.latch.openUnsafe()
              },
              next: Effect.suspend(() => {
                if (subscriber.pending) {
                  subscriber.pending = false
                  subscriber.latch.closeUnsafe()
                  return Effect.void
                }
                return subscriber.latch.await.pipe(
                  Effect.andThen(
                    Effect.sync(() => {
                      subscriber.pending = false
                      subscriber.latch.closeUnsafe()
                    })
                  )
                )
              }),
              await: (timeout) =>
                Effect.suspend(() => {
                  if (subscriber.pending) {
                    subscriber.pending = false
                    subscriber.latch.closeUnsafe()
                    return Effect.succeed(true)
                  }
                  return subscriber.latch.await.pipe(
                    Effect.timeoutOption(timeout),
                    Effect.map((woken) => {
                      subscriber.pending = false
                      subscriber.latch.closeUnsafe()
                      return woken._tag === "Some"
                    })
                  )
                })
            })
          )
        )

      return Notifier.of({
        channel,
        subscribe,
        status: Ref.get(status),
        wake: (queue) => Effect.sync(() => deliver(queue)),
        offerLocal: (queues, reader) =>
          Effect.acquireRelease(
            Effect.sync(() => {
              const entry = { queues: new Set(queues), reader }
              localReaders.add(entry)
              return entry
            }),
            (entry) => Effect.sync(() => localReaders.delete(entry))
          ).pipe(Effect.asVoid),
        reserveLocal: (queue, request) => {
          for (const { queues, reader } of localReaders) {
            if (!queues.has(queue)) continue
            const slot = reader.reserve(queue, request)
            if (slot !== undefined) return slot
          }
          return undefined
        },
        hasLocalReader: (queue) => {
          for (const { queues } of localReaders) if (queues.has(queue)) return true
          return false
        },
        stats: Effect.sync(() => ({ ...counts })),
        onPayload: (prefix, handler) =>
          Effect.acquireRelease(
            Effect.sync(() => {
              const entry = { prefix, handler }
              payloadHandlers.add(entry)
              started.openUnsafe()
              return entry
            }),
            (entry) => Effect.sync(() => payloadHandlers.delete(entry))
          ).pipe(Effect.asVoid)
      })
    })
  )
}

/** How long a reader waits before polling again, given the notifier's state. */
export const pollDelay = (status: NotifierStatus, pollingInterval: Duration.Duration): Duration.Duration =>
  status === "reconnecting" ? Duration.min(pollingInterval, Duration.millis(50)) : pollingInterval
