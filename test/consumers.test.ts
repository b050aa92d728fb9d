/**
 * Consumer priority and single active consumer across supervisor processes: while the active
 * consumer lives the others claim nothing; SIGKILL it and the next one takes over, timed.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { renderProcesses } from "../src/Cli/Operate.ts"
import * as Job from "../src/Job/Job.ts"
import { Operations } from "../src/Operations/Operations.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import type { Capsule } from "../src/Supervisor/Capsule.ts"
import { Processes } from "../src/Supervisor/Processes.ts"
import * as Supervisor from "../src/Supervisor/Supervisor.ts"
import { bundledFixture, type Child, spawnSupervisor } from "./support/child.ts"
import { createLog, fastEnv, type LogRow, logCount, logRows } from "./support/childLog.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { onFreshDatabase } from "./support/TestDatabase.ts"

const Key = Schema.Struct({ key: Schema.String })

/** The children's timings: beats every 200 ms, dead after 1.5 s, polls every 100 ms. */
const childEnv = (url: string, queue: string, extra: Record<string, string>) =>
  fastEnv(url, "1.5", { CHILD_QUEUE: queue, CHILD_CONCURRENCY: "1", CHILD_JOB_MS: "40", ...extra })

const started = logRows("started")

const completedCount = logCount("completed")

/** Enqueues `n` jobs of the children's job (same name, same queue), keys in order. */
const enqueue = (queue: string, n: number) => {
  const Sleepy = Job.make("Sleepy", { payload: Key, queue }, () => Effect.void)
  return Sleepy.enqueueMany(Array.from({ length: n }, (_, i) => ({ key: String(i).padStart(4, "0") })))
}

const outputs = (children: ReadonlyArray<Child>) =>
  children.map((c, i) => `--- child ${i} (pid ${c.process.pid})\n${c.output()}`).join("\n")

/** Kills `victim` with SIGKILL, waits until a job starts in another process; returns that pid and the time taken. */
const killAndTime = (victim: Child) =>
  Effect.gen(function* () {
    const killedAt = new Date()
    victim.process.kill("SIGKILL")
    yield* victim.exited
    const deadAt = new Date()
    let next: LogRow | undefined
    yield* eventually(
      "a job starts in another process",
      Effect.map(started, (rows) => {
        next = rows.find((r) => r.pid !== victim.process.pid && r.at.getTime() >= killedAt.getTime())
        return next !== undefined
      }),
      "30 seconds"
    )
    return {
      pid: next!.pid,
      tookMs: next!.at.getTime() - killedAt.getTime(),
      killedAt,
      deadAt,
      victim: victim.process.pid
    }
  })

/**
 * The jobs started after a kill: by the others from the kill on, and by the victim once it was
 * dead (none). A job the victim started as the signal was on its way counts as before the kill.
 */
const startedAfter = (
  rows: ReadonlyArray<LogRow>,
  kill: { readonly killedAt: Date; readonly deadAt: Date; readonly victim: number | undefined }
) =>
  rows.filter((r) =>
    r.pid === kill.victim ? r.at.getTime() >= kill.deadAt.getTime() : r.at.getTime() >= kill.killedAt.getTime()
  )

