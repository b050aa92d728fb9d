/**
 * Recurring tasks against a real database, driven by TestClock (statements bound to it): cron
 * edge cases (DST gap and repeat, end of month), catch-up after a stopped cluster, a changed or
 * removed task, two schedulers at once, run-now, and bad input (typed errors, nothing written).
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, layer } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Result, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import { layerEffectClock } from "../src/Database.ts"
import * as Job from "../src/Job/Job.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import * as Recurring from "../src/Recurring/Recurring.ts"
import { InvalidRecurringTask, UnknownRecurringTask } from "../src/Recurring/RecurringError.ts"
import { parseSchedule } from "../src/Recurring/Schedule.ts"
import { REASON_MAX, RECURRING_HEADER, RecurringScheduler } from "../src/Recurring/Scheduler.ts"
import { Registry } from "../src/Registry.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Report = Job.make("Report", { payload: Schema.Struct({ n: Schema.Number }), queue: "reports" }, () => Effect.void)

let n = 0
const unique = (base: string) => `${base}_${n++}`

/** Runs a test on TestClock from `at`, statements bound to it. */
const at = <A, E, R>(start: string, effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    yield* TestClock.setTime(new Date(start).getTime())
    return yield* effect
  }).pipe(Effect.provide([layerEffectClock, TestClock.layer()]))

const setTime = (iso: string) => TestClock.setTime(new Date(iso).getTime())

/** The ledger's slots of a task, oldest first, as ISO strings. */
const ledger = (key: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{
        readonly run_at: Date
        readonly manual: boolean
        readonly msg_id: bigint | null
        readonly actor: string | null
        readonly reason: string | null
      }>`SELECT run_at, manual, msg_id, actor, reason FROM pgbus.recurring_executions WHERE task_key = ${key} ORDER BY run_at`
  ).pipe(Effect.orDie)

const slotsOf = (key: string) => Effect.map(ledger(key), (rows) => rows.map((r) => r.run_at.toISOString()))

const firedSlots = (report: { readonly fired: ReadonlyArray<{ readonly runAt: Date }> }) =>
  report.fired.map((f) => f.runAt.toISOString())

