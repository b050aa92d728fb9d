/** Signals, waits, timers, polls and the sweep (seed 000 "Signals", seed 004 events, timers, polling). */
import { assert, describe, expect, layer } from "@effect/vitest"
import { Clock, type Duration, Effect, Metric, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import { layerEffectClock } from "../src/Database.ts"
import { Registry } from "../src/Registry.ts"
import { deliverSignal, expireWait, performNextStep, speedrun } from "../src/Testing/Workflows.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import { WorkflowMetrics, WorkflowRunner, WorkflowSweep } from "../src/Workflow/Engine.ts"
import * as States from "../src/Workflow/States.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ id: Schema.String })

let n = 0
const unique = (base: string) => `${base}_${n++}`

const client = WorkflowClient
const status = (id: string) => Effect.flatMap(client, (c) => Effect.map(c.get(id), (h) => h.info.status))
const stepRows = (id: string) =>
  Effect.flatMap(client, (c) => Effect.map(c.steps(id), (ss) => ss.map((s) => `${s.name}#${s.attempt}:${s.status}`)))
const signalRows = (id: string) =>
  Effect.flatMap(client, (c) => Effect.map(c.signals(id), (ss) => ss.map((s) => `${s.name}:${s.status}`)))
const eventTypes = (id: string) =>
  Effect.flatMap(client, (c) => Effect.map(c.events(id), (es) => es.map((e) => e.type)))

const withRegistry =
  <const W extends ReadonlyArray<Workflow.AnyWorkflow>>(workflows: W) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    effect.pipe(Effect.provide(Registry.layer(workflows)))

/** Runs a test on TestClock, statements bound to it, starting at the real time. */
const onTestClock = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    yield* TestClock.setTime(Date.now())
    return yield* effect
  }).pipe(Effect.provide([layerEffectClock, TestClock.layer()]))

const Order = Workflow.make(
  "SignalOrder",
  {
    payload: Payload,
    signals: {
      paid: Schema.Struct({ amount: Schema.Number }),
      shipped: Workflow.signalMatcher("shipped", {
        schema: Schema.Struct({ region: Schema.String }),
        matches: (p) => p.region === "eu"
      })
    }
  },
  function* ({ waitForSignal }) {
    // typed by the declarations: paid.amount is a number, shipped.region a string
    const paid = yield* waitForSignal("paid")
    const shipped = yield* waitForSignal("shipped")
    return { paid: { amount: paid.amount }, shipped: { region: shipped.region } }
  }
)

