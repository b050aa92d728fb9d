/**
 * The database: the PgClient layer built from the config, the one clock every time-dependent
 * statement reads, and the classification of driver errors.
 *
 * @since 0.1.0
 */
import { PgClient } from "@effect/sql-pg"
import {
  Cause,
  Clock,
  Context,
  Duration,
  Effect,
  type Fiber,
  Layer,
  Option,
  Redacted,
  Schedule,
  Schema,
  type Scope
} from "effect"
import * as Reactivity from "effect/reactivity/Reactivity"
import type { SqlClient } from "effect/sql"
import { isSqlError, type SqlError } from "effect/sql/SqlError"
import { effectivePoolSize, PgBusConfig, type PgBusConfigShape } from "./Config.ts"
import { DEFAULT_CONNECT_TIMEOUT, READ_PARAMETERS, targetOf, tlsOptions, unreadParameters } from "./Connection.ts"
import { type Breaker, breakerFor } from "./internal/ConnectionBreaker.ts"
import { openSocket } from "./internal/PoolCensus.ts"
import { withAcquireTimeout } from "./internal/PoolTimeout.ts"

/**
 * A database operation failed for a reason that is not part of the domain (connection lost,
 * deadlock, timeout, ...). `retryable` says whether trying again can help.
 *
 * @category errors
 */
export class DatabaseError extends Schema.TaggedError<DatabaseError>()("DatabaseError", {
  operation: Schema.String,
  reason: Schema.String,
  sqlState: Schema.optionalKey(Schema.String),
  detail: Schema.String,
  retryable: Schema.Boolean
}) {
  override get message(): string {
    return `${this.operation} failed (${this.reason}${this.sqlState ? ` ${this.sqlState}` : ""}): ${this.detail}`
  }
}

/** The server's SQLSTATE and message, which the driver keeps on `reason.cause`. */
export const serverError = (error: SqlError): { readonly code: string | undefined; readonly message: string } => {
  const cause = (error.reason as { readonly cause?: unknown }).cause
  if (typeof cause === "object" && cause !== null) {
    const c = cause as { readonly code?: unknown; readonly message?: unknown }
    return {
      code: typeof c.code === "string" ? c.code : undefined,
      message: typeof c.message === "string" ? c.message : error.message
    }
  }
  return { code: undefined, message: error.message }
}

// SQLSTATE classes of a connection that failed or a server that is going away (admin shutdown,
// crash shutdown, starting up): the driver reports the server's message for them as unknown.
const passingStates = /^(08|57P0[1-3])/

/** How to apply migrations, for errors that find them missing. */
export const MIGRATE_CURE =
  "run `npx pgbus migrate` (`npm run migrate` in this repository), `yield* PgBus.migrate` before the code that needs the tables, or build the layer with `PgBus.layer({ migrate: true })` (PGBUS_MIGRATE=true)"

// undefined table, undefined schema: almost always a database nobody migrated
const missingObject = /^(42P01|3F000)$/

/** What to check for a failure to reach the database at all, by the driver's code. */
const connectionCure = (code: string | undefined): string | undefined => {
  if (code === undefined) return undefined
  if (/^(ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|EHOSTUNREACH)$/.test(code)) {
    return "is the server up and is the URL right? It comes from DATABASE_URL (or PGHOST, PGPORT, ...); unset both to use the embedded server where effect-pgbus/embedded is used"
  }
  if (/^(28000|28P01)$/.test(code)) return "check the user and password in DATABASE_URL (or PGUSER, PGPASSWORD)"
  if (code === "3D000") return "create the database (createdb) or name another in DATABASE_URL (or PGDATABASE)"
  return undefined
}

/** Turns a driver error into a `DatabaseError` for `operation`. */
export const toDatabaseError =
  (operation: string) =>
  (error: SqlError): DatabaseError => {
    const server = serverError(error)
    const missing = server.code !== undefined && missingObject.test(server.code)
    return new DatabaseError({
      operation,
      reason: error.reason._tag,
      ...(server.code ? { sqlState: server.code } : {}),
      detail: missing
        ? `${server.message}; are the migrations applied? ${MIGRATE_CURE}`
        : connectionCure(server.code) === undefined
          ? server.message
          : `${server.message}; ${connectionCure(server.code)}`,
      retryable: error.isRetryable || (server.code !== undefined && passingStates.test(server.code))
    })
  }

