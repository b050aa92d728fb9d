/** Pure parts of jobs: the outcome decision, backoff, capsule parsing. No database. */

import { readFileSync } from "node:fs"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Duration, Effect, Exit, Schema } from "effect"
import { beforeRun, decide, failureOf } from "../src/Job/Completer.ts"
import * as Job from "../src/Job/Job.ts"
import { backoffDelayMs, type ResolvedRetryPolicy } from "../src/Job/Retry.ts"
import { parseWorkers } from "../src/Supervisor/Capsule.ts"
import { VERSION } from "../src/version.ts"

const policy: ResolvedRetryPolicy = { maxRetries: 5, backoffMs: 5_000, backoffMaxMs: 300_000, jitter: 0.15 }

describe("backoff", () => {
  it("doubles from the base, capped, within ±jitter", () => {
    const expected = [5_000, 10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000]
    expected.forEach((base, i) => {
      const attempt = i + 1
      assert.strictEqual(backoffDelayMs(policy, attempt, 0.5), base, `attempt ${attempt} without jitter`)
      assert.strictEqual(backoffDelayMs(policy, attempt, 0), Math.round(base * 0.85))
      assert.isBelow(backoffDelayMs(policy, attempt, 0.999999), Math.round(base * 1.15) + 1)
    })
  })

  it.effect.prop(
    "stays inside the band for any attempt and random draw",
    [
      Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 40 })),
      Schema.Number.check(Schema.isBetween({ minimum: 0, maximum: 0.9999 }))
    ],
    ([attempt, random]) =>
      Effect.sync(() => {
        const base = Math.min(5_000 * 2 ** (attempt - 1), 300_000)
        const d = backoffDelayMs(policy, attempt, random)
        assert.isAtLeast(d, Math.floor(base * 0.85))
        assert.isAtMost(d, Math.ceil(base * 1.15))
      })
  )
})

describe("the outcome of a delivery", () => {
  it("success archives", () => {
    assert.deepStrictEqual(decide(Exit.succeed(1), 1, policy, 0.5), { _tag: "Succeeded" })
  })
  it("a failure before the last attempt retries after the backoff", () => {
    const outcome = decide(Exit.fail(new Error("x")), 2, policy, 0.5)
    assert.strictEqual(outcome._tag, "Retry")
    if (outcome._tag === "Retry") {
      assert.strictEqual(outcome.delayMs, 10_000)
      assert.strictEqual(outcome.failure.errorClass, "Error")
      assert.strictEqual(outcome.failure.attempt, 2)
    }
  })
  it("a failure of the last attempt dead-letters", () => {
    assert.strictEqual(decide(Exit.fail(new Error("x")), 5, policy, 0.5)._tag, "DeadLetter")
  })
  it("a dead letter names the job's own limit; a delivery past it dead-letters before running", () => {
    const own: ResolvedRetryPolicy = { ...policy, maxRetries: 8 }
    const outcome = decide(Exit.fail(new Error("x")), 8, own, 0.5)
    assert.strictEqual(outcome._tag === "DeadLetter" && outcome.maxRetries, 8)
    assert.deepStrictEqual(beforeRun(own, 9), { _tag: "DeadLetter", failure: undefined, maxRetries: 8 })
    assert.isUndefined(beforeRun(own, 8))
  })
  it("a delivery at the read-count limit dead-letters before running whatever the policy allows", () => {
    const endless: ResolvedRetryPolicy = { ...policy, maxRetries: Number.MAX_SAFE_INTEGER }
    const outcome = beforeRun(endless, 2_147_483_647)
    assert.strictEqual(outcome?._tag === "DeadLetter" && outcome.reason, "read_count_limit")
    assert.isUndefined(beforeRun(endless, 2_147_483_646))
  })
  it("a defect is a failure too, named by its class", () => {
    const outcome = decide(Exit.die(new RangeError("bad")), 1, policy, 0.5)
    assert.strictEqual(outcome._tag === "Retry" && outcome.failure.errorClass, "RangeError")
  })
  it("an interruption gives the message back", () => {
    assert.strictEqual(decide(Exit.failCause(Cause.interrupt()), 1, policy, 0.5)._tag, "Abandoned")
  })
  it("a typed error is named by its _tag", () => {
    class Declined extends Schema.TaggedError<Declined>()("Declined", { why: Schema.String }) {}
    const failure = failureOf(Cause.fail(new Declined({ why: "card" })), 3)
    assert.strictEqual(failure.errorClass, "Declined")
    assert.strictEqual(failure.attempt, 3)
    assert.strictEqual(failureOf(Cause.fail("plain string"), 1).message, "plain string")
  })
})

