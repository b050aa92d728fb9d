/**
 * The stored subscriptions: registering subscribers (their rows and their queues), listing
 * and deleting them; each change invalidates the publisher's cache.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { statementNow } from "../Database.ts"
import * as Input from "../Input.ts"
import { servedQueues } from "../Job/JobClient.ts"
import type { Subscription } from "./EventBus.ts"
import { InvalidSubscriberDefinition } from "./EventBusError.ts"
import type { PublisherContext } from "./PublisherContext.ts"
import type { AnySubscriber } from "./Subscription.ts"
import type { SubscriptionCache } from "./SubscriptionCache.ts"

/** Builds `register`, `subscriptions` and `unsubscribe` over a publisher's context and cache. */
export const makeSubscriptionTable = (
  { config, ensureQueue, statements, db }: PublisherContext,
  { invalidate }: Pick<SubscriptionCache, "invalidate">
) => {
  const register = (subscribers: ReadonlyArray<AnySubscriber>) =>
    Effect.gen(function* () {
      if (subscribers.length === 0) return
      const names = new Set<string>()
      for (const s of subscribers) {
        if (names.has(s.name)) {
          return yield* new InvalidSubscriberDefinition({
            subscriber: s.name,
            reason:
              s.name === s.pattern
                ? `two subscribers are registered with this name: a subscriber without a \`name\` is named by its pattern (${s.pattern}), so two unnamed subscribers of one pattern collide; give each a \`name\` (its identity: the subscription row and idempotency records)`
                : "two subscribers are registered with this name (give one another `name`)"
          })
        }
        names.add(s.name)
      }
      for (const queue of new Set(subscribers.map((s) => s.queue))) {
        for (const physical of servedQueues(config, queue)) yield* ensureQueue(physical)
      }
      const now = yield* statementNow
      yield* statements
        .subscriptionUpsert(
          subscribers.map((s) => ({ handler: s.name, pattern: s.pattern, queue: s.queue })),
          now
        )
        .pipe(db("register subscriptions"))
      yield* invalidate
    }).pipe(Effect.withSpan("pgbus.event.register", { attributes: { subscribers: subscribers.length } }))

  const subscriptions = statements.subscriptionList().pipe(
    db("list subscriptions"),
    Effect.map((rows) =>
      rows.map(
        (r): Subscription => ({ name: r.handler, pattern: r.pattern, queue: r.queue, registeredAt: r.registered_at })
      )
    )
  )

  // a name PostgreSQL cannot store (not a string, a NUL) names no stored subscription
  const unsubscribe = (name: string) =>
    Input.textProblem(name) !== undefined
      ? Effect.succeed(false)
      : statements.subscriptionDelete(name).pipe(
          db("delete subscription"),
          Effect.tap(() => invalidate),
          Effect.map((rows) => rows.length > 0)
        )

  return { register, subscriptions, unsubscribe }
}