/**
 * `sql.withTransaction`, except that a commit or rollback that fails with its connection fails
 * with that `SqlError` (the driver reports it as a defect, which typed handling and retries
 * would not see); the transaction's own failure, when it has one, comes first. A failed
 * rollback can turn that failure into a defect too (a `DatabaseError` beside the rollback's
 * `SqlError`): the `SqlError` then stands for both.
 */
export const withTransaction = <A, E, R>(
  sql: SqlClient.SqlClient,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | SqlError, R> =>
  sql.withTransaction(effect).pipe(
    Effect.catchCause((cause) => {
      const dies = cause.reasons.filter(Cause.isDieReason)
      const lost = dies.find((d) => isSqlError(d.defect))
      if (
        lost === undefined ||
        Cause.hasInterrupts(cause) ||
        !dies.every((d) => isSqlError(d.defect) || d.defect instanceof DatabaseError)
      ) {
        return Effect.failCause(cause)
      }
      const failure = Cause.findErrorOption(cause)
      return Effect.fail(Option.isSome(failure) ? failure.value : (lost.defect as SqlError))
    })
  )

/** 100 ms doubling to 5 s between tries, for a minute at most. */
const transientRetryUpTo = (longestWait: Duration.Duration) =>
  Schedule.exponential("100 millis", 2).pipe(
    Schedule.modifyDelay(({ duration }) => Effect.succeed(Duration.min(duration, longestWait))),
    Schedule.upTo({ duration: Duration.minutes(1) })
  )
const transientRetry = transientRetryUpTo(Duration.seconds(5))
const transientRetryEverySecond = transientRetryUpTo(Duration.seconds(1))

/**
 * Runs a statement again while it fails for a reason that may pass (`retryable`: connection
 * lost, server restarting, deadlock), for up to a minute, logging each failure: for a write
 * whose input cannot be had again (a step's output), so that it is not lost to a restart.
 * The waits double from 100 ms to 5 s; `everySecond`: to 1 s, for a write that holds up work
 * (a worker's reads) and must go through soon after the server is back.
 */
export const retryTransient = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  options?: { readonly everySecond?: boolean }
): Effect.Effect<A, E, R> => {
  const logged = Effect.tapError(effect, (error) =>
    isPassingFailure(error) ? Effect.logWarning(`pgbus: ${error.message}; trying again`) : Effect.void
  )
  const schedule = options?.everySecond === true ? transientRetryEverySecond : transientRetry
  // the schedule is set up only after a first failure: this wraps hot writes (every step outcome)
  return Effect.catchIf(logged, isPassingFailure, () => Effect.retry(logged, { schedule, while: isPassingFailure }))
}

/** Whether an error is a database failure that trying again may get past (a lost connection, say). */
export const isPassingFailure = (error: unknown): error is DatabaseError =>
  error instanceof DatabaseError && error.retryable

/**
 * Whether an error, ours (`DatabaseError`) or the driver's (`SqlError`, also as a defect), is a
 * database failure that may pass: a lost connection, a server restarting, a deadlock.
 */
export const isTransientDatabaseFailure = (error: unknown): boolean =>
  isPassingFailure(error) || (isSqlError(error) && toDatabaseError("")(error).retryable)

/**
 * Which clock time-dependent statements use. `database` (the default) binds null so that
 * `coalesce($now, now())` takes the server's clock, shared by every host; `effect` binds
 * Effect's `Clock`, so TestClock drives visibility, due times and retention in tests.
 *
 * @category references
 */
export const DatabaseClock = Context.Reference<"database" | "effect">("effect-pgbus/DatabaseClock", {
  defaultValue: () => "database"
})

/**
 * The `$now` to bind in a time-dependent statement (null means the database's `now()`). One read
 * of the fiber's references: it is bound in several statements of every workflow step.
 */
export const statementNow: Effect.Effect<Date | null> = Effect.withFiberSucceed((fiber) => statementNowOf(fiber))

/** `statementNow` read from a fiber at hand (inside `Effect.withFiber`): no Effect of its own. */
export const statementNowOf = (fiber: Fiber.Fiber<unknown, unknown>): Date | null =>
  fiber.getRef(DatabaseClock) === "database" ? null : new Date(fiber.getRef(Clock.Clock).currentTimeMillisUnsafe())

/** Layer that makes every statement use Effect's `Clock` (TestClock in tests). */
export const layerEffectClock: Layer.Layer<never> = Layer.succeed(DatabaseClock, "effect")

/**
 * Connection options for the driver from the config: the URL's parts as separate fields (see
 * field guide §14.2), and TLS from the `ssl` key or the URL's `sslmode` (certificate files read).
 */
