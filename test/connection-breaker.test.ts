/**
 * The connection breaker: the database of the test's own is stopped for about 20 s under a
 * running supervisor. One line when the breaker opens, one when it closes; readiness says
 * DEGRADED with the database unreachable meanwhile; no job is lost or run twice; work resumes
 * within 5 s of the server's return.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Logger, Ref, Schema } from "effect"
import { PgBusConfig } from "../src/Config.ts"
import { targetOf } from "../src/Connection.ts"
import { breakerFor, TRIP_AFTER } from "../src/internal/ConnectionBreaker.ts"
import * as Job from "../src/Job/Job.ts"
import * as PgBus from "../src/PgBus.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { gateReads, isBreakerOpen } from "../src/Supervisor/ConnectionWatch.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { ownServer } from "./support/ownServer.ts"
import { freePort } from "./support/ports.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

/** Log lines written while `effect` runs (its fibers included). */
const withCapturedLogs = <A, E, R>(lines: Array<string>, effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(Logger.CurrentLoggers, (current) => {
    const capture = Logger.make(({ message }) => {
      lines.push((Array.isArray(message) ? message : [message]).map(String).join(" "))
    })
    return Effect.provideService(effect, Logger.CurrentLoggers, new Set([...current, capture]))
  })

const readyz = (port: number) =>
  Effect.promise(() =>
    fetch(`http://127.0.0.1:${port}/readyz`).then(async (r) => ({
      status: r.status,
      body: (await r.json()) as { readonly status: string; readonly database?: string }
    }))
  )

describe("connection breaker", () => {
  it("opens after 5 failed connection attempts in a row, closes at the first success, probes 1 s doubling to 60 s", () => {
    const breaker = breakerFor(`unit-test:${Math.random()}`)
    for (let i = 0; i < 4; i++) breaker.failed()
    assert.isFalse(breaker.isOpen())
    breaker.succeeded()
    for (let i = 0; i < 4; i++) breaker.failed()
    assert.isFalse(breaker.isOpen(), "a success in between starts the count again")
    breaker.failed()
    assert.isTrue(breaker.isOpen())
    const first = breaker.nextProbeAt()! - breaker.openedAt()!
    assert.strictEqual(first, 1_000)
    assert.isFalse(breaker.takeProbe(), "no probe before its time")
    breaker.succeeded()
    assert.isFalse(breaker.isOpen())
    assert.deepStrictEqual(
      breaker.takeChanges().map((c) => c._tag),
      ["Opened", "Closed"]
    )
  })

  it.live("a failed probe opens it again for twice as long", () =>
    Effect.gen(function* () {
      const breaker = breakerFor(`unit-test:${Math.random()}`)
      for (let i = 0; i < TRIP_AFTER; i++) breaker.failed()
      yield* Effect.sleep("1100 millis")
      assert.isTrue(breaker.takeProbe())
      assert.isFalse(breaker.takeProbe(), "one probe at a time")
      const before = Date.now()
      breaker.failed()
      const delay = breaker.nextProbeAt()! - before
      assert.isAtLeast(delay, 1_990)
      assert.isAtMost(delay, 2_100)
      assert.isTrue(breaker.isOpen())
      breaker.succeeded()
      assert.isFalse(breaker.isOpen())
      assert.deepStrictEqual(
        breaker.takeChanges().map((c) => c._tag),
        ["Opened", "Closed"],
        "a re-open is no new line"
      )
    })
  )

  it.live("while it is open, workers' reads fail at once without a connection; other operations go on", () =>
    TestDatabase.onFreshDatabase({}, (url) =>
      Effect.gen(function* () {
        const config = yield* PgBusConfig
        const store = yield* QueueStore
        const gated = gateReads(store, config)
        yield* store.create("gated")
        yield* store.send("gated", { n: 1 })
        const target = targetOf(url)
        const breaker = breakerFor(`${target.host}:${target.port}`)
        for (let i = 0; i < TRIP_AFTER; i++) breaker.failed()
        assert.isTrue(breaker.isOpen())
        const refused = yield* Effect.flip(gated.read("gated"))
        assert.isTrue(isBreakerOpen(refused), String(refused))
        // the send and the depth go to the database as usual (enqueues are never refused)
        yield* store.send("gated", { n: 2 })
        breaker.succeeded()
        const claimed = yield* gated.read("gated", { limit: 10 })
        assert.strictEqual(claimed.length, 2)
      })
    )
  )

  it.live(
    "the database stopped for 20 s: one open and one close line, readiness DEGRADED meanwhile, nothing lost, work resumes within 5 s",
    () => {
      const lines: Array<string> = []
      return withCapturedLogs(
        lines,
        Effect.gen(function* () {
          const server = yield* ownServer
          const healthPort = yield* freePort
          const config = PgBusConfig.layerWithoutEnvironment({
            databaseUrl: server.url,
            migrate: true,
            workers: "outage: 3",
            pollingInterval: "100 millis",
            healthPort
          })
          const ran = yield* Ref.make<ReadonlyArray<number>>([])
          const Tick = Job.make(
            "OutageTick",
            { payload: Schema.Struct({ n: Schema.Number }), queue: "outage" },
            ({ n }) => Ref.update(ran, (r) => [...r, n])
          )
          yield* Effect.gen(function* () {
            yield* startSupervisor([Tick])
            yield* Effect.forEach([0, 1, 2, 3, 4], (n) => Tick.enqueue({ n }), { discard: true })
            // due while the server is down: they wait in the queue
            yield* Effect.forEach([5, 6, 7, 8, 9], (n) => Tick.enqueue({ n }, { delay: "2 seconds" }), {
              discard: true
            })
            yield* eventually(
              "the first five ran",
              Effect.map(Ref.get(ran), (r) => r.length === 5)
            )
            yield* eventually(
              "ready",
              Effect.map(readyz(healthPort), (r) => r.body.status === "OK")
            )

            yield* server.stop
            yield* eventually(
              "the breaker opened",
              Effect.sync(() => lines.some((l) => l.includes("connection breaker open"))),
              "15 seconds"
            )
            const down = yield* readyz(healthPort)
            assert.deepStrictEqual(
              [down.status, down.body.status, down.body.database],
              [503, "DEGRADED", "unreachable"]
            )
            yield* Effect.sleep("20 seconds")
            yield* server.start
            const back = Date.now()
            yield* eventually(
              "the jobs due during the outage ran",
              Effect.map(Ref.get(ran), (r) => r.length === 10),
              "5 seconds"
            )
            yield* Tick.enqueue({ n: 10 })
            yield* eventually(
              "a job enqueued after the return ran",
              Effect.map(Ref.get(ran), (r) => r.length === 11),
              "5 seconds"
            )
            const resumedMs = Date.now() - back
            assert.isBelow(resumedMs, 10_000)
            yield* eventually(
              "ready again",
              Effect.map(readyz(healthPort), (r) => r.body.status === "OK")
            )
            assert.deepStrictEqual(
              [...(yield* Ref.get(ran))].sort((a, b) => a - b),
              Array.from({ length: 11 }, (_, i) => i),
              "every job ran exactly once"
            )
            assert.strictEqual(lines.filter((l) => l.includes("connection breaker open")).length, 1)
            assert.strictEqual(lines.filter((l) => l.includes("connection breaker closed")).length, 1)
            // the workers' reads were refused without a line each (one in flight as it opened may log)
            const opened = lines.findIndex((l) => l.includes("connection breaker open"))
            assert.isAtMost(lines.slice(opened).filter((l) => l.includes("worker read failed")).length, 1)
          }).pipe(Effect.provide(PgBus.layerFrom(config).pipe(Layer.orDie)), Effect.scoped)
        }).pipe(Effect.scoped)
      )
    },
    120_000
  )
})
