import { spawn } from "node:child_process"
import { assert, describe, layer } from "@effect/vitest"
import { Effect, Redacted, Result, Schema } from "effect"
import { McpTest } from "effect/ai"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../src/Config.ts"
import * as Job from "../src/Job/Job.ts"
import * as Mcp from "../src/Mcp/Mcp.ts"
import type { Failure } from "../src/Queue/Message.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import * as Recurring from "../src/Recurring/Recurring.ts"
import { RecurringScheduler } from "../src/Recurring/Scheduler.ts"
import { Registry } from "../src/Registry.ts"
import { performNextStep } from "../src/Testing/Workflows.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { family } from "./support/family.ts"
import { webCaller } from "./support/http.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ id: Schema.Number })
const Flow = Workflow.make("McpFlow", { payload: Payload }, function* () {
  yield* Workflow.step("first", Effect.succeed(1))
  yield* Workflow.sleep("nap", "1 hour")
})
const failure: Failure = { errorClass: "SmtpError", message: "secret-ish text", attempt: 1 }

/** An in-memory MCP client on the tools, with the config's MCP switches set as given. */
const client = (switches: { readonly mcpWriteTools: boolean; readonly mcpAllowPayloads: boolean }) =>
  Effect.gen(function* () {
    const config = yield* PgBusConfig
    return yield* McpTest.makeClient(Mcp.registrations, {
      protocols: Mcp.protocols,
      clientInfo: { name: "claude", version: "1.0" }
    }).pipe(Effect.provideService(PgBusConfig, { ...config, ...switches }))
  })

const structured = (result: { readonly structuredContent?: unknown }) =>
  // biome-ignore lint/suspicious/noExplicitAny: tool results are read loosely
  result.structuredContent as any

