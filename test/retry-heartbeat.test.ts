import { assert, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as Job from "../src/Job/Job.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

// A heartbeat every few milliseconds: if it could extend a message after its retry was recorded,
// the retry would wait a whole visibility timeout (30 s) instead of its 50 ms backoff.
layer(
  TestDatabase.layer({
    pollingInterval: "50 millis",
    visibilityTimeout: "30 seconds",
    visibilityHeartbeatInterval: "2 millis",
    // 40 failures in a row on purpose: the queue's circuit breaker would pause it
    circuitBreakerExempt: "flakybeat"
  }),
  { excludeTestServices: true }
)("retries and the visibility heartbeat", (it) => {
  it.effect("a retry keeps its backoff: the heartbeat never extends a message whose retry is recorded", () =>
    Effect.gen(function* () {
      const attempts: Array<number> = []
      const Flaky = Job.make(
        "FlakyBeat",
        {
          payload: Schema.Struct({ n: Schema.Number }),
          queue: "flakybeat",
          retry: { maxRetries: 20, backoff: "50 millis", backoffMax: "50 millis", jitter: 0 }
        },
        (_, job) =>
          Effect.suspend(() => {
            attempts.push(job.attempt)
            return job.attempt <= 10 ? Effect.fail(new Error(`attempt ${job.attempt} fails`)) : Effect.void
          })
      )
      yield* Effect.forEach([1, 2, 3, 4], (n) => Flaky.enqueue({ n }))
      yield* startSupervisor([Flaky], { capsules: [{ name: "c", queues: ["flakybeat"], concurrency: 4 }] })
      // 11 attempts each, 50 ms apart: seconds, not the 30 s of a visibility timeout
      yield* eventually(
        "every job's 11th attempt",
        Effect.sync(() => attempts.length === 44),
        "20 seconds"
      )
      assert.strictEqual(attempts.filter((a) => a === 11).length, 4)
    }).pipe(Effect.scoped)
  )
})
