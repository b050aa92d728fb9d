/**
 * What a dashboard page is: a module with its route, its query (an Effect on the operations
 * service) and its view (escaped `Html`), plus the POST actions it offers. The shell (navigation,
 * live updates over SSE, access, CSRF, flashes) is the dashboard's; a new page (locks, recurring
 * tasks, streams) is one more module listed in `Pages.ts`.
 *
 * @since 0.1.0
 */
import type { Effect } from "effect"
import type { CallerShape } from "../Http/Access.ts"
import type { Change, View } from "../Operations/Deps.ts"
import type { Operations } from "../Operations/Operations.ts"
import type { OperationsError } from "../Operations/OperationsError.ts"
import { CSRF_FIELD } from "./Csrf.ts"
import { type Html, html, type Interpolation } from "./Html.ts"

/** What a page's view is rendered with. */
export interface PageContext {
  /** The mount path, without a trailing slash (`/pgbus`). */
  readonly base: string
  /** The route's path parameters. */
  readonly params: Readonly<Record<string, string | undefined>>
  /** The query string. */
  readonly query: URLSearchParams
  /** The page's own address (path and query), where a form comes back to. */
  readonly url: string
  readonly caller: CallerShape
  /** The caller's view: tenant scope and whether payloads are shown. */
  readonly view: View
  /** The caller's CSRF token (empty when it cannot write: no form is shown then). */
  readonly csrf: string
  /** When the page is rendered (ms since the epoch, from Effect's Clock): ages are relative to it. */
  readonly now: number
}

/** A page: a route, a title and a view. */
export interface Page {
  /** The route under the mount path (`/queues/:queue/jobs`). */
  readonly path: `/${string}`
  /** Shown in the navigation under this label (pages without one are reached by links). */
  readonly nav?: string | undefined
  /** Shows every tenant's data: refused (403) to a tenant-scoped caller. */
  readonly clusterWide: boolean
  readonly title: (ctx: PageContext) => string
  readonly view: (ctx: PageContext) => Effect.Effect<Html, OperationsError, Operations>
}

/** What an action runs with: the submitted form and who acts. */
export interface ActionContext {
  readonly base: string
  readonly params: Readonly<Record<string, string | undefined>>
  readonly form: URLSearchParams
  /** `dashboard:<actor>` and the form's `reason`. */
  readonly change: Change
  readonly view: View
}

/** What an action answers: a message shown on the page it returns to. */
export interface Flash {
  readonly kind: "ok" | "error"
  readonly text: string
}

/** A POST route: a write through the operations service's guarded verbs. */
export interface Action {
  readonly path: `/${string}`
  /** Acts on every tenant's data: refused (403) to a tenant-scoped caller. */
  readonly clusterWide: boolean
  readonly run: (ctx: ActionContext) => Effect.Effect<Flash, OperationsError, Operations>
}

/** A page module's exports: its pages and actions. */
export interface PageModule {
  readonly pages: ReadonlyArray<Page>
  readonly actions?: ReadonlyArray<Action> | undefined
}

/** An `ok` flash. */
export const ok = (text: string): Flash => ({ kind: "ok", text })

/** A form field, trimmed; undefined when blank. */
export const field = (form: URLSearchParams, name: string): string | undefined => {
  const value = form.get(name)?.trim()
  return value === undefined || value === "" ? undefined : value
}

/** A query parameter, trimmed; undefined when blank. */
export const param = field

/** An address under the mount path, with a query (blank values dropped). */
export const href = (
  base: string,
  path: string,
  query: Readonly<Record<string, string | number | undefined | null>> = {}
): string => {
  const q = new URLSearchParams()
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== "") q.set(k, String(v))
  const s = q.toString()
  return `${base}${path}${s === "" ? "" : `?${s}`}`
}

/** Options of a form's button. */
export interface FormOptions {
  readonly label: string
  /** A red button. */
  readonly danger?: boolean | undefined
  /** Ask for a reason (recorded on the audit trail or in the log). */
  readonly reason?: boolean | undefined
  /** Extra fields before the button. */
  readonly fields?: Interpolation
  /** Hidden fields. */
  readonly hidden?: Readonly<Record<string, string>> | undefined
  /** A class for the form. */
  readonly className?: string | undefined
}

/**
 * A POST form to an action, with the caller's CSRF token and the page to come back to; nothing
 * for a caller who cannot write (a read-only role sees no buttons).
 */
export const postForm = (ctx: PageContext, action: string, options: FormOptions): Html => {
  if (!ctx.caller.canWrite) return html``
  const { back = ctx.url, ...rest } = options.hidden ?? {}
  const hidden = Object.entries(rest).map(
    ([name, value]) => html`<input type="hidden" name="${name}" value="${value}">`
  )
  return html`<form method="post" action="${ctx.base}${action}" class="${options.className ?? "act"}">
<input type="hidden" name="${CSRF_FIELD}" value="${ctx.csrf}"><input type="hidden" name="back" value="${back}">${hidden}${options.fields ?? ""}${options.reason ? html`<input name="reason" placeholder="reason (optional)" maxlength="500" aria-label="reason">` : ""}<button type="submit" class="${options.danger ? "danger" : ""}">${options.label}</button></form>`
}
