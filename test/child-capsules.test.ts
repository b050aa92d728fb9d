/**
 * Child-process capsules (issue 23 item 3): a capsule of `processes: N` runs in child processes
 * of the supervisor that re-run its entry module; each has its row in the processes table; it is
 * recycled (drained, then replaced) after maxJobsPerProcess jobs without losing or running a job
 * twice; a SIGKILLed child's claims come back at once; SIGTERM of the parent drains the children.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as Job from "../src/Job/Job.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { type Capsule, validateCapsules } from "../src/Supervisor/Capsule.ts"
import { Processes } from "../src/Supervisor/Processes.ts"
import { bundledFixture, type Child, spawnSupervisor } from "./support/child.ts"
import { createLog, fastEnv, logCount, logRows } from "./support/childLog.ts"
import { eventually } from "./support/jobs.ts"
import { freePort } from "./support/ports.ts"
import { onFreshDatabase } from "./support/TestDatabase.ts"

const FIXTURE = "test/fixtures/child-capsule-app.ts"
const Key = Schema.Struct({ key: Schema.String })

/** The parent's environment: beats every 200 ms, dead after 2 s, polls every 100 ms. */
const appEnv = (url: string, extra: Record<string, string>) => fastEnv(url, "2", extra)

/** The fixture app's log table and its `kids` queue. */
const prepare = Effect.andThen(
  createLog,
  Effect.flatMap(QueueStore, (store) => store.create("kids"))
)

/** Starts the fixture app's supervisor (the parent) with `extra` settings. */
const startParent = (url: string, extra: Record<string, string>) =>
  Effect.flatMap(bundledFixture(FIXTURE), (bundle) => spawnSupervisor(appEnv(url, extra), bundle))

/**
 * A test on a fresh database with the fixture app's log table and `kids` queue; `start` spawns the
 * parent with `extra` settings, whose output is logged when the test fails.
 */
const withApp = <A, E, R>(
  body: (start: (extra: Record<string, string>) => ReturnType<typeof startParent>) => Effect.Effect<A, E, R>
) =>
  onFreshDatabase({}, (url) => {
    let parent: Child | undefined
    return prepare.pipe(
      Effect.andThen(
        body((extra) =>
          Effect.tap(startParent(url, extra), (started) =>
            Effect.sync(() => {
              parent = started
            })
          )
        )
      ),
      Effect.onError(() => Effect.logError(parent?.output() ?? ""))
    )
  })

/** Waits until `n` children of `parent` have booted. */
const childrenBooted = (parent: Child, n: number) =>
  eventually(
    `${n} children ready`,
    Effect.sync(() => parent.output().split("boot: child process").length - 1 >= n),
    "60 seconds"
  )

/**
 * Starts the parent with `n` children of one job at a time and no read-ahead (`extra` besides),
 * and waits until they booted.
 */
const oneJobEach = (
  start: (extra: Record<string, string>) => ReturnType<typeof startParent>,
  n: number,
  extra: Record<string, string>
) =>
  Effect.tap(start({ CHILD_PROCESSES: String(n), CHILD_CONCURRENCY: "1", CHILD_READ_AHEAD: "0", ...extra }), (parent) =>
    childrenBooted(parent, n)
  )

/** Waits until `n` jobs have started (30 s at most). */
const startedAtLeast = (n: number) =>
  eventually(
    `${n} job(s) started`,
    Effect.map(logCount("started"), (started) => started >= n),
    "30 seconds"
  )

/** Enqueues `n` jobs of the app's job `name` on `kids`, keys in order. */
const enqueue = (name: string, n: number, from = 0) =>
  Job.make(name, { payload: Key, queue: "kids" }, () => Effect.void).enqueueMany(
    Array.from({ length: n }, (_, i) => ({ key: String(from + i).padStart(5, "0") }))
  )

const kidsQueue = Effect.flatMap(QueueStore, (store) => store.metrics("kids")).pipe(Effect.orDie)

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

