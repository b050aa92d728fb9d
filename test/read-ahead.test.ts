/** Adaptive read-ahead and claim floors (issue 24): the decisions, step by step. */
import { assert, describe, it } from "@effect/vitest"
import * as ClaimCursor from "../src/Queue/ClaimCursor.ts"
import * as ReadAhead from "../src/Supervisor/ReadAhead.ts"

/** Jobs of `jobMs` timed, then `claims` backlogged claims of `claimMs`: the read-ahead after each. */
const backlogged = (ra: ReadAhead.ReadAhead, jobMs: number, claimMs: number, claims: number) => {
  for (let i = 0; i < 50; i++) ra.ran(jobMs)
  return Array.from({ length: claims }, () => {
    ra.claimed(claimMs, true)
    return ra.current()
  })
}

describe("adaptive read-ahead", () => {
  it("short jobs in a backlog grow it by doubling to the bound; a drained queue keeps it until jobs grow longer", () => {
    const ra = ReadAhead.adaptive(10, 30_000)
    assert.strictEqual(ra.current(), 0)
    assert.deepStrictEqual(backlogged(ra, 0.05, 5, 8), [20, 40, 80, 160, 320, 640, 640, 640])
    // drained: a claim takes what there is, the read-ahead costs nothing and stays
    ra.claimed(1, false)
    assert.strictEqual(ra.current(), 640)
    // the jobs became long: it comes down to what they warrant, backlog or not
    for (let i = 0; i < 50; i++) ra.ran(400)
    ra.claimed(5, false)
    assert.strictEqual(ra.current(), 1)
  })

  it("long jobs get a small read-ahead (fairness between workers), bounded by the visibility timeout", () => {
    const ra = ReadAhead.adaptive(10, 30_000)
    for (let i = 0; i < 50; i++) ra.ran(200)
    for (let i = 0; i < 10; i++) ra.claimed(5, true)
    // 10 slots × 8 claim round trips × 5 ms / 200 ms per job
    assert.strictEqual(ra.current(), 2)
    const slow = ReadAhead.adaptive(10, 30_000)
    for (let i = 0; i < 50; i++) slow.ran(5_000)
    for (let i = 0; i < 10; i++) slow.claimed(2_000, true)
    // the slots run 10 × 7.5 s / 5 s = 15 jobs in a quarter of the lease: 5 beyond the slots
    assert.strictEqual(slow.current(), 5)
  })

  it("jobs short next to the claim buffer 25 ms of each slot's work; jobs of four claims or more one job per slot (workflow runs)", () => {
    const ra = ReadAhead.adaptive(10, 30_000)
    // a job of 10 ms is 3.3 claims of 3 ms: 10 slots × 8 claims × 3 ms / 10 ms is 24, 10 slots × 25 ms / 10 ms is 25
    assert.deepStrictEqual(backlogged(ra, 10, 3, 4), [20, 25, 25, 25])
    // a drained queue keeps it: the jobs still warrant it
    ra.claimed(3, false)
    assert.strictEqual(ra.current(), 25)
    // claims of 2 ms: a job is 5 of them, one job per slot is buffer enough
    for (let i = 0; i < 50; i++) ra.claimed(2, true)
    assert.strictEqual(ra.current(), 10)
    // a workflow run of 20 ms against claims of 2 ms: one per slot from the first claim on
    assert.deepStrictEqual(backlogged(ReadAhead.adaptive(10, 30_000), 20, 2, 3), [10, 10, 10])
  })

  it("none before a job has ended (it could wait behind a job that never ends), then one message per slot, backlog or not", () => {
    const ra = ReadAhead.adaptive(10, 30_000)
    ra.claimed(2, false)
    ra.claimed(2, false)
    assert.strictEqual(ra.current(), 0, "no job time known yet")
    ra.ran(20)
    assert.strictEqual(
      ra.current(),
      10,
      "a workflow runner's queue, never backlogged, still reads one run ahead per executor"
    )
    ra.claimed(2, true)
    assert.strictEqual(ra.current(), 10, "runs of ten claims: one per executor, backlog or not")
  })

  it("grown on a guess before any job ended, it comes down as soon as the first job shows them long, before the next claim", () => {
    const ra = ReadAhead.adaptive(10, 30_000)
    for (let i = 0; i < 4; i++) ra.claimed(5, true)
    assert.strictEqual(ra.current(), 0, "no job has ended")
    // the first jobs to end last 5 s: 10 slots × 8 claims × 5 ms / 5 s rounds up to one
    for (let i = 0; i < 50; i++) ra.ran(5_000)
    assert.strictEqual(ra.current(), 1)
  })

  it("an explicit read-ahead is kept whatever happens", () => {
    const ra = ReadAhead.fixed(190)
    ra.ran(0.01)
    ra.claimed(50, true)
    ra.claimed(1, false)
    assert.strictEqual(ra.current(), 190)
  })
})

describe("claim floors", () => {
  it("a claim starts below the last claim's lowest id, with a full claim at least every second", () => {
    const c = ClaimCursor.make()
    assert.strictEqual(c.start("q", 0), 0n)
    c.claimed("q", 0n, 0, 2, [1000n, 1001n, 1002n])
    assert.strictEqual(c.start("q", 10), 1000n - ClaimCursor.LAG)
    c.claimed("q", 1000n - ClaimCursor.LAG, 10, 1, [2000n, 2001n])
    assert.strictEqual(c.start("q", 20), 2000n - ClaimCursor.LAG)
    // nothing claimed: the floor stays
    c.claimed("q", 2000n - ClaimCursor.LAG, 30, 1, [])
    assert.strictEqual(c.start("q", 40), 2000n - ClaimCursor.LAG)
    // a second after the last full claim: a full one (finds retries and lapsed leases below)
    assert.strictEqual(c.start("q", 1000), 0n)
    // small ids are not cut below 0; other queues have their own floor
    c.claimed("q", 0n, 1000, 2, [100n])
    assert.strictEqual(c.start("q", 1001), 0n)
    assert.strictEqual(c.start("other", 1001), 0n)
  })

  it("a slow full claim (a walk over dead rows) comes at most every 20 times its duration", () => {
    const c = ClaimCursor.make()
    c.claimed("q", 0n, 0, 400, [5000n])
    assert.strictEqual(c.start("q", 1000), 5000n - ClaimCursor.LAG)
    assert.strictEqual(c.start("q", 7999), 5000n - ClaimCursor.LAG)
    assert.strictEqual(c.start("q", 8000), 0n)
  })
})
