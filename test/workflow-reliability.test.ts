/**
 * What a crash, a drain, a lost reply and a run that cannot be executed do to workflow runs, in
 * one process: the runner's deliveries are driven by hand (a message's id,
 * queue and read count, as a worker hands them over) or by a supervisor in the test's scope.
 */
import { assert, describe, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Job from "../src/Job/Job.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import { performNextStep, speedrun } from "../src/Testing/Workflows.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import { type Delivery, WorkflowRunner } from "../src/Workflow/Engine.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { withCapturedLogs } from "./support/logs.ts"
import { eventTypes, info, stepRows } from "./support/runs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ id: Schema.String })

const withRegistry =
  <const W extends ReadonlyArray<Workflow.AnyWorkflow>>(workflows: W) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    effect.pipe(Effect.provide(Registry.layer(workflows)))

/** Executes a step message as a worker would hand it over: message id, queue, read count. */
const deliver = <const W extends ReadonlyArray<Workflow.AnyWorkflow>>(
  workflows: W,
  message: { readonly workflow: string; readonly run: string; readonly step: string | null },
  delivery: Delivery
) =>
  Effect.gen(function* () {
    const runner = yield* WorkflowRunner
    const registry = yield* Registry.pipe(withRegistry(workflows))
    return yield* runner.execute(registry.workflows, message, delivery)
  })

const stepId = (runId: string, name: string, attempt = 1) =>
  Effect.map(
    Effect.flatMap(WorkflowClient, (c) => c.steps(runId)),
    (steps) => String(steps.find((s) => s.name === name && s.attempt === attempt)!.id)
  )

/** A workflow whose one step waits for `go` and returns its `n`; `bodies()` counts the step's runs. */
const handedOverWorkflow = (name: string) => {
  let bodies = 0
  const workflow = Workflow.make(
    name,
    { payload: Payload, signals: { go: Schema.Struct({ n: Schema.Number }) } },
    function* () {
      return yield* Workflow.step(
        "got",
        Effect.gen(function* () {
          bodies++
          const payload = (yield* Workflow.context).signal?.payload as { readonly n: number } | undefined
          return payload?.n ?? -1
        }),
        { waitFor: "go" }
      )
    }
  )
  return { workflow, bodies: () => bodies }
}

/**
 * Holds the run's step rows in a transaction of its own: a signal then reserves its local slot
 * and waits to wake and claim the step until the returned effect lets go.
 */
const holdStepRows = (runId: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const locked = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    yield* sql
      .withTransaction(
        Effect.gen(function* () {
          yield* sql`SELECT id FROM pgbus.workflow_steps WHERE run_id = ${runId}::uuid FOR UPDATE`
          yield* Deferred.succeed(locked, undefined)
          yield* Deferred.await(release)
        })
      )
      .pipe(Effect.forkScoped)
    yield* Deferred.await(locked)
    return Deferred.succeed(release, undefined)
  })

/**
 * Starts a run of `workflow` and signals it once it waits, with its step rows held
 * (`holdStepRows`): the signal has reserved its slot and waits. `unlock` lets it go on.
 */
const signalHeld = (workflow: ReturnType<typeof handedOverWorkflow>["workflow"], id: string) =>
  Effect.gen(function* () {
    const run = yield* workflow.start({ id })
    yield* eventually(
      "waiting",
      Effect.map(info(run.id), (i) => i.status === "waiting")
    )
    const unlock = yield* holdStepRows(run.id)
    const signalled = yield* run.signal("go", { n: 7 }).pipe(Effect.forkChild)
    // blocked on the step rows, past its reservation (made before the statements that touch
    // them): a fixed sleep was not always long enough on a loaded machine
    const sql = yield* SqlClient.SqlClient
    yield* eventually(
      "the signal waits on the step rows",
      Effect.map(
        sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'`,
        ([r]) => (r?.n ?? 0) > 0
      )
    )
    return { run, unlock, signalled }
  })

/** The run finishes with the signal's 7, its step's body ran once, and no delivery was logged as a zombie. */
const ranOnceQuietly = (runId: string, bodies: () => number, lines: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    yield* eventually(
      "finished",
      Effect.map(info(runId), (i) => i.status === "finished")
    )
    assert.strictEqual((yield* info(runId)).output, 7)
    assert.strictEqual(bodies(), 1, "the step's body ran once")
    const zombies = lines.filter((l) => l.includes("delivered again"))
    assert.deepStrictEqual(zombies, [], "the refused message's next delivery is its first")
  })

