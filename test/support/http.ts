/** Calls an `effect/http` app layer in-process (`HttpRouter.toWebHandler`) on the test's own services. */

import type { Scope } from "effect"
import { Effect, Layer } from "effect"
import { type FindMyWay, HttpRouter, HttpServer } from "effect/http"

/** A response: status, content type, body as text and (when JSON) parsed. */
export interface Answer {
  readonly status: number
  readonly contentType: string
  readonly text: string
  // biome-ignore lint/suspicious/noExplicitAny: test answers are read loosely
  readonly json: any
}

/** What a test calls: method, path, optional JSON body and headers. */
export type Call = (
  method: string,
  path: string,
  body?: unknown,
  headers?: Readonly<Record<string, string>>
) => Effect.Effect<Answer>

/**
 * Serves `app` (routes on an `HttpRouter`) with the services of the current context (the test's
 * PgBus), and returns a caller; the handler is disposed when the scope closes.
 */
type ServerServices = HttpRouter.HttpRouter | Layer.Success<typeof HttpServer.layerServices>

export const webCaller = <A, E, R>(
  app: Layer.Layer<A, E, R>,
  routerConfig?: Partial<FindMyWay.RouterConfig>
): Effect.Effect<Call, never, Scope.Scope | Exclude<R, ServerServices>> =>
  Effect.gen(function* () {
    const context = yield* Effect.context<Exclude<R, ServerServices>>()
    const { handler, dispose } = HttpRouter.toWebHandler(
      app.pipe(
        Layer.provide(HttpServer.layerServices),
        Layer.provide(Layer.succeedContext(context)),
        Layer.orDie
      ) as unknown as Layer.Layer<never, never, HttpRouter.HttpRouter>,
      { disableLogger: true, routerConfig }
    )
    yield* Effect.addFinalizer(() => Effect.promise(() => dispose()))
    return (method, path, body, headers = {}) =>
      Effect.promise(async () => {
        const response = await handler(
          new Request(`http://localhost${path}`, {
            method,
            headers: { ...(body === undefined ? {} : { "content-type": "application/json" }), ...headers },
            ...(body === undefined ? {} : { body: JSON.stringify(body) })
          })
        )
        const text = await response.text()
        const contentType = response.headers.get("content-type") ?? ""
        let json: unknown
        try {
          json = JSON.parse(text)
        } catch {
          json = undefined
        }
        return { status: response.status, contentType, text, json }
      })
  })
