/**
 * The dashboard's test set-up, shared by the browser tests and the screenshot script: a seeded
 * database (queues with jobs, dead letters with a hostile payload, workflow runs paused in a
 * group, waiting and finished, a batch, job statistics over the last day, a live supervisor),
 * the dashboard served on a free port, and Debian's chromium driven by playwright-core.
 */
import { Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { type Browser, chromium } from "playwright-core"
import * as Batch from "../../src/Batch/Batch.ts"
import { PgBusConfig } from "../../src/Config.ts"
import * as Dashboard from "../../src/Dashboard/Dashboard.ts"
import * as Job from "../../src/Job/Job.ts"
import { bucketOf, HISTOGRAM_SIZE } from "../../src/Job/JobStats.ts"
import { makeJobStatsSql } from "../../src/Job/JobStatsSql.ts"
import type { Failure } from "../../src/Queue/Message.ts"
import { QueueStore } from "../../src/Queue/QueueStore.ts"
import * as Recurring from "../../src/Recurring/Recurring.ts"
import { RecurringScheduler } from "../../src/Recurring/Scheduler.ts"
import { Registry } from "../../src/Registry.ts"
import { performNextStep } from "../../src/Testing/Workflows.ts"
import { WorkflowClient } from "../../src/Workflow/Client.ts"
import * as Workflow from "../../src/Workflow/Workflow.ts"
import { startSupervisor } from "./jobs.ts"
import { freePort } from "./ports.ts"

/** A payload full of markup: every page must show it as text. */
export const HOSTILE = `<script>window.__pwned = 1</script><img src=x onerror="window.__pwned=2">"quoted" 'single' \`tick\` ünïcödé 🚀 </textarea></pre>`

export const Mail = Job.make("SendMail", { payload: Schema.Struct({ to: Schema.String }), queue: "mailers" }, () =>
  Effect.sleep("5 millis")
)

/** A unique job (its key shows on the Flow control page); no worker reads its queue. */
export const ImportOrder = Job.make(
  "ImportOrder",
  {
    payload: Schema.Struct({ orderId: Schema.String }),
    queue: "imports",
    unique: { key: ({ orderId }) => `order-${orderId}` }
  },
  () => Effect.void
)

export const Order = Workflow.make(
  "OrderFlow",
  { payload: Schema.Struct({ order: Schema.Number }), signals: { paid: Schema.Struct({ amount: Schema.Number }) } },
  function* ({ payload, waitForSignal }) {
    yield* Workflow.step("reserve", Effect.succeed(payload.order))
    yield* Workflow.sleep("cool-off", "1 hour")
    const paid = yield* waitForSignal("paid")
    yield* Workflow.step("capture", Effect.succeed(paid.amount))
    return paid.amount
  }
)

export const Signup = Workflow.make(
  "SignupFlow",
  { payload: Schema.Struct({ user: Schema.String }) },
  function* ({ payload }) {
    yield* Workflow.step("welcome", Effect.succeed(payload.user))
    yield* Workflow.step("activate", Effect.succeed(payload.user))
    return payload.user
  }
)

/** A recurring task's job on a queue no process serves (its run-now messages stay to be seen). */
export const Report = Job.make(
  "NightlyReport",
  { payload: Schema.Struct({ full: Schema.Boolean }), queue: "reports" },
  () => Effect.void
)

const failure: Failure = { errorClass: "SmtpError", message: `connection refused ${HOSTILE}`, attempt: 5 }

const step = (id: string) => performNextStep(id).pipe(Effect.provide(Registry.layer([Order, Signup, Mail])))

/** What the seed made, for the tests to find it. */
export interface Seeded {
  readonly pausedRuns: ReadonlyArray<string>
  readonly waitingRun: string
  readonly deadLetterIds: ReadonlyArray<string>
}

/** Job statistics rows for the last day (so the charts have a shape). */
const seedStats = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const config = yield* PgBusConfig
  const [row] = yield* sql<{ readonly now: Date }>`SELECT now() AS now`
  const now = row!.now.getTime()
  const rows = []
  for (let m = 0; m < 24 * 60; m += 7) {
    const at = now - m * 60_000
    const bucket = new Date(at - (at % 60_000)).toISOString()
    const load = Math.round(40 + 30 * Math.sin(m / 90) + (m % 13))
    for (const [queue, job, scale] of [
      ["mailers", "SendMail", 1],
      ["billing", "SyncInvoice", 0.4]
    ] as const) {
      const duration = new Array<number>(HISTOGRAM_SIZE).fill(0)
      const latency = new Array<number>(HISTOGRAM_SIZE).fill(0)
      const completed = Math.round(load * scale)
      duration[bucketOf(20 + (m % 40))] = completed
      latency[bucketOf(3 + (m % 9))] = completed
      rows.push({
        bucket,
        queue,
        job,
        completed,
        retried: m % 11 === 0 ? 2 : 0,
        dead_lettered: m % 97 === 0 ? 1 : 0,
        duration_ms_sum: completed * 30,
        duration_hist: duration,
        latency_count: completed,
        latency_ms_sum: completed * 5,
        latency_hist: latency
      })
    }
  }
  yield* makeJobStatsSql(sql, config.schema).jobStatsAdd(rows)
})

