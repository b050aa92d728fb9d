/**
 * How many messages of a worker's read are claimed in it (`ReadClaimLimits`): those a free
 * executor takes at once, those expected to wait in the buffer less than `SOON_WAIT_MS`, and
 * none for the buffer after reads in a row that delivered nothing claimable (fresh runs' starts),
 * until a read delivers something claimable again. The claims themselves are tested against the
 * database in test/read-claim.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import type { Message } from "../src/Queue/Message.ts"
import type { ReadClaim } from "../src/Queue/QueueRows.ts"
import {
  type Backoff,
  MAX_SOON_SKIP,
  MISSES_BEFORE_SKIP,
  type ReadCounts,
  readClaimWith,
  SOON_WAIT_MS
} from "../src/Supervisor/worker/ReadClaimLimits.ts"

/** A claim whose claimable messages are those marked `claimable`. */
const claim: ReadClaim = {
  ctes: () => {
    throw new Error("no statement in these tests")
  },
  claimable: (m) => (m.message as { readonly claimable?: boolean }).claimable === true,
  claimed: () => {},
  release: () => Effect.void
}

const message = (claimable: boolean): Message => ({
  queue: "default",
  msgId: 1n,
  readCt: 1,
  enqueuedAt: new Date(0),
  vt: new Date(0),
  message: { claimable },
  headers: {},
  lastError: undefined
})

const busy: ReadCounts = { concurrency: 10, running: 10, buffered: 0, jobMs: 10 }

/** One read: its limits, then settled with `delivered`. */
const read = (backoff: Backoff, counts: ReadCounts, delivered: ReadonlyArray<Message>) => {
  const { option, settled } = readClaimWith(backoff, counts, claim)
  settled(delivered)
  return { limit: option.limit, soon: option.soon }
}

describe("the claims a worker's read makes", () => {
  it("claims at once for the free executors, and for those that will wait briefly in the buffer", () => {
    const idle = read({ misses: 0, wait: 0 }, { ...busy, running: 3 }, [])
    // ten executors starting one message each per 10 ms: 260 positions within SOON_WAIT_MS
    assert.deepStrictEqual(idle, { limit: 7, soon: 10 * (1 + SOON_WAIT_MS / 10) - 3 - 7 })
    assert.deepStrictEqual(read({ misses: 0, wait: 0 }, busy, []), { limit: 0, soon: 250 })
  })

  it("claims few for the buffer when jobs are long, none before a job has ended", () => {
    // 1-second jobs: 12 positions start within 1.25 s, 10 are running; 10-second jobs: none more
    assert.deepStrictEqual(read({ misses: 0, wait: 0 }, { ...busy, jobMs: 1_000 }, []), { limit: 0, soon: 2 })
    assert.deepStrictEqual(read({ misses: 0, wait: 0 }, { ...busy, jobMs: 10_000 }, []), { limit: 0, soon: 0 })
    assert.deepStrictEqual(read({ misses: 0, wait: 0 }, { ...busy, jobMs: undefined }, []), { limit: 0, soon: 0 })
    assert.deepStrictEqual(read({ misses: 0, wait: 0 }, { ...busy, buffered: 300 }, []), { limit: 0, soon: 0 })
  })

  it("skips the buffer's claims after reads in a row with nothing claimable, until one delivers something claimable", () => {
    const backoff: Backoff = { misses: 0, wait: 0 }
    const starts = [message(false), message(false)]
    const soons: Array<number> = []
    for (let i = 0; i < MISSES_BEFORE_SKIP; i++) soons.push(read(backoff, busy, starts).soon)
    assert.isTrue(
      soons.every((s) => s > 0),
      "claimed for the buffer while the misses are few"
    )
    // the next one skipped; empty reads change nothing
    assert.strictEqual(read(backoff, busy, []).soon, 0)
    assert.strictEqual(read(backoff, busy, []).soon, 250)
    // the skips grow with the misses, up to MAX_SOON_SKIP reads
    for (let i = 0; i < 200; i++) read(backoff, busy, starts)
    // from a read that claimed for the buffer (the skips come after it)
    while (read(backoff, busy, starts).soon === 0) {}
    let skipped = 0
    while (read(backoff, busy, starts).soon === 0) skipped++
    assert.strictEqual(skipped, MAX_SOON_SKIP)
    // a read that delivers a claimable message (a woken step) starts them again at once
    read(backoff, busy, [message(false), message(true)])
    assert.strictEqual(read(backoff, busy, starts).soon, 250)
    // and at-once claims are never skipped
    assert.deepStrictEqual(backoff.wait, 0)
    for (let i = 0; i < 10; i++) read(backoff, busy, starts)
    assert.strictEqual(read(backoff, { ...busy, running: 4 }, starts).limit, 6)
  })
})