layer(TestDatabase.layer({ pollingInterval: "50 millis" }), { excludeTestServices: true, timeout: "60 seconds" })(
  "mcp",
  (it) => {
    describe("read tools", () => {
      it.effect("lists the read tools annotated read-only; a read answers with payloads redacted", () =>
        Effect.gen(function* () {
          const mcp = yield* client({ mcpWriteTools: false, mcpAllowPayloads: false })
          const { tools } = yield* mcp.listTools()
          const names = tools.map((t) => t.name).sort()
          assert.deepStrictEqual(names, [
            "pgbus_dlq",
            "pgbus_health",
            "pgbus_job_rates",
            "pgbus_locks",
            "pgbus_processes",
            "pgbus_queues",
            "pgbus_recurring",
            "pgbus_workflow",
            "pgbus_workflow_definitions",
            "pgbus_workflow_stats",
            "pgbus_workflows",
            "pgbus_workflows_attention"
          ])
          for (const tool of tools) {
            assert.deepStrictEqual(
              [tool.annotations?.readOnlyHint, tool.annotations?.destructiveHint, tool.annotations?.openWorldHint],
              [true, false, false],
              tool.name
            )
          }

          const store = yield* QueueStore
          yield* store.create("mcp_q")
          yield* store.send("mcp_q", { job: "Mail", payload: { to: "x" } })
          const [m] = yield* store.read("mcp_q")
          yield* store.moveToDeadLetter("mcp_q", m!, { source: "worker", failure })

          const health = yield* mcp.callTool({ name: "pgbus_health", arguments: {} })
          assert.isFalse(health.isError ?? false)
          assert.include(["OK", "DEGRADED"], structured(health).status)
          const queues = structured(yield* mcp.callTool({ name: "pgbus_queues", arguments: {} }))
          assert.isTrue(queues.items.some((q: { name: string }) => q.name === "mcp_q"))
          const dlq = structured(
            yield* mcp.callTool({ name: "pgbus_dlq", arguments: { queue: "mcp_q", includePayloads: true } })
          )
          assert.deepStrictEqual([dlq.total, dlq.deadLetters[0].errorMessage], [1, "[redacted]"])

          const run = yield* Flow.start({ id: 1 })
          const one = structured(yield* mcp.callTool({ name: "pgbus_workflow", arguments: { workflowId: run.id } }))
          assert.strictEqual(one.run.payload, "[redacted]", "payloads stay redacted unless the server allows them")
          assert.deepStrictEqual(one.run.availableActions, ["pause", "cancel", "run_now", "reschedule", "signal"])
          const list = structured(
            yield* mcp.callTool({ name: "pgbus_workflows", arguments: { workflowClass: "McpFlow", status: ["ready"] } })
          )
          assert.isTrue(list.runs.some((r: { id: string }) => r.id === run.id))
          const missing = yield* mcp.callTool({
            name: "pgbus_workflow",
            arguments: { workflowId: "00000000-0000-4000-8000-000000000000" }
          })
          assert.isTrue(missing.isError)

          const allowed = yield* client({ mcpWriteTools: false, mcpAllowPayloads: true })
          const shown = structured(
            yield* allowed.callTool({
              name: "pgbus_workflow",
              arguments: { workflowId: run.id, includePayloads: true }
            })
          )
          assert.deepStrictEqual(shown.run.payload, { id: 1 })
          for (const name of ["pgbus_processes", "pgbus_workflows_attention", "pgbus_workflow_definitions"]) {
            const r = yield* mcp.callTool({ name, arguments: {} })
            assert.isFalse(r.isError ?? false, name)
          }
          const stats = yield* mcp.callTool({ name: "pgbus_workflow_stats", arguments: { workflowClass: "McpFlow" } })
          assert.isFalse(stats.isError ?? false)
        }).pipe(Effect.scoped)
      )
    })

    it.effect(
      "pgbus mcp speaks JSON-RPC on stdout and logs on stderr",
      () =>
        Effect.gen(function* () {
          const config = yield* PgBusConfig
          const child = spawn(
            process.execPath,
            ["--import", "tsx", "src/bin/pgbus.ts", "mcp", "--database-url", Redacted.value(config.databaseUrl)],
            { stdio: ["pipe", "pipe", "pipe"] }
          )
          yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGKILL")))
          let stdout = ""
          let stderr = ""
          child.stdout.on("data", (d) => {
            stdout += String(d)
          })
          child.stderr.on("data", (d) => {
            stderr += String(d)
          })
          const send = (message: unknown) => child.stdin.write(`${JSON.stringify(message)}\n`)
          send({
            jsonrpc: "2.0",
            id: 1,
            method: "initialize",
            params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "probe", version: "1" } }
          })
          send({ jsonrpc: "2.0", method: "notifications/initialized" })
          send({ jsonrpc: "2.0", id: 2, method: "tools/list", params: {} })
          // The answer, or the child's exit, ends the wait: a child that dies fails at once, one that
          // writes anything but JSON-RPC on stdout fails below. The deadline only stops a child that
          // hangs: its start (tsx compiling the CLI) outran the former 30 s on a loaded machine, so
          // it is 100 s, under the test's own timeout.
          yield* Effect.promise(
            () =>
              new Promise<void>((resolve, reject) => {
                const done = (error?: Error) => {
                  clearTimeout(deadline)
                  clearInterval(check)
                  child.off("exit", exited)
                  if (error) reject(error)
                  else resolve()
                }
                const exited = (code: number | null, signal: string | null) =>
                  done(new Error(`pgbus mcp exited (${code ?? signal}) before answering: ${stdout}\n${stderr}`))
                const deadline = setTimeout(
                  () => done(new Error(`no tools/list answer in 100 s: ${stdout}\n${stderr}`)),
                  100_000
                )
                const check = setInterval(() => {
                  if (stdout.includes('"id":2')) done()
                }, 50)
                child.on("exit", exited)
              })
          )
          const lines = stdout.split("\n").filter((l) => l.trim() !== "")
          for (const line of lines) assert.doesNotThrow(() => JSON.parse(line), `stdout holds only JSON-RPC: ${line}`)
          const list = lines.map((l) => JSON.parse(l)).find((m) => m.id === 2)
          assert.isTrue(list.result.tools.some((t: { name: string }) => t.name === "pgbus_health"))
        }),
      { timeout: 120_000 }
    )

    it.effect("mounts over HTTP (Streamable HTTP) in an app's router", () =>
      Effect.gen(function* () {
        const call = yield* webCaller(Mcp.layerHttp({ path: "/ops/mcp" }))
        const headers = { accept: "application/json, text/event-stream" }
        const init = yield* call(
          "POST",
          "/ops/mcp",
          {
            jsonrpc: "2.0",
            id: 1,
            method: "initialize",
            params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "web", version: "1" } }
          },
          headers
        )
        assert.strictEqual(init.status, 200, init.text)
        assert.include(init.text, "2025-11-25")
      })
    )

    describe("write tools", () => {
      it.effect("do not exist without the config; when on, a write needs a reason and is audited as mcp:<client>", () =>
        Effect.gen(function* () {
          const run = yield* Flow.start({ id: 2 })
          yield* performNextStep(run.id).pipe(Effect.provide(Registry.layer([Flow])))
          yield* (yield* WorkflowClient).pause(run.id, { actor: "test" })

          const readOnly = yield* client({ mcpWriteTools: false, mcpAllowPayloads: false })
          const refused = yield* Effect.result(
            readOnly.callTool({
              name: "pgbus_workflow_resume",
              arguments: { workflowId: run.id, reason: "fixed", expectedStatus: "paused" }
            })
          )
          assert.isTrue(
            refused._tag === "Failure" || refused.success.isError === true,
            "no write tool without mcpWriteTools"
          )
          assert.strictEqual((yield* (yield* WorkflowClient).get(run.id)).info.status, "paused")

          const mcp = yield* client({ mcpWriteTools: true, mcpAllowPayloads: false })
          const { tools } = yield* mcp.listTools()
          const resume = tools.find((t) => t.name === "pgbus_workflow_resume")
          assert.deepStrictEqual(
            [resume?.annotations?.readOnlyHint, resume?.annotations?.destructiveHint],
            [false, true]
          )
          assert.isTrue(tools.find((t) => t.name === "pgbus_workflow_cancel")?.annotations?.idempotentHint)

          const blank = yield* Effect.result(
            mcp.callTool({
              name: "pgbus_workflow_resume",
              arguments: { workflowId: run.id, reason: "   ", expectedStatus: "paused" }
            })
          )
          assert.isTrue(blank._tag === "Failure" || blank.success.isError === true, "a blank reason is refused")
          const stale = structured(
            yield* mcp.callTool({
              name: "pgbus_workflow_resume",
              arguments: { workflowId: run.id, reason: "fixed", expectedStatus: "ready" }
            })
          )
          assert.deepStrictEqual([stale.ok, stale.code, stale.status], [false, "status_mismatch", "paused"])
          const illegal = structured(
            yield* mcp.callTool({
              name: "pgbus_workflow_skip_step",
              arguments: { workflowId: run.id, reason: "skip it", expectedStatus: "paused" }
            })
          )
          assert.deepStrictEqual(
            [illegal.ok, illegal.code, illegal.allowed],
            [false, "invalid_transition", ["resume", "resume_at", "cancel", "signal"]]
          )
          const events = (yield* (yield* WorkflowClient).events(run.id)).map((e) => e.type)
          assert.notInclude(events, "resumed", "a refused call records nothing")

          const done = structured(
            yield* mcp.callTool({
              name: "pgbus_workflow_resume",
              arguments: { workflowId: run.id, reason: "  SMTP fixed  ", expectedStatus: "paused" }
            })
          )
          assert.isTrue(done.ok, done.reason)
          assert.notStrictEqual(done.workflow.status, "paused")
          const resumed = (yield* (yield* WorkflowClient).events(run.id)).find((e) => e.type === "resumed")
          assert.deepStrictEqual([resumed?.actor, resumed?.reason], ["mcp:claude", "SMTP fixed"])

          const cancel = structured(
            yield* mcp.callTool({
              name: "pgbus_workflow_cancel",
              arguments: { workflowId: run.id, reason: "no longer needed", expectedStatus: done.workflow.status }
            })
          )
          assert.deepStrictEqual([cancel.ok, cancel.workflow.status], [true, "cancelled"])
        }).pipe(Effect.scoped)
      )

      it.effect(
        "a run shows its parent, priority and children; cancel with cancelChildren ends the live child, as mcp:<client>",
        () =>
          Effect.gen(function* () {
            const mcp = yield* client({ mcpWriteTools: true, mcpAllowPayloads: false })
            const { parentId, childId } = yield* family()
            const parent = structured(
              yield* mcp.callTool({ name: "pgbus_workflow", arguments: { workflowId: parentId } })
            )
            assert.deepStrictEqual(
              [parent.run.priority, parent.run.singleton, parent.run.parentRunId],
              [2, false, null]
            )
            assert.deepStrictEqual(parent.children, [
              { id: childId, workflow: "FamilyKid", step: "kid", status: "ready" }
            ])
            const child = structured(
              yield* mcp.callTool({ name: "pgbus_workflow", arguments: { workflowId: childId } })
            )
            assert.deepStrictEqual([child.run.parentRunId, child.run.parentStep], [parentId, "kid"])

            const { tools } = yield* mcp.listTools()
            const cancelTool = tools.find((t) => t.name === "pgbus_workflow_cancel")
            assert.property(
              (cancelTool?.inputSchema as { properties?: Record<string, unknown> } | undefined)?.properties ?? {},
              "cancelChildren"
            )
            const cancel = structured(
              yield* mcp.callTool({
                name: "pgbus_workflow_cancel",
                arguments: {
                  workflowId: parentId,
                  reason: "order withdrawn",
                  expectedStatus: "waiting",
                  cancelChildren: true
                }
              })
            )
            assert.deepStrictEqual([cancel.ok, cancel.workflow.status], [true, "cancelled"])
            const kid = (yield* (yield* WorkflowClient).get(childId)).info
            assert.strictEqual(kid.status, "cancelled")
            const event = (yield* (yield* WorkflowClient).events(childId)).find((e) => e.type === "cancelled")
            assert.deepStrictEqual([event?.actor, event?.reason], ["mcp:claude", "order withdrawn"])

            const other = yield* family()
            const alone = structured(
              yield* mcp.callTool({
                name: "pgbus_workflow_cancel",
                arguments: { workflowId: other.parentId, reason: "just the parent", expectedStatus: "waiting" }
              })
            )
            assert.isTrue(alone.ok, alone.reason)
            assert.strictEqual((yield* (yield* WorkflowClient).get(other.childId)).info.status, "ready")
          }).pipe(Effect.scoped)
      )

      it.effect(
        "flow tools: locks and rates read; a rate set and reset, a uniqueness key released, as mcp:<client>",
        () =>
          Effect.gen(function* () {
            const Once = Job.make(
              "McpOnce",
              { payload: Payload, queue: "mcp_flow", unique: { key: ({ id }) => `k-${id}` } },
              () => Effect.void
            )
            const held = yield* Once.enqueue({ id: 7 })
            const mcp = yield* client({ mcpWriteTools: true, mcpAllowPayloads: false })
            const locks = structured(yield* mcp.callTool({ name: "pgbus_locks", arguments: {} }))
            assert.deepStrictEqual(
              locks.unique.keys
                .filter((k: { job: string }) => k.job === "McpOnce")
                .map((k: { holder: string }) => k.holder),
              [held.id]
            )
            const release = { job: "McpOnce", key: "k-7", reason: "holder is gone" }
            const released = structured(yield* mcp.callTool({ name: "pgbus_unique_key_release", arguments: release }))
            assert.isTrue(released.ok, released.reason)
            assert.include(released.reason, held.id)
            const again = structured(yield* mcp.callTool({ name: "pgbus_unique_key_release", arguments: release }))
            assert.deepStrictEqual([again.ok, again.code], [false, "NotFound"])

            const half = structured(
              yield* mcp.callTool({ name: "pgbus_job_rate_set", arguments: { job: "McpRated", limit: 5, reason: "x" } })
            )
            assert.deepStrictEqual([half.ok, half.code], [false, "InvalidRequest"], "a limit without a period")
            const bad = structured(
              yield* mcp.callTool({
                name: "pgbus_job_rate_set",
                arguments: { job: "McpRated", limit: 5, period: "whenever", reason: "x" }
              })
            )
            assert.deepStrictEqual([bad.ok, bad.code], [false, "InvalidRequest"])
            const set = structured(
              yield* mcp.callTool({
                name: "pgbus_job_rate_set",
                arguments: { job: "McpRated", limit: 20, period: "1 minute", reason: "partner limit" }
              })
            )
            assert.isTrue(set.ok, set.reason)
            assert.deepStrictEqual(
              [set.rate.effective, set.rate.override.actor, set.rate.override.reason],
              [{ limit: 20, periodMs: 60_000 }, "mcp:claude", "partner limit"]
            )
            const rates = structured(yield* mcp.callTool({ name: "pgbus_job_rates", arguments: {} }))
            assert.isTrue(rates.items.some((r: { job: string }) => r.job === "McpRated"))
            const reset = structured(
              yield* mcp.callTool({
                name: "pgbus_job_rate_set",
                arguments: { job: "McpRated", reset: true, reason: "done" }
              })
            )
            assert.deepStrictEqual([reset.ok, reset.rate], [true, null], "no definition here: no rate left")
          }).pipe(Effect.scoped)
      )

      it.effect(
        "recurring tools: tasks listed; run-now enqueues (a write tool, reason required); unknown, blank and unloaded-workflow keys refused",
        () =>
          Effect.gen(function* () {
            const Report = Job.make("McpReport", { payload: Payload, queue: "mcp_recurring" }, () => Effect.void)
            const Nightly = Workflow.make(
              "McpNightly",
              { payload: Payload, schedule: "0 4 * * *", schedulePayload: { id: 3 } },
              function* () {
                yield* Workflow.step("work", Effect.succeed(1))
              }
            )
            const report = Recurring.make("mcp-report", { schedule: "@hourly", job: Report, payload: { id: 5 } })
            const nightly = Result.getOrThrow(Recurring.fromWorkflow(Nightly))!
            yield* (yield* RecurringScheduler).sync([report, nightly])

            const mcp = yield* client({ mcpWriteTools: true, mcpAllowPayloads: false })
            const { tools } = yield* mcp.listTools()
            const runNow = tools.find((t) => t.name === "pgbus_recurring_run_now")
            assert.deepStrictEqual(
              [runNow?.annotations?.readOnlyHint, runNow?.annotations?.destructiveHint],
              [false, true]
            )
            const listed = structured(yield* mcp.callTool({ name: "pgbus_recurring", arguments: {} }))
            assert.deepStrictEqual(
              listed.items.map((t: { key: string; kind: string; job: string | null }) => [t.key, t.kind, t.job]),
              [
                ["mcp-report", "job", "McpReport"],
                ["workflow:McpNightly", "workflow", null]
              ]
            )
            assert.isString(listed.items[0].nextRunAt)

            const noReason = yield* Effect.result(
              mcp.callTool({ name: "pgbus_recurring_run_now", arguments: { key: "mcp-report", reason: " " } })
            )
            assert.isTrue(noReason._tag === "Failure" || noReason.success.isError === true, "a reason is required")
            const fired = structured(
              yield* mcp.callTool({
                name: "pgbus_recurring_run_now",
                arguments: { key: "mcp-report", reason: "the agent needs a fresh report" }
              })
            )
            assert.isTrue(fired.ok, fired.reason)
            const messages = yield* (yield* QueueStore).browse("mcp_recurring")
            assert.deepStrictEqual(
              messages.map((m) => m.message),
              [{ job: "McpReport", payload: { id: 5 } }]
            )
            assert.strictEqual(fired.fire.messageId, `mcp_recurring:${messages[0]!.msgId}`)
            assert.include(fired.reason, "enqueued mcp-report now")
            // the ledger row names the MCP caller (mcp:<client name>) and the reason
            const sql = yield* SqlClient.SqlClient
            const ledger = () =>
              sql<{ readonly manual: boolean; readonly actor: string | null; readonly reason: string | null }>`SELECT
                  manual, actor, reason FROM pgbus.recurring_executions WHERE task_key = 'mcp-report'`
            assert.deepStrictEqual(
              (yield* ledger()).map((r) => [r.manual, r.actor, r.reason]),
              [[true, "mcp:claude", "the agent needs a fresh report"]]
            )
            const relisted = structured(yield* mcp.callTool({ name: "pgbus_recurring", arguments: {} }))
            assert.deepStrictEqual(relisted.items[0].lastManualRun, {
              runAt: fired.fire.runAt,
              actor: "mcp:claude",
              reason: "the agent needs a fresh report"
            })
            // a reason past the bound (500) is refused before anything is written
            const tooLong = yield* Effect.result(
              mcp.callTool({
                name: "pgbus_recurring_run_now",
                arguments: { key: "mcp-report", reason: "r".repeat(501) }
              })
            )
            assert.isTrue(tooLong._tag === "Failure" || tooLong.success.isError === true, "at most 500 characters")
            assert.strictEqual((yield* ledger()).length, 1, "too long a reason: nothing recorded")

            for (const [key, code, text] of [
              ["no-such-task", "NotFound", "recurring task no-such-task not found"],
              ["", "InvalidRequest", "key is required"],
              ["k".repeat(300), "InvalidRequest", "key is required"],
              ["workflow:McpNightly", "InvalidRequest", "not registered in this process"]
            ] as const) {
              const refused = structured(
                yield* mcp.callTool({ name: "pgbus_recurring_run_now", arguments: { key, reason: "try" } })
              )
              assert.deepStrictEqual([refused.ok, refused.code], [false, code], key)
              assert.include(refused.reason, text)
            }
            assert.strictEqual((yield* (yield* QueueStore).browse("mcp_recurring")).length, 1, "nothing more")
            assert.strictEqual((yield* (yield* WorkflowClient).list({ workflow: "McpNightly" })).runs.length, 0)
          }).pipe(Effect.scoped)
      )
    })
  }
)
