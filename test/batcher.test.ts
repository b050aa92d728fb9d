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
