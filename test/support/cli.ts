/** The in-process CLI under test on a fresh database: the layer, its database URL, and `pgbus`. */
import { NodeServices } from "@effect/platform-node"
import { Context, Effect, Layer } from "effect"
import * as Cli from "../../src/Cli/Cli.ts"
import { PgBusConfig } from "../../src/Config.ts"
import * as PgBus from "../../src/PgBus.ts"
import { urlFor } from "./server.ts"
import { freshDatabase } from "./TestDatabase.ts"

/** The database the CLI under test is pointed at (with `--database-url`). */
export class TestDb extends Context.Service<TestDb, { readonly url: string }>()("test/support/cli/TestDb") {}

/** PgBus on a fresh migrated database, its URL, and Node's services for the CLI. */
export const testLayer = Layer.unwrap(
  Effect.map(freshDatabase, (name) =>
    Layer.mergeAll(
      PgBus.layerFrom(PgBusConfig.layerWithoutEnvironment({ databaseUrl: urlFor(name) })),
      Layer.succeed(TestDb, { url: urlFor(name) }),
      NodeServices.layer
    )
  )
).pipe(Layer.orDie)

/** Runs `pgbus <args> --database-url <the test database>` in-process. */
export const pgbus = (...args: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const { url } = yield* TestDb
    return yield* Cli.capture([...args, "--database-url", url])
  })
