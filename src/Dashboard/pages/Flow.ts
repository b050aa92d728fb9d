/**
 * Flow control: the uniqueness keys held (and by which message, with a release button for a
 * holder that will never end), the concurrency keys against their limits (running, waiting, the
 * oldest wait), each rate-limited job's rate (as defined, as set at run time and by whom, with a
 * form to change or reset it) and the rate buckets as the last claim left them.
 *
 * @since 0.1.0
 */
import { type Duration, Effect } from "effect"
import { locksView } from "../../Operations/Locks.ts"
import { Operations } from "../../Operations/Operations.ts"
import { InvalidRequest } from "../../Operations/OperationsError.ts"
import { jobRateView } from "../../Operations/Rates.ts"
import { ago, inWords, num } from "../Format.ts"
import { html } from "../Html.ts"
import { field, ok, type PageContext, type PageModule, postForm } from "../Page.ts"
import { card, meter, n, table } from "../Views.ts"

/** A period as a duration the rate form takes back: "1 minute", "30 seconds", "250 millis". */
const periodText = (ms: number): string => {
  for (const [unit, size] of [
    ["day", 86_400_000],
    ["hour", 3_600_000],
    ["minute", 60_000],
    ["second", 1_000]
  ] as const) {
    if (ms % size === 0) return `${ms / size} ${unit}${ms === size ? "" : "s"}`
  }
  return `${ms} millis`
}

/** A rate as words: "100 per 1 minute". */
const rateText = (rate: { readonly limit: number; readonly periodMs: number } | null): string =>
  rate === null ? "—" : `${num(rate.limit)} per ${periodText(rate.periodMs)}`

/** The form that sets a job's rate (prefilled with the rate in force). */
const rateForm = (
  ctx: PageContext,
  job: string,
  effective: { readonly limit: number; readonly periodMs: number } | null
) =>
  postForm(ctx, `/flow/rates/${encodeURIComponent(job)}`, {
    label: "Set",
    reason: true,
    fields: html`<input name="limit" type="number" min="1" step="1" value="${effective?.limit ?? ""}" aria-label="limit" required> per <input name="period" value="${effective === null ? "" : periodText(effective.periodMs)}" placeholder="1 minute" aria-label="period" required>`
  })

/** The page module (its routes and nav entries), as the module's comment describes. */
export const flow: PageModule = {
  pages: [
    {
      path: "/flow",
      nav: "Flow control",
      clusterWide: true,
      title: () => "Flow control",
      view: (ctx) =>
        Effect.gen(function* () {
          const ops = yield* Operations
          const locks = locksView(yield* ops.locks)
          const rates = (yield* ops.jobRates).map(jobRateView)
          const c = locks.concurrency
          return html`<h1>Flow control</h1>
<div class="cards">
${card("uniqueness keys", num(locks.unique.total), "held now (a key is free once its job ends, or its period runs out)")}
${card("slots held", num(c.slotsHeld), html`${num(c.keysAtLimit)} key(s) at their limit`)}
${card("parked", num(c.parked), c.oldestParkedMs === null ? "nothing waits for a slot" : html`the oldest waits for ${inWords(c.oldestParkedMs)}`)}
${card("rate-limited jobs", num(rates.length), "rates apply across every process")}
</div>
<h2>Uniqueness keys</h2>
${table(
  ["job", "key", "strategy", "held by", "running on", "since", "until", ""],
  locks.unique.keys.map((k) => [
    k.job,
    html`<code>${k.key}</code>`,
    k.strategy,
    html`<code>${k.holder}</code>`,
    k.runningOn ?? "—",
    ago(k.acquiredAt, ctx.now),
    k.expiresAt === null ? "its job's end" : ago(k.expiresAt, ctx.now),
    postForm(ctx, "/flow/unique/release", {
      label: "Release",
      danger: true,
      reason: true,
      hidden: { job: k.job, key: k.key }
    })
  ]),
  { empty: "no uniqueness key is held", id: "unique-keys" }
)}
<h2>Concurrency keys</h2>
${table(
  ["queue", "key", n("running"), "", n("limit"), n("waiting"), "oldest wait"],
  c.keys.map((k) => [
    k.queue,
    html`<code>${k.key}</code>`,
    num(k.running),
    meter(k.running, k.limit),
    num(k.limit),
    num(k.waiting),
    k.oldestWaitMs === null ? "—" : inWords(k.oldestWaitMs)
  ]),
  { empty: "no limited job is running or waiting", id: "concurrency-keys" }
)}
<h2>Rates</h2>
${table(
  ["job", "defined", "set at run time", "in force", ""],
  rates.map((r) => [
    r.job,
    rateText(r.defined),
    r.override === null
      ? "—"
      : html`${rateText(r.override)}<br><small class="muted">by ${r.override.actor}${r.override.reason ? ` (${r.override.reason})` : ""}, ${ago(r.override.updatedAt, ctx.now)}</small>`,
    rateText(r.effective),
    html`${rateForm(ctx, r.job, r.effective)}${r.override === null ? "" : postForm(ctx, `/flow/rates/${encodeURIComponent(r.job)}/reset`, { label: "Reset to defined", reason: true })}`
  ]),
  { empty: "no job has a rate", id: "rates" }
)}
<h3>Rate buckets</h3>
${table(
  ["queue", "key", n("tokens"), "refilled"],
  locks.rates.map((b) => [b.queue, html`<code>${b.key}</code>`, b.tokens.toFixed(1), ago(b.refilledAt, ctx.now)]),
  { empty: "no bucket yet (one is made at a rate-limited queue's first claim)", id: "rate-buckets" }
)}
<p class="muted">A run-time rate is used by every process from its next claim; it is kept with who set it and why, and logged.</p>`
        })
    }
  ],
  actions: [
    {
      path: "/flow/unique/release",
      clusterWide: true,
      run: ({ form, change }) =>
        Effect.gen(function* () {
          const r = yield* (yield* Operations).releaseUniqueKey(
            field(form, "job") ?? "",
            field(form, "key") ?? "",
            change
          )
          return ok(`Released key ${r.key} of ${r.job} (it was held by ${r.holder})`)
        })
    },
    {
      path: "/flow/rates/:job",
      clusterWide: true,
      run: ({ params, form, change }) =>
        Effect.gen(function* () {
          const job = params.job ?? ""
          const limit = Number(field(form, "limit"))
          const period = field(form, "period")
          if (period === undefined) return yield* new InvalidRequest({ reason: "a period is required (e.g. 1 minute)" })
          yield* (yield* Operations).setJobRate(job, { limit, period: period as Duration.Input }, change)
          return ok(`Rate of ${job} set to ${limit} per ${period}: every process uses it from its next claim`)
        })
    },
    {
      path: "/flow/rates/:job/reset",
      clusterWide: true,
      run: ({ params, change }) =>
        Effect.gen(function* () {
          const job = params.job ?? ""
          yield* (yield* Operations).setJobRate(job, undefined, change)
          return ok(`Rate of ${job} reset to its definition's`)
        })
    }
  ]
}
