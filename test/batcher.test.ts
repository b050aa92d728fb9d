/** The opportunistic batcher behind shared workflow statements. No database. */

import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber } from "effect"
import { makeBatcher, makeBatchGroup } from "../src/internal/Batcher.ts"

/** A batcher whose `many` waits for a gate, recording every batch and every lone send. */
const recording = (options: { readonly failMany?: (items: ReadonlyArray<number>) => boolean } = {}) =>
  Effect.gen(function* () {
    const batches: Array<ReadonlyArray<number>> = []
    const alone: Array<number> = []
    const gate = yield* Deferred.make<void>()
    const send = makeBatcher<number, string, string>({
      many: (items) =>
        Effect.gen(function* () {
          batches.push(items)
          if (batches.length === 1) yield* Deferred.await(gate)
          if (options.failMany?.(items)) return yield* Effect.fail("batch failed")
          return items.map((i) => `many:${i}`)
        }),
      one: (i) => {
        alone.push(i)
        return i < 0 ? Effect.fail(`bad ${i}`) : Effect.succeed(`one:${i}`)
      },
      key: (i) => String(Math.abs(i) % 100)
    })
    return { batches, alone, gate, send }
  })

/** Lets every forked fiber run as far as it can. */
const settle = Effect.gen(function* () {
  for (let i = 0; i < 20; i++) yield* Effect.yieldNow
})

describe("makeBatcher", () => {
  it.effect("an item that a returning batch's fiber sends at once leaves with what piled up, not alone before it", () =>
    Effect.gen(function* () {
      const { batches, gate, send } = yield* recording()
      // the fiber of item 1 sends item 10 one scheduler turn after its batch returns (a run's
      // next outcome, after its next step)
      const first = yield* Effect.forkChild(send(1).pipe(Effect.andThen(Effect.yieldNow), Effect.andThen(send(10))))
      yield* settle
      const rest = yield* Effect.forkChild(Effect.all([send(2), send(3)], { concurrency: "unbounded" }))
      yield* settle
      yield* Deferred.succeed(gate, undefined)
      assert.strictEqual(yield* Fiber.join(first), "many:10")
      assert.deepStrictEqual(yield* Fiber.join(rest), ["many:2", "many:3"])
      assert.deepStrictEqual(batches, [[1], [2, 3, 10]])
    })
  )

  it.effect("sends at once when nothing is out, and piles up the rest while a batch is out", () =>
    Effect.gen(function* () {
      const { batches, gate, send } = yield* recording()
      const first = yield* Effect.forkChild(send(1))
      yield* settle
      assert.deepStrictEqual(batches, [[1]])
      const rest = yield* Effect.forkChild(Effect.all([send(2), send(3), send(4)], { concurrency: "unbounded" }))
      yield* settle
      assert.strictEqual(batches.length, 1, "nothing else leaves while the first batch is out")
      yield* Deferred.succeed(gate, undefined)
      assert.strictEqual(yield* Fiber.join(first), "many:1")
      assert.deepStrictEqual(yield* Fiber.join(rest), ["many:2", "many:3", "many:4"])
      assert.deepStrictEqual(batches, [[1], [2, 3, 4]])
    })
  )

  it.effect("never puts two items with one key in a batch", () =>
    Effect.gen(function* () {
      const { batches, gate, send } = yield* recording()
      const first = yield* Effect.forkChild(send(1))
      yield* settle
      const rest = yield* Effect.forkChild(Effect.all([send(2), send(102), send(3)], { concurrency: "unbounded" }))
      yield* settle
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(first)
      assert.deepStrictEqual(yield* Fiber.join(rest), ["many:2", "many:102", "many:3"])
      assert.deepStrictEqual(batches, [[1], [2, 3], [102]])
    })
  )

  it.effect("a failed batch sends each item alone, and each fails alone", () =>
    Effect.gen(function* () {
      const { alone, gate, send } = yield* recording({ failMany: (items) => items.includes(-5) })
      const first = yield* Effect.forkChild(send(1))
      yield* settle
      const ok = yield* Effect.forkChild(send(2))
      const bad = yield* Effect.forkChild(send(-5))
      yield* settle
      yield* Deferred.succeed(gate, undefined)
      assert.strictEqual(yield* Fiber.join(first), "many:1")
      assert.strictEqual(yield* Fiber.join(ok), "one:2")
      const failed = yield* Fiber.await(bad)
      assert.deepStrictEqual(failed, Exit.fail("bad -5"))
      assert.deepStrictEqual(alone, [2, -5])
    })
  )

  it.effect("an item interrupted while it waits is never sent", () =>
    Effect.gen(function* () {
      const { batches, gate, send } = yield* recording()
      const first = yield* Effect.forkChild(send(1))
      yield* settle
      const dropped = yield* Effect.forkChild(send(2))
      const kept = yield* Effect.forkChild(send(3))
      yield* settle
      yield* Fiber.interrupt(dropped)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(first)
      assert.strictEqual(yield* Fiber.join(kept), "many:3")
      assert.deepStrictEqual(batches, [[1], [3]])
    })
  )

  it.effect("batchers of a group have one batch out between them: the other's items pile up, then leave in turn", () =>
    Effect.gen(function* () {
      const group = makeBatchGroup(1)
      const sent: Array<string> = []
      const gate = yield* Deferred.make<void>()
      const batcher = (name: string) =>
        makeBatcher<number, string, never>({
          many: (items) =>
            Effect.gen(function* () {
              sent.push(`${name}:${items.join(",")}`)
              if (sent.length === 1) yield* Deferred.await(gate)
              return items.map((i) => `${name}${i}`)
            }),
          one: (i) => Effect.succeed(`${name}${i}`),
          group
        })
      const a = batcher("a")
      const b = batcher("b")
      const first = yield* Effect.forkChild(a(1))
      yield* settle
      const rest = yield* Effect.forkChild(Effect.all([b(2), a(3), b(4)], { concurrency: "unbounded" }))
      yield* settle
      assert.deepStrictEqual(sent, ["a:1"], "b waits while a's batch is out")
      yield* Deferred.succeed(gate, undefined)
      assert.strictEqual(yield* Fiber.join(first), "a1")
      assert.deepStrictEqual(yield* Fiber.join(rest), ["b2", "a3", "b4"])
      assert.deepStrictEqual(sent, ["a:1", "b:2,4", "a:3"], "the other batcher first, then the one that was out")
    })
  )
})