layer(TestDatabase.layer(), { excludeTestServices: true })("recurring tasks", (it) => {
  describe("schedules", () => {
    it.effect("cron with 5 or 6 fields and a zone, macros and phrases translate to cron", () =>
      Effect.sync(() => {
        const cron = (s: string, tz?: string) => {
          const r = parseSchedule(s, tz)
          return Result.isSuccess(r) ? `${r.success.cron} ${r.success.timeZone}` : `error: ${r.failure}`
        }
        assert.strictEqual(cron("0 9 * * mon-fri"), "0 9 * * mon-fri UTC")
        assert.strictEqual(cron("30 0 9 * * *", "Europe/Berlin"), "30 0 9 * * * Europe/Berlin")
        assert.strictEqual(cron("0 9 * * * America/New_York"), "0 9 * * * America/New_York")
        assert.strictEqual(cron("@hourly"), "0 * * * * UTC")
        assert.strictEqual(cron("@daily"), "0 0 * * * UTC")
        assert.strictEqual(cron("@weekly"), "0 0 * * 0 UTC")
        assert.strictEqual(cron("@monthly"), "0 0 1 * * UTC")
        assert.strictEqual(cron("every hour"), "0 * * * * UTC")
        assert.strictEqual(cron("every day at 2am"), "0 2 * * * UTC")
        assert.strictEqual(cron("every day at 3:30pm"), "30 15 * * * UTC")
        assert.strictEqual(cron("every second"), "* * * * * * UTC")
        assert.strictEqual(cron("every 5 minutes"), "*/5 * * * * UTC")
        assert.strictEqual(cron("every 6 hours"), "0 */6 * * * UTC")
        assert.strictEqual(cron("every monday at 9am"), "0 9 * * 1 UTC")
        assert.strictEqual(cron("every weekday at 08:15"), "15 8 * * 1-5 UTC")
      })
    )

    it.effect("bad input: typed errors at definition, naming the task, and nothing written", () =>
      Effect.gen(function* () {
        const reasonOf = (key: string, options: Partial<Recurring.RecurringOptions<{ readonly n: number }>>) => {
          const r = Recurring.check(key, { schedule: "@daily", job: Report, payload: { n: 1 }, ...options })
          assert.isTrue(Result.isFailure(r), `${key} is refused`)
          const error = (r as Result.Failure<unknown, InvalidRecurringTask>).failure
          assert.instanceOf(error, InvalidRecurringTask)
          assert.strictEqual(error.task, key)
          return error.reason
        }
        assert.include(reasonOf("fortnight", { schedule: "every fortnight" }), "neither cron")
        assert.include(reasonOf("seven", { schedule: "every 7 minutes" }), "7 must divide 60")
        assert.include(reasonOf("minute61", { schedule: "61 * * * *" }), "61 * * * *")
        assert.include(reasonOf("last", { schedule: "0 0 L * *" }), "0 0 L * *")
        assert.include(reasonOf("feb31", { schedule: "0 0 31 2 *" }), "never fires")
        assert.include(reasonOf("three", { schedule: "1 2 3" }), "neither cron")
        assert.include(reasonOf("late", { schedule: "every day at 25pm" }), "1 to 12")
        assert.include(reasonOf("mars", { timezone: "Mars/Olympus" }), "time zone")
        assert.include(reasonOf("twozones", { schedule: "@daily UTC", timezone: "Europe/Paris" }), "time zone")
        assert.include(reasonOf("payload", { payload: { n: "one" } as never }), "Schema")
        assert.include(reasonOf("limit", { catchUp: "all", catchUpLimit: 0 }), "catchUpLimit")
        assert.include(reasonOf("catch", { catchUp: "some" as never }), "catchUp")
        assert.include(reasonOf("dlq", { queue: "reports_dlq" }), "dead-letter")
        assert.include(reasonOf("has space", {}), "key")
        // make throws the same typed error where the task is defined
        const thrown = Result.try({
          try: () => Recurring.make("bad", { schedule: "every blue moon", job: Report, payload: { n: 1 } }),
          catch: (e) => e
        })
        assert.isTrue(Result.isFailure(thrown) && thrown.failure instanceof InvalidRecurringTask)
        // two tasks with one key: the registry refuses them and nothing reaches the database
        const a = Recurring.make("dup", { schedule: "@daily", job: Report, payload: { n: 1 } })
        const b = Recurring.make("dup", { schedule: "@hourly", job: Report, payload: { n: 2 } })
        const built = yield* Effect.exit(Layer.build(Registry.layer([Report, a, b])).pipe(Effect.scoped))
        assert.isTrue(Exit.isFailure(built))
        assert.include(String(Exit.isFailure(built) ? built.cause : ""), "two recurring tasks have this key")
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql`SELECT key FROM pgbus.recurring_tasks WHERE key = 'dup'`
        assert.strictEqual(rows.length, 0)
        // a task whose job is not registered would fail as UnknownJob at every fire: refused at build
        const orphan = Recurring.make("orphan", { schedule: "@daily", job: Report, payload: { n: 1 } })
        const orphaned = yield* Effect.exit(Layer.build(Registry.layer([orphan])).pipe(Effect.scoped))
        assert.isTrue(Exit.isFailure(orphaned))
        assert.include(String(Exit.isFailure(orphaned) ? orphaned.cause : ""), "its job Report is not registered")
        const orphanRows = yield* sql`SELECT key FROM pgbus.recurring_tasks WHERE key = 'orphan'`
        assert.strictEqual(orphanRows.length, 0)
        // a task's own queue is a queue of the registry, so the supervisor serves it
        const urgent = Recurring.make("urgent", { schedule: "@daily", job: Report, payload: { n: 1 }, queue: "urgent" })
        const registry = yield* Layer.build(Registry.layer([Report, urgent])).pipe(
          Effect.map(Context.get(Registry)),
          Effect.scoped
        )
        assert.includeMembers([...registry.queues], ["reports", "urgent"])
        assert.deepStrictEqual(registry.queueUsers?.get("urgent"), ["recurring task urgent"])
      })
    )
  })

  describe("tasks from a file", () => {
    it.effect(
      "a JSON file's tasks name their jobs; an unknown job, a bad payload or schedule, a missing file: typed errors",
      () =>
        Effect.gen(function* () {
          const dir = yield* Effect.promise(() => mkdtemp(join(tmpdir(), "pgbus-recurring-")))
          const file = join(dir, "recurring.json")
          yield* Effect.promise(() =>
            writeFile(
              file,
              JSON.stringify({
                "nightly-report": {
                  schedule: "every day at 2am",
                  timezone: "Europe/Berlin",
                  job: "Report",
                  payload: { n: 3 }
                },
                "hourly-report": {
                  schedule: "@hourly",
                  job: "Report",
                  payload: { n: 1 },
                  catchUp: "none",
                  description: "d"
                }
              })
            )
          )
          const tasks = yield* Recurring.fromFile(file, [Report])
          assert.deepStrictEqual(
            tasks.map((t) => [t.key, t.schedule.cron, t.schedule.timeZone, t.job.name, t.payload, t.catchUp]),
            [
              ["nightly-report", "0 2 * * *", "Europe/Berlin", "Report", { n: 3 }, "one"],
              ["hourly-report", "0 * * * *", "UTC", "Report", { n: 1 }, "none"]
            ]
          )
          const refused = (record: unknown) => Effect.flip(Recurring.fromRecord(record, [Report]))
          const unknownJob = yield* refused({ a: { schedule: "@daily", job: "Nope" } })
          assert.instanceOf(unknownJob, InvalidRecurringTask)
          assert.include(unknownJob.reason, "job Nope is not among the jobs given (Report)")
          assert.include(
            (yield* refused({ b: { schedule: "@daily", job: "Report", payload: { n: "x" } } })).reason,
            "Schema"
          )
          const badSchedule = yield* refused({ c: { schedule: "every blue moon", job: "Report", payload: { n: 1 } } })
          assert.strictEqual(badSchedule.task, "c")
          assert.include((yield* refused({ d: { job: "Report" } })).task, "(file)")
          const missing = yield* Effect.flip(Recurring.fromFile(join(dir, "missing.json"), [Report]))
          assert.include(missing.reason, "ENOENT")
          yield* Effect.promise(() => rm(dir, { recursive: true, force: true }))
        })
    )
  })

  describe("slots (TestClock)", () => {
    it.effect("DST gap: 02:30 Berlin on the spring-forward night fires once, at 03:30 CEST", () =>
      at(
        "2026-03-28T12:00:00Z",
        Effect.gen(function* () {
          const key = unique("gap")
          const task = Recurring.make(key, {
            schedule: "30 2 * * *",
            timezone: "Europe/Berlin",
            job: Report,
            payload: { n: 1 }
          })
          const session = yield* (yield* RecurringScheduler).session([task])
          assert.deepStrictEqual(firedSlots(yield* session.runOnce), [])
          yield* setTime("2026-03-29T06:00:00Z")
          assert.deepStrictEqual(firedSlots(yield* session.runOnce), ["2026-03-29T01:30:00.000Z"])
          yield* setTime("2026-03-30T06:00:00Z")
          assert.deepStrictEqual(firedSlots(yield* session.runOnce), ["2026-03-30T00:30:00.000Z"])
          assert.deepStrictEqual(yield* slotsOf(key), ["2026-03-29T01:30:00.000Z", "2026-03-30T00:30:00.000Z"])
        })
      )
    )

    it.effect("DST repeat: 02:30 Berlin on the fall-back night fires once (the earlier 02:30)", () =>
      at(
        "2026-10-24T12:00:00Z",
        Effect.gen(function* () {
          const key = unique("repeat")
          const task = Recurring.make(key, { schedule: "30 2 * * * Europe/Berlin", job: Report, payload: { n: 1 } })
          const session = yield* (yield* RecurringScheduler).session([task])
          yield* session.runOnce
          yield* setTime("2026-10-25T00:45:00Z")
          assert.deepStrictEqual(firedSlots(yield* session.runOnce), ["2026-10-25T00:30:00.000Z"])
          yield* setTime("2026-10-25T06:00:00Z")
          assert.deepStrictEqual(firedSlots(yield* session.runOnce), [], "the repeated 02:30 does not fire again")
          assert.deepStrictEqual(yield* slotsOf(key), ["2026-10-25T00:30:00.000Z"])
        })
      )
    )

    it.effect("end of month: day 31 skips the short months; @monthly fires on every 1st", () =>
      at(
        "2026-01-15T00:00:00Z",
        Effect.gen(function* () {
          const k31 = unique("day31")
          const kMonthly = unique("monthly")
          const tasks = [
            Recurring.make(k31, { schedule: "0 0 31 * *", job: Report, payload: { n: 31 } }),
            Recurring.make(kMonthly, { schedule: "@monthly", job: Report, payload: { n: 1 } })
          ]
          const session = yield* (yield* RecurringScheduler).session(tasks)
          yield* session.runOnce
          for (const day of [
            "2026-02-01T00:00:01Z",
            "2026-03-01T00:00:01Z",
            "2026-04-01T00:00:01Z",
            "2026-05-01T00:00:01Z"
          ]) {
            yield* setTime(day)
            yield* session.runOnce
          }
          assert.deepStrictEqual(yield* slotsOf(k31), ["2026-01-31T00:00:00.000Z", "2026-03-31T00:00:00.000Z"])
          assert.deepStrictEqual(yield* slotsOf(kMonthly), [
            "2026-02-01T00:00:00.000Z",
            "2026-03-01T00:00:00.000Z",
            "2026-04-01T00:00:00.000Z",
            "2026-05-01T00:00:00.000Z"
          ])
        })
      )
    )

    it.effect("catch-up after a stopped cluster: one fires the newest missed slot, none none, all the newest N", () =>
      at(
        "2026-05-01T10:30:00Z",
        Effect.gen(function* () {
          const scheduler = yield* RecurringScheduler
          const keys = { one: unique("one"), none: unique("none"), all: unique("all") }
          const tasks = [
            Recurring.make(keys.one, { schedule: "every hour", job: Report, payload: { n: 1 } }),
            Recurring.make(keys.none, { schedule: "every hour", job: Report, payload: { n: 2 }, catchUp: "none" }),
            Recurring.make(keys.all, {
              schedule: "every hour",
              job: Report,
              payload: { n: 3 },
              catchUp: "all",
              catchUpLimit: 3
            })
          ]
          const first = yield* scheduler.session(tasks)
          yield* first.runOnce
          yield* setTime("2026-05-01T11:00:30Z")
          assert.strictEqual((yield* first.runOnce).fired.length, 3, "each fires 11:00 while running")
          // the cluster stops; a new leader starts at 16:10 (12:00 to 16:00 were missed)
          yield* setTime("2026-05-01T16:10:00Z")
          const second = yield* scheduler.session(tasks)
          yield* second.runOnce
          assert.deepStrictEqual(yield* slotsOf(keys.one), ["2026-05-01T11:00:00.000Z", "2026-05-01T16:00:00.000Z"])
          assert.deepStrictEqual(yield* slotsOf(keys.none), ["2026-05-01T11:00:00.000Z"])
          assert.deepStrictEqual(yield* slotsOf(keys.all), [
            "2026-05-01T11:00:00.000Z",
            "2026-05-01T14:00:00.000Z",
            "2026-05-01T15:00:00.000Z",
            "2026-05-01T16:00:00.000Z"
          ])
          // back on time: the next slot fires for all three
          yield* setTime("2026-05-01T17:00:05Z")
          assert.strictEqual((yield* second.runOnce).fired.length, 3)
          // each fire is a job on the task's queue, with the slot in its headers
          const messages = yield* (yield* QueueStore).browse("reports", { limit: 1000 })
          const slots = messages
            .map((m) => m.headers[RECURRING_HEADER] as { readonly task: string; readonly run_at: string })
            .filter((h) => h.task === keys.all)
            .map((h) => h.run_at)
          assert.deepStrictEqual(slots, yield* slotsOf(keys.all))
        })
      )
    )

    it.effect("a changed schedule applies from the next slot; a removed task stops and leaves the list", () =>
      at(
        "2026-06-01T10:30:00Z",
        Effect.gen(function* () {
          const scheduler = yield* RecurringScheduler
          const key = unique("changed")
          const gone = unique("gone")
          const hourly = Recurring.make(key, { schedule: "every hour", job: Report, payload: { n: 1 } })
          const removed = Recurring.make(gone, { schedule: "every 15 minutes", job: Report, payload: { n: 2 } })
          const old = yield* scheduler.session([hourly, removed])
          yield* old.runOnce
          // a deploy at 10:50 changes the schedule and removes the other task
          yield* setTime("2026-06-01T10:50:00Z")
          const quarter = Recurring.make(key, { schedule: "every 15 minutes", job: Report, payload: { n: 1 } })
          const next = yield* scheduler.session([quarter])
          assert.deepStrictEqual(firedSlots(yield* next.runOnce), [], "10:45 was before the change")
          yield* setTime("2026-06-01T11:01:00Z")
          assert.deepStrictEqual(firedSlots(yield* next.runOnce), ["2026-06-01T11:00:00.000Z"])
          yield* setTime("2026-06-01T11:16:00Z")
          assert.deepStrictEqual(firedSlots(yield* next.runOnce), ["2026-06-01T11:15:00.000Z"])
          assert.deepStrictEqual(yield* slotsOf(gone), [], "the removed task never fired")
          const listed = (yield* scheduler.list).map((t) => t.key)
          assert.include(listed, key)
          assert.notInclude(listed, gone)
          const summary = (yield* scheduler.list).find((t) => t.key === key)!
          assert.strictEqual(summary.cron, "*/15 * * * *")
          assert.strictEqual(summary.nextRunAt?.toISOString(), "2026-06-01T11:30:00.000Z")
        })
      )
    )

    it.effect("two schedulers tick at once: each slot fires once (the ledger's unique key)", () =>
      at(
        "2026-07-01T09:59:30Z",
        Effect.gen(function* () {
          const scheduler = yield* RecurringScheduler
          const key = unique("race")
          const task = Recurring.make(key, { schedule: "every minute", job: Report, payload: { n: 1 } })
          const a = yield* scheduler.session([task])
          const b = yield* scheduler.session([task])
          yield* Effect.all([a.runOnce, b.runOnce])
          yield* setTime("2026-07-01T10:03:10Z")
          const [ra, rb] = yield* Effect.all([a.runOnce, b.runOnce], { concurrency: 2 })
          // each slot fired by one of them; how many the other then found fired depends on when it
          // read the task (a read after the first fire starts past that slot): 4 at most
          const slots = [...firedSlots(ra!), ...firedSlots(rb!)].sort()
          assert.deepStrictEqual(
            slots,
            [
              "2026-07-01T10:00:00.000Z",
              "2026-07-01T10:01:00.000Z",
              "2026-07-01T10:02:00.000Z",
              "2026-07-01T10:03:00.000Z"
            ],
            "10:00 to 10:03, once each"
          )
          assert.isAtMost(ra!.alreadyFired + rb!.alreadyFired, 4)
          const rows = yield* ledger(key)
          assert.strictEqual(rows.length, 4)
          assert.isTrue(rows.every((r) => r.msg_id !== null))
        })
      )
    )
  })

  describe("failures", () => {
    it.effect(
      "a task whose enqueue fails does not hold up the others; its slot fires at the next tick, still on time",
      () =>
        at(
          "2026-09-01T09:59:30Z",
          Effect.gen(function* () {
            const scheduler = yield* RecurringScheduler
            const store = yield* QueueStore
            const broken = unique("broken")
            const healthy = unique("healthy")
            const queue = unique("fragile")
            const tasks = [
              Recurring.make(broken, {
                schedule: "every minute",
                job: Report,
                payload: { n: 1 },
                queue,
                catchUp: "none"
              }),
              Recurring.make(healthy, { schedule: "every minute", job: Report, payload: { n: 2 } })
            ]
            const session = yield* scheduler.session(tasks)
            yield* session.runOnce
            yield* setTime("2026-09-01T10:00:01Z")
            assert.strictEqual((yield* session.runOnce).fired.length, 2)
            // the queue goes away under the scheduler (its cache still thinks it exists)
            assert.isTrue(yield* store.drop(queue))
            yield* setTime("2026-09-01T10:01:01Z")
            const tick = yield* session.runOnce
            assert.deepStrictEqual(
              tick.failed.map((f) => f.task),
              [broken]
            )
            assert.deepStrictEqual(
              tick.fired.map((f) => f.task),
              [healthy]
            )
            assert.deepStrictEqual(
              yield* slotsOf(broken),
              ["2026-09-01T10:00:00.000Z"],
              "the failed fire wrote nothing"
            )
            // back: its 10:01 slot still counts as on time (catch-up none would drop a missed one)
            yield* store.create(queue)
            yield* setTime("2026-09-01T10:01:30Z")
            const retried = yield* session.runOnce
            assert.deepStrictEqual(firedSlots(retried), ["2026-09-01T10:01:00.000Z"])
            assert.deepStrictEqual(retried.failed, [])
            assert.deepStrictEqual(yield* slotsOf(broken), ["2026-09-01T10:00:00.000Z", "2026-09-01T10:01:00.000Z"])
          })
        )
    )
  })

  describe("run-now", () => {
    it.effect("enqueues the task's job now, recorded as manual; the schedule is unchanged; an unknown key fails", () =>
      at(
        "2026-08-01T10:30:00Z",
        Effect.gen(function* () {
          const scheduler = yield* RecurringScheduler
          const key = unique("manual")
          const task = Recurring.make(key, { schedule: "every hour", job: Report, payload: { n: 7 } })
          const session = yield* scheduler.session([task])
          yield* session.runOnce
          const fire = yield* scheduler.runNow(key)
          assert.strictEqual(fire.runAt.toISOString(), "2026-08-01T10:30:00.000Z")
          const [message] = (yield* (yield* QueueStore).browse("reports", { limit: 1000 })).filter(
            (m) => m.msgId === fire.msgId
          )
          assert.deepStrictEqual(message?.message, { job: "Report", payload: { n: 7 } })
          const rows = yield* ledger(key)
          assert.deepStrictEqual(
            rows.map((r) => [r.manual, r.msg_id]),
            [[true, fire.msgId]]
          )
          // the manual fire does not move the schedule: 11:00 still fires
          yield* setTime("2026-08-01T11:00:02Z")
          assert.deepStrictEqual(firedSlots(yield* session.runOnce), ["2026-08-01T11:00:00.000Z"])

          // a caller's run-now records who and why; the scheduled fires have neither
          yield* setTime("2026-08-01T11:10:00Z")
          const byAlice = yield* scheduler.runNow(key, { actor: "api:alice", reason: " finance asked " })
          const recorded = yield* ledger(key)
          assert.deepStrictEqual(
            recorded.map((r) => [r.run_at.toISOString(), r.manual, r.actor, r.reason]),
            [
              ["2026-08-01T10:30:00.000Z", true, null, null],
              ["2026-08-01T11:00:00.000Z", false, null, null],
              ["2026-08-01T11:10:00.000Z", true, "api:alice", "finance asked"]
            ]
          )
          assert.strictEqual(byAlice.runAt.toISOString(), "2026-08-01T11:10:00.000Z")
          // the list names the latest manual fire, not the later-or-earlier scheduled one
          const listed = (yield* scheduler.list).find((t) => t.key === key)
          assert.deepStrictEqual(
            listed?.lastManual && { ...listed.lastManual, runAt: listed.lastManual.runAt.toISOString() },
            { runAt: "2026-08-01T11:10:00.000Z", actor: "api:alice", reason: "finance asked" }
          )

          // a reason over the bound, a blank actor or unstorable text: typed, nothing written
          yield* setTime("2026-08-01T11:20:00Z")
          for (const caller of [
            { actor: "api:alice", reason: "r".repeat(REASON_MAX + 1) },
            { actor: "", reason: "why" },
            { actor: "api:alice", reason: "nul\u0000" }
          ]) {
            const refused = yield* Effect.flip(scheduler.runNow(key, caller))
            assert.instanceOf(refused, InvalidRecurringTask)
          }
          assert.strictEqual((yield* ledger(key)).length, 3)
          // at the bound it is accepted
          const atBound = yield* scheduler.runNow(key, { actor: "cli:bob", reason: "r".repeat(REASON_MAX) })
          assert.strictEqual((yield* ledger(key)).at(-1)?.reason?.length, REASON_MAX)
          assert.strictEqual(atBound.runAt.toISOString(), "2026-08-01T11:20:00.000Z")

          const unknown = yield* Effect.flip(scheduler.runNow("no-such-task"))
          assert.instanceOf(unknown, UnknownRecurringTask)
          assert.strictEqual((yield* ledger("no-such-task")).length, 0)
        })
      )
    )
  })
})
