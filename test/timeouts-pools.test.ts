/**
 * Timeouts and pools: the statement timeout and TCP keepalive every pooled connection gets, the
 * pool size derived from the capsules (and the boot refusal of a set pool that is too small), the
 * pool gauges' census of this process's connections, and zombie detection.
 */
import { execFile } from "node:child_process"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Logger, Ref, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { registry as example } from "../packages/example/src/app.ts"
import { effectivePoolSize, resolve } from "../src/Config.ts"
import { targetOf } from "../src/Connection.ts"
import { pipelinedClient } from "../src/Database.ts"
import { census } from "../src/internal/PoolCensus.ts"
import * as Job from "../src/Job/Job.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import * as Supervisor from "../src/Supervisor/Supervisor.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { withCapturedLogs } from "./support/logs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

/** The local ports of this process's established TCP connections to `port`, with their timers (`ss -o`). */
const socketTimers = (port: number) =>
  Effect.promise(
    () =>
      new Promise<string>((done, fail) =>
        execFile("ss", ["-tnop", "state", "established", `( dport = :${port} )`], (error, stdout) =>
          error ? fail(error) : done(stdout)
        )
      )
  ).pipe(Effect.map((text) => text.split("\n").filter((line) => line.includes(`pid=${process.pid},`))))

describe("statement timeout and keepalive", () => {
  it.live("the server cancels a statement that outruns statementTimeout; `none` sends no timeout", () =>
    Effect.gen(function* () {
      const outcome = yield* TestDatabase.onFreshDatabase({ statementTimeout: "1 second" }, () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const [shown] = yield* sql<{ readonly statement_timeout: string }>`SHOW statement_timeout`
          const slow = yield* Effect.exit(sql`SELECT pg_sleep(3)`)
          const after = yield* sql<{ readonly one: number }>`SELECT 1 AS one`
          return { shown: shown?.statement_timeout, slow, after: after[0]?.one }
        })
      )
      assert.strictEqual(outcome.shown, "1s")
      assert.isTrue(Exit.isFailure(outcome.slow))
      if (Exit.isFailure(outcome.slow)) assert.include(Cause.pretty(outcome.slow.cause), "StatementTimeout")
      // the connection is still good after the cancel
      assert.strictEqual(outcome.after, 1)

      const off = yield* TestDatabase.onFreshDatabase({ statementTimeout: null }, () =>
        Effect.flatMap(
          SqlClient.SqlClient,
          (sql) => sql<{ readonly statement_timeout: string }>`SHOW statement_timeout`
        )
      )
      assert.strictEqual(off[0]?.statement_timeout, "0")
    })
  )

  it.live("every pooled connection has TCP keepalive on, after tcpKeepAlive idle", () =>
    TestDatabase.onFreshDatabase({ tcpKeepAlive: "45 seconds", listenNotify: false }, (url) =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        // three connections at once, held by three transactions
        yield* Effect.all(
          [1, 2, 3].map(() => sql.withTransaction(sql`SELECT pg_sleep(0.3)`)),
          { concurrency: "unbounded" }
        )
        const lines = yield* socketTimers(targetOf(url).port)
        assert.isAtLeast(lines.length, 3, lines.join("\n"))
        for (const line of lines) assert.include(line, "timer:(keepalive", line)
      })
    )
  )
})

describe("pool size", () => {
  it.effect(
    "is derived from the capsules when unset (their concurrency + 3 + 5 for a served capsule, 10 at least); a set size wins",
    () =>
      Effect.gen(function* () {
        const derived = yield* resolve({ workers: "a, b: 20; c: 4; d" })
        // "a, b: 20" is one capsule of two queues
        assert.strictEqual(effectivePoolSize(derived), 20 + 4 + 5 + 3 + 5)
        assert.strictEqual(effectivePoolSize(yield* resolve({ workers: "a: 2" })), 10)
        assert.strictEqual(effectivePoolSize(yield* resolve({ workers: "a: 50", poolSize: 60 })), 60)
      })
  )

  it.live("the example's configuration (a queue the supervisor serves itself) boots without a warning", () => {
    const lines: Array<{ readonly level: string; readonly message: string }> = []
    const capture = Logger.make(({ logLevel, message }) => {
      lines.push({ level: logLevel, message: (Array.isArray(message) ? message : [message]).map(String).join(" ") })
    })
    // the example's own registry and workers (packages/example/src/main.ts): SendWelcome's queue,
    // mailers, is in no capsule of "default: 5", so the supervisor serves it in one of its own
    return TestDatabase.onFreshDatabase({ workers: "default: 5" }, () =>
      Effect.gen(function* () {
        yield* Effect.forkScoped(
          Effect.flatMap(Logger.CurrentLoggers, (loggers) =>
            Supervisor.runWith().pipe(
              Effect.provide(example),
              Effect.provideService(Logger.CurrentLoggers, new Set([...loggers, capture]))
            )
          )
        )
        yield* eventually(
          "the boot banner",
          Effect.sync(() => lines.some((l) => l.message.includes("boot: capsule=mailers")))
        )
        const warnings = lines.filter((l) => l.level === "Warn" || l.level === "Error")
        assert.deepStrictEqual(warnings, [], lines.map((l) => l.message).join("\n"))
        // default 5 + mailers 5, the process's 3: within the derived 13
        assert.isTrue(
          lines.some((l) => l.message.includes("pool=13 (derived)")),
          lines.map((l) => l.message).join("\n")
        )
      }).pipe(Effect.scoped)
    )
  })

  it.live("a set pool smaller than the capsules need fails the boot, naming both numbers, and logs it", () =>
    TestDatabase.onFreshDatabase({ poolSize: 6, workers: "small_pool: 8" }, () =>
      Effect.gen(function* () {
        const lines: Array<string> = []
        const exit = yield* withCapturedLogs(
          lines,
          Supervisor.runWith().pipe(Effect.provide(Registry.layer([])), Effect.exit)
        )
        assert.isTrue(Exit.isFailure(exit))
        const text = Exit.isFailure(exit) ? Cause.pretty(exit.cause) : ""
        assert.include(text, "poolSize")
        assert.include(text, "11 in all, the pool has 6")
        // a supervisor forked and never joined would otherwise fail unseen
        const logged = lines.filter((l) => l.includes("[pgbus] the supervisor stopped on a failure"))
        assert.strictEqual(logged.length, 1, lines.join("\n"))
        assert.include(logged[0], "11 in all, the pool has 6")
      })
    )
  )
})

