/**
 * A bound on the wait for a pool connection. The driver's pool (`@effect/sql-pg` 4.0.5) queues a
 * checkout until a connection is free, with no timeout, and keeps its counts to itself: with
 * every connection held (jobs holding transactions, a pool smaller than the capsules need) a
 * statement waits forever, and nothing says why. This client wraps the pool's checkout: it
 * counts the leases and the waiters itself and fails a checkout that waited `timeout` with a
 * `SqlError` (a retryable `ConnectionError`) whose message names the pool's state:
 *
 * `pool timeout: no connection free after 5s (pool size 10: 10 in use, 3 waiting); raise poolSize, or hold connections for shorter`
 *
 * The statements, transactions and streams of the wrapped client check out through it; its
 * LISTEN and NOTIFY are the pool's own. Single statements lease into a scope (the pool's scopeless
 * borrow is not reachable from outside the driver).
 *
 * @since 0.1.0
 */
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, type Scope } from "effect"
import type * as Reactivity from "effect/reactivity/Reactivity"
import * as Client from "effect/sql/SqlClient"
import type { Connection } from "effect/sql/SqlConnection"
import { ConnectionError, SqlError, UnknownError } from "effect/sql/SqlError"

/** What the pool is doing, as this client counts it. */
export interface PoolState {
  readonly size: number
  readonly inUse: number
  readonly waiting: number
}

/** The message of a checkout that timed out. */
export const poolTimeoutMessage = (timeout: Duration.Duration, state: PoolState): string =>
  `pool timeout: no connection free after ${Duration.format(timeout)} (pool size ${state.size}: ${state.inUse} in use, ${state.waiting} waiting); raise poolSize, or hold connections for shorter`

const isRollback = (result: unknown): boolean =>
  typeof result === "object" && result !== null && "command" in result && result.command === "ROLLBACK"

/** PostgreSQL answers `ROLLBACK` to the `COMMIT` of an aborted transaction (as the driver's own client checks). */
const commit = (conn: Connection) =>
  Effect.flatMap(conn.executeRaw("COMMIT", []), (result) =>
    isRollback(result)
      ? Effect.fail(
          new SqlError({
            reason: new UnknownError({
              cause: new Error("COMMIT rolled back an aborted transaction"),
              message: "PgClient: COMMIT rolled back an aborted transaction",
              operation: "commit"
            })
          })
        )
      : Effect.void
  )

/**
 * The client `inner` with every checkout bounded by `timeout`; `size` is the pool's maximum.
 * `state()` reads the counts (for tests and errors).
 */
export const withAcquireTimeout = (
  inner: PgClient.PgClient,
  size: number,
  timeout: Duration.Duration
): Effect.Effect<
  { readonly client: PgClient.PgClient; readonly state: () => PoolState },
  never,
  Reactivity.Reactivity
> =>
  Effect.gen(function* () {
    let inUse = 0
    /** Checkouts not yet served (each waits for a free connection, or for one to open). */
    let waiting = 0
    const state = (): PoolState => ({ size, inUse, waiting })
    const lease = Effect.tap(inner.reserve, () =>
      Effect.andThen(
        Effect.sync(() => {
          inUse++
        }),
        Effect.addFinalizer(() =>
          Effect.sync(() => {
            inUse--
          })
        )
      )
    )
    const acquire: Effect.Effect<Connection, SqlError, Scope.Scope> = Effect.suspend(() => {
      // while leases and checkouts leave room in the pool, no race with a timer: the common case
      // costs what the pool's own checkout does (a connect is bounded by its own timeout)
      const bounded = inUse + waiting >= size
      waiting++
      const served = Effect.ensuring(
        lease,
        Effect.sync(() => {
          waiting--
        })
      )
      if (!bounded) return served
      return Effect.timeoutOrElse(served, {
        duration: timeout,
        orElse: () => {
          // this checkout was given up already (its wait interrupted): it counts among the waiting
          const message = poolTimeoutMessage(timeout, { size, inUse, waiting: waiting + 1 })
          return Effect.fail(
            new SqlError({ reason: new ConnectionError({ cause: new Error(message), message, operation: "acquire" }) })
          )
        }
      })
    })
    const config = inner.config
    const outer = yield* Client.make({
      acquirer: acquire,
      transactionAcquirer: acquire,
      // the library's clients set no name transforms (clientOptions), so neither does this one
      compiler: PgClient.makeCompiler(undefined, config.transformJson),
      driver: "pg",
      prepareTransactionControls: true,
      commit,
      releaseSavepoint: (name) => `RELEASE SAVEPOINT ${name}`,
      spanAttributes: [
        ...(config.spanAttributes ? Object.entries(config.spanAttributes) : []),
        ["db.system.name", "postgresql"],
        ["db.namespace", config.database ?? config.username ?? "postgres"],
        ["server.address", config.host ?? "localhost"],
        ["server.port", config.port ?? 5432]
      ]
    })
    const client: PgClient.PgClient = Object.assign(outer, {
      "~@effect/sql-pg/PgClient": inner["~@effect/sql-pg/PgClient"],
      config,
      json: inner.json,
      listen: inner.listen,
      notify: inner.notify
    })
    return { client, state }
  })
