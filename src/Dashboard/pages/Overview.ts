/**
 * Overview: the cluster verdict with its reasons, then one card per area, each saying what its
 * number means and linking to the page that explains it, and the throughput and latency of the
 * last hour (from the job statistics).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { Operations } from "../../Operations/Operations.ts"
import { sparkline } from "../Charts.ts"
import { ago, num } from "../Format.ts"
import { html } from "../Html.ts"
import type { PageModule } from "../Page.ts"
import { card } from "../Views.ts"
import { seriesPoints } from "./Insights.ts"

/** The verdict strip: OK / DEGRADED / STALLED / ERROR with its reasons. */
export const verdictStrip = (verdict: { readonly status: string; readonly reasons: ReadonlyArray<string> }) =>
  html`<section class="verdict ${verdict.status}" aria-label="cluster verdict"><strong>${verdict.status}</strong>
<span class="muted">${verdict.status === "OK" ? "every process beats and no queue waits past its limit" : verdict.status === "DEGRADED" ? "work goes on, but something needs a look (readiness stays up)" : verdict.status === "STALLED" ? "processes beat, yet claimable work waits past the stall limit (readiness fails)" : "the database cannot be reached"}</span>
${verdict.reasons.length > 0 ? html`<ul>${verdict.reasons.map((r) => html`<li>${r}</li>`)}</ul>` : ""}</section>`

/** The overview page. */
export const overview: PageModule = {
  pages: [
    {
      path: "/",
      nav: "Overview",
      clusterWide: true,
      title: () => "Overview",
      view: (ctx) =>
        Effect.gen(function* () {
          const ops = yield* Operations
          const o = yield* ops.overview
          const hour = yield* ops.jobStats({ windowMs: 3_600_000 })
          const healthy = o.processes.filter((p) => p.status === "healthy")
          const jobsPerSecond = healthy.reduce((s, p) => s + p.jobsPerSecond, 0)
          const link = (path: string) => `${ctx.base}${path}`
          return html`<h1>Overview</h1>${verdictStrip(o.verdict)}
<div class="cards">
${card("Queues", num(o.queues.total), `${o.queues.paused} paused; ${num(o.queues.depth)} messages, ${num(o.queues.ready)} ready now`, link("/queues"))}
${card("Jobs/s", jobsPerSecond.toFixed(1), `finished per second over the last beat, ${healthy.length} healthy process(es)`, link("/processes"))}
${card("Retrying", num(o.queues.retrying), "failed and waiting out their backoff before the next attempt", link("/queues"))}
${card("Dead letters", num(o.queues.deadLetters), "gave up after their last attempt: retry or discard them", link("/dead-letters"))}
${card("Processes", `${o.verdict.processes.healthy}/${o.processes.length}`, `healthy of registered; ${o.verdict.processes.late} late, ${o.verdict.processes.stale} stale`, link("/processes"))}
${card("Workflows needing attention", num(o.workflows.stuck), `${num(o.workflows.ongoing)} ongoing, ${num(o.workflows.paused)} paused`, link("/workflows/attention"))}
${card("Outbox", num(o.outboxPending), "entries not yet published", link("/events"))}
${card("Batches", num(o.batchesPending), "pending batches", link("/batches"))}
${card("Recurring tasks", num(o.recurring.total), o.recurring.nextRunAt === null ? "none scheduled: a supervisor with tasks syncs them" : html`next fire ${ago(o.recurring.nextRunAt, ctx.now)}: <code>${o.recurring.nextTask}</code>`, link("/recurring"))}
</div>
<h2>The last hour</h2>
<div class="grid2">${sparkline(
            "Jobs finished per 5 minutes",
            seriesPoints(hour, (b) => b.completed + b.failed)
          )}${sparkline(
            "Pickup latency p50 per 5 minutes",
            seriesPoints(hour, (b) => b.latencyP50Ms),
            { unit: " ms" }
          )}</div>`
        })
    }
  ]
}
