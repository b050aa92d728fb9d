/** An idempotent handler whose process is killed mid-run (SIGKILL) is run again by a live process. */
import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../src/Config.ts"
import { consumerCapsules } from "../src/EventBus/Consumer.ts"
import * as EventBus from "../src/EventBus/EventBus.ts"
import * as EventBusLayer from "../src/EventBus/EventBusLayer.ts"
import { ProcessedEvents } from "../src/EventBus/ProcessedEvents.ts"
import * as PgBus from "../src/PgBus.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import * as Supervisor from "../src/Supervisor/Supervisor.ts"
import { eventually } from "./support/jobs.ts"
import { urlFor } from "./support/server.ts"
import { freshDatabase } from "./support/TestDatabase.ts"

const root = fileURLToPath(new URL("..", import.meta.url))

const settings = {
  processHeartbeatInterval: "200 millis",
  staleProcessThreshold: "1 second",
  dispatchInterval: "200 millis",
  pollingInterval: "50 millis",
  visibilityTimeout: "30 seconds",
  maxRetries: 10
} as const

/**
 * The child: a supervisor whose idempotent subscriber logs the event with its pid and then
 * hangs. Plain JavaScript run with `node --import tsx`, importing the library by path.
 */
const childProgram = `
const { Effect, Layer } = await import("effect")
const { SqlClient } = await import("effect/sql")
const src = (path) => import(${JSON.stringify(root)} + "src/" + path)
const PgBus = await src("PgBus.ts")
const EventBusLayer = await src("EventBus/EventBusLayer.ts")
const EventBus = await src("EventBus/EventBus.ts")
const Consumer = await src("EventBus/Consumer.ts")
const { Registry } = await src("Registry.ts")
const Supervisor = await src("Supervisor/Supervisor.ts")
const subscriber = EventBus.subscribe(
  "kill.orders.created",
  (event) => Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.unsafe("INSERT INTO kill_log (event_id, pid) VALUES ($1::uuid, $2)", [event.id, process.pid])
  ).pipe(Effect.andThen(Effect.never), Effect.orDie),
  { name: "kill-handler", idempotent: true }
)
const program = Effect.gen(function* () {
  const registry = yield* Registry
  return yield* Supervisor.runWith({ capsules: Consumer.consumerCapsules(registry) })
}).pipe(
  Effect.provide(Registry.layer([subscriber])),
  Effect.provide(EventBusLayer.layer.pipe(Layer.provideMerge(PgBus.layer())))
)
Supervisor.runMain(program)
`

const spawnChild = (env: Record<string, string>) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      let output = ""
      const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", childProgram], {
        cwd: root,
        env: { ...process.env, ...env },
        stdio: ["ignore", "pipe", "pipe"]
      })
      child.stdout?.on("data", (d) => {
        output += String(d)
      })
      child.stderr?.on("data", (d) => {
        output += String(d)
      })
      const exited = new Promise<NodeJS.Signals | number | null>((resolve) =>
        child.once("exit", (code, signal) => resolve(signal ?? code))
      )
      return { child, output: () => output, exited: Effect.promise(() => exited) }
    }),
    ({ child }) => Effect.sync(() => child.exitCode === null && child.kill("SIGKILL"))
  )

describe("event bus: a killed consumer", () => {
  it.live(
    "a handler killed mid-run is run again later by a live process (its pending claim went quiet)",
    () =>
      Effect.gen(function* () {
        const database = yield* freshDatabase
        const url = urlFor(database)
        const services = EventBusLayer.layer.pipe(
          Layer.provideMerge(PgBus.layerFrom(PgBusConfig.layerWithoutEnvironment({ databaseUrl: url, ...settings }))),
          Layer.orDie
        )
        yield* Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const store = yield* QueueStore
          yield* sql`CREATE TABLE kill_log (event_id uuid NOT NULL, pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`
          const log = sql<{ readonly pid: number }>`SELECT pid FROM kill_log ORDER BY at`
          // this process's subscriber: same name and pattern, a handler that finishes
          const subscriber = EventBus.subscribe(
            "kill.orders.created",
            (event) =>
              Effect.flatMap(
                SqlClient.SqlClient,
                (s) => s`INSERT INTO kill_log (event_id, pid) VALUES (${event.id}::uuid, ${process.pid})`
              ).pipe(Effect.orDie),
            { name: "kill-handler", idempotent: true }
          )
          yield* EventBus.register([subscriber])
          const published = yield* EventBus.publish("kill.orders.created", { orderId: 1 })

          const child = yield* spawnChild({
            DATABASE_URL: Redacted.value((yield* PgBusConfig).databaseUrl),
            PGBUS_PROCESS_HEARTBEAT_INTERVAL: "200 millis",
            PGBUS_STALE_PROCESS_THRESHOLD: "1 second",
            PGBUS_POLLING_INTERVAL: "50 millis",
            PGBUS_MAX_RETRIES: "10"
          })
          yield* eventually(
            "the child started the handler",
            Effect.map(log, (rows) => rows.length === 1),
            "20 seconds"
          ).pipe(Effect.tapError(() => Effect.logError(child.output())))
          const [started] = yield* log
          assert.strictEqual(started?.pid, child.child.pid)
          const [claim] = yield* sql<{ readonly claimed_by: string; readonly completed: boolean }>`
            SELECT claimed_by, completed_at IS NOT NULL AS completed FROM pgbus.processed_events
            WHERE event_id = ${published.eventId}::uuid`
          assert.strictEqual(claim?.completed, false, "the child holds a pending claim")
          assert.include(claim?.claimed_by ?? "", `:${child.child.pid}:`)

          child.child.kill("SIGKILL")
          assert.strictEqual(yield* child.exited, "SIGKILL")
          const killedAt = Date.now()

          // a live process with the same subscriber: its dispatcher reaps the dead one, its
          // consumer gets the message back and finds the claim quiet
          const context = yield* Layer.build(Registry.layer([subscriber]))
          yield* Supervisor.runWith({ capsules: consumerCapsules(Context.get(context, Registry)) }).pipe(
            Effect.provide(context),
            Effect.forkScoped
          )
          yield* eventually(
            "the live process ran the handler",
            Effect.map(log, (rows) => rows.length === 2),
            "20 seconds"
          )
          const recoveredMs = Date.now() - killedAt
          const rows = yield* log
          assert.deepStrictEqual(
            rows.map((r) => r.pid),
            [child.child.pid, process.pid]
          )
          const processed = yield* ProcessedEvents
          const claimRow = sql<{ readonly claimed_by: string; readonly completed: boolean }>`
            SELECT claimed_by, completed_at IS NOT NULL AS completed FROM pgbus.processed_events
            WHERE event_id = ${published.eventId}::uuid`
          // the completion is stamped in its own statement after the handler returns
          yield* eventually(
            "the claim was stamped completed",
            Effect.map(claimRow, ([row]) => row?.completed === true)
          )
          const [done] = yield* claimRow
          assert.deepStrictEqual(done, { claimed_by: processed.holder, completed: true })
          yield* eventually(
            "archived",
            Effect.map(store.metrics(subscriber.queue), (m) => m.archiveSize === 1 && m.depth === 0)
          )
          assert.strictEqual((yield* store.browse(`${subscriber.queue}_dlq`)).length, 0)
          assert.isBelow(recoveredMs, 10_000, "recovered within the stale threshold plus a few beats")
        }).pipe(Effect.provide(services))
      }).pipe(Effect.scoped),
    60_000
  )
})