const recycleLines = (parent: Child) =>
  parent
    .output()
    .split("\n")
    .filter((l) => l.includes("recycled (max_jobs)"))

describe("child-process capsules", () => {
  it.live(
    "2,000 jobs through one child process of at most 200 jobs: 10 recycles, every job run and archived exactly once",
    () =>
      withApp((start) =>
        Effect.gen(function* () {
          // the 10,000 jobs with 1,000 per child passed too (69.6 s on a loaded 2-core
          // machine); the suite runs a fifth of it (23-52 s)
          const total = 2000
          const perChild = 200
          yield* enqueue("Tracked", total)
          const parent = yield* start({
            CHILD_PROCESSES: "1",
            CHILD_CONCURRENCY: "5",
            CHILD_MAX_JOBS: String(perChild)
          })
          const startedAt = performance.now()
          // the child has its own row in the processes table, beside its parent's
          const processes = yield* Processes
          yield* eventually(
            "a child's row beside its parent's",
            Effect.map(processes.list, (rows) => rows.some((r) => r.pid !== parent.process.pid)).pipe(Effect.orDie),
            "60 seconds"
          )
          yield* eventually(
            "every job completed",
            Effect.map(logCount("completed"), (n) => n >= total),
            "180 seconds"
          )
          yield* eventually(
            "10 recycles logged",
            Effect.sync(() => recycleLines(parent).length >= 10),
            "30 seconds"
          )
          const seconds = (performance.now() - startedAt) / 1000
          yield* Effect.logInfo(`child-capsules: ${total} jobs, 10 recycles in ${seconds.toFixed(1)} s`)

          const started = yield* logRows("started")
          const completed = yield* logRows("completed")
          assert.strictEqual(started.length, total, "no job started twice")
          assert.strictEqual(new Set(started.map((r) => r.key)).size, total, "every job started")
          assert.strictEqual(completed.length, total, "no job completed twice")
          const perPid = new Map<number, number>()
          for (const r of started) perPid.set(r.pid, (perPid.get(r.pid) ?? 0) + 1)
          assert.deepStrictEqual(
            [...perPid.values()],
            Array.from({ length: total / perChild }, () => perChild),
            "ten child processes ran 200 jobs each"
          )
          assert.notInclude([...perPid.keys()], parent.process.pid, "the parent ran none")
          // recycled children exited; the eleventh waits for work
          assert.strictEqual(recycleLines(parent).length, 10, parent.output())
          for (const pid of perPid.keys()) {
            yield* eventually(
              `child ${pid} exited`,
              Effect.sync(() => !alive(pid)),
              "20 seconds"
            )
          }
          yield* eventually(
            "every job archived",
            Effect.map(kidsQueue, (q) => q.archiveSize === total && q.depth === 0),
            "20 seconds"
          )
          // the parent and its live child: the recycled children unregistered
          yield* eventually(
            "two processes registered",
            Effect.map(processes.list, (rows) => rows.length === 2).pipe(Effect.orDie),
            "20 seconds"
          )
        })
      ),
    300_000
  )

  it.live(
    "SIGKILL of a child mid-job: its claim is released at once and the job runs again within seconds",
    () =>
      withApp((start) =>
        Effect.gen(function* () {
          const parent = yield* oneJobEach(start, 2, { CHILD_JOB_MS: "3000" })
          yield* enqueue("Tracked", 2)
          yield* startedAtLeast(2)
          const [victim] = yield* logRows("started")
          const killedAt = Date.now()
          process.kill(victim!.pid, "SIGKILL")
          yield* eventually(
            "the killed job starts again in another process",
            Effect.map(logRows("started"), (rows) => rows.some((r) => r.key === victim!.key && r.pid !== victim!.pid)),
            "20 seconds"
          )
          const again = (yield* logRows("started")).find((r) => r.key === victim!.key && r.pid !== victim!.pid)!
          const tookMs = again.at.getTime() - killedAt
          yield* Effect.logInfo(`child-capsules: the killed child's job started again ${tookMs} ms after SIGKILL`)
          // the visibility timeout is 30 s and the stale threshold 2 s: the parent released it
          assert.isBelow(tookMs, 5000, `started again ${tookMs} ms after the kill`)
          assert.include(parent.output(), "exited without a drain (SIGKILL); released 1 claimed message(s)")
          yield* eventually(
            "both jobs completed",
            Effect.map(logCount("completed"), (n) => n >= 2),
            "30 seconds"
          )
          const completed = yield* logRows("completed")
          assert.deepStrictEqual(completed.map((r) => r.key).toSorted(), ["00000", "00001"], "each completed once")
          // the slot was restarted: two live children again
          yield* eventually(
            "a replacement child",
            Effect.sync(() => parent.output().split("boot: child process").length - 1 >= 3),
            "30 seconds"
          )
        })
      ),
    120_000
  )

  it.live(
    "SIGTERM of the parent drains its children: running jobs finish, every process exits, no row is left",
    () =>
      withApp((start) =>
        Effect.gen(function* () {
          const parent = yield* oneJobEach(start, 2, { CHILD_JOB_MS: "2000" })
          yield* enqueue("Tracked", 4)
          yield* startedAtLeast(2)
          const children = [...new Set((yield* logRows("started")).map((r) => r.pid))]
          assert.strictEqual(children.length, 2)
          parent.process.kill("SIGTERM")
          const exit = yield* parent.exited
          assert.deepStrictEqual(exit, { code: 0, signal: null }, parent.output())
          for (const pid of children) assert.isFalse(alive(pid), `child ${pid} exited with its parent`)
          const started = yield* logRows("started")
          const completed = yield* logRows("completed")
          assert.strictEqual(started.length, 2, "nothing more was claimed once the drain began")
          assert.deepStrictEqual(
            completed.map((r) => r.key).toSorted(),
            started.map((r) => r.key).toSorted(),
            "the running jobs finished"
          )
          assert.strictEqual((yield* kidsQueue).depth, 2, "the two jobs not started wait in the queue")
          const rows = yield* Effect.orDie((yield* Processes).list)
          assert.strictEqual(rows.length, 0, "every process unregistered")
        })
      ),
    120_000
  )

  it.live(
    "SIGKILL of the parent: its children see the IPC channel close, drain and exit",
    () =>
      withApp((start) =>
        Effect.gen(function* () {
          const parent = yield* start({ CHILD_PROCESSES: "2", CHILD_CONCURRENCY: "1" })
          const processes = yield* Processes
          const childRows = Effect.map(processes.list, (rows) => rows.filter((r) => r.pid !== parent.process.pid)).pipe(
            Effect.orDie
          )
          yield* eventually(
            "two children registered",
            Effect.map(childRows, (rows) => rows.length === 2),
            "60 seconds"
          )
          const children = (yield* childRows).map((r) => r.pid)
          parent.process.kill("SIGKILL")
          yield* parent.exited
          for (const pid of children) {
            yield* eventually(
              `child ${pid} exited`,
              Effect.sync(() => !alive(pid)),
              "20 seconds"
            )
          }
          // they drained: their rows are gone (the parent's is left to the stale threshold)
          yield* eventually(
            "the children unregistered",
            Effect.map(childRows, (rows) => rows.length === 0),
            "5 seconds"
          )
        })
      ),
    120_000
  )

  it.live(
    "a CPU-bound job blocks its child's event loop for 10 s: the parent keeps its claim (no redelivery) and its other capsule keeps claiming",
    () =>
      withApp((start) =>
        Effect.gen(function* () {
          yield* (yield* QueueStore).create("local")
          // a visibility timeout of 3 s and a stale threshold of 2 s: without the parent's keeping,
          // the blocked child's claim would come back (reaped, or lapsed) and the other child run it
          const parent = yield* oneJobEach(start, 2, { CHILD_BURN_MS: "10000", PGBUS_VISIBILITY_TIMEOUT: "3" })
          yield* Job.make("Burn", { payload: Key, queue: "kids" }, () => Effect.void).enqueue({ key: "burn" })
          yield* startedAtLeast(1)
          const [burn] = yield* logRows("started")
          // meanwhile the parent's in-process capsule claims and runs a job every 300 ms
          const Local = Job.make("Local", { payload: Key, queue: "local" }, () => Effect.void)
          for (let i = 0; i < 20; i++) {
            yield* Local.enqueue({ key: `local-${i}` })
            yield* Effect.sleep("300 millis")
          }
          yield* eventually(
            "the burn completed",
            Effect.map(logCount("completed"), (n) => n >= 1),
            "30 seconds"
          )
          const [done] = yield* logRows("completed")
          const during = (yield* logRows("local")).filter(
            (r) => r.at.getTime() > burn!.at.getTime() && r.at.getTime() < done!.at.getTime()
          )
          const blockedMs = done!.at.getTime() - burn!.at.getTime()
          yield* Effect.logInfo(
            `child-capsules: the burn held its loop ${blockedMs} ms; ${during.length} local jobs ran meanwhile`
          )
          assert.isAtLeast(blockedMs, 10_000)
          assert.isAtLeast(during.length, 15, "the parent's capsule kept claiming during the block")
          // past another visibility timeout: still one delivery, archived once
          yield* Effect.sleep("4 seconds")
          const started = yield* logRows("started")
          assert.deepStrictEqual(
            started.map((r) => [r.key, r.pid]),
            [["burn", burn!.pid]],
            "the blocking job was not delivered again"
          )
          assert.strictEqual(yield* logCount("completed"), 1)
          const kids = yield* kidsQueue
          assert.deepStrictEqual([kids.depth, kids.archiveSize], [0, 1], "archived once")
          assert.match(parent.output(), /silent for \d+ ms \(its event loop is blocked\): the parent keeps its 1 claim/)
          assert.match(parent.output(), /answers again after \d+ ms/)
          assert.include(parent.output(), "event loop blocked for", "the child's own watchdog logged the block")
        })
      ),
    120_000
  )
})

