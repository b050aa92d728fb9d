/**
 * The JSON API, mountable in the app's `effect/http` server or served on its own: every route
 * of `Api.ts` under `path` (default `/pgbus/api`), its OpenAPI document at
 * `<path>/openapi.json`, the bundled docs page at `<path>/docs`, and the cluster-wide
 * `<path>/readyz` (200 for OK and DEGRADED, 503 for STALLED and ERROR, the verdict as the body)
 * beside `<path>/livez`. The supervisor's own container-local `/readyz` is a different probe.
 *
 * @since 0.1.0
 */
import { createServer } from "node:http"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { HttpRouter, HttpServerResponse } from "effect/http"
import { HttpApiBuilder, HttpApiScalar } from "effect/http-api"
import type { SqlClient } from "effect/sql"
import type { PgBusConfig } from "../Config.ts"
import { Operations } from "../Operations/Operations.ts"
import type { QueueStates } from "../Queue/QueueStates.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import type { RecurringScheduler } from "../Recurring/Scheduler.ts"
import type { Processes } from "../Supervisor/Processes.ts"
import type { WorkflowClient } from "../Workflow/Client.ts"
import { type AccessOptions, layerAccess } from "./Access.ts"
import { apiAt } from "./Api.ts"
import { handlers } from "./Handlers.ts"
import { routerConfig } from "./RouterConfig.ts"

export type { AccessOptions, Authorization } from "./Access.ts"
export { routerConfig } from "./RouterConfig.ts"

/** Where and how the API is mounted. */
export interface ApiOptions extends AccessOptions {
  /** Mount path of every route (default `/pgbus/api`). */
  readonly path?: `/${string}` | undefined
  /** Serve the docs page (default true). */
  readonly docs?: boolean | undefined
}

/** What the API needs of `PgBus.layer`. */
export type ApiRequirements =
  | PgBusConfig
  | SqlClient.SqlClient
  | QueueStore
  | QueueStates
  | Processes
  | WorkflowClient
  | RecurringScheduler

/** The mount path of the API. */
export const pathOf = (options: ApiOptions): `/${string}` => options.path ?? "/pgbus/api"

/** `<path>/readyz` and `<path>/livez`: the cluster verdict as a readiness probe. */
const probes = (path: `/${string}`) =>
  HttpRouter.use((router) =>
    Effect.gen(function* () {
      const ops = yield* Operations
      yield* router.add("GET", `${path}/livez`, HttpServerResponse.text("ok"))
      yield* router.add(
        "GET",
        `${path}/readyz`,
        Effect.map(ops.health, (verdict) =>
          HttpServerResponse.jsonUnsafe(verdict, {
            status: verdict.status === "OK" || verdict.status === "DEGRADED" ? 200 : 503
          })
        )
      )
    })
  )

/**
 * The API's routes, registered on the app's `HttpRouter` (provide it with `HttpRouter.serve`
 * or `HttpRouter.toWebHandler`).
 *
 * @category layers
 */
export const layer = (options: ApiOptions = {}) => {
  const path = pathOf(options)
  const api = apiAt(path)
  const routes = HttpApiBuilder.layer(api, { openapiPath: `${path}/openapi.json` }).pipe(
    Layer.provide(handlers(api)),
    Layer.provide(layerAccess(options))
  )
  const docs = options.docs === false ? Layer.empty : HttpApiScalar.layer(api, { path: `${path}/docs` })
  return Layer.mergeAll(routes, docs, probes(path)).pipe(Layer.provide(Operations.layer))
}

/**
 * The API on its own HTTP server (`pgbus api --port`), until the scope closes.
 *
 * @category layers
 */
export const serve = (options: ApiOptions & { readonly port: number; readonly host?: string | undefined }) =>
  HttpRouter.serve(layer(options), { disableLogger: true, routerConfig }).pipe(
    Layer.provide(NodeHttpServer.layer(createServer, { port: options.port, host: options.host ?? "127.0.0.1" }))
  )
