/**
 * A newcomer's traps, each now loud: a job on a queue no capsule reads, a database nobody
 * migrated, a step output that JSON does not give back, logs that do not say which job.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Logger, References, Schema } from "effect"
import { PgBusConfig } from "../src/Config.ts"
import * as EventBus from "../src/EventBus/EventBus.ts"
import { jsonMismatch } from "../src/internal/jsonSafe.ts"
import * as Job from "../src/Job/Job.ts"
import { JobClient } from "../src/Job/JobClient.ts"
import { MigrationError } from "../src/Migrations.ts"
import * as PgBus from "../src/PgBus.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import * as Supervisor from "../src/Supervisor/Supervisor.ts"
import { speedrun } from "../src/Testing/Workflows.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { urlFor } from "./support/server.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const unique = (base: string) => `${base}_${n++}`

/** A logger that keeps each line's message and annotations. */
const capture = () => {
  const lines: Array<{ message: string; annotations: Record<string, unknown> }> = []
  const logger = Logger.make((options) => {
    const message = Array.isArray(options.message) ? options.message.map(String).join(" ") : String(options.message)
    lines.push({ message, annotations: { ...(options.fiber.getRef(References.CurrentLogAnnotations) ?? {}) } })
  })
  return { lines, layer: Logger.layer([logger]) }
}

describe("jsonMismatch", () => {
  it("passes what JSON gives back the same and names what it does not", () => {
    assert.isUndefined(jsonMismatch({ a: 1, b: ["x", null, true], c: { d: undefined } }))
    assert.include(jsonMismatch({ at: new Date(0) }) ?? "", "output.at is a Date")
    assert.include(jsonMismatch({ n: 10n }) ?? "", "output.n is a bigint")
    class Money {
      readonly cents = 5
    }
    assert.include(jsonMismatch([new Money()]) ?? "", "output[0] is an instance of Money")
    assert.include(jsonMismatch({ m: new Map() }) ?? "", "a Map")
    assert.include(jsonMismatch(Number.NaN) ?? "", "NaN")
    assert.include(jsonMismatch([undefined]) ?? "", "output[0] is undefined")
  })
})