describe("child-process capsules: readiness", () => {
  it.live(
    "the parent's /readyz counts its children: OK once they boot, DEGRADED while one is frozen, OK again after",
    () =>
      withApp((start) =>
        Effect.gen(function* () {
          yield* (yield* QueueStore).create("local")
          const port = yield* freePort
          const parent = yield* start({ CHILD_PROCESSES: "2", PGBUS_HEALTH_PORT: String(port) })
          const readyz = Effect.promise(() =>
            fetch(`http://127.0.0.1:${port}/readyz`)
              .then(async (r) => ({
                status: r.status,
                body: (await r.json()) as { status: string; expected: number; live: number }
              }))
              .catch(() => ({ status: 0, body: { status: "unreachable", expected: -1, live: -1 } }))
          )
          // the in-process capsule `local` and two children of `kids`
          yield* eventually(
            "ready with both children",
            Effect.map(readyz, (r) => r.status === 200 && r.body.expected === 3 && r.body.live === 3),
            "60 seconds"
          )
          const processes = yield* Processes
          const rows = yield* processes.list.pipe(Effect.orDie)
          const child = rows.find((r) => r.pid !== parent.process.pid)
          assert.isDefined(child, "a child's row")
          // a frozen child is silent, as a blocked loop is: not live, so the parent is not ready
          process.kill(child!.pid, "SIGSTOP")
          yield* eventually(
            "degraded while a child is frozen",
            Effect.map(readyz, (r) => r.status === 503 && r.body.status === "DEGRADED" && r.body.live === 2),
            "10 seconds"
          )
          process.kill(child!.pid, "SIGCONT")
          yield* eventually(
            "ready again",
            Effect.map(readyz, (r) => r.status === 200 && r.body.status === "OK" && r.body.live === 3),
            "10 seconds"
          )
        })
      ),
    120_000
  )
})