describe("worker capsules", () => {
  it.effect("parse the seeds' string form", () =>
    Effect.gen(function* () {
      const capsules = yield* parseWorkers("default, mailers: 10; critical: 5")
      assert.deepStrictEqual(capsules, [
        { name: "default", queues: ["default", "mailers"], concurrency: 10 },
        { name: "critical", queues: ["critical"], concurrency: 5 }
      ])
      assert.deepStrictEqual(yield* parseWorkers("reports"), [{ name: "reports", queues: ["reports"], concurrency: 5 }])
    })
  )
  it.effect("parse child-process options in the string form (the banner's words)", () =>
    Effect.gen(function* () {
      const capsules = yield* parseWorkers(
        "default: 10; reports: 2 processes=4 max_jobs=1000 max_memory_mb=512 max_lifetime=1h max_blocked=90s; pdf: processes=2"
      )
      assert.deepStrictEqual(capsules, [
        { name: "default", queues: ["default"], concurrency: 10 },
        {
          name: "reports",
          queues: ["reports"],
          concurrency: 2,
          processes: 4,
          maxJobsPerProcess: 1000,
          maxMemoryMb: 512,
          maxLifetime: Duration.hours(1),
          maxBlocked: Duration.seconds(90)
        },
        { name: "pdf", queues: ["pdf"], concurrency: 5, processes: 2 }
      ])
    })
  )
  for (const bad of [
    "",
    "default: 0",
    "default: x",
    "Bad-Name: 3",
    "a, a: 2",
    "a,: 2",
    ";;",
    "a: 2 processes=0",
    "a: 2 processes=x",
    "a: 2 max_jobs=5",
    "a: 2 processes=2 max_lifetime=soon",
    "a: 2 processes=2 max_blocked=10ms",
    "a: 2 threads=4"
  ]) {
    it.effect(`reject ${JSON.stringify(bad)} with a ConfigurationError on workers`, () =>
      Effect.gen(function* () {
        const error = yield* Effect.flip(parseWorkers(bad))
        assert.strictEqual(error._tag, "ConfigurationError")
        assert.strictEqual(error.key, "workers")
      })
    )
  }
})

describe("job definitions", () => {
  const payload = Schema.Struct({ id: Schema.Number })
  const bad: ReadonlyArray<[string, () => unknown]> = [
    ["a name with spaces", () => Job.make("has spaces", { payload }, () => Effect.void)],
    ["a queue with a dash", () => Job.make("J", { payload, queue: "a-b" }, () => Effect.void)],
    ["a dead-letter queue", () => Job.make("J", { payload, queue: "x_dlq" }, () => Effect.void)],
    ["a negative priority", () => Job.make("J", { payload, priority: -1 }, () => Effect.void)],
    ["a zero timeout", () => Job.make("J", { payload, timeout: 0 }, () => Effect.void)],
    ["a jitter of 2", () => Job.make("J", { payload, retry: { jitter: 2 } }, () => Effect.void)],
    ["zero deliveries (maxRetries 0)", () => Job.make("J", { payload, retry: { maxRetries: 0 } }, () => Effect.void)],
    ["an unknown option", () => Job.make("J", { payload, retries: 3 } as never, () => Effect.void)]
  ]
  for (const [what, define] of bad) {
    it(`fail where they are defined: ${what}`, () => {
      assert.throws(define, /invalid job/)
    })
  }
})

it("the version matches package.json", () => {
  assert.strictEqual(VERSION, JSON.parse(readFileSync("package.json", "utf8")).version)
})