layer(TestDatabase.layer({ pollingInterval: "50 millis", retryBackoff: "100 millis", maxRetries: 1 }), {
  excludeTestServices: true
})("first hour", (it) => {
  it.effect("a registered job's queue that no capsule reads is served by default, and the boot says so", () =>
    Effect.gen(function* () {
      const queue = unique("mailers")
      const ran: Array<string> = []
      const job = Job.make("Unplaced", { payload: Schema.Struct({ id: Schema.String }), queue }, ({ id }) =>
        Effect.sync(() => ran.push(id))
      )
      const logs = capture()
      yield* job.enqueue({ id: "a" })
      yield* startSupervisor([job], { capsules: [{ name: "other", queues: [unique("other")], concurrency: 1 }] }).pipe(
        Effect.provide(logs.layer)
      )
      yield* eventually(
        "the job ran",
        Effect.sync(() => ran.length === 1)
      )
      const boot = logs.lines.find((l) => l.message.includes(`uses queue ${queue}`))
      assert.isDefined(boot)
      assert.include(boot!.message, "job Unplaced")
      assert.include(boot!.message, `serving it in capsule ${queue}`)
    }).pipe(Effect.scoped)
  )

  it.effect("with unservedQueues=fail the boot fails naming the job and its queue", () =>
    Effect.gen(function* () {
      const queue = unique("reports")
      const job = Job.make("Nightly", { payload: Schema.Struct({}), queue }, () => Effect.void)
      const config = yield* PgBusConfig
      const exit = yield* Supervisor.runWith({ capsules: [{ name: "c", queues: ["default"], concurrency: 1 }] }).pipe(
        Effect.provide(Registry.layer([job])),
        Effect.provideService(PgBusConfig, { ...config, unservedQueues: "fail" }),
        Effect.exit
      )
      assert.isTrue(Exit.isFailure(exit))
      const text = String(Exit.isFailure(exit) ? exit.cause : "")
      assert.include(text, "ConfigurationError")
      assert.include(text, `job Nightly uses queue ${queue}`)
      assert.include(text, "PGBUS_WORKERS")
    })
  )

  it.effect("a job payload Schema that does not encode to JSON fails the enqueue, not every delivery", () =>
    Effect.gen(function* () {
      const job = Job.make(
        "Stamped",
        { payload: Schema.Struct({ at: Schema.Date }), queue: unique("stamped") },
        () => Effect.void
      )
      const error = yield* job.enqueue({ at: new Date(0) }).pipe(Effect.flip)
      assert.strictEqual(error._tag, "InvalidPayload")
      assert.include(error.message, "payload.at is a Date")
      assert.include(error.message, "Schema.DateFromString")
      const many = yield* job.enqueueMany([{ at: new Date(0) }]).pipe(Effect.flip)
      assert.strictEqual(many._tag, "InvalidPayload")
    })
  )

  it.effect("a first step's wait counts from the start, not from the claim that reached it", () =>
    Effect.gen(function* () {
      const Later = Workflow.make(
        unique("Later"),
        { payload: Schema.Struct({}), queue: unique("later") },
        function* () {
          yield* Workflow.step("first", Effect.void, { wait: "3 seconds" })
          yield* Workflow.step("second", Effect.void, { wait: "3 seconds" })
        }
      )
      const client = yield* WorkflowClient
      const run = yield* Later.start({})
      // no worker for a second and a half: the claim that reaches the first step comes late
      yield* Effect.sleep("1500 millis")
      yield* startSupervisor([Later])
      yield* eventually(
        "the first step is scheduled",
        Effect.map(client.steps(run.id), (steps) => steps.length > 0),
        "20 seconds"
      )
      const [first] = yield* client.steps(run.id)
      const createdAt = (yield* client.get(run.id)).info.createdAt
      assert.strictEqual(first!.name, "first")
      assert.strictEqual(first!.dueAt.getTime() - createdAt.getTime(), 3000, "due three seconds after the start")
      assert.isAbove(first!.scheduledAt.getTime() - createdAt.getTime(), 1000, "scheduled by the late claim")
      // a later step's wait counts from the step before it
      yield* eventually(
        "the second step is scheduled",
        Effect.map(client.steps(run.id), (steps) => steps.some((s) => s.name === "second")),
        "20 seconds"
      )
      const second = (yield* client.steps(run.id)).find((s) => s.name === "second")!
      assert.isAtLeast(second.dueAt.getTime() - second.scheduledAt.getTime(), 2999)
    }).pipe(Effect.scoped)
  )

  it.effect("two unnamed subscribers of one pattern fail the registry saying to name them; named, they are two", () =>
    Effect.gen(function* () {
      const pattern = `${unique("orders")}.created`
      const a = EventBus.subscribe(pattern, () => Effect.void)
      const b = EventBus.subscribe(pattern, () => Effect.void)
      const error = yield* Layer.build(Registry.layer([a, b])).pipe(Effect.scoped, Effect.flip)
      assert.strictEqual(error._tag, "InvalidSubscriberDefinition")
      assert.include(error.message, `named by its pattern (${pattern})`)
      assert.include(error.message, "give each a `name`")
      const named = [
        EventBus.subscribe(pattern, () => Effect.void, { name: `${pattern}-audit` }),
        EventBus.subscribe(pattern, () => Effect.void, { name: `${pattern}-mail` })
      ]
      const registry = yield* Layer.build(Registry.layer(named)).pipe(Effect.map(Context.get(Registry)))
      assert.lengthOf(registry.events?.consumers ?? [], 2)
    }).pipe(Effect.scoped)
  )

  it.effect("every line a job logs, and its retry line, names the job, the queue and the attempt", () =>
    Effect.gen(function* () {
      const queue = unique("logged")
      const job = Job.make("Chatty", { payload: Schema.Struct({}), queue, retry: { maxRetries: 2 } }, (_, ctx) =>
        ctx.attempt === 1 ? Effect.andThen(Effect.logInfo("first try"), Effect.fail("flaky")) : Effect.logInfo("done")
      )
      const logs = capture()
      yield* job.enqueue({})
      yield* startSupervisor([job]).pipe(Effect.provide(logs.layer))
      yield* eventually(
        "the second attempt logged",
        Effect.sync(() => logs.lines.some((l) => l.message === "done"))
      )
      for (const [message, attempt] of [
        ["first try", 1],
        ["done", 2]
      ] as const) {
        const line = logs.lines.find((l) => l.message === message)!
        assert.deepInclude(line.annotations, { job: "Chatty", queue, attempt })
      }
      const retry = logs.lines.find((l) => l.message.includes("job failed (attempt 1)"))!
      assert.deepInclude(retry.annotations, { job: "Chatty", queue, attempt: 1 })
    }).pipe(Effect.scoped)
  )

  it.effect(
    "a step returning a Date without an output Schema fails with OutputNotJson; with Schema.DateFromString it replays",
    () =>
      Effect.gen(function* () {
        const name = unique("Dated")
        const Bare = Workflow.make(name, { payload: Schema.Struct({}) }, function* () {
          // @ts-expect-error the types ask for an output Schema for a Date; untyped code gets the run-time check
          const at: Date = yield* Workflow.step("stamp", Effect.succeed(new Date(0)))
          return at.toISOString()
        })
        const Typed = Workflow.make(`${name}_typed`, { payload: Schema.Struct({}) }, function* () {
          const at = yield* Workflow.step("stamp", Effect.succeed(new Date(0)), { output: Schema.DateFromString })
          return at.toISOString()
        })
        // Schema.Date encodes to a Date: not JSON either
        const Wrong = Workflow.make(`${name}_wrong`, { payload: Schema.Struct({}) }, function* () {
          const at = yield* Workflow.step("stamp", Effect.succeed(new Date(0)), { output: Schema.Date })
          return at.toISOString()
        })
        const client = yield* WorkflowClient
        const bare = yield* Bare.start({})
        const typed = yield* Typed.start({})
        const wrong = yield* Wrong.start({})
        const [bareStatus, typedStatus, wrongStatus] = yield* Effect.all([
          speedrun(bare.id),
          speedrun(typed.id),
          speedrun(wrong.id)
        ]).pipe(Effect.provide(Registry.layer([Bare, Typed, Wrong])))
        assert.notStrictEqual(wrongStatus, "finished")
        const wrongStep = (yield* client.steps(wrong.id)).find((s) => s.error !== undefined)
        assert.include(JSON.stringify(wrongStep?.error), "encoded output is a Date")
        assert.strictEqual(typedStatus, "finished")
        assert.strictEqual((yield* client.get(typed.id)).info.output, "1970-01-01T00:00:00.000Z")
        assert.notStrictEqual(bareStatus, "finished")
        const steps = yield* client.steps(bare.id)
        const failed = steps.find((s) => s.name === "stamp" && s.error !== undefined)
        assert.isDefined(failed)
        const error = JSON.stringify(failed!.error)
        assert.include(error, "OutputNotJson")
        assert.include(error, "output is a Date")
        assert.include(error, "declare a step output Schema that encodes to JSON")
      })
  )
})

