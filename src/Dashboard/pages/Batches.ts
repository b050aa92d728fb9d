/**
 * Batches: each batch's progress (completed, failed and still to run as one bar), whether it is
 * stalled, and whether its callbacks were sent; one batch's page with its counts.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { BatchView } from "../../Operations/Model.ts"
import { Operations } from "../../Operations/Operations.ts"
import { ago, badge, num } from "../Format.ts"
import { type Html, html } from "../Html.ts"
import { href, type PageModule, param } from "../Page.ts"
import { facts, n, nextLink, table } from "../Views.ts"

/** Completed, failed and pending members as one bar. */
const progress = (b: BatchView): Html => {
  const total = Math.max(1, b.total)
  const done = (b.completed / total) * 100
  const failed = (b.failed / total) * 100
  return html`<svg class="progress" viewBox="0 0 100 10" width="120" height="10" preserveAspectRatio="none" role="img" aria-label="${b.completed} completed, ${b.failed} failed of ${b.total}"><rect class="seg waited" x="0" y="0" width="100" height="10"/><rect class="seg ran" x="0" y="0" width="${done.toFixed(1)}" height="10"/><rect class="seg failed" x="${done.toFixed(1)}" y="0" width="${failed.toFixed(1)}" height="10"/></svg>`
}

const statusOf = (b: BatchView) => (b.stalled ? "stalled" : b.status)

/** The page module (its routes and nav entries), as the module's comment describes. */
export const batches: PageModule = {
  pages: [
    {
      path: "/batches",
      nav: "Batches",
      clusterWide: true,
      title: () => "Batches",
      view: (ctx) =>
        Effect.gen(function* () {
          const s = param(ctx.query, "status")
          const status = s === "pending" || s === "finished" ? s : undefined
          const page = yield* (yield* Operations).batches({ status, cursor: param(ctx.query, "cursor") })
          return html`<h1>Batches <small class="muted">${num(page.counts.pending)} pending (${num(page.counts.stalled)} stalled), ${num(page.counts.finished)} finished</small></h1>
<p>${[undefined, "pending", "finished"].map((v) =>
            v === status
              ? html`<b>${v ?? "all"}</b> `
              : html`<a href="${href(ctx.base, "/batches", { status: v })}">${v ?? "all"}</a> `
          )}</p>
${table(
  ["batch", "status", "progress", n("completed"), n("failed"), n("total"), "created", "callbacks"],
  page.batches.map((b) => [
    html`<a href="${ctx.base}/batches/${b.id}">${b.description ?? b.id.slice(0, 8)}</a>`,
    badge(statusOf(b)),
    progress(b),
    num(b.completed),
    num(b.failed),
    num(b.total),
    ago(b.createdAt, ctx.now),
    b.callbacksSent ? "sent" : b.status === "finished" ? "due" : "—"
  ]),
  { empty: "no batch", id: "batches" }
)}${nextLink(ctx, "/batches", page.next)}`
        })
    },
    {
      path: "/batches/:id",
      clusterWide: true,
      title: (ctx) => `Batch ${ctx.params.id ?? ""}`,
      view: (ctx) =>
        Effect.gen(function* () {
          const b = yield* (yield* Operations).batch(ctx.params.id ?? "")
          return html`<h1>Batch ${b.description ?? b.id}</h1><p><a href="${ctx.base}/batches">← batches</a></p>
${facts([
  ["id", html`<code>${b.id}</code>`],
  ["status", badge(statusOf(b))],
  [
    "members",
    html`${progress(b)} ${num(b.completed)} completed, ${num(b.failed)} failed, ${num(Math.max(0, b.total - b.completed - b.failed))} to run, of ${num(b.total)}`
  ],
  ["open blocks", num(b.openBlocks)],
  ["created", ago(b.createdAt, ctx.now)],
  ["last member added", ago(b.lastEnqueuedAt, ctx.now)],
  ["finished", ago(b.finishedAt, ctx.now)],
  [
    "callbacks",
    b.callbacksSent
      ? "sent"
      : b.status === "finished"
        ? "due (the batch sweep sends them)"
        : "when every member has ended"
  ]
])}`
        })
    }
  ]
}
