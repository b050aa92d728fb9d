import { createServer as createHttpServer } from "node:http"
import { assert, describe, layer } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Schema } from "effect"
import { PgBusConfig } from "../src/Config.ts"
import * as Job from "../src/Job/Job.ts"
import * as Metrics from "../src/Operations/Metrics.ts"
import { Operations } from "../src/Operations/Operations.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import * as Supervisor from "../src/Supervisor/Supervisor.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { webCaller } from "./support/http.ts"
import { eventually } from "./support/jobs.ts"
import { freePort } from "./support/ports.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ id: Schema.Number })

/** The value of a series in Prometheus's text format (`undefined` when absent). */
const seriesValue = (text: string, name: string, labels: Record<string, string> = {}): number | undefined => {
  for (const line of text.split("\n")) {
    if (line.startsWith("#")) continue
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (.+)$/.exec(line)
    if (!match || match[1] !== name) continue
    const found = Object.fromEntries(
      [...(match[3] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]])
    )
    if (Object.entries(labels).every(([k, v]) => found[k] === v)) return Number(match[4])
  }
  return undefined
}

const Ok = Job.make("MetricsOk", { payload: Payload, queue: "metrics_work" }, () => Effect.void)
const Bad = Job.make("MetricsBad", { payload: Payload, queue: "metrics_work" }, () => Effect.fail(new Error("nope")))
const Idle = Job.make("MetricsIdle", { payload: Payload, queue: "metrics_idle" }, () => Effect.void)
const Flow = Workflow.make("MetricsFlow", { payload: Payload }, function* () {
  yield* Workflow.sleep("nap", "1 hour")
})

const testLayer = Operations.layer.pipe(
  Layer.provideMerge(
    TestDatabase.layer({
      pollingInterval: "50 millis",
      maxRetries: 2,
      retryBackoff: "50 millis",
      retryBackoffMax: "100 millis"
    })
  )
)

