import { assert, describe, it } from "@effect/vitest"
import { roundOrder } from "../packages/bench/src/orchestrate.ts"

const cases = [
  { key: "w1 ours", workload: "w1" },
  { key: "w1 graphile", workload: "w1" },
  { key: "w2 ours", workload: "w2" },
  { key: "w2 graphile", workload: "w2" },
  { key: "w2 raw", workload: "w2" }
]
const keys = (run: number) => roundOrder(cases, run, (c) => c.workload).map((c) => c.key)

describe("the benches' round order", () => {
  it("keeps the workloads in their order and rotates each one's cases a round", () => {
    assert.deepStrictEqual(keys(1), ["w1 ours", "w1 graphile", "w2 ours", "w2 graphile", "w2 raw"])
    assert.deepStrictEqual(keys(2), ["w1 graphile", "w1 ours", "w2 graphile", "w2 raw", "w2 ours"])
    assert.deepStrictEqual(keys(3), ["w1 ours", "w1 graphile", "w2 raw", "w2 ours", "w2 graphile"])
  })

  it("over as many rounds as a workload has cases, each of them runs first after the one before once", () => {
    const firstOfW2 = [1, 2, 3].map((run) => keys(run).find((k) => k.startsWith("w2")))
    assert.sameMembers(firstOfW2, ["w2 ours", "w2 graphile", "w2 raw"])
  })

  it("one group by default: every case takes its turn first, none is lost or run twice", () => {
    for (let run = 1; run <= 5; run++) {
      const order = roundOrder(cases, run, () => "")
      assert.strictEqual(order[0], cases[(run - 1) % cases.length])
      assert.sameMembers(order, cases)
    }
  })
})
