import { assert, describe, it, layer } from "@effect/vitest"
import { Clock, Deferred, Duration, Effect, Fiber, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Job from "../src/Job/Job.ts"
import * as Metrics from "../src/Operations/Metrics.ts"
import { Operations } from "../src/Operations/Operations.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Processes } from "../src/Supervisor/Processes.ts"
import { bundledFixture, spawnSupervisor } from "./support/child.ts"
import { webCaller } from "./support/http.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const fresh = (base: string) => `${base}_${n++}`

const Task = Schema.Struct({ key: Schema.String, i: Schema.Number })

/** The most intervals open at one instant (an end at t closes before a start at t opens). */
const mostAtOnce = (intervals: ReadonlyArray<{ readonly start: number; readonly end: number }>) => {
  const events = intervals.flatMap((r) => [
    { at: r.start, d: 1 },
    { at: r.end, d: -1 }
  ])
  events.sort((a, b) => a.at - b.at || a.d - b.d)
  let open = 0
  let most = 0
  for (const e of events) {
    open += e.d
    most = Math.max(most, open)
  }
  return most
}

const depthOf = (queue: string) => Effect.flatMap(QueueStore, (store) => store.metrics(queue))

// the workers' poll: a lapsed slot must wake the parked jobs well before it
const POLL_MS = 5_000

const testLayer = Operations.layer.pipe(
  Layer.provideMerge(
    TestDatabase.layer({
      visibilityTimeout: "30 seconds",
      // two beats, 500 ms, is the floor of a slot's lease (`limit.duration`)
      visibilityHeartbeatInterval: "250 millis",
      pollingInterval: Duration.millis(POLL_MS),
      processHeartbeatInterval: "200 millis",
      staleProcessThreshold: "1 second"
    })
  )
)

layer(testLayer, { excludeTestServices: true })("concurrency limits", (it) => {
  it.effect("to: 2, 50 jobs of one key across two supervisors: never more than 2 at once, all finish", () =>
    Effect.gen(function* () {
      const queue = fresh("limit2")
      const runs: Array<{ start: number; end: number }> = []
      const job = Job.make("LimitedTwo", { payload: Task, queue, limit: { to: 2, key: (p) => p.key } }, () =>
        Effect.gen(function* () {
          const start = yield* Clock.currentTimeMillis
          yield* Effect.sleep("20 millis")
          runs.push({ start, end: yield* Clock.currentTimeMillis })
        })
      )
      yield* job.enqueueMany(Array.from({ length: 50 }, (_, i) => ({ key: "one", i })))
      const capsules = [{ name: "c", queues: [queue], concurrency: 5 }]
      yield* startSupervisor([job], { capsules })
      yield* startSupervisor([job], { capsules, roles: ["workers"] })
      yield* eventually(
        "all 50 ran",
        Effect.sync(() => runs.length === 50),
        "30 seconds"
      )
      // the polling interval is 5 s: the 50 ran well within it, so parked jobs were woken by the ends
      assert.strictEqual(mostAtOnce(runs), 2)
      yield* eventually(
        "the queue is empty",
        Effect.map(depthOf(queue), (m) => m.depth === 0)
      )
    })
  )

  it.effect("the limit is per key: keys do not wait for each other", () =>
    Effect.gen(function* () {
      const queue = fresh("perkey")
      const runs = new Map<string, Array<{ start: number; end: number }>>([
        ["a", []],
        ["b", []]
      ])
      const all: Array<{ start: number; end: number }> = []
      const job = Job.make("LimitedPerKey", { payload: Task, queue, limit: { to: 1, key: (p) => p.key } }, ({ key }) =>
        Effect.gen(function* () {
          const start = yield* Clock.currentTimeMillis
          yield* Effect.sleep("50 millis")
          const run = { start, end: yield* Clock.currentTimeMillis }
          runs.get(key)!.push(run)
          all.push(run)
        })
      )
      yield* job.enqueueMany(
        Array.from({ length: 10 }, (_, i) => ({ key: i % 2 === 0 ? "a" : "b", i })),
        {}
      )
      yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 4 }] })
      yield* eventually(
        "all 10 ran",
        Effect.sync(() => all.length === 10),
        "30 seconds"
      )
      assert.strictEqual(mostAtOnce(runs.get("a")!), 1)
      assert.strictEqual(mostAtOnce(runs.get("b")!), 1)
      assert.strictEqual(mostAtOnce(all), 2, "a and b ran side by side")
    })
  )

  it.effect("a key that fills within a claim says so (more), and the next claim passes it over to the other keys", () =>
    Effect.gen(function* () {
      const queue = fresh("fills")
      const job = Job.make(
        "LimitedFills",
        { payload: Task, queue, limit: { to: 2, key: (p) => p.key } },
        () => Effect.void
      )
      // five of a, then five of b (two slots each): a claim of five looks at six, five of them a's
      yield* job.enqueueMany([
        ...Array.from({ length: 5 }, (_, i) => ({ key: "a", i })),
        ...Array.from({ length: 5 }, (_, i) => ({ key: "b", i: 5 + i }))
      ])
      const store = yield* QueueStore
      const claim = (n: number) => store.archiveAndRead(queue, [], { limit: 5, limited: true, claimedBy: `t#${n}` })
      const keys = (ms: ReadonlyArray<{ readonly message: unknown }>) =>
        ms.map((m) => (m.message as { payload: { key: string } }).payload.key).join("")
      const first = yield* claim(1)
      assert.strictEqual(keys(first.messages), "aab", "a's two slots and the one b in reach")
      assert.isTrue(first.more, "a filled within the claim: claim again")
      const second = yield* claim(2)
      assert.strictEqual(keys(second.messages), "b", "a is full: passed over; b's last slot")
      assert.isTrue(second.more, "b filled within this claim")
      const third = yield* claim(3)
      assert.strictEqual(keys(third.messages), "", "both full")
      assert.isFalse(third.more, "keys full before the claim are no news (the end of a run wakes the readers)")
    })
  )

  it.effect("concurrent claims never take more than the free slots (the claim is serialised per queue)", () =>
    Effect.gen(function* () {
      const queue = fresh("claims")
      const job = Job.make("LimitedClaims", { payload: Task, queue, limit: { to: 3 } }, () => Effect.void)
      const unlimited = Job.make("Unlimited", { payload: Task, queue }, () => Effect.void)
      yield* job.enqueueMany(Array.from({ length: 40 }, (_, i) => ({ key: "k", i })))
      yield* unlimited.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ key: "k", i })))
      const store = yield* QueueStore
      const claims = yield* Effect.forEach(
        Array.from({ length: 12 }, (_, i) => i),
        (i) => store.read(queue, { limit: 10, limited: true, visibilityTimeout: "1 minute", claimedBy: `p${i}#1` }),
        { concurrency: "unbounded" }
      )
      const claimed = claims.flat()
      const limited = claimed.filter((m) => (m.message as { job: string }).job === "LimitedClaims")
      assert.strictEqual(limited.length, 3)
      // jobs without a limit are claimed beside them
      assert.strictEqual(claimed.length - limited.length, 5)
      // a finished one frees its slot for exactly one more
      yield* store.archive(queue, [limited[0]!.msgId])
      const next = yield* store.read(queue, { limit: 10, limited: true, claimedBy: "p#2" })
      assert.strictEqual(next.length, 1)
    })
  )

  it.effect(
    "claims that waited for the queue's lock count the slots taken meanwhile (one statement, no stale count)",
    () =>
      Effect.gen(function* () {
        const queue = fresh("waited")
        const job = Job.make("LimitedWaited", { payload: Task, queue, limit: { to: 3 } }, () => Effect.void)
        yield* job.enqueueMany(Array.from({ length: 40 }, (_, i) => ({ key: "k", i })))
        const store = yield* QueueStore
        const locked = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        // the lock is held while the claims start: each statement's snapshot is older than the
        // claims committed while it waited, so its count must not come from that snapshot
        const holder = yield* store
          .withLimitLock(queue, Effect.andThen(Deferred.succeed(locked, undefined), Deferred.await(release)))
          .pipe(Effect.forkChild)
        yield* Deferred.await(locked)
        const claims = yield* Effect.forEach(
          Array.from({ length: 8 }, (_, i) => i),
          (i) => store.read(queue, { limit: 10, limited: true, visibilityTimeout: "1 minute", claimedBy: `w${i}#1` }),
          { concurrency: "unbounded" }
        ).pipe(Effect.forkChild)
        yield* Effect.sleep("500 millis")
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(holder)
        const claimed = (yield* Fiber.join(claims)).flat()
        assert.strictEqual(claimed.length, 3, "the limit, across claims that all waited for the lock")
      })
  )

  it.effect("a dead process's slot comes back through fast recovery and its parked job runs", () =>
    Effect.gen(function* () {
      const queue = fresh("deadslot")
      const ran: Array<number> = []
      const job = Job.make("LimitedOne", { payload: Task, queue, limit: { to: 1 } }, ({ i }) =>
        Effect.sync(() => ran.push(i))
      )
      yield* job.enqueueMany([
        { key: "k", i: 1 },
        { key: "k", i: 2 }
      ])
      const store = yield* QueueStore
      const processes = yield* Processes
      const sql = yield* SqlClient.SqlClient
      yield* processes.register({
        id: "dead-slot",
        pid: 1,
        host: "gone",
        roles: ["workers"],
        capsules: [],
        capacity: 1,
        appRevision: undefined,
        version: "test"
      })
      // the dead process holds the one slot (for an hour, by its lease)
      const held = yield* store.read(queue, {
        limit: 5,
        limited: true,
        visibilityTimeout: "1 hour",
        claimedBy: "dead-slot#1"
      })
      assert.strictEqual(held.length, 1)
      yield* sql`UPDATE pgbus.processes SET last_beat_at = now() - interval '1 hour' WHERE id = 'dead-slot'`
      // a supervisor's dispatcher reaps it; its worker then runs both, one at a time
      const started = yield* Clock.currentTimeMillis
      yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 2 }] })
      yield* eventually(
        "both ran",
        Effect.sync(() => ran.length === 2),
        "10 seconds"
      )
      assert.isBelow((yield* Clock.currentTimeMillis) - started, 5_000, "within seconds, not the lease's hour")
      assert.deepStrictEqual([...ran].sort(), [1, 2])
    })
  )

  it.effect("duration: a slot whose holder stops heartbeating comes back after the lease, not before", () =>
    Effect.gen(function* () {
      const queue = fresh("lease")
      const runs: Array<{ i: number; start: number; end: number }> = []
      const job = Job.make(
        "LeasedOne",
        { payload: Task, queue, limit: { to: 1, key: (p) => p.key, duration: "2 seconds" } },
        ({ i }) =>
          Effect.gen(function* () {
            const start = yield* Clock.currentTimeMillis
            yield* Effect.sleep("20 millis")
            runs.push({ i, start, end: yield* Clock.currentTimeMillis })
          })
      )
      yield* job.enqueueMany([
        { key: "k", i: 1 },
        { key: "k", i: 2 }
      ])
      const store = yield* QueueStore
      // a holder no process row knows (fast recovery cannot find it) claims the slot, then goes silent
      const before = yield* Clock.currentTimeMillis
      const held = yield* store.read(queue, { limit: 5, limited: true, claimedBy: "ghost#1" })
      assert.strictEqual(held.length, 1, "one slot: the second job is parked")
      const leaseMs = held[0]!.vt.getTime() - before
      assert.isAtLeast(leaseMs, 1_900, "the claim's lease is the job's duration")
      assert.isBelow(leaseMs, 5_000, "not the 30 s visibility timeout")
      yield* startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 2 }] })
      yield* eventually(
        "both ran",
        Effect.sync(() => runs.length === 2),
        "15 seconds"
      )
      const first = Math.min(...runs.map((r) => r.start))
      assert.isAtLeast(first - before, 1_900, "nothing of the key started while the silent holder's lease ran")
      // back when the lease lapses: the supervisor's first claim found the key full and woke
      // itself at the lapse; its next poll (5 s after that claim) would come at least 3 s later
      assert.isBelow(first - before, leaseMs + POLL_MS / 2, "woken by the lapse, not by the next poll")
      assert.strictEqual(mostAtOnce(runs), 1)
      assert.deepStrictEqual(runs.map((r) => r.i).sort(), [1, 2], "the silent holder's job ran again too")
    })
  )

  it.effect("duration: a lease shorter than two heartbeats is raised to them", () =>
    Effect.gen(function* () {
      const queue = fresh("floor")
      const job = Job.make(
        "LeasedShort",
        { payload: Task, queue, limit: { to: 1, duration: "10 millis" } },
        () => Effect.void
      )
      yield* job.enqueue({ key: "k", i: 1 })
      const store = yield* QueueStore
      const before = yield* Clock.currentTimeMillis
      const [held] = yield* store.read(queue, { limit: 1, limited: true, claimedBy: "probe#1" })
      const leaseMs = held!.vt.getTime() - before
      // two beats of 250 ms, not 10 ms (nor the 30 s visibility timeout)
      assert.isAtLeast(leaseMs, 450)
      assert.isBelow(leaseMs, 3_000)
      // the slot stays taken for the raised lease
      yield* job.enqueue({ key: "k", i: 2 })
      assert.lengthOf(yield* store.read(queue, { limit: 1, limited: true, claimedBy: "probe#2" }), 0)
    })
  )

  it.effect("duration: a running job's heartbeat renews its slot past the lease: never two at once, none twice", () =>
    Effect.gen(function* () {
      const queue = fresh("renew")
      const runs: Array<{ i: number; start: number; end: number }> = []
      const job = Job.make(
        "LeasedLong",
        { payload: Task, queue, limit: { to: 1, key: (p) => p.key, duration: "1 second" } },
        ({ i }) =>
          Effect.gen(function* () {
            const start = yield* Clock.currentTimeMillis
            yield* Effect.sleep("2500 millis")
            runs.push({ i, start, end: yield* Clock.currentTimeMillis })
          })
      )
      yield* job.enqueueMany([
        { key: "k", i: 1 },
        { key: "k", i: 2 }
      ])
      const capsules = [{ name: "c", queues: [queue], concurrency: 2 }]
      yield* startSupervisor([job], { capsules })
      yield* startSupervisor([job], { capsules, roles: ["workers"] })
      yield* eventually(
        "both ran",
        Effect.sync(() => runs.length === 2),
        "20 seconds"
      )
      // each run outlived its 1 s lease, renewed by the heartbeat every 250 ms
      assert.strictEqual(mostAtOnce(runs), 1)
      assert.deepStrictEqual(runs.map((r) => r.i).sort(), [1, 2])
    })
  )

  it.effect("the operations service shows slots held, keys at their limit, parked jobs and uniqueness keys", () =>
    Effect.gen(function* () {
      const queue = fresh("seeing")
      const job = Job.make("Seen", { payload: Task, queue, limit: { to: 1, key: (p) => p.key } }, () => Effect.void)
      const unique = Job.make("SeenUnique", { payload: Task, queue, unique: { key: (p) => p.key } }, () => Effect.void)
      yield* job.enqueueMany([
        { key: "busy", i: 1 },
        { key: "busy", i: 2 },
        { key: "busy", i: 3 },
        { key: "idle", i: 4 }
      ])
      const held = yield* unique.enqueue({ key: "u1", i: 0 })
      const store = yield* QueueStore
      // one claim takes the first of each key; the other two of "busy" are parked
      const claimed = yield* store.read(queue, { limit: 10, limited: true, claimedBy: "p#1" })
      assert.strictEqual(claimed.filter((m) => (m.message as { job: string }).job === "Seen").length, 2)
      const ops = yield* Operations
      const locks = yield* ops.locks
      // the totals are the database's (other tests' queues included): at least this queue's
      assert.isAtLeast(locks.concurrency.slotsHeld, 2)
      assert.isAtLeast(locks.concurrency.keysAtLimit, 2)
      assert.isAtLeast(locks.concurrency.parked, 2)
      assert.isDefined(locks.concurrency.oldestParkedMs)
      const mine = locks.concurrency.keys.filter((k) => k.queue === queue)
      assert.deepStrictEqual(mine.map((k) => [k.key, k.running, k.limit, k.waiting]).sort(), [
        ["busy", 1, 1, 2],
        ["idle", 1, 1, 0]
      ])
      assert.isTrue(locks.unique.keys.some((k) => k.holder === held.id && k.job === "SeenUnique"))
      // the gauges on /metrics
      const call = yield* webCaller(Metrics.layerHttp({ path: "/m" }))
      const { text } = yield* call("GET", "/m")
      const gauge = (name: string) => Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, "m").exec(text)?.[1])
      assert.isAtLeast(gauge("pgbus_concurrency_slots_held"), 2)
      assert.isAtLeast(gauge("pgbus_concurrency_blocked_executions"), 2)
      assert.isAtLeast(gauge("pgbus_concurrency_blocked_oldest_age_seconds"), 0)
      // a key released by hand can be taken again at once
      const released = yield* ops.releaseUniqueKey("SeenUnique", "u1", { actor: "test:ops", reason: "stuck" })
      assert.strictEqual(released.holder, held.id)
      yield* unique.enqueue({ key: "u1", i: 1 })
      const missing = yield* ops.releaseUniqueKey("SeenUnique", "nope", { actor: "test:ops" }).pipe(Effect.flip)
      assert.strictEqual(missing._tag, "NotFound")
    })
  )

  it.effect(
    "onConflict raise and discard: an enqueue beyond the key's unfinished jobs fails or returns the oldest",
    () =>
      Effect.gen(function* () {
        const queue = fresh("conflict")
        const raise = Job.make(
          "LimitRaise",
          { payload: Task, queue, limit: { to: 2, key: (p) => p.key, onConflict: "raise" } },
          () => Effect.void
        )
        const discard = Job.make(
          "LimitDiscard",
          { payload: Task, queue, limit: { to: 1, key: (p) => `d-${p.key}`, onConflict: "discard" } },
          () => Effect.void
        )
        // 10 concurrent enqueues of one key, to: 2: exactly two get in
        const exits = yield* Effect.forEach(
          Array.from({ length: 10 }, (_, i) => i),
          (i) => Effect.exit(raise.enqueue({ key: "a", i })),
          { concurrency: "unbounded" }
        )
        assert.strictEqual(exits.filter((e) => e._tag === "Success").length, 2)
        const failure = exits.find((e) => e._tag === "Failure")
        assert.include(failure === undefined ? "" : String(failure.cause), "ConcurrencyLimitExceeded")
        // another key is not affected
        yield* raise.enqueue({ key: "b", i: 0 })
        const first = yield* discard.enqueue({ key: "x", i: 1 })
        assert.deepStrictEqual(yield* discard.enqueue({ key: "x", i: 2 }), first)
        assert.strictEqual((yield* depthOf(queue)).depth, 4)
        // enqueueMany checks each against the ones before it
        const refs = yield* discard.enqueueMany([
          { key: "y", i: 1 },
          { key: "y", i: 2 }
        ])
        assert.deepStrictEqual(refs[1], refs[0])
        // once a job of the key ends, the key has room again
        const store = yield* QueueStore
        yield* store.archive(queue, [first.msgId])
        const next = yield* discard.enqueue({ key: "x", i: 3 })
        assert.notDeepEqual(next, first)
      })
  )

  describe("bad input", () => {
    it("a limit below 1, not an integer, or an unknown policy throws InvalidJobDefinition", () => {
      const define = (limit: unknown) => () =>
        Job.make(
          "BadLimit",
          { payload: Task, limit: limit as Job.JobOptions<typeof Task.Type>["limit"] },
          () => Effect.void
        )
      assert.throws(define({ to: -1 }), /limit.to/)
      assert.throws(define({ to: 0 }), /limit.to/)
      assert.throws(define({ to: 1.5 }), /limit.to/)
      assert.throws(define({ to: 1, onConflict: "drop" }), /onConflict must be block, discard or raise/)
      assert.throws(define({ to: 1, lease: "1 minute" }), /unknown limit option lease/)
      assert.throws(define({ to: 1, duration: "soon" }), /limit\.duration must be a finite duration/)
      assert.throws(define({ to: 1, duration: -5 }), /limit\.duration/)
      assert.throws(define({ to: 1, duration: 0 }), /limit\.duration/)
      assert.throws(define({ to: 1, duration: Number.POSITIVE_INFINITY }), /limit\.duration/)
      assert.throws(define({ to: 1, key: "account" }), /limit\.key must be a function/)
      // a valid one is accepted as any Duration input
      assert.doesNotThrow(define({ to: 1, duration: "15 minutes" }))
      assert.doesNotThrow(define({ to: 1, duration: 90_000 }))
    })

    it.effect("a key function that throws fails the enqueue with InvalidLimitKey; nothing is written", () =>
      Effect.gen(function* () {
        const queue = fresh("badlimit")
        const job = Job.make(
          "LimitKeyThrows",
          {
            payload: Task,
            queue,
            limit: {
              to: 1,
              key: () => {
                throw new Error("no account")
              }
            }
          },
          () => Effect.void
        )
        const e1 = yield* job.enqueue({ key: "k", i: 1 }).pipe(Effect.flip)
        assert.strictEqual(e1._tag, "InvalidLimitKey")
        assert.include(e1.message, "no account")
        const e2 = yield* job.enqueueMany([{ key: "k", i: 1 }]).pipe(Effect.flip)
        assert.strictEqual(e2._tag, "InvalidLimitKey")
        const depth = yield* depthOf(queue).pipe(
          Effect.map((m) => m.depth),
          Effect.catchTag("QueueNotFound", () => Effect.succeed(0))
        )
        assert.strictEqual(depth, 0)
      })
    )
  })
})

