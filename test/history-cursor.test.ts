/**
 * The history cursor, without a database: how a run's recorded steps are read against the steps
 * its body yields (the engine and `Testing/Replay.ts` both read histories with it).
 */
import { assert, describe, it } from "@effect/vitest"
import * as HistoryCursor from "../src/Workflow/HistoryCursor.ts"

const step = (name: string, position: number, status: string, attempt = 1, output: unknown = null) => ({
  name,
  attempt,
  position,
  status,
  output
})

describe("the history cursor", () => {
  it("replays recorded steps in order, each with its latest attempt, and reaches past the history", () => {
    const cursor = HistoryCursor.make([
      step("one", 0, "completed", 1, "a"),
      step("two", 1, "failed", 1),
      step("two", 1, "completed", 2, "b"),
      step("three", 2, "in_progress")
    ])
    const one = HistoryCursor.reach(cursor, "one")
    assert.deepStrictEqual([one.position, one.recorded, one.replayed, one.diverged], [0, "one", true, false])
    assert.strictEqual(one.entry?.output, "a")
    const two = HistoryCursor.reach(cursor, "two")
    assert.deepStrictEqual([two.entry?.attempt, two.entry?.status, two.entry?.output], [2, "completed", "b"])
    const three = HistoryCursor.reach(cursor, "three")
    assert.deepStrictEqual([three.replayed, three.entry?.status], [true, "in_progress"])
    const four = HistoryCursor.reach(cursor, "four")
    assert.deepStrictEqual(
      [four.position, four.recorded, four.entry, four.replayed, four.diverged],
      [3, undefined, undefined, false, false]
    )
    assert.deepStrictEqual(HistoryCursor.unreached(cursor), [])
  })

  it("attempts in any order: the latest attempt wins, the position is the step's", () => {
    const cursor = HistoryCursor.make([
      step("a", 0, "completed", 3, 3),
      step("a", 0, "failed", 1),
      step("a", 0, "failed", 2)
    ])
    const a = HistoryCursor.reach(cursor, "a")
    assert.deepStrictEqual([a.entry?.attempt, a.entry?.output], [3, 3])
  })

  it("another step where the history recorded one is a divergence, with the name it expected", () => {
    const cursor = HistoryCursor.make([step("charge", 0, "completed"), step("ship", 1, "completed")])
    HistoryCursor.reach(cursor, "charge")
    const reached = HistoryCursor.reach(cursor, "notify")
    assert.deepStrictEqual(
      [reached.diverged, reached.replayed, reached.recorded, reached.position],
      [true, false, "ship", 1]
    )
  })

  it("a body that ends early leaves recorded steps unreached", () => {
    const cursor = HistoryCursor.make([step("one", 0, "completed"), step("two", 1, "completed")])
    HistoryCursor.reach(cursor, "one")
    assert.deepStrictEqual(HistoryCursor.unreached(cursor), ["two"])
  })

  it("patched(): a recorded marker takes the patched path, another step the old one, past the history a new one", () => {
    const recorded = HistoryCursor.make([
      step("one", 0, "completed"),
      step("patch:v2", 1, "completed"),
      step("two", 2, "completed")
    ])
    HistoryCursor.reach(recorded, "one")
    assert.strictEqual(HistoryCursor.patch(recorded, "v2"), "recorded")
    assert.strictEqual(HistoryCursor.reach(recorded, "two").replayed, true, "the cursor moved past the marker")

    const old = HistoryCursor.make([step("one", 0, "completed"), step("two", 1, "completed")])
    HistoryCursor.reach(old, "one")
    assert.strictEqual(HistoryCursor.patch(old, "v2"), "unpatched")
    assert.strictEqual(HistoryCursor.reach(old, "two").replayed, true, "the cursor did not move")

    const fresh = HistoryCursor.make([step("one", 0, "completed")])
    HistoryCursor.reach(fresh, "one")
    assert.strictEqual(HistoryCursor.patch(fresh, "v2"), "new")
    HistoryCursor.recordMarker(fresh, "v2")
    assert.deepStrictEqual([fresh.order[1], fresh.position], ["patch:v2", 2])
    // replayed again, the run takes the recorded path
    const again = HistoryCursor.make([step("one", 0, "completed"), step("patch:v2", 1, "completed")])
    HistoryCursor.reach(again, "one")
    assert.strictEqual(HistoryCursor.patch(again, "v2"), "recorded")
  })

  it("an empty history: every step is new, nothing is unreached", () => {
    const cursor = HistoryCursor.make([])
    const first = HistoryCursor.reach(cursor, "first")
    assert.deepStrictEqual(
      [first.position, first.recorded, first.replayed, first.diverged],
      [0, undefined, false, false]
    )
    assert.strictEqual(HistoryCursor.patch(cursor, "x"), "new")
    assert.deepStrictEqual(HistoryCursor.unreached(cursor), [])
  })
})
