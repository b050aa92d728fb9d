/**
 * The dashboard in a real browser: Debian's chromium driven by playwright-core over a seeded
 * database. With SCREENSHOTS=1 it also saves a screenshot of every page under docs/dashboard/
 * (`npm run docs:screenshots`).
 */
import { mkdirSync } from "node:fs"
import { assert, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import type { Browser, BrowserContext, Page } from "playwright-core"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import {
  HOSTILE,
  headerAccess,
  launchBrowser,
  type Seeded,
  seed,
  serveDashboard,
  supervise
} from "./support/dashboard.ts"
import { family } from "./support/family.ts"
import { eventually } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const SCREENSHOTS = process.env.SCREENSHOTS === "1"
const SHOTS_DIR = "docs/dashboard"

/** The seeded database, the served dashboard and a browser, built once for the file. */
class Env extends Context.Service<Env, { readonly seeded: Seeded; readonly base: string; readonly browser: Browser }>()(
  "test/DashboardEnv"
) {}

const envLayer = Layer.effect(
  Env,
  Effect.gen(function* () {
    const seeded = yield* seed
    yield* supervise
    const base = yield* serveDashboard(headerAccess)
    const browser = yield* launchBrowser
    return { seeded, base, browser }
  })
).pipe(Layer.provideMerge(TestDatabase.layer({ pollingInterval: "50 millis", processHeartbeatInterval: "500 millis" })))

/** A browser context as a role (`x-role` header), with its page; errors on the page are collected. */
interface Opened {
  readonly context: BrowserContext
  readonly page: Page
  readonly errors: Array<string>
}

const open = (browser: Browser, role: "write" | "read", viewport = { width: 1280, height: 900 }) =>
  Effect.acquireRelease(
    Effect.promise(async (): Promise<Opened> => {
      const context = await browser.newContext({ extraHTTPHeaders: { "x-role": role }, viewport })
      const page = await context.newPage()
      const errors: Array<string> = []
      page.on("pageerror", (e) => errors.push(`pageerror: ${e.message}`))
      page.on("console", (m) => {
        if (m.type() === "error") errors.push(`console: ${m.text()}`)
      })
      return { context, page, errors }
    }),
    (opened) => Effect.promise(() => opened.context.close())
  )

const shoot = async (page: Page, name: string) => {
  if (!SCREENSHOTS) return
  mkdirSync(SHOTS_DIR, { recursive: true })
  await page.screenshot({ path: `${SHOTS_DIR}/${name}.png`, fullPage: true })
}

layer(envLayer, { excludeTestServices: true, timeout: "120 seconds" })("dashboard in a browser", (it) => {
  it.effect("every page loads over a seeded database; markup in payloads is shown as text, never run", () =>
    Effect.gen(function* () {
      const { seeded, base, browser } = yield* Env
      const { page, errors } = yield* open(browser, "write")
      const pages: ReadonlyArray<readonly [string, string, string]> = [
        ["overview", "/", "Overview"],
        ["queues", "/queues", "Queues"],
        ["jobs", "/queues/billing/jobs", "Jobs of billing"],
        ["job", "/queues/billing/jobs/1", "Job billing:1"],
        ["dead-letters", "/dead-letters", "Dead letters"],
        ["dead-letter", `/dead-letters/${seeded.deadLetterIds[0]}`, `Dead letter ${seeded.deadLetterIds[0]}`],
        ["processes", "/processes", "Processes"],
        ["flow", "/flow", "Flow control"],
        ["recurring", "/recurring", "Recurring tasks"],
        ["events", "/events", "Events and outbox"],
        ["batches", "/batches", "Batches"],
        ["workflows", "/workflows", "Workflows"],
        ["attention", "/workflows/attention", "Needs attention"],
        ["run", `/workflows/${seeded.waitingRun}`, "OrderFlow"],
        ["insights", "/insights?window=24h", "Insights"],
        ["insights-class", "/insights/workflows/OrderFlow", "OrderFlow"]
      ]
      for (const [name, path, heading] of pages) {
        const text = yield* Effect.promise(async () => {
          const response = await page.goto(`${base}${path === "/" ? "/" : path}`)
          assert.strictEqual(response?.status(), 200, `${path} answers 200`)
          await shoot(page, name)
          return { h1: await page.locator("h1").first().innerText(), body: await page.locator("body").innerText() }
        })
        assert.include(text.h1, heading, path)
        const pwned = yield* Effect.promise(() => page.evaluate(() => (globalThis as { __pwned?: number }).__pwned))
        assert.isUndefined(pwned, `${path}: no injected script ran`)
      }
      // the hostile payload is on the job page as text, every character of it
      yield* Effect.promise(async () => {
        await page.goto(`${base}/queues/billing/jobs/1`)
        const shown = await page.locator("pre.payload").first().innerText()
        assert.include(shown, "<script>window.__pwned = 1</script>")
        assert.include(shown, "ünïcödé 🚀")
        assert.strictEqual(await page.locator("img[src=x]").count(), 0, "no element was made from the payload")
        await page.goto(`${base}/workflows/${seeded.waitingRun}`)
        assert.include(await page.locator("dl.facts").innerText(), `order:${HOSTILE}`)
      })
      // the nav, the verdict and the cards are there
      yield* Effect.promise(async () => {
        await page.goto(`${base}/`)
        assert.match(await page.locator(".verdict strong").innerText(), /^(OK|DEGRADED|STALLED)$/)
        assert.isAtLeast(await page.locator(".card").count(), 6)
        assert.strictEqual(await page.locator("figure.chart svg").count(), 2, "two sparklines")
      })
      if (SCREENSHOTS) {
        const phone = yield* open(browser, "write", { width: 390, height: 844 })
        yield* Effect.promise(async () => {
          for (const [name, path] of [
            ["phone-overview", "/"],
            ["phone-workflows", "/workflows"]
          ] as const) {
            await phone.page.goto(`${base}${path}`)
            await shoot(phone.page, name)
          }
        })
      }
      assert.deepStrictEqual(errors, [], "no error in the browser (CSP violations included)")
    })
  )

  it.effect("a child run's page links its parent; following the link shows the child in the parent's list", () =>
    Effect.gen(function* () {
      const { base, browser } = yield* Env
      const { parentId, childId } = yield* family()
      const { page, errors } = yield* open(browser, "read")
      yield* Effect.promise(async () => {
        await page.goto(`${base}/workflows/${childId}`)
        await page.locator("a#parent-run").click()
        await page.waitForURL(`**/workflows/${parentId}`)
        const row = page.locator("#children tr", { hasText: childId })
        assert.include((await row.textContent()) ?? "", "kid")
        await row.getByRole("link").click()
        await page.waitForURL(`**/workflows/${childId}`)
      })
      assert.deepStrictEqual(errors, [])
    }).pipe(Effect.scoped)
  )

  it.effect("clicking Retry on a dead letter puts it back on its queue and it leaves the list", () =>
    Effect.gen(function* () {
      const { seeded, base, browser } = yield* Env
      const { page } = yield* open(browser, "write")
      const id = seeded.deadLetterIds[1]!
      yield* Effect.promise(async () => {
        await page.goto(`${base}/dead-letters`)
        const row = page.locator("#dead-letters tr", { hasText: id })
        assert.strictEqual(await row.count(), 1)
        await row.getByRole("button", { name: "Retry" }).click()
        await page.waitForURL(`${base}/dead-letters`)
        assert.include(await page.locator(".flash.ok").innerText(), `Retried ${id}`)
        assert.strictEqual(await page.locator("#dead-letters tr", { hasText: id }).count(), 0, "it left the list")
      })
      const store = yield* QueueStore
      const dlq = yield* store.browse("mailers_dlq", { limit: 10 })
      assert.isFalse(
        dlq.some((m) => `mailers_dlq:${m.msgId}` === id),
        "gone from the dead-letter queue"
      )
    })
  )

  it.effect("setting a job's rate on the Flow control page: the row shows the new rate and who set it", () =>
    Effect.gen(function* () {
      const { base, browser } = yield* Env
      const store = yield* QueueStore
      yield* store.setRate("BrowserRated", { limit: 10, periodMs: 60_000 }, { actor: "seed", reason: undefined })
      const { page, errors } = yield* open(browser, "write")
      yield* Effect.promise(async () => {
        await page.goto(`${base}/flow`)
        const row = page.locator("#rates tr", { hasText: "BrowserRated" })
        assert.include(await row.innerText(), "10 per 1 minute")
        await row.locator('input[name="limit"]').fill("25")
        await row.locator('input[name="period"]').fill("30 seconds")
        await row.locator('input[name="reason"]').first().fill("partner raised it")
        await row.getByRole("button", { name: "Set", exact: true }).click()
        await page.waitForURL(`${base}/flow`)
        assert.include(await page.locator(".flash.ok").innerText(), "Rate of BrowserRated set to 25 per 30 seconds")
        const after = await page.locator("#rates tr", { hasText: "BrowserRated" }).innerText()
        assert.include(after, "25 per 30 seconds")
        assert.include(after, "partner raised it")
      })
      const [rate] = (yield* store.rateOverrides).filter((r) => r.job === "BrowserRated")
      assert.deepStrictEqual([rate?.limit, rate?.periodMs, rate?.actor], [25, 30_000, "dashboard:alice"])
      assert.deepStrictEqual(errors, [])
    })
  )

  it.effect(
    "recurring: the Overview card leads to the Recurring page; Run now enqueues the task's job and the row shows its last run",
    () =>
      Effect.gen(function* () {
        const { base, browser } = yield* Env
        const { page, errors } = yield* open(browser, "write")
        yield* Effect.promise(async () => {
          await page.goto(`${base}/`)
          const card = page.locator(".card", { hasText: "Recurring tasks" })
          assert.strictEqual(await card.locator(".v").textContent(), "2")
          // "… ago" when the seed stored it before a full hour and the page renders after it
          assert.match((await card.locator("p").textContent()) ?? "", /^next fire (?:in .+|.+ ago): hourly-digest$/)
          await card.getByRole("link", { name: "Recurring tasks" }).click()
          await page.waitForURL(`${base}/recurring`)
          const row = page.locator("#recurring-tasks tr", { hasText: "nightly-report" })
          const before = (await row.textContent()) ?? ""
          assert.include(before, "the nightly sales report")
          assert.include(before, "every day at 2am (0 2 * * *)")
          assert.include(before, "Europe/Berlin")
          assert.include(before, "job NightlyReport")
          assert.include(before, "never")
          // in words: "in 22h 5m"; "in 40s" in the minute before 01:00 UTC (2am in Berlin), and
          // "3s ago" when the seed stored it before then and the page renders after (no scheduler runs here)
          assert.match(before, /in \d+(?:[dhm] \d+[hms]|m?s)|\d+(?:[dhm] \d+[hms]|m?s) ago/, "the next run in words")
          await row.locator('input[name="reason"]').fill("finance asked for it now")
          await row.getByRole("button", { name: "Run now" }).click()
          await page.waitForURL(`${base}/recurring`)
          assert.match(
            (await page.locator(".flash.ok").textContent()) ?? "",
            /^Enqueued nightly-report now as reports:\d+$/
          )
          const after = (await page.locator("#recurring-tasks tr", { hasText: "nightly-report" }).textContent()) ?? ""
          assert.notInclude(after, "never")
          assert.match(after, /\d+(ms|s) ago/)
          assert.match(after, /run now \d+(ms|s) ago by dashboard:alice: finance asked for it now/)
          // the task's page lists its fires with who ran it now and why
          await page
            .locator("#recurring-tasks tr", { hasText: "nightly-report" })
            .getByRole("link", { name: "nightly-report" })
            .click()
          await page.waitForURL(`${base}/recurring/nightly-report`)
          const fires = page.locator("#recurring-executions tbody tr")
          assert.strictEqual(await fires.count(), 1)
          const fire = (await fires.first().locator("td").allTextContents()).join(" ")
          assert.match(fire, /run now reports reports:\d+ dashboard:alice finance asked for it now/)
        })
        const messages = yield* (yield* QueueStore).browse("reports")
        assert.deepStrictEqual(
          messages.map((m) => m.message),
          [{ job: "NightlyReport", payload: { full: true } }]
        )
        const sql = yield* SqlClient.SqlClient
        const ledger = yield* sql<{
          readonly manual: boolean
          readonly msg_id: bigint | null
          readonly actor: string | null
          readonly reason: string | null
        }>`SELECT manual, msg_id, actor, reason FROM pgbus.recurring_executions WHERE task_key = 'nightly-report'`
        assert.deepStrictEqual(
          ledger.map((r) => [r.manual, r.msg_id, r.actor, r.reason]),
          [[true, messages[0]!.msgId, "dashboard:alice", "finance asked for it now"]]
        )
        assert.deepStrictEqual(errors, [])
      })
  )

  it.effect("bulk resume of a needs-attention group: every paused run resumed, recorded as dashboard:alice", () =>
    Effect.gen(function* () {
      const { seeded, base, browser } = yield* Env
      const { page } = yield* open(browser, "write")
      yield* Effect.promise(async () => {
        await page.goto(`${base}/workflows/attention`)
        const row = page.locator("#attention tr", { hasText: "paused_manual" })
        assert.strictEqual(await row.count(), 1)
        assert.include(await row.innerText(), "3")
        await row.locator("form", { hasText: "Resume" }).locator("input[name=confirm]").check()
        await row.getByRole("button", { name: "Resume" }).click()
        await page.waitForURL(`${base}/workflows/attention`)
        assert.include(await page.locator(".flash.ok").innerText(), "Resumed 3")
        assert.strictEqual(await page.locator("#attention tr", { hasText: "paused_manual" }).count(), 0)
      })
      const client = yield* WorkflowClient
      for (const id of seeded.pausedRuns) {
        const run = yield* client.get(id)
        assert.notStrictEqual(run.info.status, "paused", `${id} was resumed`)
        const resumed = (yield* client.events(id)).find((e) => e.type === "resumed")
        assert.strictEqual(resumed?.actor, "dashboard:alice")
      }
    })
  )

  it.effect("a live update arrives over SSE: a job sent after the page loaded shows up without a reload", () =>
    Effect.gen(function* () {
      const { base, browser } = yield* Env
      const { page } = yield* open(browser, "write")
      const depthOf = () => page.locator("#queues tr", { hasText: "billing" }).locator("td").nth(2).innerText()
      const before = yield* Effect.promise(async () => {
        await page.goto(`${base}/queues`)
        await page.evaluate(() => {
          ;(globalThis as { __loaded?: number }).__loaded = 1
        })
        return Number((await depthOf()).replace(/,/g, ""))
      })
      const store = yield* QueueStore
      yield* store.sendBatch(
        "billing",
        Array.from({ length: 3 }, () => ({ message: { job: "SyncInvoice", payload: { live: true } } }))
      )
      yield* eventually(
        "the page shows the new depth",
        Effect.promise(async () => Number((await depthOf()).replace(/,/g, "")) === before + 3),
        "20 seconds"
      )
      const same = yield* Effect.promise(() => page.evaluate(() => (globalThis as { __loaded?: number }).__loaded))
      assert.strictEqual(same, 1, "the page was updated in place, not reloaded")
    })
  )

  it.effect("a read-only session has no buttons and no payloads; its forged POST answers 403 and changes nothing", () =>
    Effect.gen(function* () {
      const { seeded, base, browser } = yield* Env
      const { page } = yield* open(browser, "read")
      const id = seeded.deadLetterIds[2]!
      yield* Effect.promise(async () => {
        for (const path of [
          "/queues",
          "/dead-letters",
          `/dead-letters/${id}`,
          "/workflows",
          `/workflows/${seeded.waitingRun}`,
          "/workflows/attention",
          "/queues/billing/jobs/1"
        ]) {
          await page.goto(`${base}${path}`)
          assert.strictEqual(await page.locator("form[method=post]").count(), 0, `${path}: no button`)
          assert.strictEqual(
            await page.locator("button").filter({ hasNotText: "Filter" }).count(),
            0,
            `${path}: no button`
          )
        }
        await page.goto(`${base}/queues/billing/jobs/1`)
        assert.strictEqual(await page.locator("pre.payload").count(), 0, "no payload")
        assert.notInclude(await page.locator("body").innerText(), "__pwned")
        // a forged POST, with a made-up token: 403
        const forged = await page.request.post(`${base}/dead-letters/${id}/retry`, {
          form: { _csrf: "forged", back: `${base}/dead-letters` },
          maxRedirects: 0
        })
        assert.strictEqual(forged.status(), 403)
      })
      const dlq = yield* (yield* QueueStore).browse("mailers_dlq", { limit: 10 })
      assert.isTrue(
        dlq.some((m) => `mailers_dlq:${m.msgId}` === id),
        "still dead-lettered"
      )
      // a writer without the token is refused too
      const writer = yield* open(browser, "write")
      const noToken = yield* Effect.promise(() =>
        writer.page.request.post(`${base}/dead-letters/${id}/retry`, { form: { back: "/" }, maxRedirects: 0 })
      )
      assert.strictEqual(noToken.status(), 403)
    })
  )
})
