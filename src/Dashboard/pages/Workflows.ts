/**
 * Workflows: the runs newest first with seed 000's filters (class, status, step, error class,
 * subject, id, stuck reason, created and ended ranges), each saying what it is doing and what
 * happens next, with bulk resume and cancel on the filter; a run's page with its timeline, attempts,
 * signals, audit trail, the actions its state allows (from the transition table) and a send-signal
 * form; and "needs attention", the stuck runs grouped by class, step, stuck reason and error class,
 * each group resumed or cancelled at once (500 at most a press).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { RunDetail } from "../../Operations/Model.ts"
import { Operations } from "../../Operations/Operations.ts"
import { InvalidRequest } from "../../Operations/OperationsError.ts"
import type { ActVerb, RunFilter } from "../../Operations/Workflows.ts"
import { StuckReasons } from "../../Workflow/QuerySql.ts"
import { OngoingStatuses, OutsideVerbs, type RunStatus, RunStatuses } from "../../Workflow/States.ts"
import { type Segment, timeline } from "../Charts.ts"
import { ago, badge, ms, num } from "../Format.ts"
import { type Html, html, jsonText } from "../Html.ts"
import { field, href, ok, type PageContext, type PageModule, param, postForm } from "../Page.ts"
import { facts, filterForm, n, nextLink, payload, select, table, textInput } from "../Views.ts"

const FILTER_KEYS = [
  "workflow",
  "status",
  "step",
  "errorClass",
  "subject",
  "id",
  "stuckReason",
  "createdFrom",
  "createdTo",
  "endedFrom",
  "endedTo"
] as const

const timeOf = (name: string, text: string | undefined) => {
  if (text === undefined) return Effect.succeed(undefined)
  const date = new Date(/[zZ]|[+-]\d\d:?\d\d$/.test(text) ? text : `${text}Z`)
  return Number.isNaN(date.getTime())
    ? Effect.fail(new InvalidRequest({ reason: `${name} must be a time (got ${text})` }))
    : Effect.succeed(date)
}

/** The list's filter from a query or a form; no status is the ongoing runs, `all` every status. */
export const runFilterOf = (q: URLSearchParams) =>
  Effect.gen(function* () {
    const statusText = param(q, "status")
    const statuses =
      statusText === undefined ? OngoingStatuses : statusText === "all" ? undefined : statusText.split(",")
    const bad = (statuses ?? []).filter((s) => !(RunStatuses as ReadonlyArray<string>).includes(s))
    if (bad.length > 0) return yield* new InvalidRequest({ reason: `unknown status ${bad.join(", ")}` })
    const stuck = param(q, "stuckReason")
    if (stuck !== undefined && !(StuckReasons as ReadonlyArray<string>).includes(stuck)) {
      return yield* new InvalidRequest({ reason: `unknown stuck reason ${stuck}` })
    }
    return {
      workflow: param(q, "workflow"),
      status: statuses as ReadonlyArray<RunStatus> | undefined,
      step: param(q, "step"),
      errorClass: param(q, "errorClass"),
      subject: param(q, "subject"),
      id: param(q, "id"),
      stuckReason: stuck as RunFilter["stuckReason"],
      createdFrom: yield* timeOf("createdFrom", param(q, "createdFrom")),
      createdTo: yield* timeOf("createdTo", param(q, "createdTo")),
      endedFrom: yield* timeOf("endedFrom", param(q, "endedFrom")),
      endedTo: yield* timeOf("endedTo", param(q, "endedTo"))
    } satisfies RunFilter
  })

/** The filter's fields as hidden inputs of a bulk form. */
const filterFields = (q: URLSearchParams): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const k of FILTER_KEYS) {
    const v = param(q, k)
    if (v !== undefined) out[k] = v
  }
  return out
}

const confirmBox = (text: string): Html =>
  html`<label><input type="checkbox" name="confirm" value="yes" required> ${text}</label> `

/** A bulk form on a filter: resume or cancel every matching run (500 at most a press). */
const bulkForm = (ctx: PageContext, verb: "resume" | "cancel", filter: Record<string, string>, count: string) =>
  postForm(ctx, `/workflows/bulk/${verb}`, {
    label: verb === "resume" ? "Resume" : "Cancel",
    danger: verb === "cancel",
    hidden: filter,
    fields:
      verb === "cancel"
        ? html`${confirmBox(`${verb} ${count}`)}<label><input type="checkbox" name="cancelChildren" value="yes"> and their live child runs</label> `
        : confirmBox(`${verb} ${count}`),
    reason: true
  })

