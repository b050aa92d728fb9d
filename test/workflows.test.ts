import { assert, describe, expect, layer } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import { performNextStep, speedrun } from "../src/Testing/Workflows.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import { ErrorReporter, WorkflowRunner, WorkflowSweep } from "../src/Workflow/Engine.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { awaitLockWaiter, terminateWhileWaiting } from "./support/connections.ts"
import { eventually } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const unique = (base: string) => `${base}-${n++}`
const Payload = Schema.Struct({ id: Schema.String })

/** Event types of a run, in order. */
const eventTypes = (id: string) =>
  Effect.flatMap(WorkflowClient, (c) => Effect.map(c.events(id), (es) => es.map((e) => e.type)))

const stepRows = (id: string) =>
  Effect.flatMap(WorkflowClient, (c) =>
    Effect.map(c.steps(id), (ss) => ss.map((s) => `${s.name}#${s.attempt}:${s.status}`))
  )

const status = (id: string) => Effect.flatMap(WorkflowClient, (c) => Effect.map(c.get(id), (h) => h.info.status))

/** Runs `effect` with a registry of these workflows. */
const withRegistry =
  <const W extends ReadonlyArray<Workflow.AnyWorkflow>>(workflows: W) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    effect.pipe(Effect.provide(Registry.layer(workflows)))