describe("connection errors", () => {
  it.effect("a server that does not answer, an unknown role, a missing database: the error says what to check", () =>
    Effect.gen(function* () {
      const fails = (databaseUrl: string) =>
        PgBus.migrate.pipe(
          Effect.provide(PgBus.layerFrom(PgBusConfig.layerWithoutEnvironment({ databaseUrl }))),
          Effect.flip,
          Effect.map((e) => e.message)
        )
      const server = new URL(urlFor("postgres"))
      const refused = yield* fails("postgres://postgres@127.0.0.1:1/postgres")
      assert.include(refused, "ECONNREFUSED")
      assert.include(refused, "DATABASE_URL")
      server.username = "nobody_at_all"
      assert.include(yield* fails(server.toString()), "check the user and password in DATABASE_URL")
      server.username = "postgres"
      server.pathname = "/no_such_database_here"
      assert.include(yield* fails(server.toString()), "create the database (createdb)")
    })
  )
})

describe("migrations", () => {
  it.effect(
    "on a database nobody migrated: the supervisor fails saying how to migrate; migrate: true migrates",
    () =>
      Effect.gen(function* () {
        const name = yield* TestDatabase.emptyDatabase
        const config = { databaseUrl: urlFor(name) }
        const job = Job.make("OnFresh", { payload: Schema.Struct({}) }, () => Effect.void)
        // enqueueing names the cure too
        const enqueue = yield* job
          .enqueue({})
          .pipe(Effect.provide(PgBus.layerFrom(PgBusConfig.layerWithoutEnvironment(config))), Effect.flip)
        assert.include(enqueue.message, "PgBus.layer({ migrate: true })")
        const boot = yield* Supervisor.run.pipe(
          Effect.provide(Registry.layer([job])),
          Effect.provide(PgBus.layerFrom(PgBusConfig.layerWithoutEnvironment(config))),
          Effect.flip
        )
        assert.instanceOf(boot, MigrationError)
        assert.strictEqual((boot as MigrationError).reason, "not_migrated")
        assert.include(boot.message, "npx pgbus migrate")
        // migrate: true applies them as the layer is built
        const queues = yield* Effect.gen(function* () {
          yield* JobClient.use((c) => c.ensureQueue("default"))
          return yield* QueueStore.use((s) => s.list)
        }).pipe(
          Effect.provide(PgBus.layerFrom(PgBusConfig.layerWithoutEnvironment({ ...config, migrate: true }))),
          Effect.orDie
        )
        assert.isTrue(queues.some((q) => q.name === "default"))
      }).pipe(Effect.scoped),
    30_000
  )
})