describe("pool gauges", () => {
  it.live("count this process's open connections and those in use (in a transaction) now", () =>
    TestDatabase.onFreshDatabase({ listenNotify: false }, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* sql`SELECT 1`
        assert.isAtLeast(census().open, 1)
        const before = census().inUse
        const holding = yield* Effect.forkChild(
          Effect.all(
            [1, 2].map(() => sql.withTransaction(Effect.andThen(sql`SELECT 1`, Effect.sleep("2 seconds")))),
            { concurrency: "unbounded" }
          )
        )
        yield* eventually(
          "two connections in use",
          Effect.sync(() => census().inUse >= before + 2)
        )
        yield* Fiber.join(holding)
        yield* eventually(
          "the connections idle again",
          Effect.sync(() => census().inUse <= before)
        )
      })
    )
  )

  it.live("a pipelined connection stays in use until its last statement is answered, not its first", () =>
    TestDatabase.onFreshDatabase({ listenNotify: false }, () =>
      Effect.scoped(
        Effect.gen(function* () {
          const client = yield* pipelinedClient("census pipelined")
          // a result of 5 MB, read in many chunks: the census reads the messages across them
          yield* client`SELECT repeat('x', 1000) AS x FROM generate_series(1, 5000)`
          const before = census().inUse
          const backend = (seconds: number) =>
            Effect.map(
              client<{ readonly pid: number }>`SELECT pg_backend_pid() AS pid, pg_sleep(${seconds})::text AS slept`,
              (rows) => rows[0]?.pid
            )
          const short = yield* Effect.forkChild(backend(0.2))
          const long = yield* Effect.forkChild(backend(2))
          const first = yield* Fiber.join(short)
          // the second statement still runs, on the same backend: the connection is in use
          assert.isAtLeast(census().inUse, before + 1)
          assert.strictEqual(yield* Fiber.join(long), first)
          yield* eventually(
            "the connection idle again",
            Effect.sync(() => census().inUse <= before)
          )
        })
      )
    )
  )
})

describe("zombie detection", () => {
  const Payload = Schema.Struct({ n: Schema.Number })

  it.live("a message delivered again with no failure recorded is logged; a retry after a failure is not", () => {
    const lines: Array<string> = []
    return withCapturedLogs(
      lines,
      TestDatabase.onFreshDatabase({ workers: "zombies: 2", pollingInterval: "50 millis" }, () =>
        Effect.gen(function* () {
          const ran = yield* Ref.make<ReadonlyArray<number>>([])
          const failedOnce = yield* Ref.make(false)
          const Work = Job.make(
            "ZombieWork",
            { payload: Payload, queue: "zombies", retry: { backoff: "10 millis", jitter: 0 } },
            ({ n }) =>
              Effect.gen(function* () {
                if (n === 2 && !(yield* Ref.getAndSet(failedOnce, true))) return yield* Effect.fail("first try fails")
                yield* Ref.update(ran, (r) => [...r, n])
              })
          )
          const store = yield* QueueStore
          yield* Work.enqueue({ n: 1 })
          // a process that claimed it and died: the claim lapses with no outcome recorded
          const [claimed] = yield* store.read("zombies", { visibilityTimeout: "300 millis" })
          assert.isDefined(claimed)
          yield* Effect.sleep("400 millis")
          yield* Work.enqueue({ n: 2 })
          yield* startSupervisor([Work])
          yield* eventually(
            "both jobs ran",
            Effect.map(Ref.get(ran), (r) => r.length === 2),
            "20 seconds"
          )
          const zombies = lines.filter((l) => l.includes("delivered again"))
          assert.strictEqual(zombies.length, 1, zombies.join("\n"))
          assert.include(zombies[0]!, "ZombieWork delivered again (read 2 times) with no failure recorded")
        })
      )
    )
  })
})