layer(TestDatabase.layer({ pollingInterval: "50 millis" }), { excludeTestServices: true })("workflows", (it) => {
  describe("start", () => {
    const Simple = Workflow.make("Simple", { payload: Payload }, function* ({ payload }) {
      return yield* Workflow.step("only", Effect.succeed(payload.id))
    })

    it.effect("writes the run, its started event and its first message in one statement; actor defaults to app", () =>
      Effect.gen(function* () {
        const run = yield* Simple.start({ id: "a" }, { reason: "because" })
        assert.strictEqual(run.info.status, "ready")
        const events = yield* run.events
        assert.deepStrictEqual(
          events.map((e) => [e.type, e.actor, e.reason]),
          [["started", "app", "because"]]
        )
        const store = yield* QueueStore
        const messages = yield* store.browse("default", { limit: 1000 })
        assert.isTrue(messages.some((m) => JSON.stringify(m.message).includes(run.id)))
      })
    )

    it.effect("a repeated idempotency key returns the existing run, with no new event", () =>
      Effect.gen(function* () {
        const key = unique("key")
        const first = yield* Simple.start({ id: "a" }, { idempotencyKey: key, actor: "alice" })
        const second = yield* Simple.start({ id: "different" }, { idempotencyKey: key, actor: "bob" })
        assert.strictEqual(second.id, first.id)
        assert.isTrue(second.duplicateStart)
        assert.isFalse(first.duplicateStart)
        const events = yield* first.events
        assert.deepStrictEqual(
          events.map((e) => e.actor),
          ["alice"]
        )
        const blank = yield* Simple.start({ id: "a" }, { idempotencyKey: "   " })
        assert.notStrictEqual(blank.id, first.id, "a blank key is no key")
      })
    )

    it.effect("one ongoing run per workflow and subject: AlreadyRunning carries the holder", () =>
      Effect.gen(function* () {
        const subject = unique("user")
        const first = yield* Simple.start({ id: "a" }, { subject })
        const error = yield* Effect.flip(Simple.start({ id: "b" }, { subject }))
        assert.strictEqual(error._tag, "AlreadyRunning")
        if (error._tag === "AlreadyRunning") {
          assert.strictEqual(error.run.id, first.id)
          assert.strictEqual(error.run.status, "ready")
        }
        // subject-less runs are never limited; another workflow's slot is its own
        yield* Simple.start({ id: "c" })
        yield* Simple.start({ id: "d" })
        yield* first.cancel()
        const again = yield* Simple.start({ id: "e" }, { subject })
        assert.notStrictEqual(again.id, first.id, "a cancelled run frees the slot")
      })
    )

    it.effect("concurrent starts share statements and keep every start's answer, key and subject rules", () =>
      Effect.gen(function* () {
        const key = unique("shared-key")
        const subject = unique("shared-user")
        const free = Array.from({ length: 8 }, (_, i) => Simple.start({ id: `free${i}` }, { reason: `r${i}` }))
        const keyed = Array.from({ length: 3 }, (_, i) => Simple.start({ id: `k${i}` }, { idempotencyKey: key }))
        const subjected = Array.from({ length: 3 }, (_, i) => Effect.result(Simple.start({ id: `s${i}` }, { subject })))
        const [frees, keys, subjects] = yield* Effect.all(
          [
            Effect.all(free, { concurrency: "unbounded" }),
            Effect.all(keyed, { concurrency: "unbounded" }),
            Effect.all(subjected, { concurrency: "unbounded" })
          ],
          { concurrency: "unbounded" }
        )
        assert.strictEqual(new Set(frees.map((r) => r.id)).size, 8)
        assert.strictEqual(new Set(keys.map((r) => r.id)).size, 1, "one run per idempotency key")
        assert.strictEqual(keys.filter((r) => !r.duplicateStart).length, 1)
        const held = subjects.filter((r) => r._tag === "Success")
        assert.strictEqual(held.length, 1, "one ongoing run per subject")
        for (const r of subjects) {
          if (r._tag === "Failure") {
            assert.strictEqual(r.failure._tag, "AlreadyRunning")
            if (r.failure._tag === "AlreadyRunning" && held[0]?._tag === "Success")
              assert.strictEqual(r.failure.run.id, held[0].success.id)
          }
        }
        const store = yield* QueueStore
        const messages = JSON.stringify((yield* store.browse("default", { limit: 10_000 })).map((m) => m.message))
        for (const [i, run] of frees.entries()) {
          assert.strictEqual(run.info.status, "ready")
          const events = yield* run.events
          assert.deepStrictEqual(
            events.map((e) => [e.type, e.actor, e.reason]),
            [["started", "app", `r${i}`]]
          )
          assert.isTrue(messages.includes(run.id), "every run has its first message")
        }
      })
    )

    it.effect("a start inside a transaction that rolls back leaves no run and no message", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const client = yield* WorkflowClient
        const store = yield* QueueStore
        const subject = unique("rollback")
        const before = (yield* store.metrics("default")).depth
        const exit = yield* sql
          .withTransaction(Effect.andThen(Simple.start({ id: "x" }, { subject }), Effect.fail("abort" as const)))
          .pipe(Effect.exit)
        assert.isTrue(Exit.isFailure(exit))
        assert.strictEqual((yield* client.list({ subject })).runs.length, 0)
        assert.strictEqual((yield* store.metrics("default")).depth, before)
      })
    )

    it.effect("a payload over the cap, or one that does not encode, fails and writes nothing", () =>
      Effect.gen(function* () {
        const client = yield* WorkflowClient
        const subject = unique("big")
        const big = yield* Effect.flip(Simple.start({ id: "x".repeat(200_000) }, { subject }))
        assert.strictEqual(big._tag, "InvalidWorkflowPayload")
        const bad = yield* Effect.flip(Simple.start({ id: 42 } as unknown as { id: string }, { subject }))
        assert.strictEqual(bad._tag, "InvalidWorkflowPayload")
        assert.strictEqual((yield* client.list({ subject })).runs.length, 0)
      })
    )
  })

  describe("the runner", () => {
    it.effect("runs steps in order, each a row with its events, and finishes with the body's value", () =>
      Effect.gen(function* () {
        const Three = Workflow.make("Three", { payload: Payload }, function* ({ payload }) {
          const a = yield* Workflow.step("a", Effect.succeed(`${payload.id}-a`))
          const b = yield* Workflow.step("b", Effect.succeed(`${a}-b`))
          return yield* Workflow.step("c", Effect.succeed(`${b}-c`))
        })
        const run = yield* Three.start({ id: "r" })
        const final = yield* speedrun(run.id).pipe(withRegistry([Three]))
        assert.strictEqual(final, "finished")
        assert.strictEqual((yield* run.refresh).info.output, "r-a-b-c")
        assert.deepStrictEqual(yield* stepRows(run.id), ["a#1:completed", "b#1:completed", "c#1:completed"])
        assert.deepStrictEqual(yield* eventTypes(run.id), [
          "started",
          "step_scheduled",
          "step_started",
          "step_completed",
          "step_scheduled",
          "step_started",
          "step_completed",
          "step_scheduled",
          "step_started",
          "step_completed",
          "finished"
        ])
      })
    )

    it.effect("a step with a wait is scheduled for later, and its message carries the due time", () =>
      Effect.gen(function* () {
        const Waits = Workflow.make("Waits", { payload: Payload }, function* () {
          yield* Workflow.step("first", Effect.void)
          yield* Workflow.step("later", Effect.void, { wait: "1 hour" })
        })
        const run = yield* Waits.start({ id: "w" })
        const runner = yield* WorkflowRunner
        const registry = yield* Registry.pipe(withRegistry([Waits]))
        yield* runner.execute(registry.workflows, { workflow: "Waits", run: run.id, step: null }, { attempt: 1 })
        assert.strictEqual(yield* status(run.id), "ready")
        const steps = yield* run.steps
        const later = steps.find((s) => s.name === "later")!
        assert.strictEqual(later.status, "scheduled")
        const delay = later.dueAt.getTime() - later.scheduledAt.getTime()
        assert.isTrue(Math.abs(delay - 3_600_000) < 1_000, `due an hour after scheduling (${delay})`)
        // the message for it is invisible until then
        const store = yield* QueueStore
        const messages = yield* store.browse("default", { limit: 10_000 })
        const message = messages.find(
          (m) => (m.message as { payload?: { step?: string } }).payload?.step === String(later.id)
        )
        assert.isDefined(message)
        assert.isTrue(message!.vt.getTime() >= later.dueAt.getTime() - 5)
      })
    )

    it.effect("the step context has a key stable across attempts, and reattempt schedules a new attempt", () =>
      Effect.gen(function* () {
        const keys: Array<string> = []
        const Flaky = Workflow.make("Flaky", { payload: Payload }, function* () {
          yield* Workflow.step(
            "charge",
            Effect.gen(function* () {
              const ctx = yield* Workflow.context
              keys.push(`${ctx.stepIdempotencyKey}|${ctx.attempt}`)
              if (ctx.attempt < 3) return yield* Effect.fail(new Error(`gateway timeout ${ctx.attempt}`))
              return "charged"
            }),
            { onError: [{ action: "reattempt" }] }
          )
        })
        const run = yield* Flaky.start({ id: "f" })
        const final = yield* speedrun(run.id).pipe(withRegistry([Flaky]))
        assert.strictEqual(final, "finished")
        assert.strictEqual(keys.length, 3)
        assert.strictEqual(new Set(keys.map((k) => k.split("|")[0])).size, 1, "the same key on every attempt")
        assert.strictEqual(keys[0]!.split("|")[0], `pgbus-wf:${run.id}:charge`)
        assert.deepStrictEqual(yield* stepRows(run.id), ["charge#1:failed", "charge#2:failed", "charge#3:completed"])
        const types = yield* eventTypes(run.id)
        assert.strictEqual(types.filter((t) => t === "step_reattempted").length, 2)
        assert.strictEqual(types.filter((t) => t === "step_failed").length, 2)
        const steps = yield* run.steps
        const error = steps[0]!.error as { tag: string; message: string; worker: string; stack?: string }
        expect(error).toMatchObject({ tag: "Error", message: "gateway timeout 1" })
        assert.match(error.worker, /:\d+$/)
      })
    )

    it.effect("a failing step pauses the run by default, with the error on the step and the run", () =>
      Effect.gen(function* () {
        class Declined extends Schema.TaggedError<Declined>()("Declined", { why: Schema.String }) {}
        const Fails = Workflow.make("Fails", { payload: Payload }, function* () {
          yield* Workflow.step("ok", Effect.void)
          yield* Workflow.step("boom", Effect.fail(new Declined({ why: "card expired" })))
          yield* Workflow.step("never", Effect.void)
        })
        const run = yield* Fails.start({ id: "p" })
        assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([Fails])), "paused")
        const info = (yield* run.refresh).info
        assert.strictEqual(info.pausedReason, "error")
        expect(info.error).toMatchObject({ tag: "Declined" })
        assert.deepStrictEqual(yield* stepRows(run.id), ["ok#1:completed", "boom#1:failed"])
        assert.deepStrictEqual(info.availableActions, ["resume", "resume_at", "cancel", "signal"])
      })
    )

    it.effect("flow control in a step: pause, finish, skip, cancel end the body on the spot", () =>
      Effect.gen(function* () {
        const after: Array<string> = []
        const verbs = { pause: Workflow.pause, finish: Workflow.finish, skip: Workflow.skip, cancel: Workflow.cancel }
        const make = (verb: "pause" | "finish" | "skip" | "cancel") =>
          Workflow.make(`Verb-${verb}`, { payload: Payload }, function* () {
            yield* Workflow.step(
              "act",
              Effect.gen(function* () {
                yield* verbs[verb]()
                after.push(`${verb} continued`)
              })
            )
            yield* Workflow.step(
              "next",
              Effect.sync(() => after.push(`${verb} next`))
            )
          })
        const flows = (["pause", "finish", "skip", "cancel"] as const).map(make)
        const results: Record<string, string> = {}
        for (const wf of flows) {
          const run = yield* wf.start({ id: "v" })
          results[wf.name] =
            `${yield* speedrun(run.id).pipe(withRegistry(flows))} ${(yield* stepRows(run.id)).join(",")}`
        }
        assert.deepStrictEqual(results, {
          "Verb-pause": "paused act#1:completed",
          "Verb-finish": "finished act#1:completed",
          "Verb-skip": "finished act#1:skipped,next#1:completed",
          "Verb-cancel": "cancelled act#1:cancelled"
        })
        assert.deepStrictEqual(after, ["skip next"], "no verb let its step go on")
        // the paused one goes on with its next step when resumed
        const paused = (yield* (yield* WorkflowClient).list({ workflow: "Verb-pause" })).runs[0]!
        yield* (yield* WorkflowClient).resume(paused.id)
        assert.strictEqual(yield* speedrun(paused.id).pipe(withRegistry(flows)), "finished")
        assert.deepStrictEqual(yield* stepRows(paused.id), ["act#1:completed", "next#1:completed"])
      })
    )

    it.effect("cancelIf and skipIf run before the step; a skipped step gives undefined", () =>
      Effect.gen(function* () {
        const seen: Array<unknown> = []
        const Guarded = Workflow.make(
          "Guarded",
          { payload: Payload, cancelIf: (run) => Effect.succeed(run.payload.id === "cancel-me") },
          function* () {
            const skipped = yield* Workflow.step("maybe", Effect.succeed("ran"), {
              skipIf: (run) => Effect.succeed((run.payload as { id: string }).id === "skip-me")
            })
            seen.push(skipped)
            yield* Workflow.step("after", Effect.void)
          }
        )
        const skipped = yield* Guarded.start({ id: "skip-me" })
        assert.strictEqual(yield* speedrun(skipped.id).pipe(withRegistry([Guarded])), "finished")
        assert.deepStrictEqual(yield* stepRows(skipped.id), ["maybe#1:skipped", "after#1:completed"])
        const cancelled = yield* Guarded.start({ id: "cancel-me" })
        assert.strictEqual(yield* speedrun(cancelled.id).pipe(withRegistry([Guarded])), "cancelled")
        assert.deepStrictEqual(yield* stepRows(cancelled.id), ["maybe#1:cancelled"])
        assert.include(seen, undefined)
      })
    )

    it.effect("an outside pause while a step runs: the outcome is held, the next row scheduled, resume continues", () =>
      Effect.gen(function* () {
        const gate = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const Slow = Workflow.make("Slow", { payload: Payload }, function* () {
          yield* Workflow.step("slow", Deferred.succeed(started, undefined).pipe(Effect.andThen(Deferred.await(gate))))
          yield* Workflow.step("next", Effect.void)
        })
        const run = yield* Slow.start({ id: "h" })
        const fiber = yield* performNextStep(run.id).pipe(withRegistry([Slow]), Effect.forkChild)
        yield* Deferred.await(started)
        assert.strictEqual(yield* status(run.id), "performing")
        yield* run.pause({ actor: "alice", reason: "maintenance" })
        yield* Deferred.succeed(gate, undefined)
        yield* Fiber.join(fiber)
        assert.strictEqual(yield* status(run.id), "paused", "the run stays paused")
        assert.deepStrictEqual(yield* stepRows(run.id), ["slow#1:completed", "next#1:scheduled"])
        yield* run.resume({ actor: "alice" })
        assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([Slow])), "finished")
        const events = yield* run.events
        const paused = events.find((e) => e.type === "paused")!
        assert.strictEqual(paused.actor, "alice")
        assert.strictEqual(paused.reason, "maintenance")
      })
    )

    it.effect("resume before the held step finishes unpauses: the run goes on performing it", () =>
      Effect.gen(function* () {
        const gate = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const Unpause = Workflow.make("Unpause", { payload: Payload }, function* () {
          yield* Workflow.step("slow", Deferred.succeed(started, undefined).pipe(Effect.andThen(Deferred.await(gate))))
          yield* Workflow.step("next", Effect.void)
        })
        const run = yield* Unpause.start({ id: "u" })
        const fiber = yield* performNextStep(run.id).pipe(withRegistry([Unpause]), Effect.forkChild)
        yield* Deferred.await(started)
        yield* run.pause()
        const resumed = yield* run.resume()
        assert.strictEqual(resumed.status, "performing")
        yield* Deferred.succeed(gate, undefined)
        yield* Fiber.join(fiber)
        assert.strictEqual(yield* status(run.id), "finished")
      })
    )

    it.effect("cancel while a step runs: its outcome is ignored and late_completion_ignored is written", () =>
      Effect.gen(function* () {
        const gate = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const Late = Workflow.make("Late", { payload: Payload }, function* () {
          yield* Workflow.step("slow", Deferred.succeed(started, undefined).pipe(Effect.andThen(Deferred.await(gate))))
          yield* Workflow.step("next", Effect.void)
        })
        const run = yield* Late.start({ id: "l" })
        const fiber = yield* performNextStep(run.id).pipe(withRegistry([Late]), Effect.forkChild)
        yield* Deferred.await(started)
        yield* run.cancel({ reason: "customer asked" })
        yield* Deferred.succeed(gate, undefined)
        yield* Fiber.join(fiber)
        assert.strictEqual(yield* status(run.id), "cancelled")
        assert.deepStrictEqual(yield* stepRows(run.id), ["slow#1:cancelled"])
        const types = yield* eventTypes(run.id)
        assert.include(types, "late_completion_ignored")
        assert.notInclude(types, "step_completed")
      })
    )

    it.effect("two workers racing for the same step message: exactly one runs the body", () =>
      Effect.gen(function* () {
        let runs = 0
        const Race = Workflow.make("Race", { payload: Payload }, function* () {
          yield* Workflow.step("first", Effect.void)
          yield* Workflow.step("raced", Effect.sync(() => runs++).pipe(Effect.andThen(Effect.sleep("50 millis"))), {
            wait: "1 millis"
          })
        })
        const run = yield* Race.start({ id: "r" })
        yield* performNextStep(run.id).pipe(withRegistry([Race]))
        const steps = yield* run.steps
        const raced = steps.find((s) => s.name === "raced")!
        yield* Effect.sleep("10 millis")
        const runner = yield* WorkflowRunner
        const registry = yield* Registry.pipe(withRegistry([Race]))
        const message = { workflow: "Race", run: run.id, step: String(raced.id) }
        yield* Effect.all(
          Array.from({ length: 4 }, () => runner.execute(registry.workflows, message, { attempt: 1 })),
          { concurrency: "unbounded" }
        )
        assert.strictEqual(runs, 1)
        assert.strictEqual(yield* status(run.id), "finished")
      })
    )

    it.effect("a worker killed mid-step: the redelivered message's attempt runs with the same step key", () =>
      Effect.gen(function* () {
        const keys: Array<string> = []
        let firstRuns = 0
        const started = yield* Deferred.make<void>()
        const Killed = Workflow.make("Killed", { payload: Payload }, function* () {
          yield* Workflow.step(
            "done-before",
            Effect.sync(() => firstRuns++)
          )
          yield* Workflow.step(
            "charge",
            Effect.gen(function* () {
              const ctx = yield* Workflow.context
              keys.push(ctx.stepIdempotencyKey)
              if (ctx.attempt === 1) {
                yield* Deferred.succeed(started, undefined)
                return yield* Effect.never
              }
            }),
            { wait: "1 millis" }
          )
        })
        const run = yield* Killed.start({ id: "k" })
        yield* performNextStep(run.id).pipe(withRegistry([Killed]))
        const charge = (yield* run.steps).find((s) => s.name === "charge")!
        yield* Effect.sleep("10 millis")
        const runner = yield* WorkflowRunner
        const registry = yield* Registry.pipe(withRegistry([Killed]))
        const message = { workflow: "Killed", run: run.id, step: String(charge.id) }
        // the worker dies mid-step: a killed process records nothing (its fiber hangs on here; an
        // interrupted one would release the step, as a drain does)
        const worker = yield* runner.execute(registry.workflows, message, { attempt: 1 }).pipe(Effect.forkChild)
        yield* Deferred.await(started)
        assert.deepStrictEqual(yield* stepRows(run.id), ["done-before#1:completed", "charge#1:in_progress"])
        // the same message comes back (its visibility lapsed or its process was reaped)
        yield* runner.execute(registry.workflows, message, { attempt: 2 })
        assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([Killed])), "finished")
        assert.deepStrictEqual(yield* stepRows(run.id), [
          "done-before#1:completed",
          "charge#1:failed",
          "charge#2:completed"
        ])
        assert.strictEqual(keys.length, 2)
        assert.strictEqual(keys[0], keys[1])
        assert.strictEqual(firstRuns, 1, "a completed step is never run again on replay")
        assert.include(yield* eventTypes(run.id), "stall_detected")
        yield* Fiber.interrupt(worker)
      }).pipe(Effect.provide(TestDatabase.layer({ workflowStallAction: "reattempt" }), { local: true }))
    )

    it.effect("a body changed so that a recorded step no longer comes first pauses with version_mismatch", () =>
      Effect.gen(function* () {
        const V1 = Workflow.make("Diverges", { payload: Payload, version: "1" }, function* () {
          yield* Workflow.step("a", Effect.void)
          yield* Workflow.step("b", Effect.fail(new Error("b fails in v1")))
        })
        const V2 = Workflow.make("Diverges", { payload: Payload, version: "2" }, function* () {
          yield* Workflow.step("x", Effect.void)
          yield* Workflow.step("a", Effect.void)
          yield* Workflow.step("b", Effect.void)
        })
        const run = yield* V1.start({ id: "d" })
        assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([V1])), "paused")
        yield* run.resume()
        assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([V2])), "paused")
        const info = (yield* run.refresh).info
        assert.strictEqual(info.pausedReason, "version_mismatch")
        expect(info.error).toMatchObject({ tag: "ReplayDivergence" })
        assert.include((info.error as { message: string }).message, "the history has a, the code reached x")
        assert.strictEqual(info.definitionVersion, "1")
        const listed = yield* (yield* WorkflowClient).list({ pausedReason: "version_mismatch", workflow: "Diverges" })
        assert.include(
          listed.runs.map((r) => r.id),
          run.id
        )
      })
    )

    it.effect("Workflow.patched is true for runs that reach it new and false for runs that recorded the old path", () =>
      Effect.gen(function* () {
        const paths: Array<string> = []
        const Old = Workflow.make("Patched", { payload: Payload }, function* () {
          yield* Workflow.step("a", Effect.void)
          yield* Workflow.step("b", Effect.void, { wait: "1 hour" })
        })
        const New = Workflow.make("Patched", { payload: Payload }, function* () {
          yield* Workflow.step("a", Effect.void)
          if (yield* Workflow.patched("send-sms")) {
            paths.push("new")
            yield* Workflow.step("sms", Effect.void)
          } else paths.push("old")
          yield* Workflow.step("b", Effect.void, { wait: "1 hour" })
        })
        const old = yield* Old.start({ id: "old" })
        yield* performNextStep(old.id).pipe(withRegistry([Old]))
        // deployed: the old run replays the new code
        assert.strictEqual(yield* speedrun(old.id).pipe(withRegistry([New])), "finished")
        const fresh = yield* New.start({ id: "new" })
        yield* performNextStep(fresh.id).pipe(withRegistry([New]))
        assert.strictEqual(yield* speedrun(fresh.id).pipe(withRegistry([New])), "finished")
        assert.deepStrictEqual(paths, ["old", "new", "new"])
        assert.deepStrictEqual(yield* stepRows(fresh.id), [
          "a#1:completed",
          "patch:send-sms#1:completed",
          "sms#1:completed",
          "b#1:completed"
        ])
      })
    )
  })

  describe("exception policies", () => {
    class Transient extends Schema.TaggedError<Transient>()("Transient", {}) {}
    class Declined extends Schema.TaggedError<Declined>()("Declined", {}) {}
    class Odd extends Schema.TaggedError<Odd>()("Odd", {}) {}

    it.effect("resolve in order: the step's, then the workflow's naming the error, then blanket, then pause", () =>
      Effect.gen(function* () {
        const make = (name: string, error: unknown, stepPolicies: ReadonlyArray<Workflow.ErrorPolicy>) =>
          Workflow.make(
            name,
            {
              payload: Payload,
              onError: [{ action: "skip" }, { match: "Declined", action: "cancel", report: "never" }]
            },
            function* () {
              yield* Workflow.step("s", Effect.fail(error), { onError: stepPolicies })
            }
          )
        const cases = [
          make("StepFirst", new Declined(), [{ match: "Declined", action: "pause" }]),
          make("NamedBeforeBlanket", new Declined(), []),
          make("Blanket", new Odd(), []),
          make("DefectByClass", undefined, [])
        ]
        const results: Array<string> = []
        for (const wf of cases.slice(0, 3)) {
          const run = yield* wf.start({ id: "x" })
          results.push(`${wf.name}:${yield* speedrun(run.id).pipe(withRegistry(cases))}`)
        }
        assert.deepStrictEqual(results, ["StepFirst:paused", "NamedBeforeBlanket:cancelled", "Blanket:finished"])
        // with no workflow policy at all, an error pauses
        const Bare = Workflow.make("Bare", { payload: Payload }, function* () {
          yield* Workflow.step("s", Effect.die(new RangeError("defect")))
        })
        const bare = yield* Bare.start({ id: "x" })
        assert.strictEqual(yield* speedrun(bare.id).pipe(withRegistry([Bare])), "paused")
      })
    )

    it.effect("defects match by class name or message; max reattempts then the terminal action", () =>
      Effect.gen(function* () {
        let attempts = 0
        const Capped = Workflow.make(
          "Capped",
          {
            payload: Payload,
            onError: [
              { match: /connection reset/, action: "reattempt", maxReattempts: 2, terminalAction: "cancel" },
              { match: "Transient", action: "pause" }
            ]
          },
          function* () {
            yield* Workflow.step(
              "s",
              Effect.suspend(() => {
                attempts++
                return Effect.die(new Error("connection reset by peer"))
              })
            )
          }
        )
        const run = yield* Capped.start({ id: "x" })
        assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([Capped])), "cancelled")
        assert.strictEqual(attempts, 3, "the first attempt and two reattempts")
        assert.deepStrictEqual(yield* stepRows(run.id), ["s#1:failed", "s#2:failed", "s#3:failed"])
        void Transient
      })
    )

    it.effect("report: always, never, terminal decide what reaches the ErrorReporter", () =>
      Effect.gen(function* () {
        const reported: Array<string> = []
        const reporter = {
          report: (
            _error: unknown,
            context: { readonly step: string; readonly outcome: string; readonly attempt: number }
          ) => Effect.sync(() => reported.push(`${context.step}#${context.attempt}:${context.outcome}`))
        }
        const Reports = Workflow.make("Reports", { payload: Payload }, function* () {
          yield* Workflow.step("never", Effect.fail(new Error("quiet")), {
            onError: [{ action: "skip", report: "never" }]
          })
          yield* Workflow.step("terminal", Effect.fail(new Error("flaky")), {
            onError: [{ action: "reattempt", maxReattempts: 1, terminalAction: "skip", report: "terminal" }]
          })
          yield* Workflow.step("always", Effect.fail(new Error("loud")), { onError: [{ action: "skip" }] })
        })
        const run = yield* Reports.start({ id: "r" })
        assert.strictEqual(
          yield* speedrun(run.id).pipe(withRegistry([Reports]), Effect.provideService(ErrorReporter, reporter)),
          "finished"
        )
        assert.deepStrictEqual(reported, ["terminal#2:skip", "always#1:skip"])
      })
    )

    it.effect("a policy function picks the verb", () =>
      Effect.gen(function* () {
        const Picks = Workflow.make(
          "Picks",
          {
            payload: Payload,
            onError: [
              {
                action: (error) =>
                  Effect.succeed(
                    (error as { message: string }).message.includes("read") ? { _tag: "skip" } : { _tag: "pause" }
                  )
              }
            ]
          },
          function* () {
            yield* Workflow.step("read", Effect.fail(new Error("read timeout")))
            yield* Workflow.step("write", Effect.fail(new Error("write timeout")))
          }
        )
        const run = yield* Picks.start({ id: "x" })
        assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([Picks])), "paused")
        assert.deepStrictEqual(yield* stepRows(run.id), ["read#1:skipped", "write#1:failed"])
      })
    )
  })

  describe("queries", () => {
    const Q = Workflow.make("Queried", { payload: Payload }, function* () {
      yield* Workflow.step("a", Effect.void)
      yield* Workflow.step("b", Effect.void, { wait: "1 day" })
    })

    it.effect("get scopes by resource: a run of another resource is not found", () =>
      Effect.gen(function* () {
        const client = yield* WorkflowClient
        const run = yield* Q.start({ id: "t" }, { resourceId: "tenant_1" })
        assert.strictEqual((yield* client.get(run.id, { resourceId: "tenant_1" })).id, run.id)
        const error = yield* Effect.flip(client.get(run.id, { resourceId: "tenant_2" }))
        assert.strictEqual(error._tag, "RunNotFound")
        const verbError = yield* Effect.flip(client.pause(run.id, { resourceId: "tenant_2" }))
        assert.strictEqual(verbError._tag, "RunNotFound")
        assert.strictEqual(yield* status(run.id), "ready", "nothing changed")
        assert.strictEqual((yield* Effect.flip(client.get("not-a-uuid")))._tag, "RunNotFound")
      })
    )

    it.effect("list runs newest first with filters and a cursor; counts per status; progress", () =>
      Effect.gen(function* () {
        const client = yield* WorkflowClient
        const resourceId = unique("tenant")
        const ids: Array<string> = []
        for (let i = 0; i < 7; i++) ids.push((yield* Q.start({ id: `${i}` }, { resourceId, subject: `s${i}` })).id)
        yield* client.pause(ids[0]!)
        const page1 = yield* client.list({ resourceId, limit: 3 })
        assert.strictEqual(page1.runs.length, 3)
        assert.isDefined(page1.next)
        const page2 = yield* client.list({ resourceId, limit: 3, cursor: page1.next })
        const page3 = yield* client.list({ resourceId, limit: 3, cursor: page2.next })
        assert.isUndefined(page3.next)
        const all = [...page1.runs, ...page2.runs, ...page3.runs].map((r) => r.id)
        assert.deepStrictEqual(all, [...ids].reverse(), "newest first, no gaps, no repeats")
        assert.deepStrictEqual(
          (yield* client.list({ resourceId, status: "paused" })).runs.map((r) => r.id),
          [ids[0]]
        )
        assert.deepStrictEqual(
          (yield* client.list({ resourceId, subject: "s3" })).runs.map((r) => r.id),
          [ids[3]]
        )
        const counts = yield* client.counts({ resourceId })
        assert.strictEqual(counts.ready, 6)
        assert.strictEqual(counts.paused, 1)
        yield* performNextStep(ids[1]!).pipe(withRegistry([Q]))
        const progress = yield* client.progress(ids[1]!)
        assert.strictEqual(progress.completedSteps, 1)
        assert.deepStrictEqual(
          progress.steps.map((s) => `${s.name}:${s.status}`),
          ["a:completed", "b:scheduled"]
        )
      })
    )
  })

  describe("retention", () => {
    it.effect("an event written under the run's lock while retention deletes the run goes with it", () =>
      Effect.gen(function* () {
        const Short = Workflow.make("ShortLived", { payload: Payload }, function* () {
          return yield* Workflow.step("only", Effect.succeed(1))
        })
        const run = yield* Short.start({ id: "r" })
        yield* run.cancel()
        yield* Effect.sleep("20 millis")
        const sql = yield* SqlClient.SqlClient
        const sweep = yield* WorkflowSweep
        // a writer holding the run's row lock, as every verb does, writes an event and commits only
        // once retention's delete (outside its transaction) waits for that lock
        const locked = yield* Deferred.make<void>()
        const writer = yield* Effect.forkChild(
          sql.withTransaction(
            Effect.gen(function* () {
              yield* sql`SELECT id FROM pgbus.workflow_runs WHERE id = ${run.id}::uuid FOR UPDATE`
              yield* sql`INSERT INTO pgbus.workflow_events (run_id, type, actor, at)
                VALUES (${run.id}::uuid, 'note', 'test', now())`
              yield* Deferred.succeed(locked, undefined)
              // retention waits for the run's lock
              yield* awaitLockWaiter()
            })
          )
        )
        yield* Deferred.await(locked)
        const report = yield* sweep.runOnce
        yield* Fiber.join(writer)
        assert.strictEqual(report.deleted, 1)
        yield* eventually(
          "the run is deleted",
          Effect.map(Effect.exit(Effect.flatMap(WorkflowClient, (c) => c.get(run.id))), Exit.isFailure)
        )
        const [left] = yield* sql<{ readonly events: number; readonly steps: number }>`SELECT
            (SELECT count(*)::int FROM pgbus.workflow_events WHERE run_id = ${run.id}::uuid) AS events,
            (SELECT count(*)::int FROM pgbus.workflow_steps WHERE run_id = ${run.id}::uuid) AS steps`
        assert.deepStrictEqual(left, { events: 0, steps: 0 }, "no orphaned rows")
      }).pipe(
        Effect.provide(TestDatabase.layer({ pollingInterval: "50 millis", workflowRetention: "1 millis" }), {
          local: true
        })
      )
    )
  })

  describe("with a supervisor", () => {
    it.effect("step messages are executed by the supervisor's workers", () =>
      Effect.gen(function* () {
        const Supervised = Workflow.make("Supervised", { payload: Payload }, function* ({ payload }) {
          const a = yield* Workflow.step("a", Effect.succeed(1))
          const b = yield* Workflow.step("b", Effect.succeed(a + 1), { wait: "100 millis" })
          return `${payload.id}:${b}`
        })
        const { startSupervisor } = yield* Effect.promise(() => import("./support/jobs.ts"))
        yield* startSupervisor([Supervised], { capsules: [{ name: "c", queues: ["default"], concurrency: 4 }] })
        const run = yield* Supervised.start({ id: "sup" })
        yield* eventually(
          "finished",
          Effect.map(status(run.id), (s) => s === "finished")
        )
        assert.strictEqual((yield* run.refresh).info.output, "sup:2")
      }).pipe(Effect.scoped, Effect.provide(TestDatabase.layer({ pollingInterval: "50 millis" }), { local: true }))
    )

    it.effect("a step's outcome whose statement dies with its connection is written again: no pause, one attempt", () =>
      Effect.gen(function* () {
        const reached = yield* Deferred.make<void>()
        const locked = yield* Deferred.make<void>()
        let ran = 0
        const Outcome = Workflow.make("OutcomeRetried", { payload: Payload }, function* ({ payload }) {
          const a = yield* Workflow.step(
            "a",
            Effect.gen(function* () {
              ran++
              yield* Deferred.succeed(reached, undefined)
              yield* Deferred.await(locked)
              return 1
            })
          )
          // b waits, so a's outcome goes alone (a shared outcome whose statement fails is sent again alone)
          const b = yield* Workflow.step("b", Effect.succeed(a + 1), { wait: "100 millis" })
          return `${payload.id}:${b}`
        })
        const { startSupervisor } = yield* Effect.promise(() => import("./support/jobs.ts"))
        // workers only: no sweep that could be the statement waiting on the lock instead of the outcome
        yield* startSupervisor([Outcome], {
          roles: ["workers"],
          capsules: [{ name: "c", queues: ["default"], concurrency: 2 }]
        })
        const run = yield* Outcome.start({ id: "o" })
        yield* Deferred.await(reached)
        // the events table is locked before step a returns, so that its outcome (which writes
        // step_completed) waits on the lock, in flight, when every other connection is terminated
        const blocked = yield* terminateWhileWaiting("pgbus.workflow_events", Deferred.succeed(locked, undefined))
        assert.isAbove(blocked, 0, "a statement in flight was terminated")
        yield* eventually(
          "the run finished",
          // this check's own connection may be one that was terminated: a failed check is "not yet"
          Effect.orElseSucceed(
            Effect.map(status(run.id), (s) => s === "finished"),
            () => false
          ),
          "20 seconds"
        )
        assert.strictEqual((yield* run.refresh).info.output, "o:2")
        assert.strictEqual(ran, 1, "step a ran once")
        assert.deepStrictEqual(yield* stepRows(run.id), ["a#1:completed", "b#1:completed"])
        assert.notInclude(yield* eventTypes(run.id), "paused")
      }).pipe(Effect.scoped, Effect.provide(TestDatabase.layer({ pollingInterval: "50 millis" }), { local: true }))
    )

    it.effect(
      "a signal whose transaction loses its connection fails with a retryable DatabaseError; sent again, it wakes the run",
      () =>
        Effect.gen(function* () {
          const Waits = Workflow.make(
            "WaitsThroughRestart",
            { payload: Payload, signals: { go: Schema.Struct({ n: Schema.Number }) } },
            function* ({ payload, waitForSignal }) {
              const go = yield* waitForSignal("go")
              return `${payload.id}:${go.n}`
            }
          )
          const { startSupervisor } = yield* Effect.promise(() => import("./support/jobs.ts"))
          // workers only: no sweep that could be the statement waiting on the lock instead of the signal
          yield* startSupervisor([Waits], {
            roles: ["workers"],
            capsules: [{ name: "c", queues: ["default"], concurrency: 2 }]
          })
          const run = yield* Waits.start({ id: "w" })
          yield* eventually(
            "waiting",
            Effect.map(status(run.id), (s) => s === "waiting")
          )
          // the signal's transaction waits on the locked runs table when its connection is terminated:
          // its rollback fails with the connection, which must still reach the caller as a typed error
          // sent once the lock is held (forked here, outside the locking transaction)
          const locked = yield* Deferred.make<void>()
          const sending = yield* Effect.forkChild(
            Effect.andThen(Deferred.await(locked), Effect.flip(run.signal("go", { n: 7 })))
          )
          // terminated once the signal's own lock statement waits, not at the first statement that
          // waits (a worker's claim touches the table too)
          const blocked = yield* terminateWhileWaiting(
            "pgbus.workflow_runs",
            Deferred.succeed(locked, undefined),
            `SELECT * FROM "pgbus"."workflow_runs"%FOR UPDATE`
          )
          assert.isAbove(blocked, 0, "a statement in flight was terminated")
          const error = yield* Fiber.join(sending)
          assert.strictEqual(error._tag, "DatabaseError")
          assert.isTrue(error._tag === "DatabaseError" && error.retryable, "a lost connection is worth trying again")
          yield* run.signal("go", { n: 7 })
          yield* eventually(
            "finished",
            Effect.orElseSucceed(
              Effect.map(status(run.id), (s) => s === "finished"),
              () => false
            )
          )
          assert.strictEqual((yield* run.refresh).info.output, "w:7")
        }).pipe(Effect.scoped, Effect.provide(TestDatabase.layer({ pollingInterval: "50 millis" }), { local: true }))
    )

    it.effect("every connection terminated while runs perform steps: all runs still finish", () =>
      Effect.gen(function* () {
        const Resilient = Workflow.make("Resilient", { payload: Payload }, function* ({ payload }) {
          const a = yield* Workflow.step("a", Effect.as(Effect.sleep("20 millis"), 1))
          const b = yield* Workflow.step("b", Effect.as(Effect.sleep("20 millis"), a + 1))
          const c = yield* Workflow.step("c", Effect.as(Effect.sleep("20 millis"), b + 1))
          return `${payload.id}:${c}`
        })
        const sql = yield* SqlClient.SqlClient
        const { startSupervisor } = yield* Effect.promise(() => import("./support/jobs.ts"))
        yield* startSupervisor([Resilient], { capsules: [{ name: "c", queues: ["default"], concurrency: 4 }] })
        const runs = yield* Effect.forEach(
          Array.from({ length: 10 }, (_, i) => `r${i}`),
          (id) => Resilient.start({ id })
        )
        yield* eventually(
          "a step finished",
          Effect.map(
            sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pgbus.workflow_steps WHERE status = 'completed'`,
            ([row]) => row!.n > 0
          )
        )
        // the engine's next claim or outcome waits on the locked runs table when every other
        // connection is terminated
        const blocked = yield* terminateWhileWaiting("pgbus.workflow_runs")
        assert.isAbove(blocked, 0, "a statement in flight was terminated")
        yield* eventually(
          "every run finished",
          // this check's own connection may be one that was terminated: a failed check is "not yet"
          Effect.forEach(runs, (run) => status(run.id)).pipe(
            Effect.map((all) => all.every((s) => s === "finished")),
            Effect.orElseSucceed(() => false)
          ),
          "30 seconds"
        )
        const outputs = yield* Effect.forEach(runs, (run) => Effect.map(run.refresh, (r) => r.info.output))
        assert.deepStrictEqual(
          outputs,
          runs.map((_, i) => `r${i}:3`)
        )
        // no run was paused on the way (a lost connection is not the workflow's error)
        const paused = yield* sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pgbus.workflow_events
          WHERE type = 'paused'`
        assert.strictEqual(paused[0]!.n, 0)
      }).pipe(
        Effect.scoped,
        // a claim whose reply was lost with its connection comes back after the visibility timeout
        Effect.provide(
          TestDatabase.layer({
            pollingInterval: "50 millis",
            visibilityTimeout: "2 seconds",
            workflowSweepInterval: "500 millis",
            workflowStallThreshold: "3 seconds"
          }),
          { local: true }
        )
      )
    )
  })
})
