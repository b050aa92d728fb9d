/**
 * The fan-out: prepared events written to every subscriber queue their routing keys reach,
 * in one statement (in the caller's transaction), and counted.
 *
 * @since 0.1.0
 */
import { Effect, Metric } from "effect"
import { serverError, statementNow, toDatabaseError } from "../Database.ts"
import { physicalQueueOf } from "../Job/JobClient.ts"
import { type QueueError, QueueNotFound } from "../Queue/QueueError.ts"
import type { PreparedEvent, PublishedEvent } from "./EventBus.ts"
import type { FanOutTarget } from "./EventBusSql.ts"
import type { PublisherContext } from "./PublisherContext.ts"
import type { SubscriptionCache } from "./SubscriptionCache.ts"

/** Events published (each counted once, whatever its fan-out). */
export const eventsPublished = Metric.counter("pgbus_events_published_total", {
  description: "events published"
})

/** Messages written to subscriber queues by publishes (one per matching queue per event). */
export const eventDeliveries = Metric.counter("pgbus_event_deliveries_total", {
  description: "event messages written to subscriber queues"
})

/** Builds a publisher's `send`: prepared events to their subscriber queues in one statement (none if nothing matched). */
export const makeSendEvents =
  (
    { config, store, ensureQueue, statements, db }: PublisherContext,
    { queuesFor }: Pick<SubscriptionCache, "queuesFor">
  ) =>
  (events: ReadonlyArray<PreparedEvent>) =>
    Effect.gen(function* () {
      if (events.length === 0) return [] as ReadonlyArray<PublishedEvent>
      const perEvent: Array<ReadonlyArray<string>> = []
      const byQueue = new Map<string, Array<number>>()
      for (let i = 0; i < events.length; i++) {
        const queues = yield* queuesFor(events[i]!.routingKey)
        perEvent.push(queues)
        for (const queue of queues) {
          const list = byQueue.get(queue)
          if (list) list.push(i + 1)
          else byQueue.set(queue, [i + 1])
        }
      }
      const now = yield* statementNow
      let publishedAt: Date
      if (byQueue.size === 0) {
        const [row] = yield* statements.clockNow(now).pipe(db("read the clock"))
        publishedAt = row?.now ?? new Date(0)
      } else {
        const targets: Array<FanOutTarget> = []
        for (const [queue, ordinals] of byQueue) {
          const physicalQueue = physicalQueueOf(config, { queue, priority: undefined })
          yield* ensureQueue(physicalQueue)
          const name = yield* store.validateName(physicalQueue)
          targets.push({ physical: name.physical, ordinals })
        }
        const rows = yield* statements.eventFanOut(events, targets, store.messageCtes, now).pipe(
          Effect.mapError((error): QueueError => {
            // a queue dropped since this process created it
            if (serverError(error).code === "42P01") return new QueueNotFound({ queue: [...byQueue.keys()].join(",") })
            return toDatabaseError("publish events")(error)
          })
        )
        publishedAt = rows[0]?.published_at ?? new Date(0)
        yield* Metric.update(
          eventDeliveries,
          [...byQueue.values()].reduce((n, list) => n + list.length, 0)
        )
      }
      yield* Metric.update(eventsPublished, events.length)
      return events.map(
        (e, i): PublishedEvent => ({
          eventId: e.eventId,
          routingKey: e.routingKey,
          publishedAt,
          queues: perEvent[i]!
        })
      )
    })
