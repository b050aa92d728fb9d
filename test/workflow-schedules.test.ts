/**
 * Workflow schedules (seed 004): a workflow with `schedule` starts one run per slot, fired by
 * the recurring scheduler's leader, however many supervisors run; the body sees its slot; a
 * singleton's slot that finds a run holding the slot is skipped. Durations that do not divide
 * the day, bad cron and bad zones are refused where the workflow is defined.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { Effect, Result, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Recurring from "../src/Recurring/Recurring.ts"
import { RecurringScheduler } from "../src/Recurring/Scheduler.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import { durationToCron, parseWorkflowSchedule } from "../src/Workflow/Schedule.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { InvalidWorkflowDefinition } from "../src/Workflow/WorkflowError.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

// every second (6-field cron): the body returns the slot it was started for
const Ticker = Workflow.make("Ticker", { payload: Schema.Struct({}), schedule: "* * * * * *" }, function* (run) {
  return yield* Workflow.step("slot", Effect.succeed(run.schedule?.timestamp.toISOString() ?? null))
})

// a singleton every second whose run waits for a signal: the slots while it waits are skipped
const Sync = Workflow.make(
  "Sync",
  {
    payload: Schema.Struct({ source: Schema.String }),
    schedule: "every 1 second",
    singleton: true,
    schedulePayload: { source: "shop" }
  },
  function* (run) {
    yield* run.waitForSignal("go")
    return run.payload.source
  }
)

const ledger = (task: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{
        readonly run_at: Date
      }>`SELECT run_at FROM pgbus.recurring_executions WHERE task_key = ${task} AND NOT manual ORDER BY run_at`
  ).pipe(
    Effect.map((rows) => rows.map((r) => r.run_at.toISOString())),
    Effect.orDie
  )

const runsOf = (workflow: string) =>
  Effect.flatMap(WorkflowClient, (c) => c.list({ workflow, limit: 500 })).pipe(
    Effect.map((page) => page.runs),
    Effect.orDie
  )

const defined = (f: () => unknown) => {
  try {
    f()
    return undefined
  } catch (e) {
    return e
  }
}

describe("workflow schedules: parsing", () => {
  it("durations that divide the day become cron; others are refused with the reason", () => {
    const cron = (s: number) => Result.getOrUndefined(durationToCron(s, "x"))
    assert.strictEqual(cron(300), "*/5 * * * *")
    assert.strictEqual(cron(3600), "0 * * * *")
    assert.strictEqual(cron(6 * 3600), "0 */6 * * *")
    assert.strictEqual(cron(86_400), "0 0 * * *")
    assert.strictEqual(cron(30), "*/30 * * * * *")
    for (const bad of [23 * 60, 7 * 3600, 90, 2 * 86_400, 0]) assert.isUndefined(cron(bad), `${bad}s`)
    const parsed = (s: Parameters<typeof parseWorkflowSchedule>[0], zone?: string) =>
      Result.map(parseWorkflowSchedule(s, zone), (p) => [p.cron, p.timeZone] as const)
    assert.deepStrictEqual(Result.getOrUndefined(parsed("5m")), ["*/5 * * * *", "UTC"])
    assert.deepStrictEqual(Result.getOrUndefined(parsed("1 hour")), ["0 * * * *", "UTC"])
    assert.deepStrictEqual(Result.getOrUndefined(parsed({ days: 1 })), ["0 0 * * *", "UTC"])
    assert.deepStrictEqual(Result.getOrUndefined(parsed("0 9 * * 1-5", "America/New_York")), [
      "0 9 * * 1-5",
      "America/New_York"
    ])
    assert.deepStrictEqual(Result.getOrUndefined(parsed("every day at 2am", "Europe/Berlin")), [
      "0 2 * * *",
      "Europe/Berlin"
    ])
    const reason = (s: Parameters<typeof parseWorkflowSchedule>[0], zone?: string) =>
      Result.isFailure(parseWorkflowSchedule(s, zone)) ? parseWorkflowSchedule(s, zone) : undefined
    assert.isDefined(reason("23m"))
    assert.isDefined(reason("7h"))
    assert.isDefined(reason({ minutes: 23 }))
    assert.isDefined(reason({ fortnights: 1 } as never))
    assert.isDefined(reason("61 * * * *"))
    assert.isDefined(reason("0 0 31 2 *"), "never fires")
    assert.isDefined(reason("0 9 * * *", "Mars/Olympus_Mons"))
    assert.isDefined(reason("whenever"))
  })

  it("a bad schedule, zone, schedule payload or priority throws InvalidWorkflowDefinition where it is written", () => {
    const payload = Schema.Struct({ n: Schema.Number })
    const body = function* () {
      return yield* Workflow.step("one", Effect.succeed(1))
    }
    const cases: ReadonlyArray<readonly [string, () => unknown, string]> = [
      ["23m", () => Workflow.make("A", { payload: Schema.Struct({}), schedule: "23m" }, body), "divide"],
      ["7h", () => Workflow.make("A", { payload: Schema.Struct({}), schedule: "7h" }, body), "divide"],
      ["cron", () => Workflow.make("A", { payload: Schema.Struct({}), schedule: "61 * * * *" }, body), "schedule"],
      [
        "zone",
        () => Workflow.make("A", { payload: Schema.Struct({}), schedule: "@daily", timezone: "No/Where" }, body),
        "schedule"
      ],
      ["payload", () => Workflow.make("A", { payload, schedule: "@daily" }, body), "schedulePayload"],
      [
        "payload type",
        () => Workflow.make("A", { payload, schedule: "@daily", schedulePayload: { n: "x" as never } }, body),
        "schedulePayload"
      ],
      ["zone alone", () => Workflow.make("A", { payload, timezone: "UTC" }, body), "need a schedule"],
      ["negative priority", () => Workflow.make("A", { payload, priority: -1 }, body), "priority"],
      ["fraction priority", () => Workflow.make("A", { payload, priority: 1.5 }, body), "priority"],
      ["singleton", () => Workflow.make("A", { payload, singleton: "yes" as never }, body), "singleton"]
    ]
    for (const [what, define, expected] of cases) {
      const error = defined(define)
      assert.instanceOf(error, InvalidWorkflowDefinition, what)
      assert.include((error as InvalidWorkflowDefinition).message, expected, what)
    }
  })

  it("a workflow's schedule is a recurring task of its own; one without a schedule has none", () => {
    const task = Result.getOrThrow(Recurring.fromWorkflow(Sync))
    assert.strictEqual(task?.key, "workflow:Sync")
    assert.strictEqual(task?.kind, "workflow")
    assert.strictEqual(task?.schedule.cron, "* * * * * *")
    assert.deepStrictEqual(task?.encodedPayload, { source: "shop" })
    const plain = Workflow.make("Plain", { payload: Schema.Struct({}) }, function* () {
      return yield* Workflow.step("one", Effect.succeed(1))
    })
    assert.isUndefined(Result.getOrThrow(Recurring.fromWorkflow(plain)))
  })
})

