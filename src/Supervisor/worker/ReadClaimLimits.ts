/**
 * How many messages of a worker's read another module claims in the read's statement (a woken
 * workflow step's, `QueueRows.ReadClaim`): those a free executor takes at once, then those
 * expected to wait briefly in the buffer. Claims for the buffer are dropped for a while when a
 * read delivers messages of which none could be claimed (fresh runs' starts, whose reads they
 * only slowed).
 *
 * @since 0.1.0
 */
import type { Message } from "../../Queue/Message.ts"
import type { ReadClaim } from "../../Queue/QueueRows.ts"
import type { QueueRead, WorkerContext } from "./Context.ts"

/**
 * A message expected to wait in the buffer less than this (ms, from the jobs' moving average
 * time) has its claim made in the read. A step is claimed so only when its timeout is at least a
 * lease (`ReadClaim`): a hundred times this estimate would still be within it.
 */
export const SOON_WAIT_MS = 250

/** At most this many reads go without claims for the buffer after reads that delivered nothing claimable. */
export const MAX_SOON_SKIP = 32

/** Reads in a row that delivered nothing claimable before claims for the buffer are skipped. */
export const MISSES_BEFORE_SKIP = 4

/** What a worker's read claims skip: the state of one queue's reads. */
export interface Backoff {
  /** Reads in a row that delivered messages, none claimable. */
  misses: number
  /** Reads left without claims for the buffer. */
  wait: number
}
const backoffs = new WeakMap<QueueRead, Backoff>()

/**
 * The claim option of one read of `read` (`limit`: at once; `soon`: those expected to wait less
 * than `SOON_WAIT_MS`, each executor starting about one message per job time), and `settled`, to
 * call once the read succeeded. A claim left waiting longer would age its step's stall clock, and
 * a drain gives a buffered one back claimed (released: an attempt more, not a reattempt). After
 * `MISSES_BEFORE_SKIP` reads in a row whose messages none could be claimed, claims for the buffer
 * are skipped for 1, 2, 4 ... up to `MAX_SOON_SKIP` reads at a time (their statement parts cost a
 * read of a hundred starts a fifth more); a read that delivers a claimable message starts them
 * again (an empty read changes nothing).
 */
export const readClaimFor = (ctx: WorkerContext, read: QueueRead, claim: ReadClaim) => {
  let backoff = backoffs.get(read)
  if (backoff === undefined) {
    backoff = { misses: 0, wait: 0 }
    backoffs.set(read, backoff)
  }
  return readClaimWith(
    backoff,
    {
      concurrency: ctx.capsule.concurrency,
      running: ctx.stats.running,
      buffered: ctx.stats.buffered,
      jobMs: ctx.readAhead.jobMs()
    },
    claim
  )
}

/** The worker's figures a read's claims are sized by. */
export interface ReadCounts {
  readonly concurrency: number
  readonly running: number
  readonly buffered: number
  /** The jobs' moving average time (undefined until one has ended). */
  readonly jobMs: number | undefined
}

/** `readClaimFor` on a queue's `backoff` (changed by the read's `settled`) and the worker's counts. */
export const readClaimWith = (backoff: Backoff, counts: ReadCounts, claim: ReadClaim) => {
  const { concurrency, jobMs } = counts
  const ahead = counts.running + counts.buffered
  const atOnce = Math.max(0, concurrency - ahead)
  let soon = 0
  if (backoff.wait > 0) backoff.wait--
  else if (jobMs !== undefined) {
    const within = Math.floor(concurrency * (1 + SOON_WAIT_MS / Math.max(jobMs, 0.1)))
    soon = Math.max(0, within - ahead - atOnce)
  }
  const state = backoff
  // what the read claimed is claimable too
  const settled = (messages: ReadonlyArray<Message>) => {
    if (messages.some(claim.claimable)) {
      state.misses = 0
      state.wait = 0
    } else if (messages.length > 0) {
      state.misses++
      // armed by a read that claimed for the buffer (a skipped one only counts)
      if (soon > 0 && state.misses >= MISSES_BEFORE_SKIP)
        state.wait = Math.min(MAX_SOON_SKIP, 2 ** (state.misses - MISSES_BEFORE_SKIP))
    }
  }
  return { option: { claim, limit: atOnce, soon }, settled }
}
