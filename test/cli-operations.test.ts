import { assert, describe, it, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Cli from "../src/Cli/Cli.ts"
import { table } from "../src/Cli/Format.ts"
import * as Job from "../src/Job/Job.ts"
import type { Failure } from "../src/Queue/Message.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import { Processes } from "../src/Supervisor/Processes.ts"
import { performNextStep } from "../src/Testing/Workflows.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { pgbus, testLayer } from "./support/cli.ts"
import { family } from "./support/family.ts"
import { eventually } from "./support/jobs.ts"
import { freePort } from "./support/ports.ts"
import { urlFor } from "./support/server.ts"
import { emptyDatabase } from "./support/TestDatabase.ts"

const failure: Failure = { errorClass: "SmtpError", message: "refused", attempt: 1 }
const Payload = Schema.Struct({ id: Schema.Number })
const Flow = Workflow.make(
  "CliFlow",
  { payload: Payload, signals: { go: Schema.Struct({ n: Schema.Number }) } },
  function* ({ waitForSignal }) {
    yield* Workflow.step("first", Effect.succeed(1))
    return yield* waitForSignal("go")
  }
)

describe("table", () => {
  it("measures cells by display width: wide characters take two columns", () => {
    const out = table(
      ["NAME", "N"],
      [
        ["ファイル", "1"],
        ["file", "2"]
      ]
    ).split("\n")
    assert.deepStrictEqual(out, ["NAME      N", "ファイル  1", "file      2"])
  })
})

layer(testLayer, { excludeTestServices: true, timeout: "60 seconds" })("pgbus operations commands", (it) => {
  it.effect("status prints the verdict and the processes; --json the same as data", () =>
    Effect.gen(function* () {
      yield* (yield* Processes).register({
        id: "cli-status-proc",
        pid: 4242,
        host: "worker-1",
        roles: ["workers", "dispatcher"],
        capsules: [{ name: "default", queues: ["default"], concurrency: 5 }],
        capacity: 5,
        appRevision: undefined,
        version: "test"
      })
      const out = yield* pgbus("status")
      assert.strictEqual(out.exitCode, 0, out.stderr)
      assert.match(out.stdout, /^cluster: (OK|DEGRADED)/)
      assert.include(out.stdout, "worker-1:4242")
      assert.include(out.stdout, "capsule default: default × 5")
      const asJson = yield* pgbus("status", "--json")
      const data = JSON.parse(asJson.stdout)
      assert.include(["OK", "DEGRADED"], data.verdict.status)
      assert.isTrue(data.processes.some((p: { host: string }) => p.host === "worker-1"))
    })
  )

  it.effect("doctor passes on a migrated database and prints a config summary; --json gives the checks", () =>
    Effect.gen(function* () {
      const out = yield* pgbus("doctor")
      assert.strictEqual(out.exitCode, 0, `${out.stdout}\n${out.stderr}`)
      assert.include(out.stdout, "[ ok ] database")
      assert.match(out.stdout, /\[ ok \] schema version: schema pgbus at migration \d+ \(latest\)/)
      assert.include(out.stdout, "[ ok ] LISTEN/NOTIFY: round trip in")
      assert.include(out.stdout, "config:")
      assert.notInclude(out.stdout, "password")
      const asJson = JSON.parse((yield* pgbus("doctor", "--json")).stdout)
      assert.isTrue(asJson.ok)
      assert.deepStrictEqual(
        asJson.checks.map((c: { name: string }) => c.name),
        [
          "configuration",
          "database",
          "schema version",
          "queues",
          "LISTEN/NOTIFY",
          "process liveness",
          "autovacuum",
          "long transactions"
        ]
      )
    })
  )

  it.effect(
    "doctor warns about a REPEATABLE READ reader holding its snapshot past the threshold, not after it ends",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const opened = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        // a report holding one snapshot: vacuum cannot remove rows deleted after it began
        const reader = yield* sql
          .withTransaction(
            Effect.gen(function* () {
              yield* sql`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`
              yield* sql`SELECT count(*) FROM pgbus.queues`
              yield* Deferred.succeed(opened, undefined)
              yield* Deferred.await(release)
            })
          )
          .pipe(Effect.forkChild)
        yield* Deferred.await(opened)
        yield* Effect.sleep("1200 millis")
        const held = yield* pgbus("doctor", "--long-transaction", "1")
        // a warning: the report still passes
        assert.strictEqual(held.exitCode, 0, `${held.stdout}\n${held.stderr}`)
        assert.match(
          held.stdout,
          /\[warn\] long transactions: 1 hold\(s\) back vacuum .*pid \d+ .*idle in transaction for \d+s/
        )
        // the default threshold (60 s) is not reached
        const relaxed = yield* pgbus("doctor")
        assert.include(relaxed.stdout, "[ ok ] long transactions: none older than 60s holds back vacuum")
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(reader)
        const after = yield* pgbus("doctor", "--long-transaction", "1", "--json")
        const check = JSON.parse(after.stdout).checks.find((c: { name: string }) => c.name === "long transactions")
        assert.deepStrictEqual(check, {
          name: "long transactions",
          status: "ok",
          detail: "none older than 1s holds back vacuum"
        })
      })
  )

  it.effect("doctor exits 1 on an unmigrated database and on one that cannot be reached", () =>
    Effect.gen(function* () {
      const empty = yield* emptyDatabase
      const unmigrated = yield* Cli.capture(["doctor", "--database-url", urlFor(empty)])
      assert.strictEqual(unmigrated.exitCode, 1)
      assert.include(unmigrated.stdout, "[FAIL] schema version: schema pgbus is not migrated: run pgbus migrate")
      assert.include(unmigrated.stderr, "doctor: 1 check(s) failed: schema version")
      // start --doctor runs the same checks first (process liveness skipped) and does not boot
      const start = yield* Cli.capture(["start", "--doctor", "--database-url", urlFor(empty)])
      assert.strictEqual(start.exitCode, 1)
      assert.include(start.stdout, "[FAIL] schema version")
      assert.include(start.stdout, "[skip] process liveness")
      assert.notInclude(start.stdout, "[pgbus] ready")

      const port = yield* freePort
      const down = yield* Cli.capture(["doctor", "--database-url", `postgres://postgres@127.0.0.1:${port}/postgres`])
      assert.strictEqual(down.exitCode, 1)
      assert.include(down.stdout, "[FAIL] database")
      assert.include(down.stdout, "[skip] schema version")
    }).pipe(Effect.scoped)
  )

  it.effect("workflows list, show, counts, attention, pause, resume, signal, cancel", () =>
    Effect.gen(function* () {
      const run = yield* Flow.start({ id: 1 }, { subject: "order:cli" })
      yield* performNextStep(run.id).pipe(Effect.provide(Registry.layer([Flow])))
      const list = yield* pgbus("workflows", "list", "--workflow", "CliFlow", "--status", "waiting")
      assert.strictEqual(list.exitCode, 0, list.stderr)
      assert.include(list.stdout, run.id)
      assert.include(list.stdout, "Waiting for signal `go`")
      const asJson = JSON.parse((yield* pgbus("workflows", "list", "--subject", "order:cli", "--json")).stdout)
      assert.deepStrictEqual(
        asJson.runs.map((r: { id: string }) => r.id),
        [run.id]
      )
      const bad = yield* pgbus("workflows", "list", "--status", "sleeping")
      assert.strictEqual(bad.exitCode, 1)
      assert.include(bad.stderr, "unknown status sleeping")

      const show = yield* pgbus("workflows", "show", run.id)
      assert.include(show.stdout, "status        waiting")
      assert.include(show.stdout, '"[redacted]"')
      assert.include(show.stdout, "started by app")
      const withPayloads = yield* pgbus("workflows", "show", run.id, "--payloads")
      assert.include(withPayloads.stdout, '"id": 1')

      const paused = yield* pgbus("workflows", "pause", run.id, "--reason", "look first")
      assert.strictEqual(paused.exitCode, 0, paused.stderr)
      assert.include(paused.stdout, "Paused run")
      const again = yield* pgbus("workflows", "pause", run.id)
      assert.strictEqual(again.exitCode, 1)
      assert.include(again.stderr, "it is paused")
      const events = yield* (yield* WorkflowClient).events(run.id)
      const pause = events.find((e) => e.type === "paused")
      assert.match(pause?.actor ?? "", /^cli(:|$)/)
      assert.strictEqual(pause?.reason, "look first")

      const attention = yield* pgbus("workflows", "attention", "--workflow", "CliFlow")
      assert.include(attention.stdout, "paused_manual")
      const counts = JSON.parse((yield* pgbus("workflows", "counts", "--json")).stdout)
      assert.isAtLeast(counts.byStatus.paused, 1)

      assert.strictEqual((yield* pgbus("workflows", "resume", run.id)).exitCode, 0)
      const signalled = yield* pgbus(
        "workflows",
        "signal",
        run.id,
        "go",
        "--payload",
        '{"n":3}',
        "--idempotency-key",
        "k"
      )
      assert.strictEqual(signalled.exitCode, 0, signalled.stderr)
      assert.include(signalled.stdout, "signalled go")
      const badJson = yield* pgbus("workflows", "signal", run.id, "go", "--payload", "{nope")
      assert.strictEqual(badJson.exitCode, 1)
      const cancelled = yield* pgbus("workflows", "cancel", run.id, "--expected-status", "ready")
      assert.strictEqual(cancelled.exitCode, 0, cancelled.stderr)
      assert.strictEqual((yield* (yield* WorkflowClient).get(run.id)).info.status, "cancelled")
    })
  )

  it.effect("workflows list and show priority, parent and children; cancel --cancel-children ends the live child", () =>
    Effect.gen(function* () {
      const { parentId, childId } = yield* family({ singleton: true })
      const list = yield* pgbus("workflows", "list", "--workflow", "FamilyKid")
      assert.strictEqual(list.exitCode, 0, list.stderr)
      const header = list.stdout.split("\n")[0]!
      assert.match(header, /STATUS\s+PRIORITY\s+PARENT/)
      const row = list.stdout.split("\n").find((l) => l.startsWith(childId))
      assert.match(row ?? "", new RegExp(`ready\\s+2\\s+${parentId}:kid`))

      const show = yield* pgbus("workflows", "show", parentId)
      assert.include(show.stdout, "priority      2")
      assert.include(show.stdout, "singleton     yes")
      assert.match(show.stdout, new RegExp(`children:\\n.*\\n${childId}\\s+FamilyKid\\s+kid\\s+ready`))
      const child = yield* pgbus("workflows", "show", childId)
      assert.include(child.stdout, `parent        ${parentId} (step kid)`)

      const misplaced = yield* pgbus("workflows", "pause", parentId, "--cancel-children")
      assert.strictEqual(misplaced.exitCode, 1)
      assert.include(misplaced.stderr, "Unrecognized flag: --cancel-children in command pgbus workflows pause")
      assert.strictEqual((yield* (yield* WorkflowClient).get(parentId)).info.status, "waiting", "nothing was done")

      const alone = yield* pgbus("workflows", "cancel", parentId, "--reason", "parent only")
      assert.strictEqual(alone.exitCode, 0, alone.stderr)
      assert.strictEqual((yield* (yield* WorkflowClient).get(childId)).info.status, "ready")

      const other = yield* family()
      const both = yield* pgbus("workflows", "cancel", other.parentId, "--cancel-children", "--reason", "all of it")
      assert.strictEqual(both.exitCode, 0, both.stderr)
      assert.include(both.stdout, "it is cancelled (and 1 live child run(s))")
      assert.strictEqual((yield* (yield* WorkflowClient).get(other.childId)).info.status, "cancelled")
      const event = (yield* (yield* WorkflowClient).events(other.childId)).find((e) => e.type === "cancelled")
      assert.match(event?.actor ?? "", /^cli(:|$)/)
      assert.strictEqual(event?.reason, "all of it")
    })
  )

  it.effect("queues pause, resume and purge (purge needs --yes); events, outbox and batches", () =>
    Effect.gen(function* () {
      const store = yield* QueueStore
      yield* store.create("cli_ops")
      yield* store.send("cli_ops", { job: "A", payload: 1 })
      yield* store.send("cli_ops", { job: "A", payload: 2 })
      const [claimed] = yield* store.read("cli_ops")
      yield* store.moveToDeadLetter("cli_ops", claimed!, { source: "worker", failure })

      const paused = yield* pgbus("queues", "pause", "cli_ops", "--reason", "incident")
      assert.strictEqual(paused.exitCode, 0, paused.stderr)
      const list = yield* pgbus("queues")
      assert.match(list.stdout, /cli_ops .* by cli(:\S+)?: incident/)
      const asJson = JSON.parse((yield* pgbus("queues", "--json")).stdout)
      const queue = asJson.find((q: { name: string }) => q.name === "cli_ops")
      assert.deepStrictEqual([queue.paused, queue.deadLetters, queue.depth], [true, 1, 1])
      assert.strictEqual((yield* pgbus("queues", "resume", "cli_ops")).exitCode, 0)

      const refused = yield* pgbus("queues", "purge", "cli_ops")
      assert.strictEqual(refused.exitCode, 1)
      assert.include(refused.stderr, "without --yes")
      assert.strictEqual((yield* store.metrics("cli_ops")).depth, 1, "nothing was purged")
      const purged = yield* pgbus("queues", "purge", "cli_ops", "--yes")
      assert.include(purged.stdout, "purged 1 message(s) of cli_ops")
      const missing = yield* pgbus("queues", "pause", "no_such_queue")
      assert.strictEqual(missing.exitCode, 1)
      assert.include(missing.stderr, "queue no_such_queue not found")

      for (const command of ["events", "outbox", "batches"]) {
        const out = yield* pgbus(command)
        assert.strictEqual(out.exitCode, 0, `${command}: ${out.stderr}`)
        const data = yield* pgbus(command, "--json")
        assert.doesNotThrow(() => JSON.parse(data.stdout), command)
      }
      assert.include((yield* pgbus("outbox")).stdout, "outbox: 0 pending, 0 failing, 0 published")
      assert.include((yield* pgbus("batches")).stdout, "batches: 0 pending (0 stalled), 0 finished")
      const dlq = JSON.parse((yield* pgbus("dlq", "list", "--json")).stdout)
      assert.strictEqual(dlq.total, 1)
      assert.notInclude(JSON.stringify(dlq), "payload")
    })
  )

  it.effect("locks shows and releases uniqueness keys; rates set and reset a job's rate", () =>
    Effect.gen(function* () {
      const Unique = Job.make(
        "CliUnique",
        { payload: Schema.Struct({ id: Schema.String }), queue: "cli_locks", unique: { key: (p) => p.id } },
        () => Effect.void
      )
      const held = yield* Unique.enqueue({ id: "order-7" })
      const shown = yield* pgbus("locks")
      assert.strictEqual(shown.exitCode, 0, shown.stderr)
      assert.include(shown.stdout, "1 key(s) held")
      assert.match(shown.stdout, new RegExp(`CliUnique .*order-7 .*untilExecuted .*${held.id}`))
      const data = JSON.parse((yield* pgbus("locks", "--json")).stdout)
      assert.strictEqual(data.unique.total, 1)
      const released = yield* pgbus("locks", "release", "CliUnique", "order-7", "--reason", "stuck")
      assert.include(released.stdout, `released key order-7 of CliUnique (held by ${held.id})`)
      assert.strictEqual((yield* pgbus("locks", "release", "CliUnique", "order-7")).exitCode, 1)

      const set = yield* pgbus("rates", "set", "CliRated", "20", "1 minute", "--reason", "partner asked")
      assert.strictEqual(set.exitCode, 0, set.stderr)
      assert.include(set.stdout, "rate of CliRated: 20 per 60000 ms")
      assert.match((yield* pgbus("rates")).stdout, /CliRated .*20\/60000 ms by cli/)
      assert.strictEqual((yield* pgbus("rates", "set", "CliRated", "0", "1 minute")).exitCode, 1)
      assert.strictEqual((yield* pgbus("rates", "reset", "CliRated")).exitCode, 0)
      assert.include((yield* pgbus("rates")).stdout, "no rates")
    })
  )

  it.effect("api --port serves the JSON API and its docs page until interrupted", () =>
    Effect.gen(function* () {
      const port = yield* freePort
      const server = yield* Effect.forkChild(pgbus("api", "--port", String(port)))
      const get = (path: string) =>
        Effect.tryPromise(() => fetch(`http://127.0.0.1:${port}${path}`).then((r) => r.status))
      yield* eventually(
        "the api answers",
        Effect.map(Effect.result(get("/pgbus/api/health")), (r) => r._tag === "Success" && r.success === 200),
        "20 seconds"
      )
      assert.strictEqual(yield* get("/pgbus/api/docs"), 200)
      assert.strictEqual(yield* get("/pgbus/api/queues"), 200)
      yield* Fiber.interrupt(server)
    })
  )
})
