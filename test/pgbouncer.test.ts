/**
 * The library behind pgbouncer in transaction mode (Debian's `pgbouncer`, started by the test in
 * front of the test server): jobs enqueued and processed, a workflow with a step and a signal,
 * an event published to subscribers. The pool goes through pgbouncer with no named prepared
 * statements and no session settings; LISTEN and the leaders' advisory locks use the direct URL.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer, Ref, Schema } from "effect"
import { PgBusConfig, resolve } from "../src/Config.ts"
import { consumerCapsules } from "../src/EventBus/Consumer.ts"
import * as EventBus from "../src/EventBus/EventBus.ts"
import * as Job from "../src/Job/Job.ts"
import * as PgBus from "../src/PgBus.ts"
import { Notifier } from "../src/Queue/Notifier.ts"
import { Registry } from "../src/Registry.ts"
import * as Supervisor from "../src/Supervisor/Supervisor.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { eventually } from "./support/jobs.ts"
import { pgbouncer } from "./support/pgbouncer.ts"
import { urlFor } from "./support/server.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ n: Schema.Number })

const Approval = Workflow.make(
  "BouncedApproval",
  { payload: Payload, signals: { approved: Schema.Struct({ by: Schema.String }) } },
  function* ({ payload, waitForSignal }) {
    const doubled = yield* Workflow.step("double", Effect.succeed(payload.n * 2))
    const approval = yield* waitForSignal("approved")
    return { doubled, by: approval.by }
  }
)

describe("behind pgbouncer in transaction mode", () => {
  it.effect("transactionPooler without directDatabaseUrl is refused, naming the key", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(resolve({ transactionPooler: true }))
      assert.strictEqual(error.key, "directDatabaseUrl")
      assert.include(error.rule, "LISTEN")
    })
  )

  it.live("migrations apply through pgbouncer (one transaction, nothing session-bound)", () =>
    Effect.gen(function* () {
      const bouncer = yield* pgbouncer
      const name = yield* TestDatabase.emptyDatabase
      const config = PgBusConfig.layerWithoutEnvironment({
        databaseUrl: bouncer.urlFor(name),
        directDatabaseUrl: urlFor(name),
        transactionPooler: true
      })
      const applied = yield* PgBus.migrate.pipe(Effect.provide(PgBus.layerFrom(config).pipe(Layer.orDie)))
      assert.isAbove(applied.length, 10)
      const again = yield* PgBus.migrate.pipe(Effect.provide(PgBus.layerFrom(config).pipe(Layer.orDie)))
      assert.deepStrictEqual(again, [])
    }).pipe(Effect.scoped)
  )

  it.live(
    "jobs, a workflow with a step and a signal, and the event bus work; the pool's connections go through pgbouncer",
    () =>
      Effect.gen(function* () {
        const bouncer = yield* pgbouncer
        const name = yield* TestDatabase.freshDatabase
        const config = PgBusConfig.layerWithoutEnvironment({
          databaseUrl: bouncer.urlFor(name),
          directDatabaseUrl: urlFor(name),
          transactionPooler: true,
          pollingInterval: "1 second",
          workers: "bounced: 4; default: 2"
        })
        const done = yield* Ref.make<ReadonlyArray<number>>([])
        const Work = Job.make("BouncedWork", { payload: Payload, queue: "bounced" }, ({ n }) =>
          Ref.update(done, (d) => [...d, n])
        )
        const heard = yield* Ref.make<ReadonlyArray<string>>([])
        const Audit = EventBus.subscribe("bounced.orders.#", (e) => Ref.update(heard, (h) => [...h, e.routingKey]), {
          name: "bounced-audit"
        })

        yield* Effect.gen(function* () {
          const registry = yield* Layer.build(Registry.layer([Work, Approval, Audit]))
          yield* Supervisor.runWith({
            capsules: [
              { name: "bounced", queues: ["bounced"], concurrency: 4 },
              { name: "default", queues: ["default"], concurrency: 2 },
              ...consumerCapsules(Context.get(registry, Registry))
            ]
          }).pipe(Effect.provide(registry), Effect.forkScoped)

          // the notifier listens on the direct connection: a job enqueued through pgbouncer wakes
          // the worker (polling is 1 s here), and many run through the pool
          const notifier = yield* Notifier
          yield* eventually(
            "the notifier listens",
            Effect.map(notifier.status, (s) => s === "listening")
          )
          yield* Effect.forEach(
            Array.from({ length: 40 }, (_, i) => i),
            (n) => Work.enqueue({ n }),
            {
              concurrency: 8,
              discard: true
            }
          )
          yield* eventually(
            "the 40 jobs ran once each",
            Effect.map(Ref.get(done), (d) => d.length === 40),
            "30 seconds"
          )
          assert.deepStrictEqual(
            [...(yield* Ref.get(done))].sort((a, b) => a - b),
            Array.from({ length: 40 }, (_, i) => i)
          )

          const run = yield* Approval.start({ n: 21 })
          const client = yield* WorkflowClient
          yield* eventually(
            "the workflow waits for its signal after its step",
            Effect.map(client.get(run.id), (h) => h.info.status === "waiting"),
            "30 seconds"
          )
          yield* run.signal("approved", { by: "alice" })
          yield* eventually(
            "the workflow finished",
            Effect.map(client.get(run.id), (h) => h.info.status === "finished"),
            "30 seconds"
          )
          assert.deepStrictEqual((yield* run.refresh).info.output, { doubled: 42, by: "alice" })

          yield* EventBus.publish("bounced.orders.created", { id: 1 })
          yield* EventBus.publish("bounced.orders.paid", { id: 1 })
          yield* eventually(
            "the subscriber handled both events",
            Effect.map(Ref.get(heard), (h) => h.length === 2),
            "30 seconds"
          )
          assert.sameMembers([...(yield* Ref.get(heard))], ["bounced.orders.created", "bounced.orders.paid"])

          // the pool really went through pgbouncer
          const log = yield* bouncer.log
          assert.include(log, `login attempt: db=${name}`)
        }).pipe(Effect.provide(PgBus.layerFrom(config).pipe(Layer.orDie)), Effect.scoped)
      }).pipe(Effect.scoped),
    90_000
  )
})
