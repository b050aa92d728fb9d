/**
 * The supervisor's own health endpoints: `/livez` (the process is up) and a container-local
 * `/readyz` (this supervisor booted and its workers are healthy) for rolling deploys. Neither
 * touches the database.
 *
 * @since 0.1.0
 */

import { createServer } from "node:http"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer, Ref } from "effect"
import { HttpRouter, HttpServerResponse } from "effect/http"

/** Readiness of one supervisor. Only `OK` answers 200. */
export type Readiness = "BOOTING" | "OK" | "DEGRADED" | "DRAINING"

/** The body of `/readyz`. */
export interface ReadinessReport {
  readonly status: Readiness
  readonly expected: number
  readonly live: number
}

/** Serves `/livez` and `/readyz` on `host:port` until the scope closes. */
export const serveHealth = (
  port: number,
  host: string,
  readiness: Effect.Effect<ReadinessReport>
): Layer.Layer<never, never, never> => {
  const notAllowed = HttpServerResponse.text("method not allowed", { status: 405 })
  const routes = HttpRouter.use((router) =>
    Effect.all([
      router.add("GET", "/livez", HttpServerResponse.text("ok")),
      router.add(
        "GET",
        "/readyz",
        Effect.flatMap(readiness, (report) =>
          HttpServerResponse.json(report, { status: report.status === "OK" ? 200 : 503 })
        )
      ),
      ...(["POST", "PUT", "PATCH", "DELETE"] as const).flatMap((method) => [
        router.add(method, "/livez", notAllowed),
        router.add(method, "/readyz", notAllowed)
      ])
    ])
  )
  return HttpRouter.serve(routes, { disableLogger: true }).pipe(
    Layer.provide(NodeHttpServer.layer(createServer, { port, host })),
    Layer.orDie
  )
}

/** A readiness cell. */
export const makeReadiness = Ref.make<Readiness>("BOOTING")
