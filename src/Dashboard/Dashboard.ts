/**
 * The operations dashboard: server-rendered HTML on `effect/http`, the bundled htmx for live
 * updates over SSE, every read and write through the `Operations` service. Mount it in the app's
 * router with `Dashboard.layer({ path, authorize, resolveContext })` (the same hooks as the JSON
 * API's) or serve it alone with `Dashboard.serve({ port })` (`pgbus dashboard`).
 *
 * Closed by default: without an `authorize` hook every caller is an anonymous reader (no buttons,
 * payloads redacted, every POST 403) and `serve` refuses an address other than the loopback. A
 * `read` role sees no buttons and no payloads; its forged POSTs answer 403. Every write is a POST
 * carrying a CSRF token bound to the caller, runs the same guarded verb as the API and the CLI,
 * and is recorded as `dashboard:<actor>`.
 *
 * @since 0.1.0
 */
import { createServer } from "node:http"
import { NodeHttpServer } from "@effect/platform-node"
import { Clock, Duration, Effect, Layer, Schema, Stream } from "effect"
import { HttpRouter, type HttpServerRequest, HttpServerResponse, UrlParams } from "effect/http"
import type { SqlClient } from "effect/sql"
import type { PgBusConfig } from "../Config.ts"
import { type AccessOptions, type CallerShape, resolveCaller } from "../Http/Access.ts"
import { routerConfig } from "../Http/RouterConfig.ts"
import type { View } from "../Operations/Deps.ts"
import { Operations } from "../Operations/Operations.ts"
import type { OperationsError } from "../Operations/OperationsError.ts"
import type { QueueStates } from "../Queue/QueueStates.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import type { RecurringScheduler } from "../Recurring/Scheduler.ts"
import type { Processes } from "../Supervisor/Processes.ts"
import type { WorkflowClient } from "../Workflow/Client.ts"
import { CSRF_FIELD, makeCsrf } from "./Csrf.ts"
import type { Html } from "./Html.ts"
import { assetPaths, errorPage, layout, type NavEntry } from "./Layout.ts"
import type { Action, Flash, Page, PageContext } from "./Page.ts"
import { pageModules } from "./Pages.ts"
import { stylesheet } from "./Style.ts"
import { htmx, htmxSse } from "./Vendor.ts"

export type { AccessOptions, Authorization } from "../Http/Access.ts"
export type { Action, Flash, Page, PageContext, PageModule } from "./Page.ts"

/** Where and how the dashboard is mounted. */
export interface DashboardOptions extends AccessOptions {
  /** Mount path (default `/pgbus`). */
  readonly path?: `/${string}` | undefined
  /** How often an open page refreshes over SSE (default 2 seconds). */
  readonly refreshInterval?: Duration.Input | undefined
  /** The secret CSRF tokens are signed with (default: random per process; give one to several instances). */
  readonly csrfSecret?: string | undefined
}

/** What the dashboard needs of `PgBus.layer`. */
export type DashboardRequirements =
  | PgBusConfig
  | SqlClient.SqlClient
  | QueueStore
  | QueueStates
  | Processes
  | WorkflowClient
  | RecurringScheduler

/**
 * `serve` was asked to listen beyond the loopback without an `authorize` hook.
 *
 * @category errors
 */
export class UnprotectedDashboard extends Schema.TaggedError<UnprotectedDashboard>()("UnprotectedDashboard", {
  host: Schema.String
}) {
  override get message(): string {
    return `refusing to serve the dashboard on ${this.host} without an authorize hook: bind 127.0.0.1 (the default) or give an authorize hook`
  }
}

/** The mount path without its trailing slash. */
export const basePathOf = (options: DashboardOptions): string => (options.path ?? "/pgbus").replace(/\/+$/, "")

const CSP =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"

const FLASH_COOKIE = "pgbus_flash"

/** Headers of every page: no framing, no sniffing, no inline script, no caching of data. */
const secure = (response: HttpServerResponse.HttpServerResponse) =>
  HttpServerResponse.setHeaders(response, {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store"
  })

const htmlResponse = (body: Html, status = 200) =>
  secure(HttpServerResponse.html(body.value).pipe(HttpServerResponse.setStatus(status)))

/** The message of an operations error as a page or a flash says it. */
const describeError = (error: OperationsError): { readonly status: number; readonly text: string } => {
  switch (error._tag) {
    case "NotFound":
      return { status: 404, text: error.message }
    case "Conflict":
      return { status: 409, text: error.message }
    case "InvalidRequest":
      return { status: 400, text: error.message }
    case "DatabaseError":
      return { status: 500, text: "internal error (see the pgbus log)" }
  }
}

const readFlash = (request: HttpServerRequest.HttpServerRequest): Flash | undefined => {
  const raw = request.cookies[FLASH_COOKIE]
  if (raw === undefined || raw === "") return undefined
  try {
    const parsed: unknown = JSON.parse(raw)
    if (typeof parsed === "object" && parsed !== null) {
      const { kind, text } = parsed as { kind?: unknown; text?: unknown }
      if ((kind === "ok" || kind === "error") && typeof text === "string") return { kind, text: text.slice(0, 2000) }
    }
  } catch {
    // a malformed cookie is no flash
  }
  return undefined
}

