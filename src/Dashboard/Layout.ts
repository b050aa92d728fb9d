/**
 * The shell every page renders in: the head (the bundled htmx, the stylesheet), the navigation,
 * a flash from the last action, and the page's content in a region that live updates replace
 * over SSE (`hx-sse:connect`, morphed in place so typed input and open details survive).
 *
 * @since 0.1.0
 */
import { VERSION } from "../version.ts"
import { type Html, html } from "./Html.ts"
import type { Flash, PageContext } from "./Page.ts"
import { HTMX_VERSION } from "./Vendor.ts"

/** The addresses of the assets under the mount path (versioned, so they are cached for long). */
export const assetPaths = {
  htmx: `/assets/htmx-${HTMX_VERSION}.min.js`,
  htmxSse: `/assets/hx-sse-${HTMX_VERSION}.min.js`,
  css: `/assets/dashboard-${VERSION}.css`
} as const

/** A navigation entry. */
export interface NavEntry {
  readonly label: string
  readonly path: string
}

/** Whether a navigation entry is the current page's (its path, or a page under it). */
const isHere = (entry: NavEntry, current: string) =>
  entry.path === "/" ? current === "/" : current === entry.path || current.startsWith(`${entry.path}/`)

/** The whole document of a page. */
export const layout = (options: {
  readonly ctx: PageContext
  readonly title: string
  readonly nav: ReadonlyArray<NavEntry>
  /** The page's path under the mount path, for the navigation's current entry. */
  readonly current: string
  /** The live-update stream of this page (absent: no live updates). */
  readonly liveUrl: string | undefined
  readonly flash: Flash | undefined
  readonly content: Html
}): Html => {
  const { ctx } = options
  const who = ctx.caller.canWrite
    ? `${ctx.caller.actor} (read and write)`
    : ctx.caller.actor === "anonymous"
      ? "read-only (no authorize hook)"
      : `${ctx.caller.actor} (read-only)`
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="htmx-config" content='{"includeIndicatorCSS":false,"history":false}'>
<title>${options.title} · pgbus</title><link rel="icon" href="data:,">
<link rel="stylesheet" href="${ctx.base}${assetPaths.css}">
<script src="${ctx.base}${assetPaths.htmx}"></script><script src="${ctx.base}${assetPaths.htmxSse}"></script>
</head><body>
<header class="top"><a class="brand" href="${ctx.base}/">pgbus</a>
<nav class="pages">${options.nav.map(
    (e) =>
      html`<a href="${ctx.base}${e.path === "/" ? "/" : e.path}" class="${isHere(e, options.current) ? "here" : ""}">${e.label}</a>`
  )}</nav><span class="who">${who}</span></header>
${options.flash ? html`<div class="flash ${options.flash.kind}" role="status">${options.flash.text}</div>` : ""}
<main id="live"${options.liveUrl ? html` hx-sse:connect="${options.liveUrl}" hx-swap="innerMorph"` : ""}>${options.content}</main>
</body></html>`
}

/** A page of its own for an error (401, 403, 404, 400, 500). */
export const errorPage = (base: string, status: number, message: string): Html =>
  html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${status} · pgbus</title><link rel="icon" href="data:,"><link rel="stylesheet" href="${base}${assetPaths.css}"></head>
<body><header class="top"><a class="brand" href="${base}/">pgbus</a></header><main><h1>${status}</h1><p>${message}</p></main></body></html>`
