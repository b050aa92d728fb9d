/**
 * Dead letters: every dead-letter queue's messages, filtered by queue and error class, each with
 * why it died; retry (back on its queue) or discard one, or every one the filter matches (at most
 * 500 a press, after ticking a confirmation that states the count). One dead letter's page shows
 * its reason block, backtrace, payload and headers.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { Operations } from "../../Operations/Operations.ts"
import { InvalidRequest } from "../../Operations/OperationsError.ts"
import { ago, num } from "../Format.ts"
import { html } from "../Html.ts"
import { field, href, ok, type PageModule, param, postForm } from "../Page.ts"
import { facts, filterForm, n, nextLink, payload, table, textInput } from "../Views.ts"

const filterOf = (q: URLSearchParams) => ({ queue: param(q, "queue"), errorClass: param(q, "errorClass") })

const bulk = (verb: "retry" | "discard") => ({
  path: `/dead-letters/bulk/${verb}` as const,
  clusterWide: true,
  run: ({ form, change }: { readonly form: URLSearchParams; readonly change: { readonly actor: string } }) =>
    Effect.gen(function* () {
      if (field(form, "confirm") !== "yes") {
        return yield* new InvalidRequest({ reason: "tick the confirmation to act on every matching dead letter" })
      }
      const ops = yield* Operations
      const target = filterOf(form)
      const r =
        verb === "retry" ? yield* ops.retryDeadLetters(target, change) : yield* ops.discardDeadLetters(target, change)
      return ok(r.summary)
    })
})

/** The page module (its routes and nav entries), as the module's comment describes. */
export const deadLetters: PageModule = {
  pages: [
    {
      path: "/dead-letters",
      nav: "Dead letters",
      clusterWide: true,
      title: () => "Dead letters",
      view: (ctx) =>
        Effect.gen(function* () {
          const ops = yield* Operations
          const filter = filterOf(ctx.query)
          const page = yield* ops.deadLetters({ ...filter, cursor: param(ctx.query, "cursor") }, ctx.view)
          const hidden = {
            ...(filter.queue ? { queue: filter.queue } : {}),
            ...(filter.errorClass ? { errorClass: filter.errorClass } : {})
          }
          const confirm = (verb: string) =>
            html`<label><input type="checkbox" name="confirm" value="yes" required> ${verb} all ${num(Math.min(page.total, 500))} matching${page.total > 500 ? ` (of ${num(page.total)}: 500 a press)` : ""}</label> `
          return html`<h1>Dead letters <small class="muted">${num(page.total)}</small></h1>
${filterForm(ctx, "/dead-letters", html`${textInput("queue", "queue", filter.queue, "queue or its _dlq")}${textInput("error class", "errorClass", filter.errorClass, "e.g. SmtpError")}`)}
${page.total > 0 ? html`<p>${postForm(ctx, "/dead-letters/bulk/retry", { label: "Retry matching", hidden, fields: confirm("retry"), reason: true })}${postForm(ctx, "/dead-letters/bulk/discard", { label: "Discard matching", danger: true, hidden, fields: confirm("discard"), reason: true })}</p>` : ""}
${table(
  ["id", "queue", "job", n("attempts"), "dead-lettered", "why", "", ""],
  page.deadLetters.map((d) => [
    html`<a href="${ctx.base}/dead-letters/${d.id}">${d.id}</a>`,
    d.origin ?? d.queue,
    d.job ?? "—",
    num(d.attempts),
    ago(d.deadLetteredAt, ctx.now),
    html`${d.errorClass ? html`<code>${d.errorClass}</code> ` : ""}${d.errorMessage ?? ""}${d.reason ? html`<br><small class="muted">${d.reason}</small>` : ""}`,
    postForm(ctx, `/dead-letters/${d.id}/retry`, { label: "Retry" }),
    postForm(ctx, `/dead-letters/${d.id}/discard`, { label: "Discard", danger: true })
  ]),
  { empty: "no dead letter matches", id: "dead-letters" }
)}${nextLink(ctx, "/dead-letters", page.next)}`
        })
    },
    {
      path: "/dead-letters/:id",
      clusterWide: true,
      title: (ctx) => `Dead letter ${ctx.params.id ?? ""}`,
      view: (ctx) =>
        Effect.gen(function* () {
          const d = yield* (yield* Operations).deadLetter(ctx.params.id ?? "", ctx.view)
          return html`<h1>Dead letter ${d.id}</h1><p><a href="${href(ctx.base, "/dead-letters", { queue: d.queue })}">← dead letters of ${d.queue}</a></p>
${facts([
  ["queue", d.origin ?? d.queue],
  ["job", d.job ?? "—"],
  ["attempts", num(d.attempts)],
  ["enqueued", ago(d.enqueuedAt, ctx.now)],
  ["dead-lettered", ago(d.deadLetteredAt, ctx.now)],
  ["reason", d.reason ?? "—"],
  ["error", d.errorClass ? html`<code>${d.errorClass}</code> ${d.errorMessage ?? ""}` : "—"],
  ["retried from the DLQ", num(d.retriesFromDlq)]
])}
<p>${postForm(ctx, `/dead-letters/${d.id}/retry`, { label: "Retry", hidden: { back: `${ctx.base}/dead-letters` } })}${postForm(ctx, `/dead-letters/${d.id}/discard`, { label: "Discard", danger: true, reason: true, hidden: { back: `${ctx.base}/dead-letters` } })}</p>
<h2>Backtrace</h2>${d.backtrace === null ? html`<p class="muted">none recorded</p>` : ctx.view.payloads === true ? html`<pre>${d.backtrace}</pre>` : payload(ctx, null)}
<h2>Payload</h2>${payload(ctx, d.payload)}<h2>Headers</h2>${payload(ctx, d.headers)}`
        })
    }
  ],
  actions: [
    {
      path: "/dead-letters/:id/retry",
      clusterWide: true,
      run: ({ params, change }) =>
        Effect.map(
          Effect.flatMap(Operations, (ops) => ops.retryDeadLetter(params.id ?? "", change)),
          (r) => ok(`Retried ${r.id}: back on ${r.queue} as message ${r.messageId}`)
        )
    },
    {
      path: "/dead-letters/:id/discard",
      clusterWide: true,
      run: ({ params, change }) =>
        Effect.map(
          Effect.flatMap(Operations, (ops) => ops.discardDeadLetter(params.id ?? "", change)),
          (r) => ok(`Discarded ${r.id}`)
        )
    },
    bulk("retry"),
    bulk("discard")
  ]
}