describe("single active consumer", () => {
  it.live(
    "three supervisors: one reads the queue, in order; SIGKILL it and a standby takes over within 5 s; the other claims nothing",
    () =>
      onFreshDatabase({ processHeartbeatInterval: "200 millis", staleProcessThreshold: "1500 millis" }, (url) => {
        const children: Array<Child> = []
        return Effect.gen(function* () {
          const queue = "ordered_events"
          yield* createLog
          yield* (yield* QueueStore).create(queue)
          const processes = yield* Processes
          const bundle = yield* bundledFixture("test/fixtures/supervisor-child.ts")
          for (let i = 0; i < 3; i++) {
            children.push(yield* spawnSupervisor(childEnv(url, queue, { CHILD_SINGLE_ACTIVE: "1" }), bundle))
          }
          const role = `consumer:${queue}`
          const holders = Effect.map(processes.list, (rows) => rows.filter((r) => r.leads.includes(role))).pipe(
            Effect.orDie
          )
          yield* eventually(
            "three processes, one active consumer",
            Effect.map(
              Effect.all([processes.list, holders]),
              ([rows, held]) => rows.length === 3 && held.length === 1
            ).pipe(Effect.orDie),
            "60 seconds"
          ).pipe(Effect.onError(() => Effect.logError(outputs(children))))
          const [holder] = yield* holders
          const active = children.find((c) => c.process.pid === holder!.pid)!
          assert.isDefined(active, "the holder is one of the children")
          // the banner names the active consumer; the holder logged taking the role
          yield* eventually(
            "every child logged its single-active-consumer line",
            Effect.sync(() => children.every((c) => c.output().includes(`boot: single active consumers ${role}=`))),
            "20 seconds"
          )
          assert.include(active.output(), `[pgbus] leads ${role}`)
          assert.include(active.output(), "single_active_consumer=true")

          yield* enqueue(queue, 150)
          yield* eventually(
            "40 jobs done",
            Effect.map(completedCount, (n) => n >= 40),
            "60 seconds"
          ).pipe(Effect.onError(() => Effect.logError(outputs(children))))
          const before = yield* started
          assert.deepStrictEqual(
            [...new Set(before.map((r) => r.pid))],
            [active.process.pid],
            "while the active consumer lives, the standbys claim nothing"
          )
          assert.deepStrictEqual(
            before.map((r) => r.key),
            before.map((r) => r.key).toSorted(),
            "one consumer of concurrency 1 runs them in enqueue order"
          )

          const takeover = yield* killAndTime(active)
          yield* Effect.logInfo(`single active consumer: a standby started a job ${takeover.tookMs} ms after SIGKILL`)
          assert.isBelow(takeover.tookMs, 5000, `a standby took over ${takeover.tookMs} ms after the kill`)
          const survivors = children.filter((c) => c !== active)
          const next = survivors.find((c) => c.process.pid === takeover.pid)!
          assert.isDefined(next, "the new active consumer is a survivor")
          yield* eventually(
            "all 150 done",
            Effect.map(completedCount, (n) => n >= 150),
            "90 seconds"
          ).pipe(Effect.onError(() => Effect.logError(outputs(children))))
          const after = startedAfter(yield* started, takeover)
          assert.deepStrictEqual(
            [...new Set(after.map((r) => r.pid))],
            [next.process.pid],
            "after the kill only the new active consumer ran jobs (the dead one's job included)"
          )
          const [row] = (yield* holders).map((r) => r.pid)
          assert.strictEqual(row, next.process.pid, "the processes list names the new active consumer")
          // pgbus status: its LEADS column names the role on the holder's row, the capsule says so
          const summaries = yield* Effect.orDie(
            Effect.flatMap(Operations, (ops) => ops.processes).pipe(Effect.provide(Operations.layer))
          )
          const status = renderProcesses(summaries)
          const line = status.split("\n").find((l) => l.includes(`:${next.process.pid} `))
          assert.isDefined(line, status)
          assert.include(line!, role, status)
          assert.strictEqual(status.split(role).length - 1, 1, `one process holds the role:\n${status}`)
          assert.include(status, "(single active consumer)")
          assert.include(next.output(), `[pgbus] leads ${role}`)
          const other = survivors.find((c) => c !== next)!
          assert.notInclude(other.output(), `[pgbus] leads ${role}`, "the third process never read the queue")
        }).pipe(Effect.onError(() => Effect.logError(outputs(children))))
      }),
    180_000
  )
})

