/**
 * The per-queue circuit breaker: a queue whose jobs keep failing pauses itself for every
 * process, resumes after its backoff (doubled at the next trip in a row), an exempt queue never
 * pauses; and an operator's pause stops every process reading the queue within a second.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Logger, Ref, Schema } from "effect"
import * as Job from "../src/Job/Job.ts"
import { QueueStates } from "../src/Queue/QueueStates.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ n: Schema.Number })

/** Log lines written while `effect` runs (its fibers included). */
const withCapturedLogs = <A, E, R>(lines: Array<string>, effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(Logger.CurrentLoggers, (current) => {
    const capture = Logger.make(({ message }) => {
      lines.push((Array.isArray(message) ? message : [message]).map(String).join(" "))
    })
    return Effect.provideService(effect, Logger.CurrentLoggers, new Set([...current, capture]))
  })

const stateOf = (queue: string) =>
  Effect.flatMap(QueueStates, (s) => Effect.map(s.list, (all) => all.find((q) => q.queue === queue)))

describe("per-queue circuit breaker", () => {
  it.live(
    "after 3 failures in a row the queue pauses for 2 s, resumes by itself, and the next trip in a row pauses 4 s",
    () => {
      const lines: Array<string> = []
      return withCapturedLogs(
        lines,
        TestDatabase.onFreshDatabase(
          {
            workers: "brk: 1",
            pollingInterval: "50 millis",
            circuitBreakerThreshold: 3,
            circuitBreakerBackoff: "2 seconds",
            circuitBreakerBackoffMax: "1 minute"
          },
          () =>
            Effect.gen(function* () {
              const ok = yield* Ref.make<ReadonlyArray<number>>([])
              const Broken = Job.make(
                "BreakerBroken",
                { payload: Payload, queue: "brk", retry: { maxRetries: 1 } },
                () => Effect.fail("the dependency is down")
              )
              const Fine = Job.make("BreakerFine", { payload: Payload, queue: "brk" }, ({ n }) =>
                Ref.update(ok, (o) => [...o, n])
              )
              yield* startSupervisor([Broken, Fine])
              yield* Effect.forEach([1, 2, 3], (n) => Broken.enqueue({ n }), { discard: true })
              yield* eventually(
                "the queue paused by the breaker",
                Effect.map(stateOf("brk"), (s) => s?.paused === true)
              )
              const first = (yield* stateOf("brk"))!
              assert.strictEqual(first.actor, "circuit-breaker")
              assert.strictEqual(first.breakerTrips, 1)
              assert.strictEqual(first.pausedUntil!.getTime() - first.pausedAt!.getTime(), 2_000)
              // the trip is logged once its pause is written: the line may follow the row by a moment
              yield* eventually(
                "the trip logged",
                Effect.sync(() => lines.filter((l) => l.includes("circuit breaker paused queue brk")).length === 1)
              )

              // held while paused, run after the backoff
              yield* Fine.enqueue({ n: 1 })
              yield* Effect.sleep("500 millis")
              const pausedUntil = first.pausedUntil!.getTime()
              if (Date.now() < pausedUntil - 200) assert.deepStrictEqual(yield* Ref.get(ok), [])
              yield* eventually(
                "the job ran after the pause ended",
                Effect.map(Ref.get(ok), (o) => o.length === 1),
                "10 seconds"
              )
              assert.isAtLeast(Date.now(), pausedUntil - 50)

              // failing again right after: the second trip in a row pauses twice as long
              yield* Effect.forEach([4, 5, 6], (n) => Broken.enqueue({ n }), { discard: true })
              yield* eventually(
                "paused again",
                Effect.map(stateOf("brk"), (s) => s?.paused === true && s.breakerTrips === 2)
              )
              const second = (yield* stateOf("brk"))!
              assert.strictEqual(second.pausedUntil!.getTime() - second.pausedAt!.getTime(), 4_000)
              yield* eventually(
                "the second trip logged",
                Effect.sync(() => lines.filter((l) => l.includes("circuit breaker paused queue brk")).length === 2)
              )
              yield* Effect.sleep("100 millis")
              assert.strictEqual(lines.filter((l) => l.includes("circuit breaker paused queue brk")).length, 2)
            })
        )
      )
    },
    60_000
  )

  it.live("successes between failures keep it closed; an exempt queue never pauses", () =>
    TestDatabase.onFreshDatabase(
      {
        workers: "mixed: 1; exempt: 1",
        pollingInterval: "50 millis",
        circuitBreakerThreshold: 3,
        circuitBreakerExempt: "exempt"
      },
      () =>
        Effect.gen(function* () {
          const done = yield* Ref.make(0)
          const Flaky = Job.make(
            "BreakerFlaky",
            { payload: Payload, queue: "mixed", retry: { maxRetries: 1 } },
            ({ n }) => (n % 3 === 2 ? Effect.fail("every third fails") : Ref.update(done, (d) => d + 1))
          )
          const Exempt = Job.make(
            "BreakerExempt",
            { payload: Payload, queue: "exempt", retry: { maxRetries: 1 } },
            () =>
              Effect.andThen(
                Ref.update(done, (d) => d + 1),
                Effect.fail("always")
              )
          )
          yield* startSupervisor([Flaky, Exempt])
          yield* Effect.forEach(
            Array.from({ length: 9 }, (_, n) => n),
            (n) => Flaky.enqueue({ n }),
            { discard: true }
          )
          yield* Effect.forEach([1, 2, 3, 4, 5], (n) => Exempt.enqueue({ n }), { discard: true })
          yield* eventually(
            "every job ran",
            Effect.map(Ref.get(done), (d) => d === 6 + 5),
            "20 seconds"
          )
          assert.isUndefined((yield* stateOf("mixed"))?.pausedAt)
          assert.isUndefined((yield* stateOf("exempt"))?.pausedAt)
        })
    )
  )

  it.live(
    "a pause gives the read-ahead back at once, unread; the running job finishes; resume runs the rest, each once as its first delivery",
    () =>
      TestDatabase.onFreshDatabase({ pollingInterval: "50 millis" }, () =>
        Effect.gen(function* () {
          const store = yield* QueueStore
          const states = yield* QueueStates
          const attempts = yield* Ref.make<ReadonlyArray<readonly [number, number]>>([])
          const Slow = Job.make("PauseSlow", { payload: Payload, queue: "held" }, ({ n }, { attempt }) =>
            Ref.update(attempts, (a) => [...a, [n, attempt] as const]).pipe(Effect.andThen(Effect.sleep("400 millis")))
          )
          yield* store.create("held")
          yield* startSupervisor([Slow], {
            capsules: [{ name: "c", queues: ["held"], concurrency: 1, readAhead: 5 }]
          })
          yield* Slow.enqueueMany(Array.from({ length: 10 }, (_, n) => ({ n })))
          yield* eventually(
            "one running, five read ahead",
            Effect.map(store.metrics("held"), (m) => m.visible === 4)
          )
          yield* states.pause("held", { actor: "ops", reason: "the dependency is down" })
          // the running job ends; its executor finds the next buffered message's queue paused
          yield* eventually(
            "the read-ahead given back",
            Effect.map(store.metrics("held"), (m) => m.visible + m.archiveSize === 10 && m.visible >= 8),
            "3 seconds"
          )
          const ranWhilePaused = (yield* Ref.get(attempts)).length
          assert.isAtMost(ranWhilePaused, 2, "only what ran before the pause was seen")
          assert.deepStrictEqual(
            (yield* store.browse("held")).map((m) => m.readCt),
            Array.from({ length: 10 - ranWhilePaused }, () => 0),
            "given back as if unread"
          )
          yield* Effect.sleep("1 second")
          assert.strictEqual((yield* Ref.get(attempts)).length, ranWhilePaused, "nothing ran while paused")
          yield* states.resume("held", { actor: "ops" })
          yield* eventually(
            "every job ran after the resume",
            Effect.map(Ref.get(attempts), (a) => a.length === 10),
            "15 seconds"
          )
          const ran = yield* Ref.get(attempts)
          assert.deepStrictEqual(
            ran.map(([n]) => n).sort((a, b) => a - b),
            Array.from({ length: 10 }, (_, n) => n),
            "each job once"
          )
          assert.deepStrictEqual(
            ran.map(([, attempt]) => attempt),
            Array.from({ length: 10 }, () => 1),
            "each as its first delivery: no retry spent"
          )
        })
      ),
    30_000
  )

  it.live(
    "a pause of one of a capsule's queues gives back that queue's read-ahead only: the other's runs on, in order",
    () =>
      TestDatabase.onFreshDatabase({ pollingInterval: "50 millis" }, () =>
        Effect.gen(function* () {
          const store = yield* QueueStore
          const states = yield* QueueStates
          const ran = yield* Ref.make<ReadonlyArray<string>>([])
          const record = (what: string, ms: number) =>
            Ref.update(ran, (r) => [...r, what]).pipe(Effect.andThen(Effect.sleep(ms)))
          const First = Job.make("PausedFirst", { payload: Payload, queue: "pa" }, ({ n }, { attempt }) =>
            record(`pa${n}#${attempt}`, 1_500)
          )
          const Second = Job.make("PausedSecond", { payload: Payload, queue: "pb" }, ({ n }, { attempt }) =>
            record(`pb${n}#${attempt}`, 20)
          )
          yield* store.create("pa")
          yield* store.create("pb")
          yield* First.enqueueMany([{ n: 0 }, { n: 1 }, { n: 2 }])
          yield* Second.enqueueMany([{ n: 0 }, { n: 1 }, { n: 2 }, { n: 3 }])
          // one claim takes all seven: pa's first (the capsule's order), then pb's
          yield* startSupervisor([First, Second], {
            capsules: [{ name: "c", queues: ["pa", "pb"], concurrency: 1, readAhead: 6 }]
          })
          yield* eventually(
            "pa0 running",
            Effect.map(Ref.get(ran), (r) => r.length === 1)
          )
          // the supervisor sees it at its next refresh of the paused set (twice a second), while pa0 runs
          yield* states.pause("pa", { actor: "ops", reason: "its dependency is down" })
          yield* eventually(
            "pb's jobs ran while pa is paused",
            Effect.map(Ref.get(ran), (r) => r.filter((x) => x.startsWith("pb")).length === 4),
            "5 seconds"
          )
          const whilePaused = yield* Ref.get(ran)
          assert.deepStrictEqual(
            whilePaused.filter((x) => x.startsWith("pb")),
            ["pb0#1", "pb1#1", "pb2#1", "pb3#1"],
            "in order, each once"
          )
          assert.deepStrictEqual(
            whilePaused.filter((x) => x.startsWith("pa")),
            ["pa0#1"],
            "pa's read-ahead did not run"
          )
          assert.deepStrictEqual(
            (yield* store.browse("pa")).map((m) => m.readCt),
            [0, 0],
            "given back as if unread"
          )
          yield* states.resume("pa", { actor: "ops" })
          yield* eventually(
            "pa's jobs ran after the resume",
            Effect.map(Ref.get(ran), (r) => r.length === 7),
            "10 seconds"
          )
          assert.deepStrictEqual(
            (yield* Ref.get(ran)).filter((x) => x.startsWith("pa")),
            ["pa0#1", "pa1#1", "pa2#1"]
          )
        })
      ),
    30_000
  )

  it.live("a manual pause stops every process reading the queue within a second; resume lets them go on", () =>
    TestDatabase.onFreshDatabase({ workers: "manual: 2", pollingInterval: "50 millis" }, () =>
      Effect.gen(function* () {
        const ran = yield* Ref.make(0)
        const Work = Job.make("ManualPauseWork", { payload: Payload, queue: "manual" }, () =>
          Ref.update(ran, (r) => r + 1)
        )
        // two supervisors: two processes reading the queue
        yield* startSupervisor([Work])
        yield* startSupervisor([Work])
        yield* Work.enqueue({ n: 0 })
        yield* eventually(
          "a first job ran",
          Effect.map(Ref.get(ran), (r) => r === 1)
        )
        const states = yield* QueueStates
        yield* states.pause("manual", { actor: "ops", reason: "maintenance" })
        yield* Effect.sleep("1 second")
        yield* Effect.forEach([1, 2, 3, 4, 5], (n) => Work.enqueue({ n }), { discard: true })
        yield* Effect.sleep("1500 millis")
        assert.strictEqual(yield* Ref.get(ran), 1, "no process claimed from the paused queue")
        yield* states.resume("manual", { actor: "ops" })
        yield* eventually(
          "the held jobs ran after the resume",
          Effect.map(Ref.get(ran), (r) => r === 6)
        )
      })
    )
  )
})
