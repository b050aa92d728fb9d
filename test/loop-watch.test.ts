/**
 * The event-loop watchdog: a CPU-bound handler that blocks the loop is logged once, naming the
 * job and its message, readiness says DEGRADED with the block, and the job runs once (no
 * redelivery).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Logger, Ref, Schema } from "effect"
import * as Job from "../src/Job/Job.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { freePort } from "./support/ports.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

/** Log lines written while `effect` runs (its fibers included). */
const withCapturedLogs = <A, E, R>(lines: Array<string>, effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(Logger.CurrentLoggers, (current) => {
    const capture = Logger.make(({ message }) => {
      lines.push((Array.isArray(message) ? message : [message]).map(String).join(" "))
    })
    return Effect.provideService(effect, Logger.CurrentLoggers, new Set([...current, capture]))
  })

describe("event-loop watchdog", () => {
  it.live("a handler that blocks the loop for 2 s is logged by name, readiness DEGRADED, the job runs once", () => {
    const lines: Array<string> = []
    return Effect.gen(function* () {
      const healthPort = yield* freePort
      yield* withCapturedLogs(
        lines,
        TestDatabase.onFreshDatabase(
          { workers: "cpu: 1", eventLoopBlockThreshold: "1 second", healthPort, pollingInterval: "50 millis" },
          () =>
            Effect.gen(function* () {
              const runs = yield* Ref.make(0)
              const Burn = Job.make(
                "BurnCpu",
                { payload: Schema.Struct({ ms: Schema.Number }), queue: "cpu" },
                ({ ms }) =>
                  Effect.sync(() => {
                    // CPU-bound on purpose: nothing else of the process runs meanwhile
                    const end = performance.now() + ms
                    while (performance.now() < end) {
                      // spin
                    }
                  }).pipe(Effect.andThen(Ref.update(runs, (n) => n + 1)))
              )
              const readyz = Effect.tryPromise(() =>
                fetch(`http://127.0.0.1:${healthPort}/readyz`).then(async (r) => ({
                  status: r.status,
                  body: (await r.json()) as { status: string; eventLoopBlocked?: { jobs: Array<string> } }
                }))
              )
              yield* startSupervisor([Burn])
              // booted first: a block during the boot leaves readiness BOOTING (503 either way)
              yield* eventually(
                "the supervisor is ready",
                Effect.map(
                  Effect.orElseSucceed(readyz, () => undefined),
                  (r) => r?.body.status === "OK"
                )
              )
              const ref = yield* Burn.enqueue({ ms: 2_000 })
              yield* eventually(
                "the block was logged",
                Effect.sync(() => lines.some((l) => l.includes("event loop blocked"))),
                "20 seconds"
              )
              const line = lines.find((l) => l.includes("event loop blocked"))!
              assert.include(line, `BurnCpu #${ref.msgId} on cpu`)
              const blocked = Number(/blocked for (\d+) ms/.exec(line)?.[1])
              assert.isAtLeast(blocked, 1_000)
              const ready = yield* readyz
              assert.strictEqual(ready.status, 503)
              assert.strictEqual(ready.body.status, "DEGRADED")
              assert.include(ready.body.eventLoopBlocked?.jobs[0] ?? "", "BurnCpu")
              yield* Effect.sleep("500 millis")
              assert.strictEqual(yield* Ref.get(runs), 1)
              assert.strictEqual(lines.filter((l) => l.includes("event loop blocked")).length, 1)
            })
        )
      )
    })
  })
})