export const clientOptions = (
  config: PgBusConfigShape,
  applicationName = "effect-pgbus",
  session: SessionOptions = {}
) =>
  Effect.gen(function* () {
    const direct = session.direct === true && config.directDatabaseUrl !== undefined
    const target = targetOf(Redacted.value(direct ? config.directDatabaseUrl! : config.databaseUrl))
    const ssl = yield* tlsOptions(target, config.ssl)
    const tls = ssl === false ? undefined : ssl === true ? {} : ssl
    const keepAliveMs = config.tcpKeepAlive === undefined ? undefined : Duration.toMillis(config.tcpKeepAlive)
    // through a transaction-mode pooler, a connection is another client's at the next
    // transaction: no named prepared statements, no settings in the startup packet (pgbouncer
    // refuses the ones it does not know)
    const pooled = config.transactionPooler && !direct
    const statementTimeout = session.statementTimeout === false || pooled ? undefined : config.statementTimeout
    return {
      host: target.host,
      port: target.port,
      database: target.database,
      username: target.username,
      ...(target.password !== undefined ? { password: Redacted.make(target.password) } : {}),
      // TLS is started by the socket the census opens (below), so the census reads the cleartext
      ssl: false,
      maxConnections: effectivePoolSize(config),
      applicationName,
      preparedStatementCacheSize: 512,
      ...(pooled ? { prepare: false } : {}),
      // the sockets are opened here so that the pool gauges can count them (with keepalive)
      stream: () => openSocket({ host: target.host, port: target.port, keepAliveMs, tls }),
      // libpq's connect_timeout (PGCONNECT_TIMEOUT): the connect, TLS start and login together
      connectTimeout: target.connectTimeout ?? DEFAULT_CONNECT_TIMEOUT,
      ...(statementTimeout !== undefined
        ? { startupParameters: { statement_timeout: String(Math.ceil(Duration.toMillis(statementTimeout))) } }
        : {})
    } as const
  })

/** Session settings of a client that differ from the pool's. */
export interface SessionOptions {
  /** `false`: no `statement_timeout` on this client's connections (a LISTEN connection, say). */
  readonly statementTimeout?: false | undefined
  /** Connect to `directDatabaseUrl` (when set) rather than through the pooler: for session state. */
  readonly direct?: boolean | undefined
}

/** Says once, when the pool is built, which of its URLs' query parameters are not read (and where they go instead). */
const warnUnreadParameters = (config: PgBusConfigShape): Effect.Effect<void> =>
  Effect.forEach(
    [
      ["database URL", config.databaseUrl],
      ["direct database URL", config.directDatabaseUrl]
    ] as const,
    ([what, url]) => {
      const unread = url === undefined ? [] : unreadParameters(Redacted.value(url))
      return unread.length === 0
        ? Effect.void
        : Effect.logWarning(
            `pgbus: the ${what}'s query parameters ${unread.join(", ")} are not read: effect-pgbus reads ${READ_PARAMETERS.join(", ")}`
          )
    },
    { discard: true }
  )

/** A client's options that could not be set up (TLS files unreadable, say): not worth retrying. */
const connectionSetupError = (error: { readonly detail: string }) =>
  new DatabaseError({ operation: "connect", reason: "ConnectionSetup", detail: error.detail, retryable: false })

/**
 * The PgClient (and SqlClient) layer built from `PgBusConfig`.
 *
 * @category layers
 */
export const layer: Layer.Layer<PgClient.PgClient | SqlClient.SqlClient, DatabaseError, PgBusConfig> =
  PgClient.layerFrom(
    Effect.flatMap(PgBusConfig, (config) =>
      warnUnreadParameters(config).pipe(
        Effect.andThen(clientOptions(config)),
        Effect.mapError(connectionSetupError),
        Effect.flatMap((options) => PgClient.make(options).pipe(Effect.mapError(toDatabaseError("connect")))),
        // the driver's pool waits for a free connection without a bound: poolTimeout adds one
        Effect.flatMap((client) =>
          config.poolTimeout === undefined
            ? Effect.succeed(client)
            : Effect.map(
                withAcquireTimeout(client, effectivePoolSize(config), config.poolTimeout),
                (timed) => timed.client
              )
        )
      )
    )
  )

/**
 * A client on one connection of its own, outside the pool (a dead connection is replaced by a
 * new session): for session state such as advisory locks, which must not be lent to others. It
 * connects to `directDatabaseUrl` when set (a pooler in front of `databaseUrl` keeps no session).
 */
