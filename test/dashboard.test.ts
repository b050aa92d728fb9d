/**
 * The dashboard over HTTP (no browser): the escaping helper against hostile text, access (closed
 * by default, a failing hook, tenant scope, the loopback rule), CSRF, the guarded verbs behind the
 * forms, and the job statistics the workers write.
 */

import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join as joinPath } from "node:path"
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it, layer } from "@effect/vitest"
import { Effect, Exit, Layer, Result, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { loadAccess } from "../src/Cli/App.ts"
import { capture } from "../src/Cli/Cli.ts"
import { PgBusConfig } from "../src/Config.ts"
import * as Dashboard from "../src/Dashboard/Dashboard.ts"
import { escapeHtml, html, join, raw } from "../src/Dashboard/Html.ts"
import * as Job from "../src/Job/Job.ts"
import { bucketOf, HISTOGRAM_SIZE, percentileOf } from "../src/Job/JobStats.ts"
import { Operations } from "../src/Operations/Operations.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import * as Recurring from "../src/Recurring/Recurring.ts"
import { RecurringScheduler } from "../src/Recurring/Scheduler.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { HOSTILE, Order, serveDashboard } from "./support/dashboard.ts"
import { family } from "./support/family.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { freePort } from "./support/ports.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

describe("the html tag", () => {
  it("escapes every interpolated value: markup, both quotes, the backtick, and keeps unicode", () => {
    const out = html`<p title="${HOSTILE}">${HOSTILE}</p>`.value
    assert.notInclude(out, "<script>")
    assert.notInclude(out, "<img")
    assert.include(out, "&lt;script&gt;window.__pwned = 1&lt;/script&gt;")
    assert.include(out, "onerror=&quot;window.__pwned=2&quot;")
    assert.include(out, "&#39;single&#39; &#96;tick&#96;")
    assert.include(out, "ünïcödé 🚀")
    assert.strictEqual(out.match(/"/g)?.length, 2, "only the template's own quotes remain")
    assert.strictEqual(escapeHtml(`&<>"'\``), "&amp;&lt;&gt;&quot;&#39;&#96;")
  })

  it("inserts markup built by html or raw as is, lists joined, nothing for null, undefined and booleans", () => {
    const inner = html`<b>${"<i>"}</b>`
    const out = html`<div>${inner}${[html`<br>`, "<br>"]}${null}${undefined}${false}${true}${0}${raw("<hr>")}</div>`
    assert.strictEqual(out.value, "<div><b>&lt;i&gt;</b><br>&lt;br&gt;0<hr></div>")
    assert.strictEqual(join(["<a>", html`<b>`], " & ").value, "&lt;a&gt; &amp; <b>")
  })
})

describe("pgbus dashboard --auth MODULE", () => {
  it.effect("loads the access hooks a module exports, and refuses a module without them", () =>
    Effect.gen(function* () {
      const dir = mkdtempSync(joinPath(tmpdir(), "pgbus-auth-"))
      writeFileSync(
        joinPath(dir, "access.mjs"),
        "export default { authorize: () => ({ actor: 'ops', role: 'write' }) }\n"
      )
      writeFileSync(joinPath(dir, "bad.mjs"), "export default { authorize: 'yes' }\n")
      const access = yield* loadAccess(joinPath(dir, "access.mjs"))
      assert.strictEqual(typeof access.authorize, "function")
      const bad = yield* Effect.flip(loadAccess(joinPath(dir, "bad.mjs")))
      assert.include(bad.message, "{ authorize?, resolveContext? }")
      const missing = yield* Effect.flip(loadAccess(joinPath(dir, "nope.mjs")))
      assert.strictEqual(missing._tag, "AppModuleError")
    })
  )
})

describe("job statistics histograms", () => {
  it("bucket boundaries and interpolated percentiles", () => {
    assert.strictEqual(bucketOf(0.5), 0)
    assert.strictEqual(bucketOf(1), 0)
    assert.strictEqual(bucketOf(1.5), 1)
    assert.strictEqual(bucketOf(10_000_000), HISTOGRAM_SIZE - 1)
    const hist = new Array<number>(HISTOGRAM_SIZE).fill(0)
    assert.isNull(percentileOf(hist, 0.5))
    hist[bucketOf(15)] = 100 // 100 samples in (10, 20]
    assert.strictEqual(percentileOf(hist, 0.5), 15)
    assert.strictEqual(percentileOf(hist, 1), 20)
    hist[bucketOf(3_000_000)] = 1
    assert.strictEqual(percentileOf(hist, 1), 1_800_000, "the unbounded bucket answers its lower boundary")
  })
})

const post = (url: string, form: Record<string, string>, headers: Record<string, string> = {}) =>
  Effect.promise(() =>
    fetch(url, {
      method: "POST",
      redirect: "manual",
      headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
      body: new URLSearchParams(form).toString()
    })
  )

const get = (url: string, headers: Record<string, string> = {}) =>
  Effect.promise(async () => {
    const response = await fetch(url, { headers })
    return { status: response.status, text: await response.text(), headers: response.headers }
  })

/** The CSRF token in a page's first form. */
const tokenIn = (page: string) => /name="_csrf" value="([^"]+)"/.exec(page)?.[1]

const Tick = Job.make("StatsTick", { payload: Schema.Struct({ n: Schema.Number }), queue: "ticks" }, () =>
  Effect.sleep("2 millis")
)

const access: Dashboard.AccessOptions = {
  resolveContext: (request) => Effect.succeed({ resourceId: request.headers["x-tenant"] }),
  authorize: (request) => {
    const role = request.headers["x-role"]
    if (role === undefined || role === "deny") return Effect.fail(new Error("no session"))
    return Effect.succeed({ actor: "carol", role: role === "write" ? "write" : "read" })
  }
}

layer(Operations.layer.pipe(Layer.provideMerge(TestDatabase.layer({ pollingInterval: "50 millis" }))), {
  excludeTestServices: true,
  timeout: "90 seconds"
})("dashboard over http", (it) => {
  it.effect("closed by default: without a hook every page is read-only and every POST answers 403", () =>
    Effect.gen(function* () {
      const store = yield* QueueStore
      yield* store.create("closed")
      const base = yield* serveDashboard({ path: "/ops" })
      const page = yield* get(`${base}/queues`)
      assert.strictEqual(page.status, 200)
      assert.include(page.text, "read-only (no authorize hook)")
      assert.notInclude(page.text, 'method="post"')
      assert.include(page.headers.get("content-security-policy") ?? "", "script-src 'self'")
      const refused = yield* post(`${base}/queues/closed/pause`, { back: `${base}/queues` })
      assert.strictEqual(refused.status, 403)
      assert.isFalse((yield* (yield* Operations).queue("closed")).paused, "nothing changed")
      const htmx = yield* get(`${base}/assets/htmx-4.0.1.min.js`)
      assert.strictEqual(htmx.status, 200)
      assert.include(htmx.text, "htmx")
    })
  )

  it.effect("refuses to serve beyond the loopback without an authorize hook (layer and CLI)", () =>
    Effect.gen(function* () {
      const port = yield* freePort
      const exit = yield* Effect.exit(Layer.build(Dashboard.serve({ port, host: "0.0.0.0" })))
      assert.isTrue(Exit.isFailure(exit))
      assert.include(String(Exit.isFailure(exit) ? exit.cause : ""), "UnprotectedDashboard")
      const cli = yield* capture(["dashboard", "--host", "0.0.0.0", "--port", String(port)]).pipe(
        Effect.provide(NodeServices.layer)
      )
      assert.strictEqual(cli.exitCode, 1)
      assert.include(cli.stderr, "refusing to serve the dashboard on 0.0.0.0 without an authorize hook")
      assert.isTrue(Dashboard.isLoopback("127.0.0.1") && Dashboard.isLoopback("::1"))
    })
  )

  it.effect("a failing hook answers 401; a tenant sees its runs only and cluster-wide pages answer 403", () =>
    Effect.gen(function* () {
      const base = yield* serveDashboard(access)
      assert.strictEqual((yield* get(`${base}/workflows`, { "x-role": "deny" })).status, 401)
      const mine = yield* Order.start({ order: 1 }, { resourceId: "acme" })
      const theirs = yield* Order.start({ order: 2 }, { resourceId: "globex" })
      const list = yield* get(`${base}/workflows`, { "x-role": "read", "x-tenant": "acme" })
      assert.strictEqual(list.status, 200)
      assert.include(list.text, mine.id.slice(0, 8))
      assert.notInclude(list.text, theirs.id.slice(0, 8))
      assert.strictEqual(
        (yield* get(`${base}/workflows/${theirs.id}`, { "x-role": "read", "x-tenant": "acme" })).status,
        404
      )
      assert.strictEqual((yield* get(`${base}/queues`, { "x-role": "read", "x-tenant": "acme" })).status, 403)
      assert.notInclude(list.text, `href="${base}/queues"`, "the nav hides cluster-wide pages")
    })
  )

  it.effect("a writer's form goes through the guarded verb as dashboard:<actor>; a run that moved on is refused", () =>
    Effect.gen(function* () {
      const base = yield* serveDashboard(access)
      const writer = { "x-role": "write" }
      const run = yield* Order.start({ order: 3 })
      const page = yield* get(`${base}/workflows/${run.id}`, writer)
      const token = tokenIn(page.text)
      assert.isDefined(token)
      assert.include(page.text, `action="/pgbus/workflows/${run.id}/act/cancel"`)
      assert.notInclude(page.text, "/act/resume", "resume is not offered to a ready run")
      // a stale form: the page said ready, the run is paused by someone else meanwhile
      yield* (yield* WorkflowClient).pause(run.id, { actor: "someone" })
      const stale = yield* post(
        `${base}/workflows/${run.id}/act/cancel`,
        { _csrf: token!, back: `/pgbus/workflows/${run.id}`, expectedStatus: "ready", reason: "typo" },
        writer
      )
      assert.strictEqual(stale.status, 303)
      const flash = decodeURIComponent(/pgbus_flash=([^;]+)/.exec(stale.headers.get("set-cookie") ?? "")?.[1] ?? "")
      assert.include(flash, "is paused, not ready: nothing was done")
      assert.strictEqual((yield* (yield* WorkflowClient).get(run.id)).info.status, "paused")
      const done = yield* post(
        `${base}/workflows/${run.id}/act/resume`,
        { _csrf: token!, back: `/pgbus/workflows/${run.id}`, expectedStatus: "paused", reason: "fixed" },
        writer
      )
      assert.strictEqual(done.status, 303)
      assert.strictEqual(done.headers.get("location"), `/pgbus/workflows/${run.id}`)
      const resumed = (yield* (yield* WorkflowClient).events(run.id)).find((e) => e.type === "resumed")
      assert.deepStrictEqual([resumed?.actor, resumed?.reason], ["dashboard:carol", "fixed"])
      // another actor's token is not this one's
      const forged = yield* post(`${base}/workflows/${run.id}/act/cancel`, { _csrf: `${token}x`, back: "/" }, writer)
      assert.strictEqual(forged.status, 403)
      // an open redirect is not followed: back to the dashboard instead
      const away = yield* post(
        `${base}/workflows/${run.id}/act/pause`,
        { _csrf: token!, back: "https://evil.example/" },
        writer
      )
      assert.strictEqual(away.headers.get("location"), "/pgbus/")
    })
  )

  it.effect(
    "flow control: keys, slots and rates shown; a key released and a rate set and reset as dashboard:<actor>",
    () =>
      Effect.gen(function* () {
        const base = yield* serveDashboard(access)
        const writer = { "x-role": "write" }
        const Once = Job.make(
          "DashOnce",
          { payload: Schema.Struct({ n: Schema.Number }), queue: "dash_flow", unique: { key: ({ n }) => `n-${n}` } },
          () => Effect.void
        )
        const held = yield* Once.enqueue({ n: 1 })
        const ops = yield* Operations
        yield* ops.setJobRate("DashRated", { limit: 30, period: "1 minute" }, { actor: "test", reason: undefined })

        const reader = yield* get(`${base}/flow`, { "x-role": "read" })
        assert.strictEqual(reader.status, 200)
        assert.include(reader.text, "<code>n-1</code>")
        assert.include(reader.text, `<code>${held.id}</code>`)
        assert.include(reader.text, "30 per 1 minute")
        assert.notInclude(reader.text, 'method="post"', "a reader sees no buttons")
        assert.strictEqual((yield* get(`${base}/flow`, { "x-role": "read", "x-tenant": "acme" })).status, 403)

        const page = yield* get(`${base}/flow`, writer)
        const token = tokenIn(page.text)!
        assert.include(page.text, 'action="/pgbus/flow/unique/release"')
        const badRate = yield* post(
          `${base}/flow/rates/DashRated`,
          { _csrf: token, back: "/pgbus/flow", limit: "0", period: "1 minute" },
          writer
        )
        const flashOf = (r: Response) =>
          decodeURIComponent(/pgbus_flash=([^;]+)/.exec(r.headers.get("set-cookie") ?? "")?.[1] ?? "")
        assert.include(flashOf(badRate), "the limit must be a positive integer")
        const set = yield* post(
          `${base}/flow/rates/DashRated`,
          { _csrf: token, back: "/pgbus/flow", limit: "12", period: "10 seconds", reason: "partner" },
          writer
        )
        assert.strictEqual(set.status, 303)
        const rate = (yield* ops.jobRates).find((r) => r.job === "DashRated")
        assert.deepStrictEqual(
          [rate?.effective, rate?.override?.actor, rate?.override?.reason],
          [{ limit: 12, periodMs: 10_000 }, "dashboard:carol", "partner"]
        )
        yield* post(`${base}/flow/rates/DashRated/reset`, { _csrf: token, back: "/pgbus/flow" }, writer)
        assert.isUndefined(
          (yield* ops.jobRates).find((r) => r.job === "DashRated"),
          "no definition: no rate left"
        )

        const released = yield* post(
          `${base}/flow/unique/release`,
          { _csrf: token, back: "/pgbus/flow", job: "DashOnce", key: "n-1", reason: "stuck" },
          writer
        )
        assert.include(flashOf(released), `Released key n-1 of DashOnce (it was held by ${held.id})`)
        assert.include((yield* get(`${base}/flow`, writer)).text, "no uniqueness key is held")
      })
  )

  it.effect(
    "recurring: the page lists tasks with last and next run in words, the Overview card links it; Run now enqueues; bad keys flash why",
    () =>
      Effect.gen(function* () {
        const Report = Job.make(
          "DashReport",
          { payload: Schema.Struct({ n: Schema.Number }), queue: "dash_rec" },
          () => Effect.void
        )
        const Sync = Workflow.make(
          "DashSync",
          { payload: Schema.Struct({ n: Schema.Number }), schedule: "*/5 * * * *", schedulePayload: { n: 1 } },
          function* () {
            yield* Workflow.step("work", Effect.succeed(1))
          }
        )
        const report = Recurring.make("dash-report", {
          schedule: "every day at 2am",
          job: Report,
          payload: { n: 4 },
          description: "the <b>daily</b> report"
        })
        yield* (yield* RecurringScheduler).sync([report, Result.getOrThrow(Recurring.fromWorkflow(Sync))!])
        const base = yield* serveDashboard(access)
        const writer = { "x-role": "write" }

        const reader = yield* get(`${base}/recurring`, { "x-role": "read" })
        assert.strictEqual(reader.status, 200)
        assert.include(reader.text, "<code>dash-report</code>")
        assert.include(reader.text, "the &lt;b&gt;daily&lt;/b&gt; report", "the description is escaped")
        assert.include(reader.text, 'every day at 2am <small class="muted">(0 2 * * *)</small>')
        assert.include(reader.text, "job DashReport")
        assert.include(reader.text, "a run of workflow DashSync")
        assert.include(reader.text, ">never<", "no fire yet")
        assert.match(reader.text, /<time datetime="[^"]+" title="[^"]+">in \d/, "the next run in words")
        assert.include(reader.text, `href="/pgbus/recurring" class="here">Recurring</a>`)
        assert.notInclude(reader.text, 'method="post"', "a reader sees no buttons")
        assert.strictEqual((yield* get(`${base}/recurring`, { "x-role": "read", "x-tenant": "acme" })).status, 403)

        const overview = yield* get(`${base}/`, { "x-role": "read" })
        // the sooner of the two: the every-5-minutes schedule, except in the five minutes before
        // 02:00 UTC, when both fire at 02:00 and the daily task comes first (by key)
        assert.match(
          overview.text,
          /<a href="\/pgbus\/recurring">Recurring tasks<\/a><\/div><div class="v">2<\/div><p>next fire <time[^>]*>in [^<]+<\/time>: <code>(?:workflow:DashSync|dash-report)<\/code>/
        )

        const page = yield* get(`${base}/recurring`, writer)
        const token = tokenIn(page.text)!
        assert.include(page.text, 'action="/pgbus/recurring/run-now"')
        assert.include(page.text, '<input type="hidden" name="key" value="dash-report">')
        const flashOf = (r: Response) =>
          decodeURIComponent(/pgbus_flash=([^;]+)/.exec(r.headers.get("set-cookie") ?? "")?.[1] ?? "")
        const form = { _csrf: token, back: "/pgbus/recurring" }
        const tenant = yield* post(
          `${base}/recurring/run-now`,
          { ...form, key: "dash-report" },
          { ...writer, "x-tenant": "acme" }
        )
        assert.strictEqual(tenant.status, 403, "a tenant-scoped writer")
        const ran = yield* post(`${base}/recurring/run-now`, { ...form, key: "dash-report", reason: "now" }, writer)
        assert.strictEqual(ran.status, 303)
        const messages = yield* (yield* QueueStore).browse("dash_rec")
        assert.deepStrictEqual(
          messages.map((m) => m.message),
          [{ job: "DashReport", payload: { n: 4 } }]
        )
        assert.include(flashOf(ran), `Enqueued dash-report now as dash_rec:${messages[0]!.msgId}`)
        for (const [key, text] of [
          ["nope", "recurring task nope not found"],
          ["", "key is required"],
          ["workflow:DashSync", "not registered in this process"]
        ] as const) {
          const refused = yield* post(`${base}/recurring/run-now`, { ...form, key }, writer)
          assert.include(flashOf(refused), text, key)
        }
        assert.strictEqual((yield* (yield* QueueStore).browse("dash_rec")).length, 1, "nothing more enqueued")
        const after = yield* get(`${base}/recurring`, writer)
        // the table's row (the "next fire" card above it names the task too when it fires first)
        const row = after.text
          .split("<tr>")
          .slice(1)
          .find((r) => r.includes("<code>dash-report</code>"))
        assert.match(row ?? "", /<td><time [^>]*>\d+m?s ago<\/time><br>/)
        assert.notInclude(row ?? "", ">never<", "the task's last run is shown")
        // who ran it and why: on the ledger row and under the last run
        assert.match(
          row ?? "",
          /<small class="muted last-manual">run now <time [^>]*>\d+m?s ago<\/time> by dashboard:carol: now<\/small><\/td>/
        )
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{
          readonly manual: boolean
          readonly actor: string | null
          readonly reason: string | null
        }>`SELECT
            manual, actor, reason FROM pgbus.recurring_executions WHERE task_key = 'dash-report'`
        assert.deepStrictEqual(
          rows.map((r) => [r.manual, r.actor, r.reason]),
          [[true, "dashboard:carol", "now"]]
        )
      })
  )

  it.effect(
    "a run page links parent and children, shows priority and singleton; the cancel form's checkbox cancels the live children",
    () =>
      Effect.gen(function* () {
        const base = yield* serveDashboard(access)
        const writer = { "x-role": "write" }
        const { parentId, childId } = yield* family({ singleton: true })
        const parent = yield* get(`${base}/workflows/${parentId}`, writer)
        assert.strictEqual(parent.status, 200)
        assert.include(parent.text, `<a href="/pgbus/workflows/${childId}"><code>${childId}</code></a>`)
        assert.include(parent.text, "<dt>priority</dt><dd>2</dd>")
        assert.include(parent.text, "yes (one live run of the class at a time)")
        assert.include(parent.text, 'name="cancelChildren"', "the run has a live child: the cancel form offers it")
        assert.include(parent.text, "also cancel its 1 live child run(s)")
        const child = yield* get(`${base}/workflows/${childId}`, writer)
        assert.include(child.text, `<a id="parent-run" href="/pgbus/workflows/${parentId}">${parentId}</a>`)
        assert.include(child.text, "at step <code>kid</code>")
        assert.include(child.text, "no child run")
        assert.notInclude(child.text, 'name="cancelChildren"', "no live child: no checkbox")

        // unticked: the parent alone
        const token = tokenIn(parent.text)!
        yield* post(
          `${base}/workflows/${parentId}/act/cancel`,
          { _csrf: token, back: `/pgbus/workflows/${parentId}`, expectedStatus: "waiting", reason: "parent only" },
          writer
        )
        assert.strictEqual((yield* (yield* WorkflowClient).get(parentId)).info.status, "cancelled")
        assert.strictEqual((yield* (yield* WorkflowClient).get(childId)).info.status, "ready")

        // ticked: the child too, on the audit trail as the dashboard's actor
        const other = yield* family()
        const page = yield* get(`${base}/workflows/${other.parentId}`, writer)
        const done = yield* post(
          `${base}/workflows/${other.parentId}/act/cancel`,
          {
            _csrf: tokenIn(page.text)!,
            back: `/pgbus/workflows/${other.parentId}`,
            expectedStatus: "waiting",
            cancelChildren: "yes",
            reason: "whole order"
          },
          writer
        )
        assert.strictEqual(done.status, 303)
        const flash = decodeURIComponent(/pgbus_flash=([^;]+)/.exec(done.headers.get("set-cookie") ?? "")?.[1] ?? "")
        assert.include(flash, "(and 1 live child run(s))")
        assert.strictEqual((yield* (yield* WorkflowClient).get(other.childId)).info.status, "cancelled")
        const event = (yield* (yield* WorkflowClient).events(other.childId)).find((e) => e.type === "cancelled")
        assert.deepStrictEqual([event?.actor, event?.reason], ["dashboard:carol", "whole order"])
        const after = yield* get(`${base}/workflows/${other.parentId}`, writer)
        assert.match(
          after.text,
          new RegExp(`${other.childId}</code></a></td><td>FamilyKid</td><td>kid</td><td>[^]*?cancelled`)
        )

        // the bulk cancel on a filter offers it too
        const third = yield* family()
        const list = yield* get(`${base}/workflows?workflow=FamilyParent`, writer)
        assert.include(list.text, "and their live child runs")
        const bulk = yield* post(
          `${base}/workflows/bulk/cancel`,
          {
            _csrf: tokenIn(list.text)!,
            back: "/pgbus/workflows",
            workflow: "FamilyParent",
            status: "ready,performing,waiting,paused",
            confirm: "yes",
            cancelChildren: "yes",
            reason: "bulk"
          },
          writer
        )
        assert.strictEqual(bulk.status, 303)
        assert.strictEqual((yield* (yield* WorkflowClient).get(third.parentId)).info.status, "cancelled")
        assert.strictEqual((yield* (yield* WorkflowClient).get(third.childId)).info.status, "cancelled")
      })
  )

  it.effect("purge asks for the queue's name: a wrong name deletes nothing, the right one purges", () =>
    Effect.gen(function* () {
      const base = yield* serveDashboard(access)
      const writer = { "x-role": "write" }
      const store = yield* QueueStore
      yield* store.create("purgeme")
      yield* store.sendBatch("purgeme", [{ message: { n: 1 } }, { message: { n: 2 } }])
      const token = tokenIn((yield* get(`${base}/queues`, writer)).text)!
      yield* post(`${base}/queues/purgeme/purge`, { _csrf: token, back: "/pgbus/queues", confirm: "purge" }, writer)
      assert.strictEqual((yield* (yield* Operations).queue("purgeme")).depth, 2)
      yield* post(`${base}/queues/purgeme/purge`, { _csrf: token, back: "/pgbus/queues", confirm: "purgeme" }, writer)
      assert.strictEqual((yield* (yield* Operations).queue("purgeme")).depth, 0)
    })
  )

  it.effect("workers write job statistics (flushed at the latest when they stop) that the Insights page charts", () =>
    Effect.gen(function* () {
      const store = yield* QueueStore
      yield* store.create("ticks")
      yield* Effect.scoped(
        Effect.gen(function* () {
          yield* startSupervisor([Tick], { capsules: [{ name: "ticks", queues: ["ticks"], concurrency: 4 }] })
          yield* Effect.forEach(
            Array.from({ length: 30 }, (_, n) => n),
            (n) => Tick.enqueue({ n }),
            { discard: true }
          )
          yield* eventually(
            "every tick archived",
            Effect.map((yield* Operations).queue("ticks"), (q) => q.depth === 0 && q.archived === 30)
          )
        })
      )
      const sql = yield* SqlClient.SqlClient
      const config = yield* PgBusConfig
      const [row] = yield* sql<{
        readonly completed: bigint
        readonly latency_count: bigint
      }>`SELECT sum(completed) AS completed, sum(latency_count) AS latency_count FROM ${sql(`${config.schema}.job_stats`)} WHERE queue = 'ticks'`
      assert.strictEqual(Number(row?.completed), 30)
      assert.strictEqual(Number(row?.latency_count), 30)
      const stats = yield* (yield* Operations).jobStats({ windowMs: 3_600_000, queue: "ticks" })
      assert.strictEqual(
        stats.total.reduce((s, b) => s + b.completed, 0),
        30
      )
      assert.isNotNull(stats.total.find((b) => b.completed > 0)?.durationP50Ms ?? null)
      const base = yield* serveDashboard(access)
      const insights = yield* get(`${base}/insights?window=1h`, { "x-role": "read" })
      assert.include(insights.text, "ticks: jobs finished per bucket")
      assert.include(insights.text, "30 completed")
    })
  )
})
