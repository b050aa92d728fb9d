/**
 * A throwaway database for a user's test: created on the server the environment names, or on
 * the embedded server (data in `.pgbus/test`), migrated, and dropped when the layer is released.
 *
 * @since 0.1.0
 */
import { Effect, Layer } from "effect"
import { type ConfigurationError, load, PgBusConfig, type PgBusConfigInput } from "../Config.ts"
import type { DatabaseError } from "../Database.ts"
import { dropDatabase, ensureDatabase, urlWithDatabase } from "../Embedded/Databases.ts"
import type { EmbeddedError } from "../Embedded/EmbeddedError.ts"
import { layerConfig } from "../Embedded/index.ts"
import type { EmbeddedOptions } from "../Embedded/Server.ts"
import type { MigrationError } from "../Migrations.ts"
import * as PgBus from "../PgBus.ts"

let created = 0

/**
 * `PgBusConfig` on a new, empty database of its own (`pgbus_test_<pid>_<n>_<random>`), dropped
 * (its sessions ended) when the layer is released.
 *
 * @category layers
 */
export const layerDatabaseConfig = (
  overrides: PgBusConfigInput = {},
  options: EmbeddedOptions = { dataDir: ".pgbus/test" }
): Layer.Layer<PgBusConfig, ConfigurationError | EmbeddedError> =>
  Layer.effect(
    PgBusConfig,
    Effect.gen(function* () {
      const server = yield* PgBusConfig
      const name = `pgbus_test_${process.pid}_${created++}_${crypto.randomUUID().slice(0, 8)}`
      yield* Effect.acquireRelease(ensureDatabase(server, name), () =>
        dropDatabase(server, name).pipe(
          Effect.catch((e) => Effect.logWarning(`[pgbus] could not drop the test database ${name}: ${e.message}`))
        )
      )
      return yield* load(
        { ...overrides, databaseUrl: urlWithDatabase(server, name) },
        `${server.databaseSource}, throwaway database ${name}`
      )
    })
  ).pipe(Layer.provide(layerConfig(overrides, options)))

/**
 * `PgBus.layer` on a throwaway database, migrated: for a test file or a test of a user's own.
 *
 * @category layers
 */
export const layerDatabase = (
  overrides: PgBusConfigInput = {},
  options: EmbeddedOptions = { dataDir: ".pgbus/test" }
): Layer.Layer<PgBus.PgBus, ConfigurationError | EmbeddedError | DatabaseError | MigrationError> =>
  PgBus.layerFrom(layerDatabaseConfig({ ...overrides, migrate: true }, options))
