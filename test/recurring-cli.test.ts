import { userInfo } from "node:os"
import { assert, layer } from "@effect/vitest"
import { Effect, Fiber, Result, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Job from "../src/Job/Job.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import * as Recurring from "../src/Recurring/Recurring.ts"
import { RecurringScheduler } from "../src/Recurring/Scheduler.ts"
import { Processes } from "../src/Supervisor/Processes.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import { CliSync } from "./fixtures/workflow-schedule-app.ts"
import { pgbus, testLayer } from "./support/cli.ts"
import { eventually } from "./support/jobs.ts"

const Nightly = Job.make(
  "Nightly",
  { payload: Schema.Struct({ full: Schema.Boolean }), queue: "nightly" },
  () => Effect.void
)

layer(testLayer, { excludeTestServices: true, timeout: "60 seconds" })("pgbus recurring", (it) => {
  it.effect(
    "list shows the synced tasks with their schedule, zone, last and next run; run-now enqueues; errors exit 1",
    () =>
      Effect.gen(function* () {
        const empty = yield* pgbus("recurring", "list")
        assert.strictEqual(empty.exitCode, 0)
        assert.include(empty.stdout, "no recurring task")

        const task = Recurring.make("nightly-report", {
          schedule: "every day at 2am",
          timezone: "Europe/Berlin",
          job: Nightly,
          payload: { full: true },
          description: "the nightly report"
        })
        yield* (yield* RecurringScheduler).sync([task])
        const listed = yield* pgbus("recurring", "list")
        assert.strictEqual(listed.exitCode, 0, listed.stderr)
        const row = listed.stdout.split("\n").find((l) => l.startsWith("nightly-report"))
        assert.isDefined(row)
        assert.include(row!, "every day at 2am (0 2 * * *)")
        assert.include(row!, "Europe/Berlin")
        assert.include(row!, "Nightly")
        assert.include(listed.stdout, "nightly-report: the nightly report")
        const json = JSON.parse((yield* pgbus("recurring", "list", "--json")).stdout) as ReadonlyArray<{
          readonly key: string
          readonly nextRunAt: string
          readonly lastRunAt: string | null
        }>
        assert.strictEqual(json[0]!.key, "nightly-report")
        assert.isNull(json[0]!.lastRunAt)
        // 02:00 in Berlin is 00:00 or 01:00 UTC
        assert.match(json[0]!.nextRunAt, /T0[01]:00:00\.000Z$/)

        // a reason past the bound (500): exit 1, nothing recorded or enqueued
        const tooLong = yield* pgbus("recurring", "run-now", "nightly-report", "--reason", "r".repeat(501))
        assert.strictEqual(tooLong.exitCode, 1)
        assert.include(tooLong.stderr, "run-now caller")
        const sql = yield* SqlClient.SqlClient
        const ledger = () =>
          sql<{ readonly manual: boolean; readonly actor: string | null; readonly reason: string | null }>`SELECT
              manual, actor, reason FROM pgbus.recurring_executions WHERE task_key = 'nightly-report'`
        assert.strictEqual((yield* ledger()).length, 0)

        const ran = yield* pgbus("recurring", "run-now", "nightly-report", "--reason", "finance asked")
        assert.strictEqual(ran.exitCode, 0, ran.stderr)
        // the ledger row names the OS user and the reason
        assert.deepStrictEqual(
          (yield* ledger()).map((r) => [r.manual, r.actor, r.reason]),
          [[true, `cli:${userInfo().username}`, "finance asked"]]
        )
        const shown = yield* pgbus("recurring", "list")
        assert.include(shown.stdout, `nightly-report: last run now at`)
        assert.include(shown.stdout, `by cli:${userInfo().username}: finance asked`)
        assert.include(ran.stdout, "enqueued nightly-report now as nightly:")
        const messages = yield* (yield* QueueStore).browse("nightly")
        assert.deepStrictEqual(
          messages.map((m) => m.message),
          [{ job: "Nightly", payload: { full: true } }]
        )
        const after = JSON.parse((yield* pgbus("recurring", "list", "--json")).stdout) as ReadonlyArray<{
          readonly lastRunAt: string | null
          readonly fires: number
        }>
        assert.isNotNull(after[0]!.lastRunAt)
        assert.strictEqual(after[0]!.fires, 1)

        const unknown = yield* pgbus("recurring", "run-now", "no-such-task")
        assert.strictEqual(unknown.exitCode, 1)
        assert.include(unknown.stderr, "no recurring task no-such-task")
        assert.strictEqual((yield* (yield* QueueStore).browse("nightly")).length, 1, "nothing more enqueued")
      })
  )

  it.effect(
    "run-now of a workflow's schedule: without --app a typed error naming the cure; with it a run starts (a singleton's held slot skips)",
    () =>
      Effect.gen(function* () {
        const task = Recurring.fromWorkflow(CliSync)
        assert.isTrue(Result.isSuccess(task))
        yield* (yield* RecurringScheduler).sync([Result.getOrThrow(task)!])
        const sql = yield* SqlClient.SqlClient
        const fires = () =>
          Effect.map(
            sql<{ readonly manual: boolean }>`SELECT manual FROM pgbus.recurring_executions
              WHERE task_key = 'workflow:CliSync'`,
            (rows) => rows.map((r) => r.manual)
          )
        const client = yield* WorkflowClient
        const runs = () => Effect.map(client.list({ workflow: "CliSync" }), (page) => page.runs)

        const bare = yield* pgbus("recurring", "run-now", "workflow:CliSync")
        assert.strictEqual(bare.exitCode, 1)
        assert.include(bare.stderr, "starts workflow CliSync, whose definition is not loaded here")
        assert.include(bare.stderr, "--app MODULE")
        assert.deepStrictEqual(yield* fires(), [], "nothing recorded")
        assert.strictEqual((yield* runs()).length, 0, "no run started")

        const app = "test/fixtures/workflow-schedule-app.ts"
        const ran = yield* pgbus("recurring", "run-now", "workflow:CliSync", "--app", app)
        assert.strictEqual(ran.exitCode, 0, ran.stderr)
        const [run] = yield* runs()
        assert.isDefined(run)
        assert.include(ran.stdout, `started workflow:CliSync now as run ${run!.id}`)
        const info = (yield* client.get(run!.id)).info
        assert.deepStrictEqual([info.singleton, info.scheduledFor !== undefined], [true, true])
        assert.deepStrictEqual(yield* fires(), [true], "one manual fire in the ledger")

        // the first run (ready, never worked here) holds the singleton's slot: the second fire is skipped
        const again = yield* pgbus("recurring", "run-now", "workflow:CliSync", "--app", app)
        assert.strictEqual(again.exitCode, 0, again.stderr)
        assert.include(again.stdout, `skipped workflow:CliSync: run ${run!.id} holds its singleton workflow's slot`)
        assert.strictEqual((yield* runs()).length, 1)
      })
  )

  it.effect("start --scheduler-only runs only the scheduler: it leads, fires the app's task, runs no worker", () =>
    Effect.gen(function* () {
      const conflict = yield* pgbus("start", "--scheduler-only", "--dispatcher-only")
      assert.strictEqual(conflict.exitCode, 1)
      assert.include(conflict.stderr, "mutually exclusive")
      const capsule = yield* pgbus("start", "--scheduler-only", "--capsule", "x")
      assert.strictEqual(capsule.exitCode, 1)
      assert.include(capsule.stderr, "--capsule selects workers")

      const fiber = yield* Effect.forkChild(
        pgbus("start", "--scheduler-only", "--app", "test/fixtures/recurring-app.ts")
      )
      const sql = yield* SqlClient.SqlClient
      yield* eventually(
        "two fires of cli-tick",
        Effect.map(
          sql<{ readonly n: bigint }>`SELECT count(*) AS n FROM pgbus.recurring_executions WHERE task_key = 'cli-tick'`,
          ([r]) => Number(r!.n) >= 2
        ),
        "30 seconds"
      )
      const processes = yield* (yield* Processes).list
      assert.strictEqual(processes.length, 1)
      assert.deepStrictEqual(processes[0]!.roles, ["scheduler"])
      assert.deepStrictEqual(processes[0]!.leads, ["scheduler"])
      assert.strictEqual(processes[0]!.capacity, 0)
      const status = yield* pgbus("status")
      assert.match(status.stdout, /scheduler\s+scheduler/, status.stdout)
      yield* Fiber.interrupt(fiber)
    })
  )
})
