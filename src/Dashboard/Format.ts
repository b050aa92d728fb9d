/**
 * Numbers, times and states as the dashboard shows them (plain text; the views escape it).
 *
 * @since 0.1.0
 */
import { inWords } from "../Operations/Deps.ts"
import { type Html, html } from "./Html.ts"

export { inWords }

/** A count with thousands separators. */
export const num = (n: number): string => (Number.isFinite(n) ? Math.round(n).toLocaleString("en-US") : "—")

/** A duration in milliseconds, or a dash. */
export const ms = (value: number | null | undefined): string =>
  value === null || value === undefined ? "—" : inWords(value)

/** A rate (0..1) as a percentage, or a dash. */
export const pct = (value: number | null | undefined): string =>
  value === null || value === undefined ? "—" : `${(value * 100).toFixed(value < 0.1 ? 1 : 0)}%`

/** A time as `<time>` with its age in words ("3m 4s ago") and the ISO time as its title. */
export const ago = (iso: string | null | undefined, now: number): Html => {
  if (iso === null || iso === undefined) return html`—`
  const age = now - new Date(iso).getTime()
  const words = age >= 0 ? `${inWords(age)} ago` : `in ${inWords(-age)}`
  return html`<time datetime="${iso}" title="${iso}">${words}</time>`
}

/** A status as a coloured badge (the class names the state). */
export const badge = (status: string): Html =>
  html`<span class="badge s-${status.toLowerCase().replace(/[^a-z_]/g, "")}">${status}</span>`
