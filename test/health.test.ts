import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { PgBusConfig } from "../src/Config.ts"
import * as Http from "../src/Http/Http.ts"
import { Operations } from "../src/Operations/Operations.ts"
import * as PgBus from "../src/PgBus.ts"
import { webCaller } from "./support/http.ts"
import { eventually } from "./support/jobs.ts"
import { ownServer } from "./support/ownServer.ts"

describe("cluster health", () => {
  it.live(
    "the verdict goes ERROR while the database is down (a server of the test's own), and back after",
    () =>
      Effect.gen(function* () {
        const server = yield* ownServer
        const bus = PgBus.layerFrom(
          PgBusConfig.layerWithoutEnvironment({ databaseUrl: server.url, poolSize: 3, listenNotify: false })
        )
        yield* PgBus.migrate.pipe(Effect.provide(bus))
        const context = yield* Layer.build(Operations.layer.pipe(Layer.provideMerge(bus)))
        yield* Effect.gen(function* () {
          const ops = yield* Operations
          const call = yield* webCaller(Http.layer())
          const up = yield* ops.health
          assert.strictEqual(up.status, "OK", up.reasons.join("; "))
          const ready = yield* call("GET", "/pgbus/api/readyz")
          assert.deepStrictEqual([ready.status, ready.json.status], [200, "OK"])

          yield* server.stop
          const down = yield* ops.health
          assert.strictEqual(down.status, "ERROR")
          assert.include(down.reasons[0] ?? "", "database unreachable")
          const probe = yield* call("GET", "/pgbus/api/readyz")
          assert.deepStrictEqual([probe.status, probe.json.status], [503, "ERROR"])
          const api = yield* call("GET", "/pgbus/api/health")
          assert.deepStrictEqual([api.status, api.json.status], [200, "ERROR"])

          yield* server.start
          yield* eventually(
            "the verdict is OK again once the server is back",
            Effect.map(ops.health, (v) => v.status === "OK"),
            "30 seconds"
          )
        }).pipe(Effect.provide(context), Effect.scoped)
      }).pipe(Effect.scoped),
    120_000
  )
})
