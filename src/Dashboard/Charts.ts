/**
 * Charts drawn on the server as inline SVG (no chart library): a sparkline, a bar chart over time
 * and a horizontal timeline. Each chart comes with its data as a plain table (a `<details>` under
 * it), the fallback for screen readers, text browsers and narrow screens. Colours come from CSS
 * classes, so light and dark themes apply and no inline style is needed (the CSP forbids them).
 *
 * @since 0.1.0
 */
import { type Html, html, raw } from "./Html.ts"

/** One point of a series. */
export interface Point {
  /** The label of the point (a time, a bucket). */
  readonly label: string
  readonly value: number | null
}

const fmt = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(1))

/** A small line chart of one series, with its data table. */
export const sparkline = (
  caption: string,
  points: ReadonlyArray<Point>,
  options: { readonly unit?: string | undefined; readonly className?: string | undefined } = {}
): Html => {
  const width = 240
  const height = 48
  const values = points.map((p) => p.value ?? 0)
  const max = Math.max(1, ...values)
  const step = points.length > 1 ? width / (points.length - 1) : width
  const coords = values.map((v, i) => `${fmt(i * step)},${fmt(height - 2 - (v / max) * (height - 4))}`)
  const line = coords.length > 0 ? coords.join(" ") : `0,${height - 2} ${width},${height - 2}`
  const last = points.at(-1)?.value
  return html`<figure class="chart spark ${options.className ?? ""}">
<figcaption>${caption}${last !== undefined && last !== null ? html` <b>${fmt(last)}${options.unit ?? ""}</b>` : ""}</figcaption>
<svg viewBox="0 0 ${width} ${height}" width="100%" height="${height}" preserveAspectRatio="none" role="img" aria-label="${caption}"><polyline class="line" fill="none" points="${line}"/></svg>
${dataTable(caption, points, options.unit)}</figure>`
}

/** Vertical bars over time (one series), with its data table. */
export const bars = (
  caption: string,
  points: ReadonlyArray<Point>,
  options: { readonly unit?: string | undefined; readonly className?: string | undefined } = {}
): Html => {
  const width = 600
  const height = 120
  const max = Math.max(1, ...points.map((p) => p.value ?? 0))
  const w = points.length > 0 ? width / points.length : width
  const rects = points.map((p, i) => {
    const v = p.value ?? 0
    const h = Math.max(v > 0 ? 1 : 0, (v / max) * (height - 14))
    return html`<rect class="bar" x="${fmt(i * w + 1)}" y="${fmt(height - h)}" width="${fmt(Math.max(1, w - 2))}" height="${fmt(h)}"><title>${p.label}: ${p.value === null ? "—" : fmt(v)}${options.unit ?? ""}</title></rect>`
  })
  return html`<figure class="chart bars ${options.className ?? ""}">
<figcaption>${caption} <small>(max ${fmt(max)}${options.unit ?? ""})</small></figcaption>
<svg viewBox="0 0 ${width} ${height}" width="100%" height="${height}" preserveAspectRatio="none" role="img" aria-label="${caption}">${rects}</svg>
${dataTable(caption, points, options.unit)}</figure>`
}

/** A segment of a timeline row: from and to in ms since the row's start, and its kind (a CSS class). */
export interface Segment {
  readonly from: number
  readonly to: number
  readonly kind: string
  readonly title: string
}

/** A horizontal timeline: one row per item, its label beside its segments, every row on one time axis. */
export const timeline = (
  rows: ReadonlyArray<{ readonly label: string; readonly segments: ReadonlyArray<Segment> }>,
  span: { readonly start: number; readonly end: number }
): Html => {
  const width = 1000
  const total = Math.max(1, span.end - span.start)
  const x = (t: number) => ((t - span.start) / total) * width
  return html`<div class="timeline">${rows.map(
    (row) =>
      html`<div class="tl-row"><span class="tl-label">${row.label}</span><svg viewBox="0 0 ${width} 12" width="100%" height="12" preserveAspectRatio="none" role="img" aria-label="${row.label}">${row.segments.map(
        (s) =>
          html`<rect class="seg ${s.kind}" x="${fmt(x(s.from))}" y="0" width="${fmt(Math.max(2, x(s.to) - x(s.from)))}" height="12"><title>${row.label}: ${s.title}</title></rect>`
      )}</svg></div>`
  )}</div>`
}

/** A chart's data as a table, folded under it. */
const dataTable = (caption: string, points: ReadonlyArray<Point>, unit: string | undefined): Html =>
  html`<details class="data"><summary>Data</summary><table><caption>${caption}</caption><thead><tr><th>when</th><th>${unit ? raw("value") : "value"}</th></tr></thead><tbody>${points.map(
    (p) =>
      html`<tr><td>${p.label}</td><td class="n">${p.value === null ? "—" : `${fmt(p.value)}${unit ?? ""}`}</td></tr>`
  )}</tbody></table></details>`