describe("concurrency limits across processes", () => {
  it.live(
    "a slot held by a supervisor killed with SIGKILL comes back within seconds; never two at once",
    () =>
      TestDatabase.onFreshDatabase(
        { processHeartbeatInterval: "200 millis", staleProcessThreshold: "1 second", pollingInterval: "5 seconds" },
        (url) =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            yield* sql`CREATE TABLE child_log (key text NOT NULL, event text NOT NULL, pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`
            const log = sql<{
              readonly key: string
              readonly event: string
              readonly pid: number
              readonly at: Date
            }>`SELECT key, event, pid, at FROM child_log ORDER BY at`
            const queue = "limited_crash"
            // the survivor runs the same job (same name, same limit), quickly, logging as this process
            const Sleepy = Job.make("Sleepy", { payload: Task, queue, limit: { to: 1 } }, ({ key }) =>
              Effect.gen(function* () {
                yield* sql`INSERT INTO child_log (key, event, pid) VALUES (${key}, 'started', ${process.pid})`
                yield* Effect.sleep("50 millis")
                yield* sql`INSERT INTO child_log (key, event, pid) VALUES (${key}, 'completed', ${process.pid})`
              }).pipe(Effect.orDie)
            )
            yield* (yield* QueueStore).create(queue)
            const bundle = yield* bundledFixture("test/fixtures/supervisor-child.ts")
            const child = yield* spawnSupervisor(
              {
                DATABASE_URL: url,
                CHILD_QUEUE: queue,
                CHILD_CONCURRENCY: "3",
                CHILD_JOB_MS: "60000",
                CHILD_LIMIT_TO: "1",
                PGBUS_PROCESS_HEARTBEAT_INTERVAL: "0.2",
                PGBUS_STALE_PROCESS_THRESHOLD: "1",
                PGBUS_VISIBILITY_TIMEOUT: "30"
              },
              bundle
            )
            yield* Sleepy.enqueueMany(Array.from({ length: 4 }, (_, i) => ({ key: `k${i}`, i })))
            yield* eventually(
              "the child runs one",
              Effect.map(log, (rows) => rows.some((r) => r.event === "started")),
              "30 seconds"
            ).pipe(Effect.tapError(() => Effect.logError(child.output())))
            yield* startSupervisor([Sleepy], { capsules: [{ name: "survivor", queues: [queue], concurrency: 4 }] })
            yield* Effect.sleep("1 second")
            assert.strictEqual((yield* log).length, 1, "the child holds the one slot: nothing else started")
            const killedAt = yield* Clock.currentTimeMillis
            child.process.kill("SIGKILL")
            yield* child.exited
            yield* eventually(
              "the survivor ran all four",
              Effect.map(log, (rows) => rows.filter((r) => r.event === "completed").length === 4),
              "15 seconds"
            )
            const took = (yield* Clock.currentTimeMillis) - killedAt
            assert.isBelow(took, 10_000, `back in ${took} ms, not the 30 s visibility timeout`)
            // the survivor's runs (the killed one's never ended), one at a time
            const mine = (yield* log).filter((r) => r.pid === process.pid)
            const runs = mine
              .filter((r) => r.event === "started")
              .map((r) => ({
                start: r.at.getTime(),
                end: mine.find((e) => e.key === r.key && e.event === "completed")!.at.getTime()
              }))
            assert.strictEqual(runs.length, 4, "the killed child's job ran again too")
            assert.strictEqual(mostAtOnce(runs), 1)
          })
      ),
    60_000
  )
})
