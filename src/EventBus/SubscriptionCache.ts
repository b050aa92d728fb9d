/**
 * A publisher's copy of the subscriptions table, trusted for `SUBSCRIPTION_CACHE_TTL`, and the
 * routing it answers: the subscriber queues a routing key reaches.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect, Semaphore } from "effect"
import { InvalidRoutingKey } from "./EventBusError.ts"
import type { SubscriptionRow } from "./EventBusSql.ts"
import type { PublisherContext } from "./PublisherContext.ts"
import * as Topic from "./Topic.ts"

/** How long a publisher trusts its copy of the subscriptions table. */
export const SUBSCRIPTION_CACHE_TTL = Duration.seconds(1)

/** Builds the subscription cache and its routing over a publisher's context. */
export const makeSubscriptionCache = ({ statements, db }: PublisherContext) =>
  Effect.gen(function* () {
    const ttlMs = Duration.toMillis(SUBSCRIPTION_CACHE_TTL)
    let cache:
      | {
          readonly loadedAt: number
          readonly rows: ReadonlyArray<SubscriptionRow>
          readonly byKey: Map<string, ReadonlyArray<string>>
        }
      | undefined
    const loading = yield* Semaphore.make(1)

    const invalidate = Effect.sync(() => {
      cache = undefined
    })

    const loadSubscriptions = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      if (cache !== undefined && now - cache.loadedAt < ttlMs) return cache
      return yield* loading.withPermit(
        Effect.gen(function* () {
          const again = yield* Clock.currentTimeMillis
          if (cache !== undefined && again - cache.loadedAt < ttlMs) return cache
          const rows = yield* statements.subscriptionList().pipe(db("read subscriptions"))
          cache = { loadedAt: again, rows, byKey: new Map() }
          return cache
        })
      )
    })

    /** The subscriber queues (app-facing names) a routing key reaches. */
    const queuesFor = (routingKey: string) =>
      Effect.map(loadSubscriptions, (current) => {
        const known = current.byKey.get(routingKey)
        if (known) return known
        const queues = [
          ...new Set(current.rows.filter((r) => Topic.matches(r.pattern, routingKey)).map((r) => r.queue))
        ]
        if (current.byKey.size >= 10_000) current.byKey.clear()
        current.byKey.set(routingKey, queues)
        return queues as ReadonlyArray<string>
      })

    const routes = (routingKey: string) =>
      Effect.gen(function* () {
        const problem = Topic.routingKeyProblem(routingKey)
        if (problem !== undefined) return yield* new InvalidRoutingKey({ routingKey, reason: problem })
        return yield* queuesFor(routingKey)
      })

    return { invalidate, queuesFor, routes }
  })

/** A publisher's subscription cache. */
export type SubscriptionCache = Effect.Success<ReturnType<typeof makeSubscriptionCache>>