layer(TestDatabase.layer(), { excludeTestServices: true })("signals", (it) => {
  describe("waiting and waking", () => {
    it.effect("a step with no signal parks as waiting and nothing is sent; a signal wakes it and it runs", () =>
      Effect.gen(function* () {
        const run = yield* Order.start({ id: "o" })
        yield* performNextStep(run.id)
        assert.strictEqual(yield* status(run.id), "waiting")
        assert.deepStrictEqual(yield* stepRows(run.id), ["wait:paid#1:waiting"])
        assert.include(yield* eventTypes(run.id), "step_waiting")
        const receipt = yield* run.signal("paid", { amount: 42 }, { actor: "webhook", reason: "gateway callback" })
        assert.isTrue(receipt.claimed)
        assert.strictEqual(yield* status(run.id), "ready", "woken: the step is scheduled and sent")
        yield* performNextStep(run.id)
        assert.deepStrictEqual(yield* stepRows(run.id), ["wait:paid#1:completed", "wait:shipped#1:waiting"])
        const steps = yield* run.steps
        assert.deepStrictEqual(steps[0]!.output, { amount: 42 })
        assert.deepStrictEqual(yield* signalRows(run.id), ["paid:consumed"])
        const events = yield* run.events
        const received = events.find((e) => e.type === "signal_received")!
        assert.strictEqual(received.actor, "webhook")
        assert.strictEqual(received.reason, "gateway callback")
        assert.include(
          events.map((e) => e.type),
          "signal_claimed"
        )
      }).pipe(withRegistry([Order]))
    )

    it.effect("a signal sent before the step waits stays pending and is taken at the gate", () =>
      Effect.gen(function* () {
        const run = yield* Order.start({ id: "b" })
        yield* run.signal("paid", { amount: 1 })
        assert.deepStrictEqual(yield* signalRows(run.id), ["paid:pending"])
        yield* performNextStep(run.id)
        assert.deepStrictEqual(yield* stepRows(run.id), ["wait:paid#1:completed", "wait:shipped#1:waiting"])
        assert.deepStrictEqual(yield* signalRows(run.id), ["paid:consumed"])
      }).pipe(withRegistry([Order]))
    )

    it.effect("the oldest pending matching signal wins; the matcher takes only what it matches", () =>
      Effect.gen(function* () {
        const run = yield* Order.start({ id: "m" })
        yield* run.signal("paid", { amount: 1 })
        yield* run.signal("paid", { amount: 2 })
        yield* run.signal("shipped", { region: "us" })
        yield* run.signal("shipped", { region: "eu" })
        yield* performNextStep(run.id)
        yield* performNextStep(run.id)
        assert.strictEqual(yield* status(run.id), "finished")
        assert.deepStrictEqual((yield* run.refresh).info.output, { paid: { amount: 1 }, shipped: { region: "eu" } })
        assert.deepStrictEqual(yield* signalRows(run.id), [
          "paid:consumed",
          "paid:pending",
          "shipped:pending",
          "shipped:consumed"
        ])
      }).pipe(withRegistry([Order]))
    )

    it.effect("a matcher that throws at the gate goes to the exception policies", () =>
      Effect.gen(function* () {
        const Throws = Workflow.make(
          "ThrowingMatcher",
          { payload: Payload, onError: [{ action: "cancel" }] },
          function* () {
            yield* Workflow.waitForSignal({
              name: "x",
              matches: () => {
                throw new Error("matcher broke")
              }
            })
          }
        )
        const run = yield* Throws.start({ id: "t" })
        yield* (yield* WorkflowClient).signal(run.id, "x", {})
        assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([Throws])), "cancelled")
        const steps = yield* run.steps
        expect(steps[0]!.error).toMatchObject({ message: "matcher broke" })
      })
    )
  })

  describe("sending", () => {
    it.effect("a repeated idempotency key stores nothing, wakes nothing and returns the stored signal", () =>
      Effect.gen(function* () {
        const run = yield* Order.start({ id: "i" })
        const first = yield* run.signal("paid", { amount: 5 }, { idempotencyKey: "evt-1" })
        const again = yield* run.signal("paid", { amount: 999 }, { idempotencyKey: "evt-1" })
        assert.isFalse(first.duplicate)
        assert.isTrue(again.duplicate)
        assert.strictEqual(again.id, first.id)
        assert.deepStrictEqual(again.payload, { amount: 5 })
        assert.deepStrictEqual(yield* signalRows(run.id), ["paid:pending"])
        const blank = yield* run.signal("paid", { amount: 6 }, { idempotencyKey: "  " })
        assert.isFalse(blank.duplicate, "a blank key is no key")
        const events = yield* run.events
        const received = events.filter((e) => e.type === "signal_received")
        assert.strictEqual(received.length, 3)
        assert.strictEqual((received[1]!.details as { duplicate: boolean }).duplicate, true)
      }).pipe(withRegistry([Order]))
    )

    it.effect("payloads are checked against the declared Schema and the size cap; nothing is stored", () =>
      Effect.gen(function* () {
        const run = yield* Order.start({ id: "p" })
        const bad = yield* Effect.flip(run.signal("paid", { amount: "lots" }))
        assert.strictEqual(bad._tag, "InvalidSignal")
        const big = yield* Effect.flip((yield* WorkflowClient).signal(run.id, "other", { blob: "x".repeat(200_000) }))
        assert.strictEqual(big._tag, "InvalidSignal")
        // @ts-expect-error the declared Schema types the payload; an untyped caller is checked at run time
        const typed = yield* Effect.flip(Order.signal(run.id, "paid", { amount: "x" }))
        assert.strictEqual(typed._tag, "InvalidSignal")
        assert.deepStrictEqual(yield* signalRows(run.id), [])
      }).pipe(withRegistry([Order]))
    )

    it.effect("a declared matcher that throws in signal: the error reaches the caller and nothing is stored", () =>
      Effect.gen(function* () {
        const Broken = Workflow.make(
          "BrokenMatcher",
          {
            payload: Payload,
            signals: {
              x: Workflow.signalMatcher("x", {
                schema: Schema.Struct({ v: Schema.Number }),
                matches: () => {
                  throw new Error("matcher broke")
                }
              })
            }
          },
          function* () {
            yield* Workflow.waitForSignal("x")
          }
        )
        const run = yield* Broken.start({ id: "mb" })
        yield* performNextStep(run.id).pipe(withRegistry([Broken]))
        const error = yield* Effect.flip(run.signal("x", { v: 1 }))
        assert.strictEqual(error._tag, "InvalidSignal")
        assert.include(String((error as { issue?: string }).issue), "matcher broke")
        assert.deepStrictEqual(yield* signalRows(run.id), [])
        assert.strictEqual(yield* status(run.id), "waiting")
      })
    )

    it.effect("a finished or cancelled run fails with NotOngoing; by subject, missing raises or is ignored", () =>
      Effect.gen(function* () {
        const subject = unique("order")
        const run = yield* Order.start({ id: "n" }, { subject })
        const bySubject = yield* Order.signalSubject(subject, "paid", { amount: 3 })
        assert.strictEqual(bySubject?.runId, run.id)
        yield* run.cancel()
        const error = yield* Effect.flip(run.signal("paid", { amount: 1 }))
        assert.strictEqual(error._tag, "NotOngoing")
        const missing = yield* Effect.flip(Order.signalSubject(subject, "paid", { amount: 1 }))
        assert.strictEqual(missing._tag, "NotOngoing")
        assert.isUndefined(yield* Order.signalSubject(subject, "paid", { amount: 1 }, { missing: "ignore" }))
        assert.isUndefined(yield* Order.signalSubject("nobody", "paid", { amount: 1 }, { missing: "ignore" }))
      }).pipe(withRegistry([Order]))
    )

    it.effect("a signal inside a transaction that rolls back stores nothing and wakes nothing", () =>
      Effect.gen(function* () {
        const run = yield* Order.start({ id: "rb" })
        yield* performNextStep(run.id)
        const sql = yield* SqlClient.SqlClient
        yield* sql
          .withTransaction(Effect.andThen(run.signal("paid", { amount: 1 }), Effect.fail("abort")))
          .pipe(Effect.ignore)
        assert.strictEqual(yield* status(run.id), "waiting")
        assert.deepStrictEqual(yield* signalRows(run.id), [])
      }).pipe(withRegistry([Order]))
    )
  })

  describe("lifecycle", () => {
    it.effect("a claimed signal is kept when the attempt reattempts: the next attempt runs with it", () =>
      Effect.gen(function* () {
        const seen: Array<string> = []
        const Retry = Workflow.make("SignalRetry", { payload: Payload }, function* () {
          yield* Workflow.step(
            "use",
            Effect.gen(function* () {
              const ctx = yield* Workflow.context
              seen.push(`${ctx.attempt}:${JSON.stringify(ctx.signal?.payload)}:${yield* Workflow.woken}`)
              if (ctx.attempt === 1) return yield* Effect.fail(new Error("flaky"))
            }),
            { waitFor: "go", onError: [{ action: "reattempt" }] }
          )
        })
        const run = yield* Retry.start({ id: "r" })
        yield* performNextStep(run.id).pipe(withRegistry([Retry]))
        yield* deliverSignal(run.id, "go", { n: 1 }).pipe(withRegistry([Retry]))
        assert.deepStrictEqual(yield* signalRows(run.id), ["go:claimed"], "kept for the next attempt")
        yield* performNextStep(run.id).pipe(withRegistry([Retry]))
        assert.strictEqual(yield* status(run.id), "finished")
        assert.deepStrictEqual(seen, ['1:{"n":1}:true', '2:{"n":1}:true'])
        assert.deepStrictEqual(yield* signalRows(run.id), ["go:consumed"])
      })
    )

    it.effect("a claimed signal is kept when the attempt fails into a pause: resume runs with it, unmatched", () =>
      Effect.gen(function* () {
        const seen: Array<string> = []
        let matcherCalls = 0
        const Pauses = Workflow.make("SignalPause", { payload: Payload }, function* () {
          yield* Workflow.step(
            "use",
            Effect.gen(function* () {
              const ctx = yield* Workflow.context
              seen.push(`${ctx.attempt}:${JSON.stringify(ctx.signal?.payload)}`)
              if (ctx.attempt === 1) return yield* Effect.fail(new Error("needs a human"))
            }),
            {
              waitFor: {
                name: "go",
                matches: (p: unknown) => {
                  matcherCalls++
                  return (p as { n: number }).n > 0
                }
              }
            }
          )
        })
        const inline = withRegistry([Pauses])
        const run = yield* Pauses.start({ id: "fp" })
        yield* Effect.flip(speedrun(run.id).pipe(inline))
        yield* deliverSignal(run.id, "go", { n: 1 }).pipe(inline)
        assert.strictEqual(yield* status(run.id), "paused")
        assert.deepStrictEqual(yield* signalRows(run.id), ["go:claimed"], "kept for the next attempt")
        const calls = matcherCalls
        yield* run.resume()
        assert.strictEqual(yield* speedrun(run.id).pipe(inline), "finished")
        assert.strictEqual(matcherCalls, calls, "the next attempt does not match again")
        assert.deepStrictEqual(seen, ['1:{"n":1}', '2:{"n":1}'])
        assert.deepStrictEqual(yield* signalRows(run.id), ["go:consumed"])
      })
    )

    it.effect("a guard that skips a step holding a signal consumes it; a cancelIf that cancels takes none", () =>
      Effect.gen(function* () {
        const SkipsWoken = Workflow.make("SkipsWoken", { payload: Payload }, function* () {
          yield* Workflow.step("held", Effect.void, { waitFor: "go", skipIf: () => Workflow.woken })
        })
        const inline = withRegistry([SkipsWoken])
        const run = yield* SkipsWoken.start({ id: "sw" })
        yield* Effect.flip(speedrun(run.id).pipe(inline))
        yield* deliverSignal(run.id, "go", {}).pipe(inline)
        assert.deepStrictEqual(yield* stepRows(run.id), ["held#1:skipped"])
        assert.deepStrictEqual(yield* signalRows(run.id), ["go:consumed"])
        assert.strictEqual(yield* status(run.id), "finished")

        const Cancels = Workflow.make(
          "CancelsPending",
          { payload: Payload, cancelIf: () => Effect.succeed(true) },
          function* () {
            yield* Workflow.waitForSignal("go")
          }
        )
        const cancelled = yield* Cancels.start({ id: "cp" })
        yield* cancelled.signal("go", {})
        assert.strictEqual(yield* speedrun(cancelled.id).pipe(withRegistry([Cancels])), "cancelled")
        assert.deepStrictEqual(yield* signalRows(cancelled.id), ["go:pending"])
      })
    )

    it.effect("a paused run still takes a signal for its waiting step but stays paused; resume runs the step", () =>
      Effect.gen(function* () {
        const run = yield* Order.start({ id: "ps" })
        yield* performNextStep(run.id)
        yield* run.pause({ reason: "audit" })
        const receipt = yield* run.signal("paid", { amount: 9 })
        assert.isTrue(receipt.claimed)
        assert.strictEqual(yield* status(run.id), "paused")
        yield* run.resume()
        assert.strictEqual(yield* status(run.id), "ready")
        yield* performNextStep(run.id)
        assert.deepStrictEqual(yield* stepRows(run.id), ["wait:paid#1:completed", "wait:shipped#1:waiting"])
      }).pipe(withRegistry([Order]))
    )

    it.effect("resume of a run paused while waiting puts it back to waiting (rewait)", () =>
      Effect.gen(function* () {
        const run = yield* Order.start({ id: "rw" })
        yield* performNextStep(run.id)
        yield* run.pause()
        const resumed = yield* run.resume()
        assert.strictEqual(resumed.status, "waiting")
        yield* deliverSignal(run.id, "paid", { amount: 1 })
        assert.deepStrictEqual(yield* stepRows(run.id), ["wait:paid#1:completed", "wait:shipped#1:waiting"])
      }).pipe(withRegistry([Order]))
    )

    it.effect("signalReady and woken: a guard reading them skips only when no signal is held or pending", () =>
      Effect.gen(function* () {
        const reads: Array<string> = []
        let shippedAlready = false
        const Guarded = Workflow.make("SignalGuard", { payload: Payload }, function* () {
          yield* Workflow.step("await_shipped", Effect.void, {
            waitFor: "shipped",
            skipIf: () =>
              Effect.gen(function* () {
                const ready = yield* Workflow.signalReady
                const woken = yield* Workflow.woken
                reads.push(`ready=${ready} woken=${woken}`)
                return shippedAlready && !ready
              })
          })
          yield* Workflow.step("after", Effect.void)
        })
        // 1. the record already passed the state and no signal came: the wait is skipped
        shippedAlready = true
        const inline = withRegistry([Guarded])
        const skipped = yield* Guarded.start({ id: "1" })
        yield* speedrun(skipped.id).pipe(inline)
        assert.deepStrictEqual(yield* stepRows(skipped.id), ["await_shipped#1:skipped", "after#1:completed"])
        // 2. a signal came first (buffered): not woken, but ready, so the step runs with it
        const buffered = yield* Guarded.start({ id: "2" })
        yield* buffered.signal("shipped", {})
        yield* speedrun(buffered.id).pipe(inline)
        assert.deepStrictEqual(yield* stepRows(buffered.id), ["await_shipped#1:completed", "after#1:completed"])
        // 3. woken by a signal: woken and ready
        shippedAlready = false
        const woken = yield* Guarded.start({ id: "3" })
        // a step with a guard is scheduled first, then parks: run until it waits
        assert.strictEqual((yield* Effect.flip(speedrun(woken.id).pipe(inline)))._tag, "StepWaiting")
        shippedAlready = true
        yield* deliverSignal(woken.id, "shipped", {}).pipe(inline)
        assert.deepStrictEqual(yield* stepRows(woken.id), ["await_shipped#1:completed", "after#1:completed"])
        assert.deepStrictEqual(reads, [
          "ready=false woken=false",
          "ready=true woken=false",
          "ready=false woken=false",
          "ready=true woken=true"
        ])
        const outside = yield* Effect.flip(Workflow.woken)
        assert.strictEqual(outside._tag, "NotInStep")
        assert.strictEqual((yield* Effect.flip(Workflow.signalReady))._tag, "NotInStep")
      })
    )

    it.effect("a guard that skips takes no signal: a pending one stays for a later step that matches it", () =>
      Effect.gen(function* () {
        const Skips = Workflow.make("SkipKeepsSignal", { payload: Payload }, function* () {
          yield* Workflow.step("first", Effect.void, { waitFor: "go", skipIf: () => Effect.succeed(true) })
          return yield* Workflow.waitForSignal("go", { step: "second" })
        })
        const run = yield* Skips.start({ id: "k" })
        yield* run.signal("go", { v: 7 })
        yield* speedrun(run.id).pipe(withRegistry([Skips]))
        assert.deepStrictEqual(yield* stepRows(run.id), ["first#1:skipped", "second#1:completed"])
        assert.deepStrictEqual((yield* run.refresh).info.output, { v: 7 })
      })
    )

    it.effect("an outside skip of a waiting step consumes its held signal and moves on", () =>
      Effect.gen(function* () {
        const run = yield* Order.start({ id: "sk" })
        yield* performNextStep(run.id)
        const skipped = yield* run.skip({ actor: "alice", reason: "picked up in store" })
        assert.strictEqual(skipped.status, "ready")
        yield* performNextStep(run.id)
        assert.deepStrictEqual(yield* stepRows(run.id), ["wait:paid#1:skipped", "wait:shipped#1:waiting"])
        const refused = yield* Effect.flip((yield* WorkflowClient).skip((yield* Order.start({ id: "x" })).id))
        assert.strictEqual(refused._tag, "InvalidTransition")
      }).pipe(withRegistry([Order]))
    )
  })

  describe("timeouts", () => {
    const waiting = (onTimeout: Workflow.OnTimeout, timeout: Workflow.WaitTimeout = "1 hour") =>
      Workflow.make(`Timeout-${onTimeout}-${unique("w")}`, { payload: Payload }, function* () {
        const got = yield* Workflow.step(
          "wait",
          Effect.map(Workflow.context, (c) => ({ signal: c.signal?.payload ?? null, timedOut: c.timedOut })),
          { waitFor: "reply", waitTimeout: timeout, onTimeout }
        )
        return got
      })

    const expire = (wf: ReturnType<typeof waiting>) =>
      Effect.gen(function* () {
        const run = yield* wf.start({ id: "t" })
        yield* performNextStep(run.id).pipe(withRegistry([wf]))
        yield* TestClock.adjust("61 minutes")
        const sweep = yield* WorkflowSweep
        const report = yield* sweep.runOnce
        return { run, report }
      })

    it.effect("onTimeout pause (default): the step fails with WaitTimedOut and the run pauses", () =>
      Effect.gen(function* () {
        const { run, report } = yield* expire(waiting("pause"))
        assert.isAtLeast(report.timedOut, 1)
        assert.strictEqual(yield* status(run.id), "paused")
        const steps = yield* run.steps
        expect(steps[0]!.error).toMatchObject({ tag: "WaitTimedOut" })
        assert.include(yield* eventTypes(run.id), "wait_timed_out")
        // a signal after the timeout stays pending
        yield* (yield* WorkflowClient).signal(run.id, "reply", {})
        assert.deepStrictEqual(yield* signalRows(run.id), ["reply:pending"])
      }).pipe(onTestClock)
    )

    it.effect("onTimeout cancel cancels; skip moves on", () =>
      Effect.gen(function* () {
        const cancelled = yield* expire(waiting("cancel"))
        assert.strictEqual(yield* status(cancelled.run.id), "cancelled")
        const skip = waiting("skip")
        const skipped = yield* expire(skip)
        assert.strictEqual(yield* status(skipped.run.id), "ready")
        assert.strictEqual(yield* speedrun(skipped.run.id).pipe(withRegistry([skip])), "finished")
        assert.deepStrictEqual(yield* stepRows(skipped.run.id), ["wait#1:skipped"])
      }).pipe(onTestClock)
    )

    it.effect("onTimeout run: the body runs with no signal and timedOut true", () =>
      Effect.gen(function* () {
        const wf = waiting("run")
        const { run } = yield* expire(wf)
        assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([wf])), "finished")
        assert.deepStrictEqual((yield* run.refresh).info.output, { signal: null, timedOut: true })
      }).pipe(onTestClock)
    )

    it.effect("a per-run deadline: a past Date parks with the deadline now; undefined parks without one", () =>
      Effect.gen(function* () {
        const past = waiting("pause", () => Effect.succeed(new Date(Date.now() - 86_400_000)))
        const run = yield* past.start({ id: "d" })
        yield* performNextStep(run.id).pipe(withRegistry([past]))
        const sweep = yield* WorkflowSweep
        yield* sweep.runOnce
        assert.strictEqual(yield* status(run.id), "paused", "the next sweep applies onTimeout")
        const none = waiting("pause", () => Effect.succeed(undefined))
        const open = yield* none.start({ id: "u" })
        yield* performNextStep(open.id).pipe(withRegistry([none]))
        yield* TestClock.adjust("30 days")
        yield* sweep.runOnce
        assert.strictEqual(yield* status(open.id), "waiting", "no deadline this attempt")
      }).pipe(onTestClock)
    )

    it.effect("a per-run deadline that gives a non-positive duration goes to the exception policies", () =>
      Effect.gen(function* () {
        const bad = waiting("pause", () => Effect.succeed("-5 minutes" as const))
        const run = yield* bad.start({ id: "bd" })
        assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([bad])), "paused")
        expect((yield* run.refresh).info.error).toMatchObject({ message: expect.stringContaining("positive duration") })
        assert.deepStrictEqual(yield* stepRows(run.id), ["wait#1:failed"], "it never parks silently")
      }).pipe(onTestClock)
    )

    it.effect("resume after a two-hour pause moves the deadline by two hours; a paused wait never times out", () =>
      Effect.gen(function* () {
        const wf = waiting("pause", "3 hours")
        const run = yield* wf.start({ id: "pp" })
        yield* performNextStep(run.id).pipe(withRegistry([wf]))
        const before = (yield* run.steps)[0]!
        const deadline = (yield* SqlClient.SqlClient)<{
          readonly timeout_at: Date
        }>`SELECT timeout_at FROM pgbus.workflow_steps WHERE id = ${before.id}`
        const original = (yield* deadline)[0]!.timeout_at.getTime()
        yield* run.pause()
        yield* TestClock.adjust("4 hours")
        yield* (yield* WorkflowSweep).runOnce
        assert.strictEqual(yield* status(run.id), "paused", "no timeout while paused")
        yield* run.resume()
        const moved = (yield* deadline)[0]!.timeout_at.getTime()
        assert.strictEqual(moved - original, 4 * 3_600_000, "moved by the length of the pause")
        assert.strictEqual(yield* status(run.id), "waiting")
      }).pipe(onTestClock)
    )

    it.effect("a notify wait late three times reports three notices, keeps waiting, then takes a late signal", () =>
      Effect.gen(function* () {
        const wf = waiting("notify")
        const run = yield* wf.start({ id: "nt" })
        yield* performNextStep(run.id).pipe(withRegistry([wf]))
        const sweep = yield* WorkflowSweep
        for (let i = 0; i < 3; i++) {
          yield* TestClock.adjust("61 minutes")
          yield* sweep.runOnce
        }
        // a sweep that missed several deadlines reports them once
        yield* TestClock.adjust("5 hours")
        yield* sweep.runOnce
        const notices = (yield* run.events).filter((e) => e.type === "wait_timed_out")
        assert.strictEqual(notices.length, 4)
        assert.isTrue(notices.every((e) => (e.details as { action: string }).action === "notify"))
        assert.strictEqual(yield* status(run.id), "waiting")
        yield* deliverSignal(run.id, "reply", { late: true }).pipe(withRegistry([wf]))
        assert.deepStrictEqual((yield* run.refresh).info.output, { signal: { late: true }, timedOut: false })
      }).pipe(onTestClock)
    )

    it.effect("a per-run notify deadline is evaluated again at each notice, by a worker, once per deadline", () =>
      Effect.gen(function* () {
        const parkedAt = yield* Clock.currentTimeMillis
        // park: 1 hour; 1st notice: a date 3 hours after the park; 2nd: a duration; 3rd: none
        const answers: Array<Duration.Input | Date | undefined> = [
          "1 hour",
          new Date(parkedAt + 3 * 3_600_000),
          "2 hours",
          undefined
        ]
        let calls = 0
        const wf = waiting("notify", () => Effect.sync(() => answers[calls++]))
        const run = yield* wf.start({ id: "pr" })
        yield* performNextStep(run.id).pipe(withRegistry([wf]))
        const sql = yield* SqlClient.SqlClient
        const stepId = (yield* run.steps)[0]!.id
        const deadline = Effect.map(
          sql<{ readonly timeout_at: Date | null }>`SELECT timeout_at FROM pgbus.workflow_steps WHERE id = ${stepId}`,
          (rows) => rows[0]!.timeout_at?.getTime() ?? null
        )
        const sweep = yield* WorkflowSweep
        const notices = Effect.map(run.events, (es) => es.filter((e) => e.type === "wait_timed_out"))

        yield* TestClock.adjust("61 minutes")
        assert.strictEqual((yield* sweep.runOnce).timedOut, 1)
        assert.strictEqual((yield* sweep.runOnce).timedOut, 0, "a second sweep hands the same deadline over no more")
        const handed = yield* sql<{ readonly message: { readonly payload: { readonly deadline?: string } } }>`
          SELECT message FROM pgbus.q_pgbus_default WHERE message->'payload'->>'deadline' IS NOT NULL`
        assert.strictEqual(handed.length, 1, "the notice is handed to a worker as a step message")
        assert.strictEqual((yield* notices).length, 0, "the worker writes the notice")
        // a handed-over notice whose message is gone is handed over again past the stall threshold
        yield* sql`DELETE FROM pgbus.q_pgbus_default WHERE message->'payload'->>'deadline' IS NOT NULL`
        yield* TestClock.adjust("61 minutes")
        assert.strictEqual((yield* sweep.runOnce).timedOut, 1)
        assert.strictEqual((yield* sweep.runOnce).timedOut, 0)
        const work = yield* (yield* WorkflowRunner).next(run.id)
        assert.strictEqual(work._tag, "Step")
        yield* performNextStep(run.id).pipe(withRegistry([wf]))
        // a duplicate delivery of the same message changes nothing
        if (work._tag === "Step") {
          const runner = yield* WorkflowRunner
          yield* Effect.gen(function* () {
            const registry = yield* Registry
            yield* runner.execute(registry.workflows, work.message, { attempt: 2 })
          }).pipe(withRegistry([wf]))
        }
        assert.strictEqual(calls, 2, "evaluated at the park and at the notice")
        assert.strictEqual(yield* deadline, parkedAt + 3 * 3_600_000, "a date after now is the next deadline")
        const first = (yield* notices)[0]!
        expect(first.details).toMatchObject({ action: "notify", evaluated: true })

        yield* TestClock.adjust("2 hours")
        yield* sweep.runOnce
        yield* performNextStep(run.id).pipe(withRegistry([wf]))
        assert.strictEqual(
          yield* deadline,
          parkedAt + 5 * 3_600_000,
          "a duration moves the deadline one period on, as a static one"
        )

        yield* TestClock.adjust("2 hours")
        yield* sweep.runOnce
        yield* performNextStep(run.id).pipe(withRegistry([wf]))
        assert.isNull(yield* deadline, "undefined leaves the wait without a deadline")
        yield* TestClock.adjust("30 days")
        yield* sweep.runOnce
        assert.strictEqual((yield* notices).length, 3, "one notice per deadline, none after the last")
        assert.strictEqual(calls, 4)
        assert.strictEqual(yield* status(run.id), "waiting")
        yield* deliverSignal(run.id, "reply", { late: true }).pipe(withRegistry([wf]))
        assert.deepStrictEqual((yield* run.refresh).info.output, { signal: { late: true }, timedOut: false })
      }).pipe(onTestClock)
    )

    it.effect("a per-run notify deadline that fails at a notice pauses the run with its error", () =>
      Effect.gen(function* () {
        let calls = 0
        const wf = waiting("notify", () =>
          calls++ === 0 ? Effect.succeed("1 hour" as const) : Effect.fail(new Error("SLA service down"))
        )
        const run = yield* wf.start({ id: "pf" })
        yield* performNextStep(run.id).pipe(withRegistry([wf]))
        yield* expireWait(run.id).pipe(withRegistry([wf]))
        assert.strictEqual(yield* status(run.id), States.targetOf("notice_pause", "waiting"))
        const info = (yield* run.refresh).info
        assert.strictEqual(info.pausedReason, "error")
        expect(info.error).toMatchObject({ message: "SLA service down" })
        const types = yield* eventTypes(run.id)
        assert.includeMembers(types, ["wait_timed_out", "paused"])
        assert.deepStrictEqual(yield* stepRows(run.id), ["wait#1:waiting"], "the step still waits")
        yield* run.resume()
        assert.strictEqual(yield* status(run.id), "waiting", "resume puts it back to waiting, without a deadline")
        yield* deliverSignal(run.id, "reply", { ok: 1 }).pipe(withRegistry([wf]))
        assert.strictEqual(yield* status(run.id), "finished")
      }).pipe(onTestClock)
    )

    it.effect("expireWait applies onTimeout now, whatever the deadline", () =>
      Effect.gen(function* () {
        const wf = waiting("cancel", "30 days")
        const run = yield* wf.start({ id: "e" })
        yield* performNextStep(run.id).pipe(withRegistry([wf]))
        assert.isTrue(yield* expireWait(run.id))
        assert.strictEqual(yield* status(run.id), "cancelled")
      })
    )
  })

  describe("timers and polls", () => {
    it.effect("sleep and waitUntil hold no worker: the step waits for its due time", () =>
      Effect.gen(function* () {
        const Timers = Workflow.make("Timers", { payload: Payload }, function* () {
          yield* Workflow.sleep("cool-off", "3 days")
          yield* Workflow.waitUntil("launch", new Date(Date.now() + 10 * 86_400_000))
          yield* Workflow.waitUntil("past", new Date(0))
        })
        const run = yield* Timers.start({ id: "z" })
        yield* performNextStep(run.id).pipe(withRegistry([Timers]))
        const [sleeping] = yield* run.steps
        assert.strictEqual(sleeping!.status, "scheduled")
        assert.isTrue(Math.abs(sleeping!.dueAt.getTime() - sleeping!.scheduledAt.getTime() - 3 * 86_400_000) < 1_000)
        assert.strictEqual(yield* status(run.id), "ready")
        // fast-forward cuts a timer short
        yield* (yield* WorkflowClient).fastForward(run.id)
        assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([Timers])), "finished")
        assert.deepStrictEqual(yield* stepRows(run.id), [
          "cool-off#1:completed",
          "launch#1:completed",
          "past#1:completed"
        ])
      })
    )

    it.effect("poll checks on an interval, holding no worker between checks, and gives the data", () =>
      Effect.gen(function* () {
        let checks = 0
        const Polls = Workflow.make("Polls", { payload: Payload }, function* () {
          return yield* Workflow.poll(
            "wait-for-file",
            Effect.sync(() => (++checks >= 3 ? Option.some({ url: "s3://x" }) : Option.none())),
            { interval: "1 minute", timeout: "1 hour" }
          )
        })
        const run = yield* Polls.start({ id: "p" })
        yield* performNextStep(run.id).pipe(withRegistry([Polls]))
        assert.strictEqual(yield* status(run.id), "ready")
        const [step] = yield* run.steps
        assert.strictEqual(step!.status, "scheduled")
        assert.isTrue(step!.dueAt.getTime() - Date.now() > 50_000, "the next check is a minute away")
        assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([Polls])), "finished")
        assert.strictEqual(checks, 3)
        assert.deepStrictEqual((yield* run.refresh).info.output, { timedOut: false, data: { url: "s3://x" } })
        assert.deepStrictEqual(yield* stepRows(run.id), ["wait-for-file#1:completed"], "one step, checked three times")
      })
    )

    it.effect(
      "fastForward: a poll resolves with data, a wait gets it as its signal, a paused run resumes; else nothing",
      () =>
        Effect.gen(function* () {
          const FF = Workflow.make("FastForwards", { payload: Payload }, function* () {
            const polled = yield* Workflow.poll("export", Effect.succeed(Option.none()), { interval: "1 hour" })
            const approval = yield* Workflow.waitForSignal("approved")
            yield* Workflow.step("editor", Workflow.pause("editor approval"))
            return { polled, approval }
          })
          const inline = withRegistry([FF])
          const c = yield* WorkflowClient
          const run = yield* FF.start({ id: "ff" })
          yield* performNextStep(run.id).pipe(inline)
          assert.strictEqual((yield* run.steps)[0]!.status, "scheduled", "between checks")
          yield* c.fastForward(run.id, { url: "s3://ready" })
          assert.strictEqual((yield* Effect.flip(speedrun(run.id).pipe(inline)))._tag, "StepWaiting")
          yield* c.fastForward(run.id, { approved: true })
          assert.strictEqual(yield* speedrun(run.id).pipe(inline), "paused")
          const finished = yield* c.fastForward(run.id)
          assert.strictEqual(finished.status, "ready")
          assert.strictEqual(yield* speedrun(run.id).pipe(inline), "finished")
          assert.deepStrictEqual((yield* run.refresh).info.output, {
            polled: { timedOut: false, data: { url: "s3://ready" } },
            approval: { approved: true }
          })
          const again = yield* c.fastForward(run.id)
          assert.strictEqual(again.status, "finished", "a finished run is left alone")
        })
    )

    it.effect("poll gives timedOut once its timeout has passed", () =>
      Effect.gen(function* () {
        const Never = Workflow.make("PollsForever", { payload: Payload }, function* () {
          return yield* Workflow.poll("never", Effect.succeed(Option.none()), {
            interval: "10 minutes",
            timeout: "1 hour"
          })
        })
        const run = yield* Never.start({ id: "n" })
        for (let i = 0; i < 8 && (yield* status(run.id)) !== "finished"; i++) {
          yield* performNextStep(run.id).pipe(withRegistry([Never]))
          yield* TestClock.adjust("11 minutes")
        }
        assert.strictEqual(yield* status(run.id), "finished")
        assert.deepStrictEqual((yield* run.refresh).info.output, { timedOut: true })
      }).pipe(onTestClock)
    )
  })

  describe("the sweep", () => {
    const Sweepable = Workflow.make("Sweepable", { payload: Payload }, function* () {
      yield* Workflow.step("work", Effect.void, { wait: "1 millis" })
    })

    it.effect("an in-progress step past the stall threshold gets the stall action, once, with two sweeps racing", () =>
      Effect.gen(function* () {
        const run = yield* Sweepable.start({ id: "s" })
        yield* performNextStep(run.id).pipe(withRegistry([Sweepable]))
        const sql = yield* SqlClient.SqlClient
        // a worker claimed it and died: in progress since long ago
        yield* sql`UPDATE pgbus.workflow_steps SET status = 'in_progress', started_at = now() - interval '2 hours'
          WHERE run_id = ${run.id}::uuid`
        yield* sql`UPDATE pgbus.workflow_runs SET status = 'performing' WHERE id = ${run.id}::uuid`
        const sweep = yield* WorkflowSweep
        const [a, b] = yield* Effect.all([sweep.runOnce, sweep.runOnce], { concurrency: 2 })
        assert.strictEqual(a.stalled + b.stalled, 1)
        assert.strictEqual(yield* status(run.id), "paused")
        const info = (yield* run.refresh).info
        assert.strictEqual(info.pausedReason, "stalled")
        expect(info.error).toMatchObject({ tag: "StepStalled" })
        assert.strictEqual((yield* eventTypes(run.id)).filter((t) => t === "stall_detected").length, 1)
      })
    )

    it.effect("a scheduled step due long ago whose message is gone is sent again, once, with two sweeps racing", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const messagesOf = (stepId: bigint) =>
          Effect.map(
            sql<{ readonly n: bigint }>`SELECT count(*) AS n FROM pgbus.q_pgbus_default
              WHERE message -> 'payload' ->> 'step' = ${String(stepId)}`,
            (rows) => Number(rows[0]!.n)
          )
        const sweep = yield* WorkflowSweep
        // behind a backlog: overdue, but its message is still queued, so nothing is sent
        const behind = yield* Sweepable.start({ id: "bl" })
        yield* performNextStep(behind.id).pipe(withRegistry([Sweepable]))
        yield* sql`UPDATE pgbus.workflow_steps SET due_at = now() - interval '2 hours' WHERE run_id = ${behind.id}::uuid`
        const [queuedStep] = yield* behind.steps
        assert.strictEqual((yield* sweep.runOnce).resent, 0)
        assert.strictEqual(yield* messagesOf(queuedStep!.id), 1)
        yield* sql`DELETE FROM pgbus.q_pgbus_default WHERE message -> 'payload' ->> 'step' = ${String(queuedStep!.id)}`
        // lost: its message is gone
        const run = yield* Sweepable.start({ id: "l" })
        yield* performNextStep(run.id).pipe(withRegistry([Sweepable]))
        yield* sql`UPDATE pgbus.workflow_steps SET due_at = now() - interval '2 hours' WHERE run_id = ${run.id}::uuid`
        const [step] = yield* run.steps
        yield* sql`DELETE FROM pgbus.q_pgbus_default WHERE message -> 'payload' ->> 'step' = ${String(step!.id)}`
        const [a, b] = yield* Effect.all([sweep.runOnce, sweep.runOnce], { concurrency: 2 })
        assert.strictEqual(a.resent + b.resent, 2, "the two lost messages, each sent once")
        assert.strictEqual(yield* messagesOf(step!.id), 1)
        assert.strictEqual(yield* messagesOf(queuedStep!.id), 1)
        assert.strictEqual(yield* speedrun(run.id).pipe(withRegistry([Sweepable])), "finished")
      })
    )

    it.effect("a wait's deadline gets its onTimeout once with two sweeps racing; a waiting step is never stalled", () =>
      Effect.gen(function* () {
        const Waits = Workflow.make("SweepWait", { payload: Payload }, function* () {
          yield* Workflow.waitForSignal("never", { timeout: "1 hour", onTimeout: "cancel" })
        })
        const run = yield* Waits.start({ id: "w" })
        yield* performNextStep(run.id).pipe(withRegistry([Waits]))
        const sweep = yield* WorkflowSweep
        yield* TestClock.adjust("50 minutes")
        yield* sweep.runOnce
        assert.strictEqual(yield* status(run.id), "waiting", "not stalled, not yet late")
        yield* TestClock.adjust("11 minutes")
        const [a, b] = yield* Effect.all([sweep.runOnce, sweep.runOnce], { concurrency: 2 })
        assert.strictEqual(a.timedOut + b.timedOut, 1)
        assert.strictEqual(yield* status(run.id), "cancelled")
      }).pipe(onTestClock)
    )

    it.effect("a run waiting longer than the visibility threshold counts as stuck (waitingOverdue)", () =>
      Effect.gen(function* () {
        const Stuck = Workflow.make("StuckWait", { payload: Payload }, function* () {
          yield* Workflow.waitForSignal("never")
        })
        const run = yield* Stuck.start({ id: "st" })
        yield* performNextStep(run.id).pipe(withRegistry([Stuck]))
        const sweep = yield* WorkflowSweep
        const gauge = Metric.value(
          WorkflowMetrics.waitingOverdue.pipe(Metric.withAttributes({ workflow_class: "StuckWait" }))
        )
        yield* TestClock.adjust("6 days")
        yield* sweep.runOnce
        assert.strictEqual((yield* gauge).value, 0)
        yield* TestClock.adjust("2 days")
        assert.isAtLeast((yield* sweep.runOnce).waitingOverdue, 1)
        assert.strictEqual((yield* gauge).value, 1)
        assert.strictEqual(yield* status(run.id), "waiting", "counted, never moved")
        yield* run.cancel()
        yield* sweep.runOnce
        assert.strictEqual((yield* gauge).value, 0, "back to 0 once it moved on")
      }).pipe(onTestClock)
    )

    it.effect("finished and cancelled runs older than the retention are deleted with their rows", () =>
      Effect.gen(function* () {
        const kept = yield* Sweepable.start({ id: "k" })
        const old = yield* Sweepable.start({ id: "o" })
        yield* old.signal("noise", {})
        yield* old.cancel()
        const done = yield* Sweepable.start({ id: "d" })
        assert.strictEqual(yield* speedrun(done.id).pipe(withRegistry([Sweepable])), "finished")
        yield* TestClock.adjust("31 days")
        const fresh = yield* Sweepable.start({ id: "f" })
        yield* fresh.cancel()
        const sweep = yield* WorkflowSweep
        const [a, b] = yield* Effect.all([sweep.runOnce, sweep.runOnce], { concurrency: 2 })
        assert.isAtLeast(a.deleted + b.deleted, 1)
        const c = yield* WorkflowClient
        assert.strictEqual((yield* Effect.flip(c.get(old.id)))._tag, "RunNotFound")
        assert.strictEqual((yield* c.events(old.id)).length, 0)
        assert.strictEqual((yield* c.signals(old.id)).length, 0)
        // no foreign key cascades them (migration 0009): the sweep deletes a run's steps and events with it
        const sql = yield* SqlClient.SqlClient
        const [left] = yield* sql<{ readonly steps: number; readonly events: number }>`SELECT
            (SELECT count(*)::int FROM pgbus.workflow_steps WHERE run_id IN (${old.id}::uuid, ${done.id}::uuid)) AS steps,
            (SELECT count(*)::int FROM pgbus.workflow_events WHERE run_id IN (${old.id}::uuid, ${done.id}::uuid)) AS events`
        assert.deepStrictEqual(left, { steps: 0, events: 0 })
        assert.strictEqual((yield* Effect.flip(c.get(done.id)))._tag, "RunNotFound")
        assert.strictEqual((yield* c.get(fresh.id)).info.status, "cancelled")
        assert.strictEqual((yield* c.get(kept.id)).info.status, "ready", "ongoing runs are never deleted")
      }).pipe(onTestClock)
    )
  })
})
