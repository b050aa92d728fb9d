/**
 * The consuming side: subscribers registered in a `Registry` become one job, `pgbus.event`,
 * whose handler dispatches a delivered event to the subscribers of the queue it came from
 * whose patterns match its routing key. Consumers are ordinary worker capsules on the
 * subscriber queues, so wake-ups, heartbeats, retries and dead letters are the worker's.
 *
 * @since 0.1.0
 */
import { Cause, Context, Effect, Exit, Metric, Option, Schema } from "effect"
import type { PgBusConfigShape } from "../Config.ts"
import { internalJob } from "../Job/InternalJob.ts"
import type { JobContext } from "../Job/Job.ts"
import { linkedSpan } from "../Job/JobClient.ts"
import type { RegisteredJob } from "../Job/RegisteredJob.ts"
import { CurrentAttributes, EVENT_JOB, type Event, EventEnvelope } from "./Envelope.ts"
import { EventBus } from "./EventBus.ts"
import { EventPayloadDecodeError, type RegisterError } from "./EventBusError.ts"
import { ProcessedEvents } from "./ProcessedEvents.ts"
import type { AnySubscriber } from "./Subscription.ts"
import * as Topic from "./Topic.ts"

/** Event messages archived because no subscriber of this process owns them (a stale binding). */
export const eventsUnrouted = Metric.counter("pgbus_event_unrouted_total", {
  description: "event messages in a queue no registered subscriber owns (archived)"
})

/**
 * The subscribers a registry runs.
 *
 * @category models
 */
export interface RegisteredEvents {
  /** The `pgbus.event` job: always registered, so unrouted event messages are archived. */
  readonly job: RegisteredJob
  readonly subscribers: ReadonlyArray<AnySubscriber>
  /** The subscriber queues, with how many handler runs each takes at once. */
  readonly consumers: ReadonlyArray<{ readonly queue: string; readonly concurrency: number }>
}

/** Groups subscribers by queue; a shared queue runs as many at once as its most concurrent subscriber. */
const consumersOf = (subscribers: ReadonlyArray<AnySubscriber>) => {
  const byQueue = new Map<string, Array<AnySubscriber>>()
  for (const s of subscribers) {
    const list = byQueue.get(s.queue)
    if (list) list.push(s)
    else byQueue.set(s.queue, [s])
  }
  const consumers = [...byQueue].map(([queue, list]) => ({
    queue,
    concurrency: Math.max(...list.map((s) => s.concurrency))
  }))
  return { byQueue, consumers }
}

/**
 * Registers subscribers (their subscriptions are stored and their queues created) and builds
 * the `pgbus.event` job. `services` holds what the handlers need, captured by the Registry;
 * it holds `EventBus` and `ProcessedEvents` whenever there is a subscriber (their handlers'
 * requirements say so).
 */
