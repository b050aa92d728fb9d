/**
 * Queues: each queue's figures and what it is doing in words, with pause, resume and purge (which
 * asks for the queue's name to be typed). Jobs: a queue's jobs by state, filtered by job name and
 * payload text, and one job with its attempts, last error, headers and payload; retry (claimable
 * now) and discard for a job that is not running.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { JobState } from "../../Operations/Model.ts"
import { Operations } from "../../Operations/Operations.ts"
import { InvalidRequest } from "../../Operations/OperationsError.ts"
import { ago, badge, ms, num } from "../Format.ts"
import { html } from "../Html.ts"
import { field, href, ok, type PageModule, param, postForm } from "../Page.ts"
import { facts, filterForm, n, nextLink, payload, select, table, textInput } from "../Views.ts"

const JOB_STATES: ReadonlyArray<JobState> = ["ready", "scheduled", "running", "retrying", "archived"]

const queueOf = (params: Readonly<Record<string, string | undefined>>) => params.queue ?? ""

/** The page module (its routes and nav entries), as the module's comment describes. */
export const queues: PageModule = {
  pages: [
    {
      path: "/queues",
      nav: "Queues",
      clusterWide: true,
      title: () => "Queues",
      view: (ctx) =>
        Effect.gen(function* () {
          const list = yield* (yield* Operations).queues
          return html`<h1>Queues</h1>
${table(
  [
    "queue",
    "state",
    n("depth"),
    n("ready"),
    n("scheduled"),
    n("running"),
    n("retrying"),
    n("oldest"),
    n("latency"),
    n("dead letters"),
    n("archived"),
    "actions"
  ],
  list.map((q) => [
    html`<a href="${ctx.base}/queues/${q.name}/jobs">${q.name}</a>${q.paused ? html` ${badge("paused")}` : ""}`,
    q.status,
    num(q.depth),
    num(q.ready),
    num(q.scheduled),
    num(q.running),
    num(q.retrying),
    ms(q.oldestAgeMs),
    ms(q.claimableLatencyMs),
    q.deadLetterQueue === null
      ? num(q.deadLetters)
      : html`<a href="${href(ctx.base, "/dead-letters", { queue: q.deadLetterQueue })}">${num(q.deadLetters)}</a>`,
    num(q.archived),
    html`${q.paused ? postForm(ctx, `/queues/${q.name}/resume`, { label: "Resume" }) : postForm(ctx, `/queues/${q.name}/pause`, { label: "Pause", reason: true })}
${postForm(ctx, `/queues/${q.name}/purge`, {
  label: "Purge",
  danger: true,
  fields: html`<input name="confirm" required placeholder="type ${q.name} to purge" aria-label="type the queue's name to purge it" autocomplete="off">`
})}`
  ]),
  { empty: "no queue yet", id: "queues" }
)}
<p class="muted">Latency: how long the oldest claimable message has been claimable (scheduled and backed-off jobs do not count). Pausing stops every worker from claiming within a second; purging deletes the queued messages, not the archive or the dead letters.</p>`
        })
    },
    {
      path: "/queues/:queue/jobs",
      clusterWide: true,
      title: (ctx) => `Jobs of ${queueOf(ctx.params)}`,
      view: (ctx) =>
        Effect.gen(function* () {
          const ops = yield* Operations
          const name = queueOf(ctx.params)
          const q = yield* ops.queue(name)
          const state = param(ctx.query, "state") as JobState | undefined
          if (state !== undefined && !JOB_STATES.includes(state)) {
            return yield* new InvalidRequest({ reason: `unknown state ${state} (one of ${JOB_STATES.join(", ")})` })
          }
          const text = param(ctx.query, "text")
          const page = yield* ops.jobs(
            { queue: name, state, job: param(ctx.query, "job"), text, cursor: param(ctx.query, "cursor") },
            ctx.view
          )
          const path = `/queues/${name}/jobs`
          return html`<h1>Jobs of ${name}</h1><p><a href="${ctx.base}/queues">← queues</a> · ${q.status}</p>
${filterForm(
  ctx,
  path,
  html`${select("state", "state", JOB_STATES, state)}${textInput("job", "job", param(ctx.query, "job"), "job name")}${ctx.view.payloads === true ? textInput("payload contains", "text", text, "text in the payload") : ""}`
)}
${table(
  ["id", "job", "state", n("attempts"), "enqueued", "visible", "last error"],
  page.jobs.map((j) => [
    html`<a href="${ctx.base}${path}/${j.id}">${j.id}</a>`,
    j.job ?? "—",
    badge(j.state),
    num(j.attempts),
    ago(j.enqueuedAt, ctx.now),
    j.state === "archived" ? ago(j.archivedAt, ctx.now) : ago(j.visibleAt, ctx.now),
    j.lastError === null ? "" : html`<code>${j.lastError.class}</code> ${j.lastError.message}`
  ]),
  { empty: "no job matches", id: "jobs" }
)}${nextLink(ctx, path, page.next)}`
        })
    },
    {
      path: "/queues/:queue/jobs/:id",
      clusterWide: true,
      title: (ctx) => `Job ${queueOf(ctx.params)}:${ctx.params.id ?? ""}`,
      view: (ctx) =>
        Effect.gen(function* () {
          const name = queueOf(ctx.params)
          const j = yield* (yield* Operations).job(name, ctx.params.id ?? "", ctx.view)
          const acts = j.state === "scheduled" || j.state === "retrying" || j.state === "ready"
          return html`<h1>Job ${name}:${j.id}</h1><p><a href="${ctx.base}/queues/${name}/jobs">← jobs of ${name}</a></p>
${facts([
  ["job", j.job ?? "—"],
  ["state", badge(j.state)],
  ["attempts", num(j.attempts)],
  ["enqueued", ago(j.enqueuedAt, ctx.now)],
  [
    j.state === "archived" ? "archived" : "visible",
    j.state === "archived" ? ago(j.archivedAt, ctx.now) : ago(j.visibleAt, ctx.now)
  ],
  ["claimed by", j.claimedBy ?? "—"],
  ["last error", j.lastError === null ? "—" : html`<code>${j.lastError.class}</code> ${j.lastError.message}`]
])}
${acts ? html`<p>${j.state === "ready" ? "" : postForm(ctx, `/queues/${name}/jobs/${j.id}/retry`, { label: "Retry now" })}${postForm(ctx, `/queues/${name}/jobs/${j.id}/discard`, { label: "Discard", danger: true, reason: true })}</p>` : ""}
<h2>Payload</h2>${payload(ctx, j.payload)}<h2>Headers</h2>${payload(ctx, j.headers)}`
        })
    }
  ],
  actions: [
    {
      path: "/queues/:queue/pause",
      clusterWide: true,
      run: ({ params, change }) =>
        Effect.map(
          Effect.flatMap(Operations, (ops) => ops.pauseQueue(queueOf(params), change)),
          (q) => ok(`Paused ${q.name}: no worker claims from it within a second`)
        )
    },
    {
      path: "/queues/:queue/resume",
      clusterWide: true,
      run: ({ params, change }) =>
        Effect.map(
          Effect.flatMap(Operations, (ops) => ops.resumeQueue(queueOf(params), change)),
          (q) => ok(`Resumed ${q.name}`)
        )
    },
    {
      path: "/queues/:queue/purge",
      clusterWide: true,
      run: ({ params, form, change }) =>
        Effect.gen(function* () {
          const name = queueOf(params)
          if (field(form, "confirm") !== name) {
            return yield* new InvalidRequest({
              reason: `type the queue's name (${name}) to purge it: nothing was deleted`
            })
          }
          const r = yield* (yield* Operations).purgeQueue(name, change)
          return ok(`Purged ${r.queue}: ${r.purged} message(s) deleted`)
        })
    },
    {
      path: "/queues/:queue/jobs/:id/retry",
      clusterWide: true,
      run: ({ params, change }) =>
        Effect.map(
          Effect.flatMap(Operations, (ops) => ops.retryJob(queueOf(params), params.id ?? "", change)),
          (r) => ok(`Job ${r.queue}:${r.id} is claimable now (it was ${r.was})`)
        )
    },
    {
      path: "/queues/:queue/jobs/:id/discard",
      clusterWide: true,
      run: ({ params, change }) =>
        Effect.map(
          Effect.flatMap(Operations, (ops) => ops.discardJob(queueOf(params), params.id ?? "", change)),
          (r) => ok(`Job ${r.queue}:${r.id} discarded`)
        )
    }
  ]
}