describe("child-process capsules: a hung child", () => {
  it.live(
    "a child whose loop stays blocked past maxBlocked is killed and restarted; its job runs again in the new child",
    () =>
      withApp((start) =>
        Effect.gen(function* () {
          // the first delivery spins for ten minutes (an endless loop, as far as the test goes)
          const parent = yield* oneJobEach(start, 1, {
            CHILD_BURN_MS: "600000",
            CHILD_BURN_ONCE: "1",
            CHILD_MAX_BLOCKED: "3"
          })
          yield* Job.make("Burn", { payload: Key, queue: "kids" }, () => Effect.void).enqueue({ key: "hung" })
          yield* eventually(
            "the job completed in a new child",
            Effect.map(logCount("completed"), (n) => n >= 1),
            "60 seconds"
          )
          const started = yield* logRows("started")
          assert.strictEqual(started.length, 2, "delivered twice: the hung attempt, then its retry")
          assert.notStrictEqual(started[0]!.pid, started[1]!.pid, "the retry ran in the replacement child")
          assert.isFalse(alive(started[0]!.pid), "the hung child was killed")
          const [done] = yield* logRows("completed")
          assert.strictEqual(done!.pid, started[1]!.pid)
          assert.match(
            parent.output(),
            /child 0 \(pid \d+\) silent for \d+ ms, past maxBlocked \(3s\): killing it \(SIGKILL\); its 1 claim\(s\) go back/
          )
          assert.match(parent.output(), /exited without a drain \(SIGKILL\); released 1 claimed message\(s\)/)
          // the handler logs `completed` before its delivery is archived
          yield* eventually(
            "archived once",
            Effect.map(kidsQueue, (kids) => kids.depth === 0 && kids.archiveSize === 1),
            "10 seconds"
          )
        })
      ),
    120_000
  )
})