/** A batcher with two batches out at once, each held until the test opens its gate (in order). */
const twoOut = Effect.gen(function* () {
  const batches: Array<ReadonlyArray<number>> = []
  const gates: Array<Deferred.Deferred<void>> = []
  const send = makeBatcher<number, string, never>({
    many: (items) =>
      Effect.gen(function* () {
        const gate = yield* Deferred.make<void>()
        batches.push(items)
        gates.push(gate)
        yield* Deferred.await(gate)
        return items.map((i) => `many:${i}`)
      }),
    one: (i) => Effect.succeed(`one:${i}`),
    key: (i) => String(i % 100),
    maxOut: 2
  })
  const open = (n: number) => Deferred.succeed(gates[n]!, undefined)
  return { batches, send, open }
})

const sendAll = (send: (i: number) => Effect.Effect<string>, items: ReadonlyArray<number>) =>
  Effect.forkChild(Effect.forEach(items, send, { concurrency: "unbounded" }))

describe("makeBatcher with two batches out", () => {
  it.effect(
    "a second batch leaves only with three items and a quarter of those in play: stragglers wait for a batch to return",
    () =>
      Effect.gen(function* () {
        const { batches, send, open } = yield* twoOut
        const a = yield* sendAll(send, [1])
        yield* settle
        const b = yield* sendAll(send, [2, 3])
        yield* settle
        assert.deepStrictEqual(batches, [[1]], "two alone wait while a batch is out")
        const c = yield* sendAll(send, [4])
        yield* settle
        assert.deepStrictEqual(batches, [[1], [2, 3, 4]], "three leave beside the batch out")
        const d = yield* sendAll(send, [5, 6, 7, 8, 9, 10, 11, 12])
        yield* settle
        assert.strictEqual(batches.length, 2, "two out: the rest wait")
        yield* open(0)
        yield* settle
        assert.deepStrictEqual(batches[2], [5, 6, 7, 8, 9, 10, 11, 12])
        const e = yield* sendAll(send, [13, 14])
        yield* open(1)
        yield* settle
        assert.strictEqual(batches.length, 3, "two of ten in play wait while a batch is out")
        const f = yield* sendAll(send, [15])
        yield* settle
        assert.deepStrictEqual(batches[3], [13, 14, 15], "three of eleven leave beside the batch out")
        yield* open(2)
        yield* open(3)
        assert.deepStrictEqual(yield* Fiber.join(a), ["many:1"])
        assert.deepStrictEqual(yield* Fiber.join(b), ["many:2", "many:3"])
        assert.deepStrictEqual(yield* Fiber.join(c), ["many:4"])
        assert.strictEqual((yield* Fiber.join(d)).length, 8)
        assert.deepStrictEqual(yield* Fiber.join(e), ["many:13", "many:14"])
        assert.deepStrictEqual(yield* Fiber.join(f), ["many:15"])
      })
  )

  it.effect("with many in play, three wait for a quarter of them before a second batch leaves", () =>
    Effect.gen(function* () {
      const { batches, send, open } = yield* twoOut
      const first = yield* sendAll(send, [1])
      yield* settle
      const second = yield* sendAll(send, [2, 3, 4])
      yield* settle
      const many = yield* sendAll(
        send,
        Array.from({ length: 16 }, (_, i) => i + 5)
      )
      yield* settle
      yield* open(0)
      yield* settle
      yield* open(1)
      yield* settle
      assert.strictEqual(batches[2]?.length, 16, "sixteen out")
      const more = yield* sendAll(send, [21, 22, 23])
      yield* settle
      assert.strictEqual(batches.length, 3, "three of nineteen in play wait")
      const rest = yield* sendAll(send, [24, 25, 26])
      yield* settle
      assert.deepStrictEqual(batches[3], [21, 22, 23, 24, 25, 26], "six of twenty-two leave beside the batch out")
      yield* open(2)
      yield* open(3)
      yield* Fiber.join(first)
      yield* Fiber.join(second)
      assert.strictEqual((yield* Fiber.join(many)).length, 16)
      assert.deepStrictEqual(yield* Fiber.join(more), ["many:21", "many:22", "many:23"])
      assert.deepStrictEqual(yield* Fiber.join(rest), ["many:24", "many:25", "many:26"])
    })
  )

  it.effect("an item whose key is out waits for that batch to return, even with a batch free", () =>
    Effect.gen(function* () {
      const { batches, send, open } = yield* twoOut
      const first = yield* sendAll(send, [1])
      yield* settle
      const rest = yield* sendAll(send, [101, 2, 3])
      yield* settle
      assert.deepStrictEqual(batches, [[1], [2, 3]], "101 shares 1's key: it stays while 1 is out")
      yield* open(0)
      yield* settle
      yield* open(1)
      yield* settle
      assert.deepStrictEqual(batches, [[1], [2, 3], [101]])
      yield* open(2)
      assert.deepStrictEqual(yield* Fiber.join(first), ["many:1"])
      assert.deepStrictEqual(yield* Fiber.join(rest), ["many:101", "many:2", "many:3"])
    })
  )
})
