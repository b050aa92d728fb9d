/**
 * What every part of a publisher runs on: its database, queue store and queue creation, the
 * event bus statements on that database, and the error mapping.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { SqlError } from "effect/sql/SqlError"
import { type DatabaseError, toDatabaseError } from "../Database.ts"
import type { PublisherDeps } from "./EventBus.ts"
import { makeEventBusSql } from "./EventBusSql.ts"

/** Builds a publisher's shared context over its dependencies. */
export const makePublisherContext = (deps: PublisherDeps) => {
  const statements = makeEventBusSql(deps.sql, deps.config.schema)
  const db =
    (operation: string) =>
    <A>(effect: Effect.Effect<A, SqlError>): Effect.Effect<A, DatabaseError> =>
      Effect.mapError(effect, toDatabaseError(operation))
  return { ...deps, statements, db }
}

/** A publisher's shared context. */
export type PublisherContext = ReturnType<typeof makePublisherContext>