describe("single active consumer, two processes", () => {
  it.live(
    "a standby in the enqueuing process takes nothing, not even by local dispatch, until the holder is SIGKILLed",
    () =>
      onFreshDatabase(
        { processHeartbeatInterval: "200 millis", staleProcessThreshold: "1500 millis", pollingInterval: "100 millis" },
        (url) => {
          const children: Array<Child> = []
          return Effect.gen(function* () {
            const queue = "ordered_local"
            yield* createLog
            yield* (yield* QueueStore).create(queue)
            const processes = yield* Processes
            const bundle = yield* bundledFixture("test/fixtures/supervisor-child.ts")
            children.push(yield* spawnSupervisor(childEnv(url, queue, { CHILD_SINGLE_ACTIVE: "1" }), bundle))
            const [holder] = children as [Child]
            const role = `consumer:${queue}`
            const holders = Effect.map(processes.list, (rows) => rows.filter((r) => r.leads.includes(role))).pipe(
              Effect.orDie
            )
            yield* eventually(
              "the child holds the queue",
              Effect.map(holders, (rows) => rows.length === 1 && rows[0]!.pid === holder.process.pid),
              "60 seconds"
            )
            // this process: the same job, logging as this process, in a standby capsule
            const Sleepy = Job.make("Sleepy", { payload: Key, queue }, ({ key }) =>
              Effect.gen(function* () {
                const sql = yield* SqlClient.SqlClient
                yield* sql`INSERT INTO child_log (key, event, pid) VALUES (${key}, 'started', ${process.pid})`
                yield* sql`INSERT INTO child_log (key, event, pid) VALUES (${key}, 'completed', ${process.pid})`
              }).pipe(Effect.orDie)
            )
            yield* startSupervisor([Sleepy], {
              capsules: [{ name: "standby", queues: [queue], concurrency: 1, singleActiveConsumer: true }],
              roles: ["workers"]
            })
            yield* eventually(
              "two processes",
              Effect.map(processes.list, (rows) => rows.length === 2).pipe(Effect.orDie),
              "30 seconds"
            )
            // one at a time from this process: each enqueue due now may be handed to a local worker
            for (let i = 0; i < 20; i++) yield* Sleepy.enqueue({ key: String(i).padStart(4, "0") })
            yield* eventually(
              "20 done",
              Effect.map(completedCount, (n) => n >= 20),
              "60 seconds"
            )
            assert.deepStrictEqual(
              [...new Set((yield* started).map((r) => r.pid))],
              [holder.process.pid],
              "the standby in the sending process ran none"
            )
            // a backlog the holder is working through when it dies
            yield* enqueue(queue, 100)
            yield* eventually(
              "the holder runs the backlog",
              Effect.map(completedCount, (n) => n >= 25),
              "30 seconds"
            )
            const takeover = yield* killAndTime(holder)
            assert.strictEqual(takeover.pid, process.pid, "the standby took over")
            assert.isBelow(takeover.tookMs, 5000, `the standby took over ${takeover.tookMs} ms after the kill`)
            yield* Effect.logInfo(`single active consumer (two processes): took over ${takeover.tookMs} ms`)
            yield* eventually(
              "this process holds the queue",
              Effect.map(holders, (rows) => rows.length === 1 && rows[0]!.pid === process.pid),
              "10 seconds"
            )
          }).pipe(Effect.onError(() => Effect.logError(outputs(children))))
        }
      ),
    120_000
  )
})

