import { assert, describe, expect, it, layer } from "@effect/vitest"
import { Cause, Effect, Exit, Option, Schema } from "effect"
import { decide } from "../src/Job/Completer.ts"
import * as Job from "../src/Job/Job.ts"
import { JobSnoozed } from "../src/Job/JobError.ts"
import { withErrorRules } from "../src/Job/Retry.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

let n = 0
const unique = (base: string) => `${base}_${n++}`

const Payload = Schema.Struct({ id: Schema.Number })

class CardDeclined extends Schema.TaggedError<CardDeclined>()("CardDeclined", { card: Schema.String }) {}
class UserGone extends Schema.TaggedError<UserGone>()("UserGone", { user: Schema.String }) {}
class Flaky extends Schema.TaggedError<Flaky>()("Flaky", {}) {}

const policy = withErrorRules(
  { maxRetries: 5, backoffMs: 100, backoffMaxMs: 1000, jitter: 0 },
  { discardOn: ["UserGone"], deadLetterOn: ["CardDeclined"] }
)

describe("per-error rules (decide)", () => {
  it("a tag in deadLetterOn dead-letters on the first attempt, one in discardOn discards", () => {
    const dead = decide(Exit.fail(new CardDeclined({ card: "1" })), 1, policy, 0.5)
    expect(dead).toMatchObject({
      _tag: "DeadLetter",
      maxRetries: 5,
      failure: { errorClass: "CardDeclined", attempt: 1 }
    })
    const discarded = decide(Exit.fail(new UserGone({ user: "u" })), 2, policy, 0.5)
    expect(discarded).toMatchObject({ _tag: "Discarded", failure: { errorClass: "UserGone", attempt: 2 } })
  })

  it("other typed errors and defects are retried as before, even a defect named like a listed tag", () => {
    assert.strictEqual(decide(Exit.fail(new Flaky()), 1, policy, 0.5)._tag, "Retry")
    assert.strictEqual(decide(Exit.die(new CardDeclined({ card: "1" })), 1, policy, 0.5)._tag, "Retry")
  })

  it("a snooze is neither a failure nor an attempt, whatever the rules", () => {
    assert.deepStrictEqual(decide(Exit.fail(new JobSnoozed({ delayMs: 300 })), 5, policy, 0.5), {
      _tag: "Snoozed",
      delayMs: 300
    })
    assert.strictEqual(decide(Exit.failCause(Cause.interrupt()), 1, policy, 0.5)._tag, "Abandoned")
  })

  it("a tag in both lists, or an empty tag, is an invalid definition", () => {
    const both = () => Job.make("Both", { payload: Payload, discardOn: ["A"], deadLetterOn: ["A"] }, () => Effect.void)
    expect(both).toThrow(/A is in both discardOn and deadLetterOn/)
    const empty = () => Job.make("Empty", { payload: Payload, discardOn: [""] }, () => Effect.void)
    expect(empty).toThrow(/discardOn must be a list of error tags/)
  })
})

layer(
  TestDatabase.layer({
    retryBackoff: "50 millis",
    retryBackoffMax: "100 millis",
    maxRetries: 3,
    pollingInterval: "50 millis"
  }),
  { excludeTestServices: true }
)("per-error rules and snooze", (it) => {
  it.effect("an error in deadLetterOn goes to the DLQ after one attempt, with its class in the block", () =>
    Effect.gen(function* () {
      const queue = unique("nodlq")
      let runs = 0
      const Charge = Job.make("Charge", { payload: Payload, queue, deadLetterOn: ["CardDeclined"] }, () =>
        Effect.suspend(() => {
          runs++
          return Effect.fail(new CardDeclined({ card: "4242" }))
        })
      )
      yield* startSupervisor([Charge], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
      yield* Charge.enqueue({ id: 1 })
      const store = yield* QueueStore
      yield* eventually(
        "dead-lettered",
        Effect.map(store.browse(`${queue}_dlq`), (rows) => rows.length === 1)
      )
      const [dead] = yield* store.browse(`${queue}_dlq`)
      expect(store.deadLetterOf(dead!).deadLetter).toMatchObject({
        attempts: 1,
        max_retries: 3,
        error_class: "CardDeclined"
      })
      assert.strictEqual(runs, 1, "not retried")
    }).pipe(Effect.scoped)
  )

  it.effect(
    "an error in discardOn archives the job with a discarded mark: no retry, no DLQ, JobDiscarded to awaiters",
    () =>
      Effect.gen(function* () {
        const queue = unique("discard")
        let runs = 0
        const Welcome = Job.make(
          "Welcome",
          { payload: Payload, success: Schema.Struct({ sent: Schema.Boolean }), queue, discardOn: ["UserGone"] },
          () =>
            Effect.suspend(() => {
              runs++
              return Effect.fail(new UserGone({ user: "u1" }))
            })
        )
        yield* startSupervisor([Welcome], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
        const ref = yield* Welcome.enqueue({ id: 1 })
        const error = yield* Welcome.awaitResult(ref, { timeout: "10 seconds" }).pipe(Effect.flip)
        assert.strictEqual(error._tag, "JobDiscarded")
        if (error._tag === "JobDiscarded") assert.strictEqual(error.errorClass, "UserGone")
        const store = yield* QueueStore
        assert.strictEqual((yield* store.browse(`${queue}_dlq`)).length, 0, "no dead letter")
        assert.strictEqual((yield* store.metrics(queue)).archiveSize, 1)
        const found = yield* store.outcomes.find(queue, ref.msgId)
        assert.strictEqual(found._tag, "Archived")
        if (found._tag === "Archived") {
          expect(found.discarded).toMatchObject({ error_class: "UserGone", error_attempt: 1 })
          assert.isTrue(Option.isNone(found.result))
        }
        assert.strictEqual(runs, 1)
      }).pipe(Effect.scoped)
  )

  it.effect("a snoozed job runs again later with its attempt count unchanged", () =>
    Effect.gen(function* () {
      const queue = unique("snooze")
      const attempts: Array<number> = []
      const Poll = Job.make("Poll", { payload: Payload, queue, retry: { maxRetries: 1 } }, (_, job) =>
        Effect.suspend(() => {
          attempts.push(job.attempt)
          // maxRetries 1: a snooze that counted would dead-letter the job on its second run
          return attempts.length < 3 ? Job.snooze("100 millis") : Effect.void
        })
      )
      yield* startSupervisor([Poll], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
      yield* Poll.enqueue({ id: 1 })
      const store = yield* QueueStore
      yield* eventually(
        "archived",
        Effect.map(store.metrics(queue), (m) => m.archiveSize === 1)
      )
      assert.deepStrictEqual(attempts, [1, 1, 1])
      assert.strictEqual((yield* store.browse(`${queue}_dlq`)).length, 0)
    }).pipe(Effect.scoped)
  )
})