export const registerSubscribers = (
  config: PgBusConfigShape,
  subscribers: ReadonlyArray<AnySubscriber>,
  services: Context.Context<never>
): Effect.Effect<RegisteredEvents, RegisterError> =>
  Effect.gen(function* () {
    const { byQueue, consumers } = consumersOf(subscribers)
    const context = services as Context.Context<EventBus | ProcessedEvents>
    if (subscribers.length > 0) {
      const bus = Context.getOption(context, EventBus)
      if (Option.isNone(bus)) {
        return yield* Effect.die(new Error("subscribers need the EventBus service: provide PgBus.layer()"))
      }
      yield* bus.value.register(subscribers)
    }
    const processed = Context.getOption(context, ProcessedEvents)
    if (subscribers.some((s) => s.idempotent) && Option.isNone(processed)) {
      return yield* Effect.die(
        new Error("idempotent subscribers need the ProcessedEvents service: provide PgBus.layer()")
      )
    }
    const loggedUnrouted = new Set<string>()

    /** The subscriber queue a delivery came from (a priority sub-queue maps back to its queue). */
    const subscriberQueue = (queue: string) => {
      if (byQueue.has(queue) || config.priorityLevels === undefined) return queue
      const base = queue.replace(/_p\d+$/, "")
      return byQueue.has(base) ? base : queue
    }

    const unrouted = (queue: string, envelope: EventEnvelope) =>
      Effect.gen(function* () {
        yield* Metric.update(eventsUnrouted.pipe(Metric.withAttributes({ queue })), 1)
        if (loggedUnrouted.has(queue)) return
        loggedUnrouted.add(queue)
        yield* Effect.logWarning(
          `pgbus: event messages on queue ${queue} have no subscriber here (a stale subscription?); archiving them`
        ).pipe(Effect.annotateLogs({ queue, routing_key: envelope.routing_key, event_id: envelope.event_id }))
      })

    const runSubscriber = (subscriber: AnySubscriber, envelope: EventEnvelope, job: JobContext["Service"]) => {
      const decoded: Effect.Effect<unknown, EventPayloadDecodeError> =
        subscriber.payload === undefined
          ? Effect.succeed(envelope.payload)
          : Schema.decodeUnknownEffect(subscriber.payload)(envelope.payload).pipe(
              Effect.mapError(
                (error) =>
                  new EventPayloadDecodeError({
                    subscriber: subscriber.name,
                    routingKey: envelope.routing_key,
                    issue: error.message
                  })
              )
            )
      const attributes = envelope.context ?? {}
      const handle = Effect.flatMap(decoded, (payload) => {
        const event: Event<unknown> = {
          id: envelope.event_id,
          routingKey: envelope.routing_key,
          publishedAt: new Date(envelope.published_at),
          headers: envelope.headers ?? {},
          payload,
          context: attributes,
          subscriber: subscriber.name,
          queue: job.queue,
          attempt: job.attempt
        }
        const handler = subscriber.handler as (event: Event<unknown>) => Effect.Effect<unknown, unknown, never>
        return handler(event).pipe(
          Effect.provide(services),
          Effect.provideService(CurrentAttributes, attributes)
        ) as Effect.Effect<unknown, unknown>
      })
      const guarded: Effect.Effect<unknown, unknown> =
        subscriber.idempotent && Option.isSome(processed)
          ? processed.value.run(envelope.event_id, subscriber.name, handle)
          : handle
      const link = envelope.headers === undefined ? undefined : linkedSpan(envelope.headers)
      return guarded.pipe(
        Effect.withSpan(
          "pgbus.event.handle",
          {
            attributes: { subscriber: subscriber.name, routing_key: envelope.routing_key, event_id: envelope.event_id },
            ...(link ? { links: [{ span: link, attributes: { "pgbus.link": "publish" } }] } : {})
          },
          { captureStackTrace: false }
        ),
        Effect.annotateLogs({ subscriber: subscriber.name, event_id: envelope.event_id })
      )
    }

    const dispatch = (envelope: EventEnvelope, job: JobContext["Service"]): Effect.Effect<unknown, unknown> =>
      Effect.gen(function* () {
        const queue = subscriberQueue(job.queue)
        const matching = (byQueue.get(queue) ?? []).filter((s) => Topic.matches(s.pattern, envelope.routing_key))
        if (matching.length === 0) return yield* unrouted(queue, envelope)
        if (matching.length === 1) return yield* runSubscriber(matching[0]!, envelope, job)
        // a shared queue: every matching subscriber runs on this one delivery; if any fails the
        // delivery is retried (and the ones that succeeded run again unless idempotent)
        const exits = yield* Effect.forEach(matching, (s) => Effect.exit(runSubscriber(s, envelope, job)), {
          concurrency: "unbounded"
        })
        const failed = exits.flatMap((exit, i) => (Exit.isFailure(exit) ? [{ exit, subscriber: matching[i]! }] : []))
        if (failed.length === 0) return
        if (failed.length > 1) {
          for (const { exit, subscriber } of failed.slice(1)) {
            yield* Effect.logWarning(`pgbus: subscriber ${subscriber.name} failed too`, Cause.pretty(exit.cause))
          }
        }
        return yield* Effect.failCause(failed[0]!.exit.cause)
      })

    // its dead letters name the consumer as their mover
    const job: RegisteredJob = internalJob(config, EVENT_JOB, EventEnvelope, undefined, dispatch, {
      deadLetterSource: "consumer"
    })
    return { job, subscribers, consumers }
  })

/** A consumer capsule, shaped like the supervisor's `Capsule`. */
export interface ConsumerCapsule {
  readonly name: string
  readonly queues: ReadonlyArray<string>
  readonly concurrency: number
  readonly readAhead?: number | undefined
  readonly prefetchLimit?: number | undefined
}

/**
 * The consumer capsules of a registry: one per subscriber queue, named `events_<queue>`, with
 * the subscribers' concurrency. The supervisor runs them beside its worker capsules.
 */
export const consumerCapsules = (registry: {
  readonly events?: RegisteredEvents | undefined
}): ReadonlyArray<ConsumerCapsule> =>
  (registry.events?.consumers ?? []).map((c) => ({
    name: `events_${c.queue}`,
    queues: [c.queue],
    concurrency: c.concurrency
  }))

export { EVENT_JOB }