const LABELS: Record<ActVerb, string> = {
  pause: "Pause",
  resume: "Resume",
  resume_at: "Resume at",
  cancel: "Cancel",
  run_now: "Run now",
  reschedule: "Reschedule",
  rerun: "Rerun",
  skip: "Skip step"
}

/** The run's actions: one form per verb its state allows (`availableActions`, from the transition table). */
const actionsOf = (ctx: PageContext, detail: RunDetail): Html => {
  const run = detail.run
  const steps = [...new Set(detail.steps.map((s) => s.name))]
  const expected = { expectedStatus: run.status }
  return html`${run.availableActions.map((verb) => {
    if (verb === "signal") return ""
    const v = verb as ActVerb
    const path = `/workflows/${run.id}/act/${verb}`
    switch (v) {
      case "resume_at":
        return postForm(ctx, path, {
          label: LABELS[v],
          hidden: expected,
          fields: html`<select name="step" aria-label="step">${steps.map((s) => html`<option>${s}</option>`)}</select>`,
          reason: true
        })
      case "reschedule":
        return postForm(ctx, path, {
          label: LABELS[v],
          hidden: expected,
          fields: html`<input name="at" type="datetime-local" required aria-label="when (UTC)"> <small>UTC</small>`
        })
      case "resume": {
        const failed = detail.steps.at(-1)?.status === "failed"
        return postForm(ctx, path, {
          label: failed ? "Resume (retry the failed step)" : "Resume (continue)",
          hidden: expected,
          reason: true
        })
      }
      case "cancel": {
        const live = detail.children.filter((c) => (OngoingStatuses as ReadonlyArray<string>).includes(c.status)).length
        return postForm(ctx, path, {
          label: LABELS[v],
          hidden: expected,
          fields:
            live > 0
              ? html`<label><input type="checkbox" name="cancelChildren" value="yes"> also cancel its ${num(live)} live child run(s)</label> `
              : undefined,
          reason: true,
          danger: true
        })
      }
      default:
        return postForm(ctx, path, { label: LABELS[v], hidden: expected, reason: true })
    }
  })}`
}

/** The run's timeline: per attempt, waited (scheduled → due), queued (due → started), ran (started → finished). */
const timelineOf = (detail: RunDetail, now: number): Html => {
  const steps = detail.steps
  if (steps.length === 0) return html`<p class="muted">no attempt yet</p>`
  const t = (iso: string | null) => (iso === null ? undefined : new Date(iso).getTime())
  const start = Math.min(...steps.map((s) => t(s.scheduledAt)!))
  const end = Math.max(now, ...steps.map((s) => t(s.finishedAt) ?? now))
  const rows = steps.map((s) => {
    const scheduled = t(s.scheduledAt)!
    const due = t(s.dueAt)!
    const started = t(s.startedAt)
    const finished = t(s.finishedAt)
    const segments: Array<Segment> = []
    if (due > scheduled)
      segments.push({ from: scheduled, to: Math.min(due, end), kind: "waited", title: `waited ${ms(due - scheduled)}` })
    if (started !== undefined) {
      if (started > due) segments.push({ from: due, to: started, kind: "queued", title: `queued ${ms(started - due)}` })
      const stop = finished ?? now
      segments.push({
        from: started,
        to: stop,
        kind: s.status === "failed" ? "failed" : "ran",
        title: `ran ${ms(stop - started)} (${s.status})`
      })
    } else if (s.status === "waiting" || s.status === "scheduled") {
      segments.push({ from: Math.max(due, scheduled), to: now, kind: "waiting", title: s.status })
    }
    return { label: `${s.name} #${s.attempt}`, segments }
  })
  return html`<p class="legend"><span><i class="waited"></i>waited</span><span><i class="queued"></i>queued</span><span><i class="ran"></i>ran</span><span><i class="failed"></i>failed</span></p>${timeline(rows, { start, end })}`
}

const signalForm = (ctx: PageContext, detail: RunDetail): Html =>
  detail.run.availableActions.includes("signal")
    ? html`<h2>Send a signal</h2>${postForm(ctx, `/workflows/${detail.run.id}/signal`, {
        label: "Send signal",
        className: "act stack",
        hidden: { idempotencyKey: crypto.randomUUID(), expectedStatus: detail.run.status },
        fields: html`<label>name <input name="name" required></label><label>payload (JSON) <textarea name="payload">{}</textarea></label>`,
        reason: true
      })}<p class="muted">The form carries an idempotency key: a double submit sends one signal.</p>`
    : html``

