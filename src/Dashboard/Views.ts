/**
 * Building blocks the pages share: tables (with a scroll wrapper for phones), cards, fact lists,
 * payload blocks (shown only when the caller may see payloads), filter forms.
 *
 * @since 0.1.0
 */
import { type Html, html, type Interpolation, jsonText } from "./Html.ts"
import type { PageContext } from "./Page.ts"

/** A column: its heading and whether it holds numbers (right-aligned). */
export type Column = string | { readonly label: string; readonly numeric: true }

/** A table; `empty` is said when there is no row. */
export const table = (
  columns: ReadonlyArray<Column>,
  rows: ReadonlyArray<ReadonlyArray<Interpolation>>,
  options: { readonly empty?: string | undefined; readonly id?: string | undefined } = {}
): Html => {
  const numeric = columns.map((c) => typeof c !== "string")
  const head = columns.map((c) => (typeof c === "string" ? html`<th>${c}</th>` : html`<th class="n">${c.label}</th>`))
  const body =
    rows.length === 0
      ? html`<tr><td colspan="${columns.length}" class="muted">${options.empty ?? "nothing here"}</td></tr>`
      : rows.map(
          (r) =>
            html`<tr>${r.map((cell, i) => (numeric[i] ? html`<td class="n">${cell}</td>` : html`<td>${cell}</td>`))}</tr>`
        )
  return html`<div class="scroll"><table${options.id ? html` id="${options.id}"` : ""}><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table></div>`
}

/** A numeric column heading. */
export const n = (label: string): Column => ({ label, numeric: true })

/** A card: what it counts, the number, and what the number means. */
export const card = (label: string, value: Interpolation, note: Interpolation, link?: string): Html =>
  html`<div class="card"><div class="k">${link ? html`<a href="${link}">${label}</a>` : label}</div><div class="v">${value}</div><p>${note}</p></div>`

/** A definition list of facts. */
export const facts = (entries: ReadonlyArray<readonly [string, Interpolation]>): Html =>
  html`<dl class="facts">${entries.map(([k, v]) => html`<dt>${k}</dt><dd>${v}</dd>`)}</dl>`

/** A JSON value as text, or a note that payloads are hidden from this caller. */
export const payload = (ctx: PageContext, value: unknown): Html =>
  ctx.view.payloads === true
    ? html`<pre class="payload">${jsonText(value)}</pre>`
    : html`<p class="muted">hidden (payloads are shown to callers allowed to see them)</p>`

/** A GET filter form keeping the page's address. */
export const filterForm = (ctx: PageContext, path: string, fields: Interpolation): Html =>
  html`<form class="filters" method="get" action="${ctx.base}${path}">${fields}<button type="submit">Filter</button> <a href="${ctx.base}${path}">clear</a></form>`

/** A labelled text input of a filter form. */
export const textInput = (label: string, name: string, value: string | undefined, placeholder = ""): Html =>
  html`<label>${label}<input name="${name}" value="${value ?? ""}" placeholder="${placeholder}"></label>`

/** A labelled select of a filter form (the first option is "any"). */
export const select = (label: string, name: string, options: ReadonlyArray<string>, value: string | undefined): Html =>
  html`<label>${label}<select name="${name}"><option value="">any</option>${options.map(
    (o) => html`<option value="${o}"${o === value ? html` selected` : ""}>${o}</option>`
  )}</select></label>`

/** Busy out of capacity as a small bar. */
export const meter = (value: number, max: number): Html => {
  const ratio = max > 0 ? Math.min(1, value / max) : 0
  return html`<span class="meter" title="${value} / ${max}"><svg viewBox="0 0 100 8" width="80" height="8" preserveAspectRatio="none"><rect class="fill" x="0" y="0" width="${Math.round(ratio * 100)}" height="8"/></svg></span>`
}

/** A paging link to the next page, keeping the filters. */
export const nextLink = (ctx: PageContext, path: string, next: string | null): Html => {
  if (next === null) return html``
  const q = new URLSearchParams(ctx.query)
  q.set("cursor", next)
  return html`<p><a href="${ctx.base}${path}?${q.toString()}" rel="next">Next page →</a></p>`
}
