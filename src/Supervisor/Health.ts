/**
 * The supervisor's own health endpoints: `/livez` (the process is up) and a container-local
 * `/readyz` (this supervisor booted and its workers are healthy) for rolling deploys. Neither
 * touches the database. `/metrics` serves the process's metrics in Prometheus's text format,
 * after the `MetricsSampler` (which `Metrics.layer` provides) has sampled the gauges.
 *
 * @since 0.1.0
 */

import { createServer } from "node:http"
import { NodeHttpServer } from "@effect/platform-node"
import { Context, Effect, Layer, Ref } from "effect"
import { HttpRouter, HttpServerResponse } from "effect/http"
import { PrometheusMetrics } from "effect/observability"

/**
 * What runs before `/metrics` is formatted: samples the gauges that are read from the database
 * (queue depths, runs by status, table health). Nothing by default; `Metrics.layer` provides it.
 *
 * @category references
 */
export const MetricsSampler = Context.Reference<Effect.Effect<void>>("effect-pgbus/MetricsSampler", {
  defaultValue: () => Effect.void
})

/** The `/metrics` response: the sampler, then every metric in Prometheus's text format. */
export const metricsResponse = (sample: Effect.Effect<void>) =>
  sample.pipe(
    Effect.andThen(PrometheusMetrics.format()),
    Effect.map((text) => HttpServerResponse.text(text, { contentType: "text/plain; version=0.0.4; charset=utf-8" }))
  )

/** Readiness of one supervisor. Only `OK` answers 200. */
export type Readiness = "BOOTING" | "OK" | "DEGRADED" | "DRAINING"

/** The body of `/readyz`. */
export interface ReadinessReport {
  readonly status: Readiness
  readonly expected: number
  readonly live: number
  /** `unreachable` while this process's connection breaker is open (then the status is DEGRADED). */
  readonly database?: "ok" | "unreachable" | undefined
  readonly unreachableSince?: string | undefined
  /** The last block of the event loop, for a minute after it (then the status is DEGRADED). */
  readonly eventLoopBlocked?:
    | { readonly at: string; readonly ms: number; readonly jobs: ReadonlyArray<string> }
    | undefined
}

/** Serves `/livez`, `/readyz` and `/metrics` on `host:port` until the scope closes. */
export const serveHealth = (
  port: number,
  host: string,
  readiness: Effect.Effect<ReadinessReport>,
  sample: Effect.Effect<void> = Effect.void
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
      router.add("GET", "/metrics", metricsResponse(sample)),
      ...(["POST", "PUT", "PATCH", "DELETE"] as const).flatMap((method) => [
        router.add(method, "/livez", notAllowed),
        router.add(method, "/readyz", notAllowed),
        router.add(method, "/metrics", notAllowed)
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
