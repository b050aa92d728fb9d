/**
 * Events and outbox: each subscriber with its queue's figures, its handler's processed-event
 * records and whether a live consumer drains it; the events waiting in subscriber queues; the
 * outbox's entries by state.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { Operations } from "../../Operations/Operations.ts"
import { ago, badge, num } from "../Format.ts"
import { html } from "../Html.ts"
import { href, type PageModule, param } from "../Page.ts"
import { n, nextLink, payload, table } from "../Views.ts"

const OUTBOX_STATES = ["pending", "failing", "published"] as const

/** The page module (its routes and nav entries), as the module's comment describes. */
export const events: PageModule = {
  pages: [
    {
      path: "/events",
      nav: "Events",
      clusterWide: true,
      title: () => "Events and outbox",
      view: (ctx) =>
        Effect.gen(function* () {
          const ops = yield* Operations
          const bus = yield* ops.events({ handler: param(ctx.query, "handler") }, ctx.view)
          const stateParam = param(ctx.query, "outbox")
          const state = OUTBOX_STATES.find((s) => s === stateParam)
          const outbox = yield* ops.outbox({ state, cursor: param(ctx.query, "cursor") }, ctx.view)
          return html`<h1>Events and outbox</h1>
<h2>Subscribers</h2>
${table(
  [
    "handler",
    "pattern",
    "queue",
    n("pending"),
    n("ready"),
    n("running"),
    n("retrying"),
    n("dead letters"),
    n("completed"),
    n("handling"),
    n("silent"),
    "consumer"
  ],
  bus.subscriptions.map((s) => [
    html`<a href="${href(ctx.base, "/events", { handler: s.handler })}">${s.handler}</a>`,
    html`<code>${s.pattern}</code>`,
    html`<a href="${ctx.base}/queues/${s.queue}/jobs">${s.queue}</a>`,
    num(s.pending),
    num(s.ready),
    num(s.running),
    num(s.retrying),
    s.deadLetters > 0
      ? html`<a href="${href(ctx.base, "/dead-letters", { queue: s.queue })}">${num(s.deadLetters)}</a>`
      : "0",
    num(s.completed),
    num(s.handling),
    num(s.silent),
    s.consumed ? "a live consumer drains it" : html`<span class="badge s-stale">no live consumer</span>`
  ]),
  { empty: "no subscriber registered", id: "subscribers" }
)}
<h2>Pending events</h2>
${table(
  ["event", "routing key", "handler", "state", n("attempts"), "enqueued", "last error", "payload"],
  bus.pending.map((e) => [
    html`<a href="${ctx.base}/queues/${e.queue}/jobs/${e.id}">${e.eventId ?? e.id}</a>`,
    e.routingKey ?? "—",
    e.handler ?? "—",
    badge(e.state),
    num(e.attempts),
    ago(e.enqueuedAt, ctx.now),
    e.lastError === null ? "" : html`<code>${e.lastError.class}</code> ${e.lastError.message}`,
    payload(ctx, e.payload)
  ]),
  { empty: "no event waits", id: "pending-events" }
)}
<h2>Outbox <small class="muted">${num(outbox.counts.pending)} pending, ${num(outbox.counts.failing)} failing, ${num(outbox.counts.published)} published</small></h2>
<p>${[undefined, ...OUTBOX_STATES].map((s) =>
            s === state
              ? html`<b>${s ?? "all"}</b> `
              : html`<a href="${href(ctx.base, "/events", { outbox: s })}">${s ?? "all"}</a> `
          )}</p>
${table(
  ["id", "kind", "target", "state", n("attempts"), "created", "deliver at", "published", "last error"],
  outbox.entries.map((e) => [
    e.id,
    e.kind,
    e.target,
    badge(e.state),
    num(e.attempts),
    ago(e.createdAt, ctx.now),
    ago(e.deliverAt, ctx.now),
    ago(e.publishedAt, ctx.now),
    e.lastError ?? ""
  ]),
  { empty: "no outbox entry", id: "outbox" }
)}${nextLink(ctx, "/events", outbox.next)}`
        })
    }
  ]
}