describe("child-process capsule options", () => {
  const base = { name: "a", queues: ["q"], concurrency: 1 }
  const cases: ReadonlyArray<readonly [string, Capsule, string]> = [
    ["zero processes", { ...base, processes: 0 }, "processes must be an integer of at least 1"],
    ["fractional processes", { ...base, processes: 1.5 }, "processes must be an integer of at least 1"],
    ["a job limit without processes", { ...base, maxJobsPerProcess: 10 }, "need processes"],
    ["a memory limit without processes", { ...base, maxMemoryMb: 100 }, "need processes"],
    ["a zero job limit", { ...base, processes: 1, maxJobsPerProcess: 0 }, "maxJobsPerProcess must be"],
    ["a negative memory limit", { ...base, processes: 1, maxMemoryMb: -1 }, "maxMemoryMb must be"],
    ["a zero lifetime", { ...base, processes: 1, maxLifetime: "0 seconds" }, "maxLifetime must be"],
    ["a blocked limit without processes", { ...base, maxBlocked: "1 minute" }, "need processes"],
    ["a blocked limit under a second", { ...base, processes: 1, maxBlocked: "500 millis" }, "maxBlocked must be"]
  ]
  for (const [what, capsule, rule] of cases) {
    it.effect(`${what}: a ConfigurationError on workers`, () =>
      Effect.gen(function* () {
        const error = yield* Effect.flip(validateCapsules([capsule]))
        assert.strictEqual(error.key, "workers")
        assert.include(error.rule, rule)
      })
    )
  }
  it.effect("processes with every recycling limit is accepted", () =>
    Effect.gen(function* () {
      const capsule: Capsule = {
        ...base,
        processes: 2,
        maxJobsPerProcess: 1000,
        maxMemoryMb: 512,
        maxLifetime: "1 hour",
        maxBlocked: Number.POSITIVE_INFINITY
      }
      assert.deepStrictEqual(yield* validateCapsules([capsule]), [capsule])
    })
  )
})