/**
 * The dashboard's routes, registered on the app's `HttpRouter` (provide it with
 * `HttpRouter.serve` or `HttpRouter.toWebHandler`), on `PgBus.layer`'s services.
 *
 * @category layers
 */
export const layer = (options: DashboardOptions = {}) => {
  const base = basePathOf(options)
  const refresh = Duration.fromInputUnsafe(options.refreshInterval ?? "2 seconds")
  const csrf = makeCsrf(options.csrfSecret)
  const modules = pageModules
  const pages = modules.flatMap((m) => m.pages)
  const actions = modules.flatMap((m) => m.actions ?? [])
  const cookiePath = base === "" ? "/" : base

  const routes = HttpRouter.use((router) =>
    Effect.gen(function* () {
      const ops = yield* Operations

      const callerOf = (request: HttpServerRequest.HttpServerRequest) => Effect.result(resolveCaller(options, request))

      const viewOf = (caller: CallerShape): View => ({ resourceId: caller.resourceId, payloads: caller.payloads })

      const navFor = (caller: CallerShape): ReadonlyArray<NavEntry> =>
        pages
          .filter((p) => p.nav !== undefined && (caller.resourceId === undefined || !p.clusterWide))
          .map((p) => ({ label: p.nav!, path: p.path }))

      const contextOf = (
        caller: CallerShape,
        params: Readonly<Record<string, string | undefined>>,
        url: URL,
        now: number
      ): PageContext => ({
        base,
        params,
        query: url.searchParams,
        url: `${url.pathname}${url.search}`,
        caller,
        view: viewOf(caller),
        csrf: caller.canWrite ? csrf.tokenFor(caller.actor) : "",
        now
      })

      /** The address of the page a live stream is about (the stream's own address without `/_live`). */
      const pageUrlOf = (request: HttpServerRequest.HttpServerRequest, live: boolean): URL => {
        const url = new URL(request.url, "http://dashboard")
        if (live) url.pathname = url.pathname.replace(`${base}/_live`, base) || "/"
        return url
      }

      const renderView = (page: Page, ctx: PageContext) => page.view(ctx).pipe(Effect.provideService(Operations, ops))

      const servePage = (page: Page) => (request: HttpServerRequest.HttpServerRequest) =>
        Effect.gen(function* () {
          const who = yield* callerOf(request)
          if (who._tag === "Failure") return htmlResponse(errorPage(base, 401, who.failure.message), 401)
          const caller = who.success
          if (page.clusterWide && caller.resourceId !== undefined) {
            return htmlResponse(errorPage(base, 403, "a tenant-scoped caller sees only its workflow runs"), 403)
          }
          const params = yield* HttpRouter.params
          const url = pageUrlOf(request, false)
          const ctx = contextOf(caller, params, url, yield* Clock.currentTimeMillis)
          const content = yield* Effect.result(renderView(page, ctx))
          if (content._tag === "Failure") {
            const { status, text } = describeError(content.failure)
            if (content.failure._tag === "DatabaseError") {
              yield* Effect.logError("pgbus dashboard: a page failed", content.failure)
            }
            return htmlResponse(errorPage(base, status, text), status)
          }
          const flash = readFlash(request)
          const body = layout({
            ctx,
            title: page.title(ctx),
            nav: navFor(caller),
            current: page.path,
            liveUrl: `${base}/_live${url.pathname.slice(base.length) || "/"}${url.search}`,
            flash,
            content: content.success
          })
          const response = htmlResponse(body)
          return flash === undefined
            ? response
            : HttpServerResponse.expireCookieUnsafe(response, FLASH_COOKIE, { path: cookiePath })
        })

      /** The page's content as SSE: sent at once, then again whenever it changes; a comment each tick. */
      const serveLive = (page: Page) => (request: HttpServerRequest.HttpServerRequest) =>
        Effect.gen(function* () {
          const who = yield* callerOf(request)
          if (who._tag === "Failure") return HttpServerResponse.text(who.failure.message, { status: 401 })
          const caller = who.success
          if (page.clusterWide && caller.resourceId !== undefined) {
            return HttpServerResponse.text("forbidden", { status: 403 })
          }
          const params = yield* HttpRouter.params
          const at = contextOf(caller, params, pageUrlOf(request, true), 0)
          let last = ""
          const frames = Stream.tick(refresh).pipe(
            Stream.mapEffect(() =>
              Effect.flatMap(Clock.currentTimeMillis, (now) => renderView(page, { ...at, now })).pipe(
                Effect.map((content) => {
                  if (content.value === last) return ": unchanged\n\n"
                  last = content.value
                  return `${content.value
                    .split("\n")
                    .map((line) => `data: ${line}`)
                    .join("\n")}\n\n`
                }),
                // a failed render keeps the page as it is; the next tick tries again
                Effect.catch(() => Effect.succeed(": render failed\n\n"))
              )
            ),
            Stream.encodeText
          )
          return HttpServerResponse.stream(frames, {
            contentType: "text/event-stream",
            headers: { "cache-control": "no-store", "x-accel-buffering": "no" }
          })
        })

      const redirectBack = (back: string | undefined, flash: Flash) => {
        const safe =
          back !== undefined && (back === base || back.startsWith(`${base}/`)) && !back.startsWith("//")
            ? back
            : `${base}/`
        return HttpServerResponse.redirect(safe, { status: 303 }).pipe(
          // the cookie's value is encoded by effect/http (and decoded in request.cookies)
          HttpServerResponse.setCookieUnsafe(FLASH_COOKIE, JSON.stringify(flash), {
            path: cookiePath,
            httpOnly: true,
            sameSite: "strict",
            maxAge: "1 minute"
          })
        )
      }

      const serveAction = (action: Action) => (request: HttpServerRequest.HttpServerRequest) =>
        Effect.gen(function* () {
          const who = yield* callerOf(request)
          if (who._tag === "Failure") return htmlResponse(errorPage(base, 401, who.failure.message), 401)
          const caller = who.success
          if (caller.writeRefusal !== undefined) {
            return htmlResponse(errorPage(base, 403, `forbidden: ${caller.writeRefusal}`), 403)
          }
          const body = yield* Effect.result(request.urlParamsBody)
          if (body._tag === "Failure") return htmlResponse(errorPage(base, 400, "the form could not be read"), 400)
          const form = new URLSearchParams(UrlParams.toString(body.success))
          if (!csrf.verify(caller.actor, form.get(CSRF_FIELD) ?? undefined)) {
            return htmlResponse(errorPage(base, 403, "forbidden: missing or invalid CSRF token (reload the page)"), 403)
          }
          if (action.clusterWide && caller.resourceId !== undefined) {
            return htmlResponse(
              errorPage(base, 403, "forbidden: a tenant-scoped caller acts only on its workflow runs"),
              403
            )
          }
          const params = yield* HttpRouter.params
          const reason = form.get("reason")?.trim()
          const outcome = yield* Effect.result(
            action
              .run({
                base,
                params,
                form,
                change: {
                  actor: `dashboard:${caller.actor}`,
                  reason: reason === "" ? undefined : reason?.slice(0, 500)
                },
                view: viewOf(caller)
              })
              .pipe(Effect.provideService(Operations, ops))
          )
          if (outcome._tag === "Failure" && outcome.failure._tag === "DatabaseError") {
            yield* Effect.logError("pgbus dashboard: an action failed", outcome.failure)
          }
          const flash: Flash =
            outcome._tag === "Success" ? outcome.success : { kind: "error", text: describeError(outcome.failure).text }
          return redirectBack(form.get("back") ?? undefined, flash)
        })

      const asset = (body: string, contentType: string) =>
        HttpServerResponse.text(body, {
          contentType,
          headers: { "cache-control": "public, max-age=31536000, immutable", "x-content-type-options": "nosniff" }
        })
      yield* router.add(
        "GET",
        `${base}${assetPaths.htmx}` as `/${string}`,
        asset(htmx, "text/javascript; charset=utf-8")
      )
      yield* router.add(
        "GET",
        `${base}${assetPaths.htmxSse}` as `/${string}`,
        asset(htmxSse, "text/javascript; charset=utf-8")
      )
      yield* router.add("GET", `${base}${assetPaths.css}` as `/${string}`, asset(stylesheet, "text/css; charset=utf-8"))

      for (const page of pages) {
        // the router ignores a trailing slash: `/pgbus` and `/pgbus/` are one route
        const path = page.path === "/" ? (base === "" ? "/" : base) : `${base}${page.path}`
        yield* router.add("GET", path as `/${string}`, servePage(page))
        yield* router.add("GET", `${base}/_live${page.path}` as `/${string}`, serveLive(page))
      }
      for (const action of actions) {
        yield* router.add("POST", `${base}${action.path}` as `/${string}`, serveAction(action))
      }
    })
  )
  return routes.pipe(Layer.provide(Operations.layer))
}

const LOOPBACK = /^(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|::1|localhost)$/

/** Whether an address to bind is the loopback. */
export const isLoopback = (host: string): boolean => LOOPBACK.test(host)

/**
 * The dashboard on its own HTTP server (`pgbus dashboard --port 3777`), until the scope closes.
 * Binds 127.0.0.1 by default; another address needs an `authorize` hook (`UnprotectedDashboard`).
 *
 * @category layers
 */
export const serve = (
  options: DashboardOptions & { readonly port: number; readonly host?: string | undefined }
): Layer.Layer<never, UnprotectedDashboard | unknown, DashboardRequirements> => {
  const host = options.host ?? "127.0.0.1"
  if (!isLoopback(host) && options.authorize === undefined)
    return Layer.effectDiscard(new UnprotectedDashboard({ host }))
  return HttpRouter.serve(layer(options), { disableLogger: true, routerConfig }).pipe(
    Layer.provide(NodeHttpServer.layer(createServer, { port: options.port, host }))
  )
}