describe("consumer priority", () => {
  it.live(
    "priorities 10, 5 and 0: only the highest live one claims; SIGKILL it and the next takes over, twice",
    () =>
      onFreshDatabase({ processHeartbeatInterval: "200 millis", staleProcessThreshold: "1500 millis" }, (url) => {
        const children: Array<Child> = []
        return Effect.gen(function* () {
          const queue = "ranked"
          yield* createLog
          yield* (yield* QueueStore).create(queue)
          const processes = yield* Processes
          const bundle = yield* bundledFixture("test/fixtures/supervisor-child.ts")
          for (const priority of [0, 5, 10]) {
            children.push(
              yield* spawnSupervisor(
                childEnv(url, queue, { CHILD_CONSUMER_PRIORITY: String(priority), CHILD_CONCURRENCY: "2" }),
                bundle
              )
            )
          }
          const [low, mid, high] = children as [Child, Child, Child]
          const lastStanding = (c: Child) =>
            c
              .output()
              .match(/consumer of ranked at priority -?\d+ (backs off|is active)/g)
              ?.at(-1)
          yield* eventually(
            "three processes; the highest active, the others backing off",
            Effect.map(
              processes.list,
              (rows) =>
                rows.length === 3 &&
                lastStanding(high)?.endsWith("is active") === true &&
                lastStanding(mid)?.endsWith("backs off") === true &&
                lastStanding(low)?.endsWith("backs off") === true
            ).pipe(Effect.orDie),
            "60 seconds"
          ).pipe(Effect.onError(() => Effect.logError(outputs(children))))
          assert.include(high.output(), "consumer_priority=10")

          yield* enqueue(queue, 300)
          yield* eventually(
            "40 jobs done",
            Effect.map(completedCount, (n) => n >= 40),
            "60 seconds"
          )
          const first = yield* started
          assert.deepStrictEqual(
            [...new Set(first.map((r) => r.pid))],
            [high.process.pid],
            "while priority 10 lives, 5 and 0 claim nothing"
          )

          const one = yield* killAndTime(high)
          yield* Effect.logInfo(`consumer priority: 5 took over ${one.tookMs} ms after SIGKILL of 10`)
          assert.strictEqual(one.pid, mid.process.pid, "priority 5 takes over, not 0")
          assert.isBelow(one.tookMs, 5000, `priority 5 took over ${one.tookMs} ms after the kill`)
          const done = yield* completedCount
          yield* eventually(
            "40 more jobs done",
            Effect.map(completedCount, (n) => n >= done + 40),
            "60 seconds"
          )
          const second = startedAfter(yield* started, one)
          assert.deepStrictEqual(
            [...new Set(second.map((r) => r.pid))],
            [mid.process.pid],
            "while priority 5 lives, 0 claims nothing"
          )

          const two = yield* killAndTime(mid)
          yield* Effect.logInfo(`consumer priority: 0 took over ${two.tookMs} ms after SIGKILL of 5`)
          assert.strictEqual(two.pid, low.process.pid)
          assert.isBelow(two.tookMs, 5000, `priority 0 took over ${two.tookMs} ms after the kill`)
          yield* eventually(
            "all 300 done",
            Effect.map(completedCount, (n) => n >= 300),
            "120 seconds"
          ).pipe(Effect.onError(() => Effect.logError(outputs(children))))
          assert.include(low.output(), "consumer of ranked at priority 0 is active")
        }).pipe(Effect.onError(() => Effect.logError(outputs(children))))
      }),
    240_000
  )
})

describe("consumer options at boot", () => {
  const Noop = Job.make("Noop", { payload: Key, queue: "q" }, () => Effect.void)
  // a boot that does not fail would run for ever: the timeout fails the test instead
  const boot = (capsules: ReadonlyArray<Capsule>) =>
    Supervisor.runWith({ capsules, roles: ["workers"] }).pipe(
      Effect.provide(Registry.layer([Noop])),
      Effect.flip,
      Effect.timeoutOrElse({ duration: "20 seconds", orElse: () => Effect.die(new Error("the supervisor booted")) })
    )
  const cases: ReadonlyArray<readonly [string, ReadonlyArray<Capsule>, string]> = [
    [
      "a fractional priority",
      [{ name: "a", queues: ["q"], concurrency: 1, consumerPriority: 1.5 }],
      "consumerPriority"
    ],
    [
      "a priority out of range",
      [{ name: "a", queues: ["q"], concurrency: 1, consumerPriority: 10_000_000 }],
      "consumerPriority"
    ],
    ["NaN", [{ name: "a", queues: ["q"], concurrency: 1, consumerPriority: Number.NaN }], "consumerPriority"],
    [
      "both options on one capsule",
      [{ name: "a", queues: ["q"], concurrency: 1, consumerPriority: 1, singleActiveConsumer: true }],
      "not both"
    ],
    [
      "a queue read beside its single active consumer",
      [
        { name: "a", queues: ["q"], concurrency: 1, singleActiveConsumer: true },
        { name: "b", queues: ["other", "q"], concurrency: 1 }
      ],
      "every capsule that reads it must be one"
    ]
  ]
  for (const [what, capsules, rule] of cases) {
    it.live(`${what}: a ConfigurationError at boot, no process registered`, () =>
      onFreshDatabase({}, () =>
        Effect.gen(function* () {
          const error = yield* boot(capsules)
          assert.strictEqual(error._tag, "ConfigurationError")
          if (error._tag !== "ConfigurationError") return
          assert.strictEqual(error.key, "workers")
          assert.include(error.rule, rule)
          const rows = yield* Effect.orDie((yield* Processes).list)
          assert.strictEqual(rows.length, 0, "nothing registered")
        })
      )
    )
  }
})