export const dedicatedClient = (
  applicationName: string,
  session: Omit<SessionOptions, "direct"> = {}
): Effect.Effect<PgClient.PgClient, DatabaseError, PgBusConfig | Scope.Scope> =>
  Effect.flatMap(PgBusConfig, (config) =>
    clientOptions(config, applicationName, { ...session, direct: true }).pipe(
      Effect.mapError(connectionSetupError),
      Effect.flatMap((options) =>
        PgClient.make({ ...options, maxConnections: 1 }).pipe(
          Effect.mapError(toDatabaseError("connect")),
          Effect.provide(Reactivity.layer)
        )
      )
    )
  )

/**
 * A small client of its own (two connections at most) whose statements are pipelined on one
 * connection: several statements written at once, run one after the other by one backend.
 * For a process's own steady statements (the workers' claims and archives), which then no
 * longer run beside each other on two backends contending for the same table and cores: on
 * bench:jobs W1, PostgreSQL did a fifth less work for the same 20,000 jobs. Transactions take a
 * connection to themselves (the second). Behind a transaction pooler it is not pipelined.
 */
export const pipelinedClient = (
  applicationName: string
): Effect.Effect<PgClient.PgClient, DatabaseError, PgBusConfig | Scope.Scope> =>
  Effect.flatMap(PgBusConfig, (config) =>
    clientOptions(config, applicationName).pipe(
      Effect.mapError(connectionSetupError),
      Effect.flatMap((options) =>
        PgClient.make({
          ...options,
          maxConnections: 2,
          ...(config.transactionPooler ? {} : { multiplex: true, multiplexConcurrency: PIPELINE_DEPTH })
        }).pipe(Effect.mapError(toDatabaseError("connect")), Effect.provide(Reactivity.layer))
      )
    )
  )

/**
 * Opens a client's first connection now (a new PostgreSQL backend takes 10-20 ms or more to
 * start), so that its first real statement finds it open; a failure is left to that statement.
 */
export const openAhead = (client: SqlClient.SqlClient): Effect.Effect<void> => Effect.ignore(client`SELECT 1`)

/** Statements of a pipelined client in flight on one connection before it opens its second. */
const PIPELINE_DEPTH = 8

/**
 * The workers' session: the pipelined client (`pipelinedClient`) of this process's own steady
 * statements, those of its workers and of the workflow runner's shared statements, never a
 * caller's. A supervisor running workers opens its connection at boot (`openAhead`); it closes
 * after a minute idle and opens again at the next statement.
 *
 * @category services
 */
export class WorkerSession extends Context.Service<WorkerSession, SqlClient.SqlClient>()("effect-pgbus/WorkerSession") {
  /** The workers' session, on a pipelined client of its own. */
  static readonly layer: Layer.Layer<WorkerSession, DatabaseError, PgBusConfig> = Layer.effect(
    WorkerSession,
    pipelinedClient("effect-pgbus workers")
  )
}

/** The connection breaker of the pool's target (see `internal/ConnectionBreaker.ts`). */
export const breakerOf = (config: PgBusConfigShape): Breaker => {
  const target = targetOf(Redacted.value(config.databaseUrl))
  return breakerFor(`${target.host}:${target.port}`)
}

/**
 * The connection breaker's half-open probe: one connection of its own to the pool's target and
 * `SELECT 1`, 5 s at most. Its socket tells the breaker how it went (a success closes it, a
 * failure opens it again for twice as long); the outcome is returned too.
 */
export const probeDatabase: Effect.Effect<boolean, never, PgBusConfig> = Effect.flatMap(PgBusConfig, (config) =>
  clientOptions(config, "effect-pgbus probe").pipe(
    Effect.flatMap((options) => PgClient.make({ ...options, maxConnections: 1 })),
    Effect.flatMap((client) => client`SELECT 1`),
    Effect.provide(Reactivity.layer),
    Effect.scoped,
    Effect.timeoutOption(Duration.seconds(5)),
    Effect.map((done) => done._tag === "Some"),
    Effect.catch(() => Effect.succeed(false))
  )
)

/** Runs `log` unless the pool's connection breaker is open (the outage was logged once, when it opened). */
export const unlessUnreachable = (config: PgBusConfigShape, log: Effect.Effect<void>): Effect.Effect<void> =>
  Effect.suspend(() => (breakerOf(config).isOpen() ? Effect.void : log))
