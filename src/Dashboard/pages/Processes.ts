/**
 * Processes: every supervisor with its status in words (why it is healthy, late or stale and what
 * happens next), its capsules, busy out of capacity, jobs/s, what it finished, its last beat and
 * its uptime.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { Operations } from "../../Operations/Operations.ts"
import { ago, badge, inWords, num } from "../Format.ts"
import { html } from "../Html.ts"
import type { PageModule } from "../Page.ts"
import { meter, n, table } from "../Views.ts"

/** The page module (its routes and nav entries), as the module's comment describes. */
export const processes: PageModule = {
  pages: [
    {
      path: "/processes",
      nav: "Processes",
      clusterWide: true,
      title: () => "Processes",
      view: (ctx) =>
        Effect.gen(function* () {
          const list = yield* (yield* Operations).processes
          return html`<h1>Processes <small class="muted">${list.length}</small></h1>
${table(
  ["process", "status", "capsules", n("busy"), n("jobs/s"), n("succeeded"), n("failed"), "last beat", "up", "version"],
  list.map((p) => [
    html`<code title="${p.id}">${p.host}:${p.pid}</code><br><small class="muted">${p.roles.join(", ")}${p.leads.length > 0 ? ` · leads ${p.leads.join(", ")}` : ""}</small>`,
    html`${badge(p.status)}<br><small>${p.statusText}</small>`,
    p.capsules.length === 0
      ? "—"
      : html`${p.capsules.map((c) => html`<div><b>${c.name}</b>: ${c.queues.join(", ")} × ${c.concurrency}</div>`)}`,
    html`${meter(p.busy, p.capacity)} ${p.busy}/${p.capacity}`,
    p.jobsPerSecond.toFixed(1),
    num(p.succeeded),
    num(p.failed),
    ago(p.lastBeatAt, ctx.now),
    inWords(ctx.now - new Date(p.startedAt).getTime()),
    html`${p.version}${p.appRevision ? html`<br><small class="muted">${p.appRevision}</small>` : ""}`
  ]),
  { empty: "no process is running: start one with `pgbus start`", id: "processes" }
)}
<p class="muted">A process beats every few seconds; one that stops beating is late, then stale, and a dispatcher releases its claims and removes it.</p>`
        })
    }
  ]
}