layer(TestDatabase.layer({ pollingInterval: "50 millis" }), { excludeTestServices: true })(
  "workflow reliability",
  (it) => {
    describe("a redelivered message finds what its dead worker held", () => {
      it.effect(
        "a step claimed at once after the one the message names: the redelivery stalls it (reattempt), the run finishes",
        () =>
          Effect.gen(function* () {
            const started = yield* Deferred.make<void>()
            const Chained = Workflow.make("Chained", { payload: Payload }, function* () {
              yield* Workflow.step(
                "a",
                Effect.gen(function* () {
                  if ((yield* Workflow.context).attempt === 1) return yield* Effect.fail(new Error("once"))
                }),
                { onError: [{ action: "reattempt", wait: "1 millis" }] }
              )
              yield* Workflow.step(
                "b",
                Effect.gen(function* () {
                  if ((yield* Workflow.context).attempt > 1) return "b"
                  yield* Deferred.succeed(started, undefined)
                  return yield* Effect.never
                })
              )
              yield* Workflow.step("c", Effect.succeed("c"))
            })
            const run = yield* Chained.start({ id: "chained" })
            // the start's execution runs a and schedules its second attempt (a message naming a#2)
            yield* performNextStep(run.id).pipe(withRegistry([Chained]))
            yield* Effect.sleep("5 millis")
            const message = { workflow: "Chained", run: run.id, step: yield* stepId(run.id, "a", 2) }
            // that message's execution completes a#2 and claims b at once; its worker dies in b (a
            // killed process records nothing: the fiber just hangs on here)
            const dead = yield* deliver([Chained], message, { attempt: 1, msgId: 41n, queue: "default" }).pipe(
              Effect.forkChild
            )
            yield* Deferred.await(started)
            assert.deepStrictEqual(yield* stepRows(run.id), ["a#1:failed", "a#2:completed", "b#1:in_progress"])
            // fast recovery gives the message back: it names a#2, which is completed
            yield* deliver([Chained], message, { attempt: 2, msgId: 41n, queue: "default" })
            assert.include(yield* eventTypes(run.id), "stall_detected")
            assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([Chained])), "finished")
            assert.deepStrictEqual(yield* stepRows(run.id), [
              "a#1:failed",
              "a#2:completed",
              "b#1:failed",
              "b#2:completed",
              "c#1:completed"
            ])
            yield* Fiber.interrupt(dead)
          }).pipe(Effect.provide(TestDatabase.layer({ workflowStallAction: "reattempt" }), { local: true }))
      )

      it.effect("a start's message delivered again while another message's execution holds the step: no stall", () =>
        Effect.gen(function* () {
          const started = yield* Deferred.make<void>()
          const release = yield* Deferred.make<void>()
          const Two = Workflow.make("TwoMessages", { payload: Payload }, function* () {
            yield* Workflow.step("a", Effect.succeed("a"))
            yield* Workflow.step(
              "b",
              Effect.andThen(Deferred.succeed(started, undefined), Effect.as(Deferred.await(release), "b")),
              { wait: "1 millis" }
            )
          })
          const run = yield* Two.start({ id: "two" })
          const start = { workflow: "TwoMessages", run: run.id, step: null }
          // the start's message runs a and schedules b with a message of its own
          yield* deliver([Two], start, { attempt: 1, msgId: 1n, queue: "default" })
          yield* Effect.sleep("5 millis")
          const b = { workflow: "TwoMessages", run: run.id, step: yield* stepId(run.id, "b") }
          const running = yield* deliver([Two], b, { attempt: 1, msgId: 2n, queue: "default" }).pipe(Effect.forkChild)
          yield* Deferred.await(started)
          // the start's message comes back (its worker died before archiving it): b is not its
          yield* deliver([Two], start, { attempt: 2, msgId: 1n, queue: "default" })
          assert.notInclude(yield* eventTypes(run.id), "stall_detected")
          yield* Deferred.succeed(release, undefined)
          yield* Fiber.join(running)
          assert.strictEqual((yield* info(run.id)).status, "finished")
          assert.deepStrictEqual(yield* stepRows(run.id), ["a#1:completed", "b#1:completed"])
        })
      )

      it.effect("a claim that committed and lost its reply: sent again, it finds the step its own and runs it", () =>
        Effect.gen(function* () {
          const Lost = Workflow.make("LostReply", { payload: Payload }, function* () {
            yield* Workflow.step("a", Effect.succeed("a"))
            return yield* Workflow.step("b", Effect.succeed("b"), { wait: "1 millis" })
          })
          const run = yield* Lost.start({ id: "lost" })
          yield* performNextStep(run.id).pipe(withRegistry([Lost]))
          yield* Effect.sleep("5 millis")
          const b = yield* stepId(run.id, "b")
          // what the lost claim committed: b in progress under this delivery's mark, the run performing
          const sql = yield* SqlClient.SqlClient
          yield* sql`UPDATE pgbus.workflow_steps SET status = 'in_progress', started_at = now(),
          claimed_by = 'default:7:1' WHERE id = ${BigInt(b)}`
          yield* sql`UPDATE pgbus.workflow_runs SET status = 'performing' WHERE id = ${run.id}::uuid`
          yield* deliver(
            [Lost],
            { workflow: "LostReply", run: run.id, step: b },
            {
              attempt: 1,
              msgId: 7n,
              queue: "default"
            }
          )
          assert.strictEqual((yield* info(run.id)).status, "finished")
          assert.deepStrictEqual(yield* stepRows(run.id), ["a#1:completed", "b#1:completed"])
          assert.notInclude(yield* eventTypes(run.id), "stall_detected")
        })
      )
      it.effect(
        "a woken step's message whose archive a crash lost (a lease): redelivered, it changes nothing and the signal is taken once",
        () =>
          Effect.gen(function* () {
            let ran = 0
            const Woken = Workflow.make(
              "WokenLostArchive",
              { payload: Payload, signals: { go: Schema.Struct({ n: Schema.Number }) } },
              function* () {
                return yield* Workflow.step(
                  "got",
                  Effect.gen(function* () {
                    ran++
                    return (yield* Workflow.context).signal?.payload
                  }),
                  { waitFor: "go" }
                )
              }
            )
            const run = yield* Woken.start({ id: "woken" })
            yield* performNextStep(run.id).pipe(withRegistry([Woken]))
            assert.strictEqual((yield* info(run.id)).status, "waiting")
            yield* run.signal("go", { n: 7 })
            const got = { workflow: "WokenLostArchive", run: run.id, step: yield* stepId(run.id, "got") }
            yield* deliver([Woken], got, { attempt: 1, msgId: 11n, queue: "default" })
            assert.strictEqual((yield* info(run.id)).status, "finished")
            const before = yield* eventTypes(run.id)
            // the archive's commit was lost with the server: the message comes back, read again
            yield* deliver([Woken], got, { attempt: 2, msgId: 11n, queue: "default" })
            assert.strictEqual(ran, 1, "the step's body ran once")
            assert.strictEqual((yield* info(run.id)).status, "finished")
            assert.deepStrictEqual(yield* stepRows(run.id), ["got#1:completed"])
            assert.deepStrictEqual(yield* eventTypes(run.id), before, "nothing written by the redelivery")
            const signals = yield* Effect.flatMap(WorkflowClient, (c) => c.signals(run.id))
            assert.deepStrictEqual(
              signals.map((x) => x.status),
              ["consumed"]
            )
          })
      )
    })

    describe("an execution interrupted from outside (a drain past its timeout)", () => {
      it.effect(
        "releases its step: a new attempt at once, a step_interrupted event, the run not paused; its message comes back as a duplicate",
        () =>
          Effect.gen(function* () {
            const started = yield* Deferred.make<void>()
            const Drained = Workflow.make("Drained", { payload: Payload }, function* () {
              return yield* Workflow.step(
                "long",
                Effect.gen(function* () {
                  const { attempt } = yield* Workflow.context
                  if (attempt === 1) {
                    yield* Deferred.succeed(started, undefined)
                    yield* Effect.never
                  }
                  return attempt
                })
              )
            })
            const run = yield* Drained.start({ id: "drained" })
            const message = { workflow: "Drained", run: run.id, step: null }
            const running = yield* deliver([Drained], message, { attempt: 1, msgId: 9n, queue: "default" }).pipe(
              Effect.forkChild
            )
            yield* Deferred.await(started)
            yield* Fiber.interrupt(running)
            assert.deepStrictEqual(yield* stepRows(run.id), ["long#1:failed", "long#2:scheduled"])
            const long = (yield* (yield* WorkflowClient).steps(run.id))[0]!
            assert.strictEqual((long.error as { readonly tag: string }).tag, "StepInterrupted")
            const events = yield* (yield* WorkflowClient).events(run.id)
            const interrupted = events.find((e) => e.type === "step_interrupted")
            assert.include(interrupted?.reason ?? "", "drain")
            assert.strictEqual((yield* info(run.id)).status, "ready")
            // the drained worker gave its message back: delivered again, it is a duplicate
            yield* deliver([Drained], message, { attempt: 2, msgId: 9n, queue: "default" })
            assert.notInclude(yield* eventTypes(run.id), "stall_detected")
            assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([Drained])), "finished")
            assert.strictEqual((yield* info(run.id)).output, 2)
            assert.notInclude(yield* eventTypes(run.id), "paused")
          })
      )
    })

    describe("a woken step handed over in this process", () => {
      it.effect(
        "goes only to a free executor (never behind read-ahead), so that a drain cannot give it back looking stalled",
        () =>
          Effect.gen(function* () {
            const gate = yield* Deferred.make<void>()
            const busy = yield* Deferred.make<void>()
            const Blocker = Job.make("HandoverBlocker", { payload: Schema.Struct({}) }, () =>
              Effect.andThen(Deferred.succeed(busy, undefined), Deferred.await(gate))
            )
            const Waits = Workflow.make(
              "HandedOver",
              { payload: Payload, signals: { go: Schema.Struct({ n: Schema.Number }) } },
              function* ({ waitForSignal }) {
                return (yield* waitForSignal("go")).n
              }
            )
            const capsule = { name: "c", queues: ["default"], concurrency: 1, readAhead: 1 }
            const run = yield* Effect.scoped(
              Effect.gen(function* () {
                yield* startSupervisor([Blocker, Waits], { capsules: [capsule] })
                const run = yield* Waits.start({ id: "handed" })
                yield* eventually(
                  "waiting",
                  Effect.map(info(run.id), (i) => i.status === "waiting")
                )
                // the one executor runs a job; a read-ahead slot is free
                yield* Blocker.enqueue({})
                yield* Deferred.await(busy)
                yield* run.signal("go", { n: 5 })
                return run
              })
            )
            // the first supervisor drained (its job was given back); the next one runs everything
            yield* startSupervisor([Blocker, Waits], { capsules: [{ ...capsule, readAhead: 0, concurrency: 2 }] })
            yield* Deferred.succeed(gate, undefined)
            yield* eventually(
              "finished",
              Effect.map(info(run.id), (i) => i.status === "finished")
            )
            assert.strictEqual((yield* info(run.id)).output, 5)
            const types = yield* eventTypes(run.id)
            assert.notInclude(types, "paused")
            assert.notInclude(types, "stall_detected")
          }).pipe(
            Effect.scoped,
            Effect.provide(TestDatabase.layer({ pollingInterval: "50 millis", drainTimeout: "300 millis" }), {
              local: true
            })
          )
      )

      it.effect(
        "refused when a claim filled its executor meanwhile: its message goes back unread (no zombie warning, no retry spent), the step runs once, the run finishes",
        () => {
          const lines: Array<string> = []
          return withCapturedLogs(
            lines,
            Effect.gen(function* () {
              const gate = yield* Deferred.make<void>()
              const busy = yield* Deferred.make<void>()
              const Blocker = Job.make("RefusalBlocker", { payload: Schema.Struct({}) }, () =>
                Effect.andThen(Deferred.succeed(busy, undefined), Deferred.await(gate))
              )
              const Waits = handedOverWorkflow("Filled")
              // one executor and a read-ahead of one: a job claimed while the signal is out
              // takes the executor, and the slot the signal reserved can no longer be honoured
              yield* startSupervisor([Blocker, Waits.workflow], {
                capsules: [{ name: "c", queues: ["default"], concurrency: 1, readAhead: 1 }]
              })
              const { run, unlock, signalled } = yield* signalHeld(Waits.workflow, "filled")
              yield* Blocker.enqueue({})
              yield* Deferred.await(busy)
              yield* unlock
              yield* Fiber.join(signalled)
              yield* eventually(
                "the hand-over refused",
                Effect.map(eventTypes(run.id), (types) => types.includes("step_interrupted"))
              )
              yield* Deferred.succeed(gate, undefined)
              yield* ranOnceQuietly(run.id, Waits.bodies, lines)
            }).pipe(
              Effect.scoped,
              Effect.provide(TestDatabase.layer({ pollingInterval: "50 millis" }), { local: true })
            )
          )
        }
      )

      it.effect(
        "refused when its worker stopped meanwhile: its message goes back unread (no zombie warning, no retry spent), the step runs once elsewhere",
        () => {
          const lines: Array<string> = []
          return withCapturedLogs(
            lines,
            Effect.gen(function* () {
              const Waits = handedOverWorkflow("Refused")
              const capsule = { name: "c", queues: ["default"], concurrency: 1 }
              const supervisor = yield* startSupervisor([Waits.workflow], { capsules: [capsule] })
              const { run, unlock, signalled } = yield* signalHeld(Waits.workflow, "refused")
              // the worker drains with the slot reserved; the signal commits after it stopped
              yield* Fiber.interrupt(supervisor)
              yield* unlock
              yield* Fiber.join(signalled)
              yield* eventually(
                "the hand-over refused",
                Effect.map(eventTypes(run.id), (types) => types.includes("step_interrupted"))
              )
              yield* startSupervisor([Waits.workflow], { capsules: [capsule] })
              yield* ranOnceQuietly(run.id, Waits.bodies, lines)
              const interrupted = (yield* (yield* WorkflowClient).events(run.id)).find(
                (e) => e.type === "step_interrupted"
              )
              assert.include(interrupted?.reason ?? "", "could not take it")
            }).pipe(
              Effect.scoped,
              Effect.provide(TestDatabase.layer({ pollingInterval: "50 millis" }), { local: true })
            )
          )
        }
      )

      it.effect(
        "refused, and its step's release fails: the message goes back as read, and its next delivery applies the stall action (no run stranded)",
        () =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            const Waits = handedOverWorkflow("RefusedUnreleased")
            const capsule = { name: "c", queues: ["default"], concurrency: 1 }
            const supervisor = yield* startSupervisor([Waits.workflow], { capsules: [capsule] })
            // the step's release cannot end its attempt while this trigger stands
            yield* sql.unsafe(`CREATE FUNCTION pgbus_test_refuse_release() RETURNS trigger LANGUAGE plpgsql AS
              $$ BEGIN RAISE EXCEPTION 'release refused by the test'; END $$`)
            yield* sql.unsafe(`CREATE TRIGGER pgbus_test_refuse_release BEFORE UPDATE ON pgbus.workflow_steps
              FOR EACH ROW WHEN (OLD.status = 'in_progress' AND NEW.status = 'failed')
              EXECUTE FUNCTION pgbus_test_refuse_release()`)
            const { run, unlock, signalled } = yield* signalHeld(Waits.workflow, "unreleased")
            yield* Fiber.interrupt(supervisor)
            yield* unlock
            yield* Fiber.join(signalled)
            yield* eventually(
              "given back as read",
              Effect.map(
                sql<{
                  readonly read_ct: number
                }>`SELECT read_ct FROM pgbus.q_pgbus_default WHERE vt <= now() AND claimed_by IS NULL`,
                (rows) => rows.length === 1 && rows[0]!.read_ct === 1
              )
            )
            yield* sql.unsafe("DROP TRIGGER pgbus_test_refuse_release ON pgbus.workflow_steps")
            yield* startSupervisor([Waits.workflow], { capsules: [capsule] })
            // the stall action (pause, the default) applies to the step the message still held
            yield* eventually(
              "paused as stalled",
              Effect.map(info(run.id), (i) => i.status === "paused" && i.pausedReason === "stalled")
            )
            assert.include(yield* eventTypes(run.id), "stall_detected")
            yield* (yield* WorkflowClient).resume(run.id)
            yield* eventually(
              "finished",
              Effect.map(info(run.id), (i) => i.status === "finished")
            )
            assert.strictEqual((yield* info(run.id)).output, 7)
            assert.strictEqual(Waits.bodies(), 1)
          }).pipe(Effect.scoped, Effect.provide(TestDatabase.layer({ pollingInterval: "50 millis" }), { local: true }))
      )
    })

    describe("a run that can never start", () => {
      it.effect(
        "a workflow no worker registers: its message is retried, and its last delivery pauses the run as undeliverable; resumed where it is registered, it finishes",
        () =>
          Effect.gen(function* () {
            const Ghost = Workflow.make("Ghost", { payload: Payload }, function* ({ payload }) {
              return yield* Workflow.step("only", Effect.succeed(payload.id))
            })
            const Other = Workflow.make("OtherThanGhost", { payload: Payload }, function* () {
              yield* Workflow.step("only", Effect.void)
            })
            const store = yield* QueueStore
            const run = yield* Effect.scoped(
              Effect.gen(function* () {
                yield* startSupervisor([Other], {
                  roles: ["workers"],
                  capsules: [{ name: "c", queues: ["default"], concurrency: 2 }]
                })
                const run = yield* Ghost.start({ id: "boo" })
                yield* eventually(
                  "paused",
                  Effect.map(info(run.id), (i) => i.status === "paused"),
                  "20 seconds"
                )
                return run
              })
            )
            const paused = yield* info(run.id)
            assert.strictEqual(paused.pausedReason, "undeliverable")
            assert.strictEqual((paused.error as { readonly tag: string }).tag, "WorkflowNotRegistered")
            assert.strictEqual((yield* store.metrics("default_dlq")).depth, 0, "its message was not dead-lettered")
            const events = yield* (yield* WorkflowClient).events(run.id)
            assert.include(events.find((e) => e.type === "paused")?.reason ?? "", "last delivery")
            yield* Effect.scoped(
              Effect.gen(function* () {
                yield* startSupervisor([Ghost], { capsules: [{ name: "c", queues: ["default"], concurrency: 2 }] })
                yield* (yield* WorkflowClient).resume(run.id)
                yield* eventually(
                  "finished",
                  Effect.map(info(run.id), (i) => i.status === "finished")
                )
              })
            )
            assert.strictEqual((yield* info(run.id)).output, "boo")
          }).pipe(
            Effect.provide(
              TestDatabase.layer({ pollingInterval: "50 millis", maxRetries: 2, retryBackoff: "50 millis" }),
              {
                local: true
              }
            )
          )
      )

      it.effect("a step name PostgreSQL cannot store (a NUL): the run pauses with InvalidWorkflowDefinition", () =>
        Effect.gen(function* () {
          const Nul = Workflow.make("NulStep", { payload: Payload }, function* () {
            yield* Workflow.step("bad\u0000name", Effect.void)
          })
          yield* startSupervisor([Nul], { capsules: [{ name: "c", queues: ["default"], concurrency: 2 }] })
          const run = yield* Nul.start({ id: "nul" })
          yield* eventually(
            "paused",
            Effect.map(info(run.id), (i) => i.status === "paused"),
            "20 seconds"
          )
          const paused = yield* info(run.id)
          assert.strictEqual(paused.pausedReason, "error")
          assert.strictEqual((paused.error as { readonly tag: string }).tag, "InvalidWorkflowDefinition")
        }).pipe(
          Effect.scoped,
          Effect.provide(
            TestDatabase.layer({ pollingInterval: "50 millis", maxRetries: 2, retryBackoff: "50 millis" }),
            {
              local: true
            }
          )
        )
      )

      it.effect("an output PostgreSQL cannot store fails its step with OutputNotStorable (the policies decide)", () =>
        Effect.gen(function* () {
          const Nul = Workflow.make("NulOutput", { payload: Payload }, function* () {
            yield* Workflow.step("out", Effect.succeed({ text: "a\u0000b" }))
          })
          const run = yield* Nul.start({ id: "nul-out" })
          yield* speedrun(run.id).pipe(withRegistry([Nul]))
          const paused = yield* info(run.id)
          assert.strictEqual(paused.status, "paused")
          assert.strictEqual(paused.pausedReason, "error")
          assert.strictEqual((paused.error as { readonly tag: string }).tag, "OutputNotStorable")
        })
      )
    })
  }
)
