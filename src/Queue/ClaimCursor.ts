/**
 * Where a claim of a queue starts reading (issue 24: healthy under MVCC pressure).
 *
 * A claim reads the queue in `msg_id` order. Every finished job leaves a dead row (its archive
 * deletes it; its claim left an older version too), and while any transaction holds a snapshot
 * older than those deletes (a REPEATABLE READ report, a long statement, an idle-in-transaction
 * session) vacuum cannot remove them: a claim from the start of the queue walks every one, index
 * entry and heap fetch, so each claim grows slower the longer the snapshot stays (measured: 71k
 * buffers and 16 ms per claim behind 40k finished jobs, against 17 buffers and 0.1 ms from a
 * floor past them).
 *
 * So a reader remembers, per queue, the lowest id its last claim took, and its next claim starts
 * a little below it (`LAG` ids, for sends that commit out of id order). Rows below the floor can
 * become claimable again later: a retry's or a lapsed lease's `vt` passes, a delayed send comes
 * due, a lower id commits late. A full claim from the start finds them: one at least every
 * `FULL_EVERY_MS`, and no more often than every `FULL_COST_FACTOR` times the last full claim's
 * duration, so under pressure the full walks cost a bounded share of the claims' time. Such a
 * row waits at most about that long past its due time while the queue has newer messages.
 * A full claim first reads the queue's earliest `vt` (the vt index's first entry; claimScan in
 * QueueSqlContext.ts): when nothing is due it reads nothing, so an idle worker's claims of a
 * queue of delayed messages (no floor: every claim is full) read a few buffers, not every row.
 *
 * The rows this process itself makes due below the floor (a retry's backoff, a snooze, a message
 * given back) need not wait for a full claim: the store notes each one's id and due time (`due`),
 * and the first claim after that time starts at or below the lowest such id. A full claim walks
 * every row below the first due one, delayed rows included (100k rows scheduled for tomorrow: a
 * full claim every few seconds under load, a retry several seconds late); a claim from a noted
 * id reads from there. Rows other processes make due still wait for a full claim.
 *
 * @since 0.1.0
 */

/** Ids below the last claim's lowest that a bounded claim still reads (sends committing out of order). */
export const LAG = 256n

/** A full claim (from the start of the queue) at least this often (ms). */
export const FULL_EVERY_MS = 1000

/** ... but no more often than this many times the last full claim's duration. */
export const FULL_COST_FACTOR = 20

/** Most rows noted as coming due per queue (beyond them, the full claims find the rest). */
export const MAX_DUE_NOTES = 256

interface State {
  /** The lowest id the last claim that took anything took. */
  floor: bigint | undefined
  /** When the last full claim started (ms) and how long it took. */
  lastFullAt: number
  lastFullMs: number
  /** Rows made due by this process: their ids and when (ms). */
  due: Array<{ readonly id: bigint; readonly at: number }>
}

/** Per-queue claim floors of one queue store. */
export interface ClaimCursor {
  /**
   * The lowest id the next claim of `queue` reads from: 0 (a full claim) when the queue has no
   * floor yet or a full claim is due at `nowMs`.
   */
  readonly start: (queue: string, nowMs: number) => bigint
  /** Records a claim that started at `nowMs` from `from`, took `tookMs` and claimed `ids`. */
  readonly claimed: (queue: string, from: bigint, nowMs: number, tookMs: number, ids: ReadonlyArray<bigint>) => void
  /** Notes rows of `queue` this process made claimable again from `atMs` (a retry, a snooze, a give-back). */
  readonly due: (queue: string, ids: ReadonlyArray<bigint>, atMs: number) => void
}

/** A new, empty set of floors. */
export const make = (): ClaimCursor => {
  const states = new Map<string, State>()
  const stateOf = (queue: string, nowMs: number, tookMs: number): State => {
    let s = states.get(queue)
    if (s === undefined) {
      s = { floor: undefined, lastFullAt: nowMs, lastFullMs: tookMs, due: [] }
      states.set(queue, s)
    }
    return s
  }
  /** The lowest id of the noted rows due by `nowMs`, taken off the notes (the claim from it reads them). */
  const takeDue = (s: State, nowMs: number): bigint | undefined => {
    let lowest: bigint | undefined
    let kept = 0
    for (const d of s.due) {
      if (d.at <= nowMs) {
        if (lowest === undefined || d.id < lowest) lowest = d.id
      } else s.due[kept++] = d
    }
    s.due.length = kept
    return lowest
  }
  return {
    start: (queue, nowMs) => {
      const s = states.get(queue)
      if (s === undefined || s.floor === undefined) return 0n
      const every = Math.max(FULL_EVERY_MS, FULL_COST_FACTOR * s.lastFullMs)
      if (nowMs - s.lastFullAt >= every) {
        // a full claim reads the noted rows due by now too
        if (s.due.length > 0) takeDue(s, nowMs)
        return 0n
      }
      const bounded = s.floor > LAG ? s.floor - LAG : 0n
      const due = s.due.length === 0 ? undefined : takeDue(s, nowMs)
      // from a noted row below the floor: a claim of its own range upward, not a full one
      return due !== undefined && due < bounded ? (due > 0n ? due : 1n) : bounded
    },
    claimed: (queue, from, nowMs, tookMs, ids) => {
      const s = stateOf(queue, nowMs, tookMs)
      if (from === 0n) {
        s.lastFullAt = nowMs
        s.lastFullMs = tookMs
      }
      if (ids.length === 0) return
      let min = ids[0]!
      for (const id of ids) if (id < min) min = id
      s.floor = min
    },
    due: (queue, ids, atMs) => {
      const s = states.get(queue)
      // no floor yet: every claim is a full one
      if (s === undefined || s.floor === undefined) return
      for (const id of ids) {
        if (s.due.length >= MAX_DUE_NOTES) return
        s.due.push({ id, at: atMs })
      }
    }
  }
}
