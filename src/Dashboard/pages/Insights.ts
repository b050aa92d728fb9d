/**
 * Insights: per workflow class, runs going on and ended in the window with end-to-end p50/p95;
 * a class's pipeline (runs at each step now, p50/p95/p99 step run times, pickup latency, failure,
 * reattempt and skip rates); per queue, throughput and run time and pickup latency over time from
 * the job statistics. The window is 1 h, 24 h (default) or 7 d.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { JobStatsBucket, JobStatsView } from "../../Operations/Model.ts"
import { Operations } from "../../Operations/Operations.ts"
import { bars, type Point } from "../Charts.ts"
import { ms, num, pct } from "../Format.ts"
import { type Html, html } from "../Html.ts"
import { href, type PageContext, type PageModule } from "../Page.ts"
import { n, table } from "../Views.ts"

/** The windows offered. */
export const WINDOWS = [
  { key: "1h", label: "1 hour", ms: 3_600_000 },
  { key: "24h", label: "24 hours", ms: 86_400_000 },
  { key: "7d", label: "7 days", ms: 7 * 86_400_000 }
] as const

const windowOf = (ctx: PageContext) => WINDOWS.find((w) => w.key === ctx.query.get("window")) ?? WINDOWS[1]

/** A bucket's time as a short label. */
const labelOf = (iso: string, bucketMs: number) =>
  bucketMs >= 86_400_000
    ? iso.slice(0, 10)
    : bucketMs >= 3_600_000
      ? iso.slice(5, 16).replace("T", " ")
      : iso.slice(11, 16)

/** One series of a statistics view as chart points. */
export const seriesPoints = (
  view: JobStatsView,
  value: (b: JobStatsBucket) => number | null,
  buckets: ReadonlyArray<JobStatsBucket> = view.total
): ReadonlyArray<Point> => buckets.map((b) => ({ label: labelOf(b.at, view.bucketMs), value: value(b) }))

const windowLinks = (ctx: PageContext, path: string, current: string): Html =>
  html`<p class="muted">Window: ${WINDOWS.map((w) =>
    w.key === current
      ? html`<b>${w.label}</b> `
      : html`<a href="${href(ctx.base, path, { window: w.key })}">${w.label}</a> `
  )}</p>`

const queueCharts = (view: JobStatsView): Html => {
  if (view.queues.length === 0) {
    return html`<p class="muted">No job finished in this window (statistics are written by the workers every few seconds).</p>`
  }
  return html`${view.queues.map((q) => {
    const done = q.buckets.reduce((s, b) => s + b.completed, 0)
    const failed = q.buckets.reduce((s, b) => s + b.failed, 0)
    return html`<h3>${q.queue} <small class="muted">${num(done)} completed, ${num(failed)} failed</small></h3>
<div class="grid2">${bars(
      `${q.queue}: jobs finished per bucket`,
      seriesPoints(view, (b) => b.completed + b.failed, q.buckets)
    )}${bars(
      `${q.queue}: run time p95`,
      seriesPoints(view, (b) => b.durationP95Ms, q.buckets),
      { unit: " ms" }
    )}${bars(
      `${q.queue}: pickup latency p50`,
      seriesPoints(view, (b) => b.latencyP50Ms, q.buckets),
      { unit: " ms" }
    )}</div>`
  })}`
}

/** The page module (its routes and nav entries), as the module's comment describes. */
export const insights: PageModule = {
  pages: [
    {
      path: "/insights",
      nav: "Insights",
      clusterWide: false,
      title: () => "Insights",
      view: (ctx) =>
        Effect.gen(function* () {
          const ops = yield* Operations
          const w = windowOf(ctx)
          const classes = yield* ops.workflowDefinitions({ windowMs: w.ms }, ctx.view)
          // job statistics are cluster-wide: a tenant-scoped caller sees its workflows only
          const jobs = ctx.caller.resourceId === undefined ? yield* ops.jobStats({ windowMs: w.ms }) : undefined
          return html`<h1>Insights</h1>${windowLinks(ctx, "/insights", w.key)}
<h2>Workflow classes</h2>
${table(
  [
    "class",
    n("ongoing"),
    n("paused"),
    n("needing attention"),
    n("finished"),
    n("cancelled"),
    n("p50 end to end"),
    n("p95 end to end")
  ],
  classes.map((c) => [
    html`<a href="${href(ctx.base, `/insights/workflows/${encodeURIComponent(c.workflow)}`, { window: w.key })}">${c.workflow}</a>${c.loaded ? "" : html` <small class="muted">definition not loaded</small>`}`,
    html`<a href="${href(ctx.base, "/workflows", { workflow: c.workflow })}">${num(c.ongoing)}</a>`,
    html`<a href="${href(ctx.base, "/workflows", { workflow: c.workflow, status: "paused" })}">${num(c.paused)}</a>`,
    html`<a href="${href(ctx.base, "/workflows/attention", { workflow: c.workflow })}">${num(c.stuck)}</a>`,
    num(c.finished),
    num(c.cancelled),
    ms(c.p50Ms),
    ms(c.p95Ms)
  ]),
  { empty: "no workflow class has runs" }
)}
${jobs === undefined ? "" : html`<h2>Queues: throughput and latency over time</h2>${queueCharts(jobs)}`}`
        })
    },
    {
      path: "/insights/workflows/:workflow",
      clusterWide: false,
      title: (ctx) => `Insights: ${ctx.params.workflow ?? ""}`,
      view: (ctx) =>
        Effect.gen(function* () {
          const ops = yield* Operations
          const w = windowOf(ctx)
          const workflow = ctx.params.workflow ?? ""
          const stats = yield* ops.workflowStats(workflow, { windowMs: w.ms }, ctx.view)
          const path = `/insights/workflows/${encodeURIComponent(workflow)}`
          return html`<h1>${workflow}</h1><p><a href="${ctx.base}/insights">← every class</a></p>${windowLinks(ctx, path, w.key)}
<h2>Pipeline</h2>
${table(
  [
    "step",
    n("scheduled"),
    n("running"),
    n("waiting"),
    n("paused"),
    n("attempts"),
    n("p50"),
    n("p95"),
    n("p99"),
    n("pickup p50"),
    n("failure"),
    n("reattempt"),
    n("skip")
  ],
  stats.steps.map((s) => [
    html`${s.step}${s.fewSamples && s.attempts > 0 ? html` <small class="muted">few samples (${s.attempts})</small>` : ""}`,
    html`<a href="${href(ctx.base, "/workflows", { workflow, step: s.step, status: "ready" })}">${num(s.scheduled)}</a>`,
    html`<a href="${href(ctx.base, "/workflows", { workflow, step: s.step, status: "performing" })}">${num(s.running)}</a>`,
    html`<a href="${href(ctx.base, "/workflows", { workflow, step: s.step, status: "waiting" })}">${num(s.waiting)}</a>`,
    html`<a href="${href(ctx.base, "/workflows", { workflow, step: s.step, status: "paused" })}">${num(s.paused)}</a>`,
    num(s.attempts),
    ms(s.p50Ms),
    ms(s.p95Ms),
    ms(s.p99Ms),
    ms(s.pickupP50Ms),
    pct(s.failureRate),
    pct(s.reattemptRate),
    pct(s.skipRate)
  ]),
  { empty: "no step of this class has run" }
)}`
        })
    }
  ]
}