/** The page module (its routes and nav entries), as the module's comment describes. */
export const workflows: PageModule = {
  pages: [
    {
      path: "/workflows",
      nav: "Workflows",
      clusterWide: false,
      title: () => "Workflows",
      view: (ctx) =>
        Effect.gen(function* () {
          const ops = yield* Operations
          const filter = yield* runFilterOf(ctx.query)
          const page = yield* ops.workflows({ ...filter, cursor: param(ctx.query, "cursor") }, ctx.view)
          // ongoing statuses are counted (index reads); finished and cancelled ones may be millions
          const counts = yield* ops.workflowCounts({ workflow: filter.workflow, ongoingOnly: true }, ctx.view)
          const statusText = param(ctx.query, "status")
          const tab = (label: string, value: string | undefined, count: number | undefined) =>
            statusText === value
              ? html`<b>${label}${count === undefined ? "" : ` ${num(count)}`}</b> `
              : html`<a href="${href(ctx.base, "/workflows", { ...filterFields(ctx.query), status: value, cursor: undefined })}">${label}${count === undefined ? "" : ` ${num(count)}`}</a> `
          const ongoing = OngoingStatuses.reduce((s, st) => s + (counts.byStatus[st] ?? 0), 0)
          const bulkFilter = filterFields(ctx.query)
          return html`<h1>Workflows</h1>
<p><a href="${ctx.base}/workflows/attention">Needs attention</a> · <a href="${ctx.base}/insights">Insights by class</a></p>
<p>${tab("ongoing", undefined, ongoing)}${RunStatuses.map((s) => tab(s, s, OngoingStatuses.includes(s) ? counts.byStatus[s] : undefined))}${tab("all", "all", undefined)}</p>
${filterForm(
  ctx,
  "/workflows",
  html`${statusText === undefined ? "" : html`<input type="hidden" name="status" value="${statusText}">`}${textInput("class", "workflow", filter.workflow)}${textInput("step", "step", filter.step)}${textInput("error class", "errorClass", filter.errorClass)}${textInput("subject", "subject", filter.subject)}${textInput("run id", "id", filter.id)}${select("stuck reason", "stuckReason", StuckReasons, filter.stuckReason)}${textInput("created from", "createdFrom", param(ctx.query, "createdFrom"), "2026-12-01T00:00Z")}${textInput("created to", "createdTo", param(ctx.query, "createdTo"))}${textInput("ended from", "endedFrom", param(ctx.query, "endedFrom"))}${textInput("ended to", "endedTo", param(ctx.query, "endedTo"))}`
)}
${page.runs.length > 0 ? html`<p>${bulkForm(ctx, "resume", bulkFilter, "every matching paused run (500 a press)")}${bulkForm(ctx, "cancel", bulkFilter, "every matching ongoing run (500 a press)")}</p>` : ""}
${table(
  ["run", "class", "subject", "status", "doing / next", "created"],
  page.runs.map((r) => [
    html`<a href="${ctx.base}/workflows/${r.id}"><code>${r.id.slice(0, 8)}</code></a>`,
    r.workflow,
    r.subject ?? "—",
    html`${badge(r.status)}${r.stuckReason ? html` <small class="muted">${r.stuckReason}</small>` : ""}`,
    r.description,
    ago(r.createdAt, ctx.now)
  ]),
  { empty: "no run matches", id: "runs" }
)}${nextLink(ctx, "/workflows", page.next)}`
        })
    },
    {
      path: "/workflows/attention",
      clusterWide: false,
      title: () => "Needs attention",
      view: (ctx) =>
        Effect.gen(function* () {
          const workflow = param(ctx.query, "workflow")
          const groups = yield* (yield* Operations).needsAttention({ workflow }, ctx.view)
          return html`<h1>Needs attention</h1><p><a href="${ctx.base}/workflows">← workflows</a>${workflow ? html` · class ${workflow} (<a href="${ctx.base}/workflows/attention">every class</a>)` : ""}</p>
<p class="muted">Stuck runs grouped by class, step, stuck reason and error class (the 200 biggest groups). Once the cause is fixed, resume or cancel a whole group: each run goes through its own guarded transition, 500 at most a press.</p>
${table(
  ["class", "step", "stuck reason", "error class", n("runs"), "first seen", "last seen", "newest error", "actions"],
  groups.map((g) => {
    const filter: Record<string, string> = {
      workflow: g.workflow,
      stuckReason: g.stuckReason,
      ...(g.step === null ? {} : { step: g.step }),
      ...(g.errorClass === null ? {} : { errorClass: g.errorClass })
    }
    const paused = g.stuckReason === "paused_error" || g.stuckReason === "paused_manual" || g.stuckReason === "stalled"
    const count = `${num(Math.min(g.count, 500))} run(s)`
    return [
      g.workflow,
      g.step ?? "—",
      badge(g.stuckReason),
      g.errorClass ?? "—",
      html`<a href="${href(ctx.base, "/workflows", { ...filter, status: "all" })}">${num(g.count)}</a>`,
      ago(g.firstSeen, ctx.now),
      ago(g.lastSeen, ctx.now),
      g.newestError ?? "—",
      html`${paused ? bulkForm(ctx, "resume", { ...filter, status: "paused" }, count) : ""}${bulkForm(ctx, "cancel", { ...filter, status: OngoingStatuses.join(",") }, count)}`
    ]
  }),
  { empty: "nothing needs attention", id: "attention" }
)}`
        })
    },
    {
      path: "/workflows/:id",
      clusterWide: false,
      title: (ctx) => `Run ${ctx.params.id ?? ""}`,
      view: (ctx) =>
        Effect.gen(function* () {
          const detail = yield* (yield* Operations).workflow(ctx.params.id ?? "", ctx.view)
          const run = detail.run
          return html`<h1>${run.workflow} <small class="muted"><code>${run.id}</code></small></h1>
<p><a href="${href(ctx.base, "/workflows", { workflow: run.workflow })}">← runs of ${run.workflow}</a></p>
<p>${badge(run.status)} ${run.description}</p>
<div id="actions">${actionsOf(ctx, detail)}</div>
${facts([
  ["subject", run.subject ?? "—"],
  ["current step", run.currentStep ?? "—"],
  ["stuck", run.stuckReason ?? "no"],
  ["error", run.error === null ? "—" : html`<code>${run.error.class}</code> ${run.error.message}`],
  ["created", ago(run.createdAt, ctx.now)],
  ["updated", ago(run.updatedAt, ctx.now)],
  ["finished", ago(run.finishedAt, ctx.now)],
  [
    "parent",
    run.parentRunId === null
      ? "—"
      : html`<a id="parent-run" href="${ctx.base}/workflows/${run.parentRunId}">${run.parentRunId}</a> at step <code>${run.parentStep ?? "?"}</code>`
  ],
  ["priority", run.priority === null ? "default" : num(run.priority)],
  ["singleton", run.singleton ? "yes (one live run of the class at a time)" : "no"],
  ["schedule slot", run.scheduledFor === null ? "—" : run.scheduledFor],
  ["rerun of", run.rerunOf === null ? "—" : html`<a href="${ctx.base}/workflows/${run.rerunOf}">${run.rerunOf}</a>`],
  ["idempotency key", run.idempotencyKey ?? "—"],
  ["version", `engine ${run.engineVersion}${run.definitionVersion ? `, definition ${run.definitionVersion}` : ""}`]
])}
<h2>Child runs</h2>
${table(
  ["run", "class", "step", "status"],
  detail.children.map((c) => [
    html`<a href="${ctx.base}/workflows/${c.id}"><code>${c.id}</code></a>`,
    c.workflow,
    c.step,
    badge(c.status)
  ]),
  { empty: "no child run", id: "children" }
)}
<h2>Timeline</h2>${timelineOf(detail, ctx.now)}
<h2>Attempts <small class="muted">newest 100</small></h2>
${table(
  ["step", n("attempt"), "status", "scheduled", n("waited"), n("queued"), n("ran"), "worker", "waiting for", "error"],
  detail.steps.map((s) => {
    const t = (iso: string | null) => (iso === null ? null : new Date(iso).getTime())
    const due = t(s.dueAt)!
    const started = t(s.startedAt)
    return [
      s.name,
      num(s.attempt),
      badge(s.status),
      ago(s.scheduledAt, ctx.now),
      ms(Math.max(0, due - t(s.scheduledAt)!)),
      started === null ? "—" : ms(Math.max(0, started - due)),
      ms(s.durationMs),
      s.worker ?? "—",
      s.waitingFor ?? (s.batchId ? `batch ${s.batchId}` : "—"),
      s.error === null ? "" : ctx.view.payloads === true ? html`<code>${jsonText(s.error)}</code>` : "[redacted]"
    ]
  }),
  { empty: "no attempt yet", id: "attempts" }
)}
<h2>Signals</h2>
${table(
  ["name", "status", "duplicate", "payload"],
  detail.signals.map((s) => [s.name, badge(s.status), s.duplicate ? "yes" : "no", payload(ctx, s.payload)]),
  { empty: "no signal received" }
)}
${signalForm(ctx, detail)}
<h2>Audit trail</h2>
${table(
  ["when", "event", "step", "actor", "reason"],
  detail.events.map((e) => [
    ago(e.at, ctx.now),
    e.type,
    e.step === null ? "—" : `${e.step}${e.attempt === null ? "" : ` #${e.attempt}`}`,
    e.actor,
    e.reason ?? ""
  ]),
  { empty: "no event", id: "audit" }
)}
<h2>Payload</h2>${payload(ctx, run.payload)}<h2>Output</h2>${payload(ctx, run.output)}`
        })
    }
  ],
  actions: [
    {
      path: "/workflows/bulk/:verb",
      clusterWide: false,
      run: ({ params, form, change, view }) =>
        Effect.gen(function* () {
          const verb = params.verb
          if (verb !== "resume" && verb !== "cancel") return yield* new InvalidRequest({ reason: `no bulk ${verb}` })
          if (field(form, "confirm") !== "yes") {
            return yield* new InvalidRequest({ reason: "tick the confirmation to act on every matching run" })
          }
          const filter = yield* runFilterOf(form)
          const cancelChildren = verb === "cancel" && field(form, "cancelChildren") === "yes" ? true : undefined
          const r = yield* (yield* Operations).actMany(verb, { filter }, { ...change, cancelChildren }, view)
          return ok(r.summary)
        })
    },
    {
      path: "/workflows/:id/act/:verb",
      clusterWide: false,
      run: ({ params, form, change, view }) =>
        Effect.gen(function* () {
          const verb = params.verb ?? ""
          if (verb === "signal" || !(OutsideVerbs as ReadonlyArray<string>).includes(verb)) {
            return yield* new InvalidRequest({ reason: `unknown verb ${verb}` })
          }
          const expected = field(form, "expectedStatus")
          if (expected !== undefined && !(RunStatuses as ReadonlyArray<string>).includes(expected)) {
            return yield* new InvalidRequest({ reason: `unknown status ${expected}` })
          }
          const r = yield* (yield* Operations).act(
            params.id ?? "",
            verb as ActVerb,
            {
              ...change,
              expectedStatus: expected as RunStatus | undefined,
              step: field(form, "step"),
              at: yield* timeOf("at", field(form, "at")),
              cancelChildren: verb === "cancel" && field(form, "cancelChildren") === "yes" ? true : undefined
            },
            view
          )
          return ok(r.summary)
        })
    },
    {
      path: "/workflows/:id/signal",
      clusterWide: false,
      run: ({ params, form, change, view }) =>
        Effect.gen(function* () {
          const name = field(form, "name")
          if (name === undefined) return yield* new InvalidRequest({ reason: "a signal needs a name" })
          const text = field(form, "payload") ?? "{}"
          const parsed = yield* Effect.try({
            try: (): unknown => JSON.parse(text),
            catch: () => new InvalidRequest({ reason: "the payload is not JSON" })
          })
          if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
            return yield* new InvalidRequest({ reason: "the payload must be a JSON object" })
          }
          const expected = field(form, "expectedStatus")
          const r = yield* (yield* Operations).signal(
            params.id ?? "",
            { name, payload: parsed, idempotencyKey: field(form, "idempotencyKey") },
            {
              ...change,
              expectedStatus: (RunStatuses as ReadonlyArray<string>).includes(expected ?? "")
                ? (expected as RunStatus)
                : undefined
            },
            view
          )
          return ok(
            r.signal.duplicate
              ? `Signal ${r.signal.name} was already received (same idempotency key): nothing new was sent`
              : `Signal ${r.signal.name} sent: the run is ${r.run.status}`
          )
        })
    }
  ]
}
