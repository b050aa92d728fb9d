/**
 * Recurring tasks: every task the scheduler's leader stored, with its schedule in words and as
 * cron, what it fires (a job, or a workflow's run) on which queue, its catch-up, when it last
 * fired and when it fires next, and a Run now button (with a reason) that fires it at once
 * through the scheduler's ledger, its schedule unchanged; a task's page lists its fires in the
 * ledger, with who ran each run-now and why.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { RecurringTaskView } from "../../Operations/Model.ts"
import { Operations } from "../../Operations/Operations.ts"
import { describeFire, recurringExecutionView, recurringTaskView } from "../../Operations/Recurring.ts"
import { ago, num } from "../Format.ts"
import { html } from "../Html.ts"
import { field, ok, type PageModule, postForm } from "../Page.ts"
import { card, facts, n, table } from "../Views.ts"

/** What each catch-up setting does, in words. */
const catchUpText = {
  one: "after downtime, fires the newest missed slot",
  none: "after downtime, skips missed slots",
  all: "after downtime, fires every missed slot"
} as const

/** A task's latest run now: when, by whom and why (under its last run). */
const lastManual = (t: RecurringTaskView, now: number) => {
  const m = t.lastManualRun
  if (m === null) return ""
  return html`<br><small class="muted last-manual">run now ${ago(m.runAt, now)} by ${m.actor ?? "(not recorded)"}${m.reason === null ? "" : html`: ${m.reason}`}</small>`
}

/** The page module (its routes and nav entries), as the module's comment describes. */
export const recurring: PageModule = {
  pages: [
    {
      path: "/recurring",
      nav: "Recurring",
      clusterWide: true,
      title: () => "Recurring tasks",
      view: (ctx) =>
        Effect.gen(function* () {
          const tasks = (yield* (yield* Operations).recurringTasks).map(recurringTaskView)
          const upcoming = tasks
            .filter((t) => t.nextRunAt !== null)
            .sort((a, b) => (a.nextRunAt! < b.nextRunAt! ? -1 : 1))[0]
          const fires = tasks.reduce((s, t) => s + t.fires, 0)
          return html`<h1>Recurring tasks</h1>
<div class="cards">
${card("tasks", num(tasks.length), "stored by the scheduler's leader (a supervisor with tasks syncs them)")}
${card("next fire", upcoming === undefined ? "—" : ago(upcoming.nextRunAt, ctx.now), upcoming === undefined ? "no task is scheduled" : html`<code>${upcoming.key}</code>`)}
${card("fires", num(fires), "in the ledger (kept for the retention; each task's latest stays)")}
</div>
${table(
  ["task", "schedule", "runs", "queue", "catch-up", "last run", "next run", n("fires"), ""],
  tasks.map((t) => [
    html`<a href="${ctx.base}/recurring/${encodeURIComponent(t.key)}"><code>${t.key}</code></a>${t.description === null ? "" : html`<br><small class="muted">${t.description}</small>`}`,
    html`${t.schedule}${t.schedule === t.cron ? "" : html` <small class="muted">(${t.cron})</small>`}<br><small class="muted">${t.timeZone}</small>`,
    t.kind === "job" ? html`job ${t.job}` : html`a run of workflow ${t.workflow}`,
    t.queue,
    html`<span title="${catchUpText[t.catchUp]}">${t.catchUp}</span>`,
    html`${t.lastRunAt === null ? "never" : ago(t.lastRunAt, ctx.now)}${lastManual(t, ctx.now)}`,
    t.nextRunAt === null ? "—" : ago(t.nextRunAt, ctx.now),
    num(t.fires),
    postForm(ctx, "/recurring/run-now", { label: "Run now", reason: true, hidden: { key: t.key } })
  ]),
  {
    empty: "no recurring task (a supervisor with tasks syncs them when it leads the scheduler)",
    id: "recurring-tasks"
  }
)}
<p class="muted">Run now fires a task at once, recorded in the ledger as a manual fire; its schedule is unchanged. A workflow's schedule starts its run only where the workflow is registered (the app's Registry layer).</p>`
        })
    },
    {
      path: "/recurring/:key",
      clusterWide: true,
      title: (ctx) => `Recurring task ${ctx.params.key ?? ""}`,
      view: (ctx) =>
        Effect.gen(function* () {
          const found = yield* (yield* Operations).recurringExecutions(ctx.params.key ?? "")
          const t = recurringTaskView(found.task)
          return html`<h1>Recurring task <code>${t.key}</code></h1><p><a href="${ctx.base}/recurring">← recurring tasks</a></p>
${facts([
  ["schedule", html`${t.schedule} <small class="muted">(${t.cron}, ${t.timeZone})</small>`],
  ["runs", t.kind === "job" ? html`job ${t.job}` : html`a run of workflow ${t.workflow}`],
  ["queue", t.queue],
  ["next run", t.nextRunAt === null ? "—" : ago(t.nextRunAt, ctx.now)],
  ["fires", num(t.fires)]
])}
<h2>Fires</h2>
${table(
  ["fired", "for", "queue", "message", "by", "reason"],
  found.executions
    .map(recurringExecutionView)
    .map((e) => [
      ago(e.createdAt, ctx.now),
      e.manual ? "run now" : html`slot ${e.runAt}`,
      e.queue,
      e.messageId ?? "—",
      e.manual
        ? (e.actor ?? html`<span class="muted">(not recorded)</span>`)
        : html`<span class="muted">schedule</span>`,
      e.reason ?? ""
    ]),
  { empty: "no fire in the ledger (kept for the retention)", id: "recurring-executions" }
)}`
        })
    }
  ],
  actions: [
    {
      path: "/recurring/run-now",
      clusterWide: true,
      run: ({ form, change }) =>
        Effect.gen(function* () {
          const fire = yield* (yield* Operations).runRecurringNow(field(form, "key") ?? "", change)
          const text = describeFire(fire)
          return ok(`${text.charAt(0).toUpperCase()}${text.slice(1)}`)
        })
    }
  ]
}