layer(testLayer, { excludeTestServices: true, timeout: "60 seconds" })("metrics", (it) => {
  describe("/metrics", () => {
    it.effect("the supervisor's health port serves each family with its labels after a workload", () =>
      Effect.gen(function* () {
        const port = yield* freePort
        const store = yield* QueueStore
        yield* store.create("metrics_paused")
        const config = yield* PgBusConfig
        yield* Effect.forkScoped(
          Supervisor.runWith({ capsules: [{ name: "m", queues: ["metrics_work"], concurrency: 2 }] }).pipe(
            Effect.provide(Metrics.layer),
            Effect.provide(Registry.layer([Ok, Bad, Idle, Flow])),
            // this supervisor serves the health port (the rest of the file's services do not need it)
            Effect.provideService(PgBusConfig, { ...config, healthPort: port })
          )
        )
        const scrape = Effect.tryPromise(async () => {
          const response = await fetch(`http://127.0.0.1:${port}/metrics`)
          return {
            status: response.status,
            type: response.headers.get("content-type") ?? "",
            text: await response.text()
          }
        }).pipe(Effect.orDie)
        const attempt = Effect.tryPromise(() => fetch(`http://127.0.0.1:${port}/metrics`))
        yield* eventually(
          "the health port answers",
          Effect.map(Effect.result(attempt), (r) => r._tag === "Success" && r.success.status === 200)
        )
        const boot = yield* scrape
        assert.include(boot.type, "text/plain")
        // registered at boot: a job that never ran already has its series
        assert.strictEqual(
          seriesValue(boot.text, "pgbus_queue_job_count", {
            queue: "metrics_idle",
            job: "MetricsIdle",
            status: "completed"
          }),
          0
        )
        assert.strictEqual(seriesValue(boot.text, "pgbus_database_up"), 1)

        yield* Ok.enqueue({ id: 1 })
        yield* Ok.enqueue({ id: 2 })
        yield* Bad.enqueue({ id: 3 })
        const ops = yield* Operations
        yield* ops.pauseQueue("metrics_paused", { actor: "test" })
        yield* store.send("metrics_paused", { job: "MetricsOk", payload: { id: 4 } })
        const run = yield* Flow.start({ id: 1 })
        yield* run.pause({ actor: "test" })
        yield* eventually(
          "the bad job is dead-lettered",
          Effect.map(ops.queue("metrics_work"), (q) => q.deadLetters === 1 && q.depth === 0),
          "20 seconds"
        )

        const { text } = yield* scrape
        const work = { queue: "metrics_work" }
        assert.strictEqual(
          seriesValue(text, "pgbus_queue_job_count", { ...work, job: "MetricsOk", status: "completed" }),
          2
        )
        assert.strictEqual(
          seriesValue(text, "pgbus_queue_job_count", { ...work, job: "MetricsBad", status: "failed" }),
          2
        )
        assert.strictEqual(
          seriesValue(text, "pgbus_queue_job_count", { ...work, job: "MetricsBad", status: "retried" }),
          1
        )
        assert.strictEqual(
          seriesValue(text, "pgbus_queue_job_count", { ...work, job: "MetricsBad", status: "dead_lettered" }),
          1
        )
        assert.strictEqual(seriesValue(text, "pgbus_job_duration_ms_count", { ...work, job: "MetricsOk" }), 2)
        assert.strictEqual(seriesValue(text, "pgbus_dlq_depth", work), 1)
        assert.strictEqual(seriesValue(text, "pgbus_queue_depth", work), 0)
        assert.strictEqual(seriesValue(text, "pgbus_queue_paused", { queue: "metrics_paused" }), 1)
        assert.strictEqual(seriesValue(text, "pgbus_queue_depth", { queue: "metrics_paused" }), 1)
        assert.strictEqual(seriesValue(text, "pgbus_queue_ready", { queue: "metrics_paused" }), 1)
        assert.isAtLeast(seriesValue(text, "pgbus_queue_latency", { queue: "metrics_paused" }) ?? -1, 0)
        assert.strictEqual(seriesValue(text, "pgbus_workflows", { workflow_class: "MetricsFlow", status: "paused" }), 1)
        assert.strictEqual(
          seriesValue(text, "pgbus_workflows", { workflow_class: "MetricsFlow", status: "finished" }),
          0
        )
        assert.strictEqual(
          seriesValue(text, "pgbus_workflows_stuck", { workflow_class: "MetricsFlow", reason: "paused_manual" }),
          1
        )
        assert.strictEqual(seriesValue(text, "pgbus_processes", { status: "healthy" }), 1)
        assert.strictEqual(seriesValue(text, "pgbus_pool_size"), 13)
        assert.isAtLeast(seriesValue(text, "pgbus_pool_open") ?? 0, 1)
        assert.isDefined(seriesValue(text, "pgbus_table_dead_tuples", { table: "workflow_runs" }))
        assert.isDefined(seriesValue(text, "pgbus_table_bloat_ratio", { table: "q_pgbus_metrics_work" }))
        assert.isDefined(seriesValue(text, "pgbus_table_last_vacuum_age_seconds", { table: "processes" }))
        assert.isDefined(seriesValue(text, "pgbus_oldest_transaction_age_seconds"))
        assert.strictEqual(seriesValue(text, "pgbus_outbox_pending"), 0)
        assert.strictEqual(seriesValue(text, "pgbus_batches", { status: "pending" }), 0)

        // a cancelled run moves the gauge: the paused series goes to 0, not stale
        yield* run.cancel({ actor: "test" })
        const after = (yield* scrape).text
        assert.strictEqual(
          seriesValue(after, "pgbus_workflows", { workflow_class: "MetricsFlow", status: "paused" }),
          0
        )
        assert.strictEqual(
          seriesValue(after, "pgbus_workflows", { workflow_class: "MetricsFlow", status: "cancelled" }),
          1
        )
      })
    )

    it.effect("mounts in an app's router", () =>
      Effect.gen(function* () {
        yield* (yield* QueueStore).create("metrics_work")
        const call = yield* webCaller(Metrics.layerHttp({ path: "/ops/metrics" }))
        const answer = yield* call("GET", "/ops/metrics")
        assert.strictEqual(answer.status, 200)
        assert.include(answer.contentType, "text/plain")
        assert.isDefined(seriesValue(answer.text, "pgbus_database_up"))
        assert.isDefined(seriesValue(answer.text, "pgbus_queue_depth", { queue: "metrics_work" }))
      })
    )
  })

  it.effect("exports by OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set, nothing otherwise", () =>
    Effect.gen(function* () {
      const received: Array<{ path: string; body: string }> = []
      const server = createHttpServer((req, res) => {
        let body = ""
        req.on("data", (chunk) => {
          body += chunk
        })
        req.on("end", () => {
          received.push({ path: req.url ?? "", body })
          res.writeHead(200, { "content-type": "application/json" }).end("{}")
        })
      })
      const port = yield* Effect.promise(
        () =>
          new Promise<number>((resolve) =>
            server.listen(0, "127.0.0.1", () => {
              const address = server.address()
              resolve(typeof address === "object" && address ? address.port : 0)
            })
          )
      )
      yield* Effect.addFinalizer(() =>
        Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve())))
      )
      const withEnv = (env: Record<string, string>) =>
        Layer.effectDiscard(Effect.void).pipe(
          Layer.provideMerge(Metrics.layerOtlp),
          Layer.provide(ConfigProvider.layer(ConfigProvider.fromUnknown(env)))
        )
      // off without an endpoint
      yield* Effect.scoped(Layer.build(withEnv({})))
      assert.strictEqual(received.length, 0)
      // on with one: the layer's release flushes what was recorded
      yield* Effect.scoped(
        Layer.build(
          withEnv({
            OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
            OTEL_METRIC_EXPORT_INTERVAL: "200"
          })
        )
      )
      yield* eventually(
        "metrics are posted",
        Effect.sync(() =>
          received.some(
            (r) =>
              r.path === "/v1/metrics" && r.body.includes("pgbus_database_up") && r.body.includes("pgbus_workflows")
          )
        )
      )
    })
  )
})