layer(
  TestDatabase.layer({
    pollingInterval: "50 millis",
    recurringScheduleInterval: "100 millis",
    leaderCheckInterval: "200 millis"
  }),
  { excludeTestServices: true, timeout: "90 seconds" }
)("workflow schedules on two supervisors", (it) => {
  it.effect("each slot starts one run however many supervisors run, and the body sees the slot", () =>
    Effect.gen(function* () {
      const capsules = [{ name: "c", queues: ["default"], concurrency: 2 }]
      yield* startSupervisor([Ticker], { capsules })
      yield* startSupervisor([Ticker], { capsules })
      yield* eventually(
        "four slots fired",
        Effect.map(ledger("workflow:Ticker"), (slots) => slots.length >= 4),
        "30 seconds"
      )
      const slots = yield* ledger("workflow:Ticker")
      // every slot the ledger recorded started exactly one run, for that slot
      yield* eventually(
        "the runs of those slots finished",
        Effect.map(runsOf("Ticker"), (runs) =>
          slots.every((slot) => runs.some((r) => r.scheduledFor?.toISOString() === slot && r.status === "finished"))
        ),
        "30 seconds"
      )
      const runs = yield* runsOf("Ticker")
      for (const slot of slots) {
        const mine = runs.filter((r) => r.scheduledFor?.toISOString() === slot)
        assert.strictEqual(mine.length, 1, `one run for ${slot}`)
        assert.strictEqual(mine[0]!.output, slot, "the body saw its slot")
      }
      assert.strictEqual(new Set(runs.map((r) => r.scheduledFor?.toISOString())).size, runs.length)
      const seconds = slots.map((s) => new Date(s).getTime() / 1000)
      for (let i = 1; i < seconds.length; i++) assert.strictEqual(seconds[i]! - seconds[i - 1]!, 1, "no slot skipped")
    }).pipe(Effect.scoped)
  )

  it.effect("two schedulers firing at once (a leader change) still start one run per slot", () =>
    Effect.gen(function* () {
      const Pulse = Workflow.make("Pulse", { payload: Schema.Struct({}), schedule: "* * * * * *" }, function* (run) {
        return yield* Workflow.step("slot", Effect.succeed(run.schedule?.timestamp.toISOString() ?? null))
      })
      const task = Result.getOrThrow(Recurring.fromWorkflow(Pulse))!
      const scheduler = yield* RecurringScheduler
      const a = yield* scheduler.session([task])
      const b = yield* scheduler.session([task])
      const both = Effect.all([a.runOnce, b.runOnce], { concurrency: 2 })
      // ~3 s of both ticking at once, each racing the other for every slot
      yield* both.pipe(Effect.repeat({ schedule: Schedule.spaced("50 millis"), times: 60 }))
      const slots = yield* ledger("workflow:Pulse")
      assert.isAtLeast(slots.length, 2)
      const runs = yield* runsOf("Pulse")
      assert.deepStrictEqual(
        runs.map((r) => r.scheduledFor?.toISOString()).sort(),
        slots,
        "one run per ledger slot, none without"
      )
    })
  )

  it.effect("a singleton's slots are skipped while its run holds the slot, and fire again once it finished", () =>
    Effect.gen(function* () {
      yield* startSupervisor([Sync], { capsules: [{ name: "c", queues: ["default"], concurrency: 2 }] })
      yield* eventually(
        "a run waits",
        Effect.map(runsOf("Sync"), (runs) => runs.some((r) => r.status === "waiting"))
      )
      const first = (yield* runsOf("Sync"))[0]!
      assert.strictEqual(first.payload && (first.payload as { source: string }).source, "shop")
      yield* eventually(
        "three more slots came and went",
        Effect.map(ledger("workflow:Sync"), (slots) => slots.length >= 4),
        "30 seconds"
      )
      assert.strictEqual((yield* runsOf("Sync")).length, 1, "the slots while it waited were skipped")
      const client = yield* WorkflowClient
      yield* client.signal(first.id, "go", {})
      yield* eventually(
        "finished, and the next slot started a run",
        Effect.map(
          runsOf("Sync"),
          (runs) => runs.length === 2 && runs.some((r) => r.id === first.id && r.status === "finished")
        ),
        "30 seconds"
      )
      const second = (yield* runsOf("Sync")).find((r) => r.id !== first.id)!
      assert.isAbove(second.scheduledFor!.getTime(), first.scheduledFor!.getTime() + 2000)
    }).pipe(Effect.scoped)
  )
})