/** Seeds a database for the dashboard. */
export const seed = Effect.gen(function* () {
  const store = yield* QueueStore
  const client = yield* WorkflowClient
  yield* store.create("mailers")
  yield* store.create("billing")
  yield* store.sendBatch(
    "billing",
    Array.from({ length: 5 }, (_, i) => ({ message: { job: "SyncInvoice", payload: { invoice: i, note: HOSTILE } } }))
  )
  yield* store.send("billing", { job: "SyncInvoice", payload: { invoice: 99 } }, { delay: "1 hour" })
  // dead letters: two SmtpError, one Timeout, with markup in the payload and the error
  yield* store.sendBatch(
    "mailers",
    Array.from({ length: 3 }, (_, i) => ({
      message: { job: "SendMail", payload: { to: `user${i}@example.com`, html: HOSTILE } }
    }))
  )
  const claimed = yield* store.read("mailers", { limit: 3 })
  const deadLetterIds: Array<string> = []
  for (const [i, m] of claimed.entries()) {
    yield* store.moveToDeadLetter("mailers", m, {
      source: "worker",
      failure: { ...failure, errorClass: i === 2 ? "Timeout" : "SmtpError" }
    })
    deadLetterIds.push(`mailers_dlq:${m.msgId}`)
  }
  // workflows: three paused on the same step (one group), one waiting for a signal, finished ones
  const pausedRuns: Array<string> = []
  for (let i = 0; i < 3; i++) {
    const run = yield* Order.start({ order: i })
    yield* step(run.id)
    yield* client.pause(run.id, { actor: "seed", reason: "payment provider down" })
    pausedRuns.push(run.id)
  }
  const waiting = yield* Order.start({ order: 10 }, { subject: `order:${HOSTILE}` })
  yield* step(waiting.id)
  yield* client.runNow(waiting.id, { actor: "seed" })
  yield* step(waiting.id)
  for (let i = 0; i < 2; i++) {
    const run = yield* Signup.start({ user: `u${i}` })
    yield* step(run.id)
    yield* step(run.id)
  }
  // a batch of two mails
  const batch = yield* Batch.make({ description: "Newsletter" })
  yield* batch.enqueue(Effect.all([Mail.enqueue({ to: "a@example.com" }), Mail.enqueue({ to: "b@example.com" })]))
  yield* seedStats
  // flow control: a uniqueness key held by a queued import, a rate set at run time
  yield* ImportOrder.enqueue({ orderId: "A-1042" })
  yield* store.setRate("SyncPartner", { limit: 100, periodMs: 60_000 }, { actor: "cli:ops", reason: "partner quota" })
  // recurring tasks, as a scheduler's leader would have stored them
  yield* (yield* RecurringScheduler).sync([
    Recurring.make("nightly-report", {
      schedule: "every day at 2am",
      timezone: "Europe/Berlin",
      job: Report,
      payload: { full: true },
      description: "the nightly sales report"
    }),
    Recurring.make("hourly-digest", { schedule: "@hourly", job: Report, payload: { full: false } })
  ])
  return { pausedRuns, waitingRun: waiting.id, deadLetterIds } satisfies Seeded
})

/** A live supervisor serving `mailers` (the processes page has a row). */
export const supervise = startSupervisor([Mail, Order, Signup], {
  capsules: [{ name: "mail", queues: ["mailers"], concurrency: 2 }]
})

/** Header-driven access: `x-role` (write|read) as the API's tests use; the browser sets it per context. */
export const headerAccess: Dashboard.AccessOptions = {
  authorize: (request) => {
    const role = request.headers["x-role"]
    if (role === undefined) return Effect.fail(new Error("no session"))
    return Effect.succeed({ actor: role === "write" ? "alice" : "bob", role: role === "write" ? "write" : "read" })
  }
}

/** Serves the dashboard on a free port in the current scope; its base address. */
export const serveDashboard = (options: Dashboard.DashboardOptions = {}) =>
  Effect.gen(function* () {
    const port = yield* freePort
    yield* Layer.build(Dashboard.serve({ refreshInterval: "300 millis", ...options, port }))
    return `http://127.0.0.1:${port}${Dashboard.basePathOf(options)}`
  })

/** Debian's chromium through playwright-core (`--no-sandbox`: the tests run as root). */
export const launchBrowser = Effect.acquireRelease(
  Effect.promise(
    (): Promise<Browser> =>
      chromium.launch({
        executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
        args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]
      })
  ),
  (browser) => Effect.promise(() => browser.close())
)
