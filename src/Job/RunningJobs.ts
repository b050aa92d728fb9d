/**
 * The deliveries this process is running, and those that ended a moment ago: what the event-loop
 * watchdog names when the loop was blocked (a CPU-bound handler holds the one thread every
 * heartbeat and claim of the process runs on). Process-wide, in memory, a few entries.
 * Recorded for every delivery, so the record is cheap: the id stays a bigint until `during`
 * reads it, the running entries are a linked list (no hashing per delivery), the ended a ring.
 *
 * @since 0.1.0
 */

/** One delivery, from its start to its end. */
export interface RunningJob {
  readonly job: string
  readonly queue: string
  readonly msgId: string
  readonly startedAt: number
  readonly endedAt: number | undefined
}

/** A delivery as recorded (its id as the message carries it). */
export interface RunningEntry {
  readonly job: string
  readonly queue: string
  readonly msgId: bigint
  readonly startedAt: number
  endedAt: number | undefined
  prev: RunningEntry | undefined
  next: RunningEntry | undefined
}

/** How many ended deliveries are kept (the newest). */
const ENDED_KEPT = 64

/** The newest running entry (the list goes on through `prev`). */
let newest: RunningEntry | undefined
const ended: Array<RunningEntry | undefined> = new Array(ENDED_KEPT).fill(undefined)
/** The ring's next slot. */
let slot = 0

/** Records a delivery's start (`performance.now()`); call `finished` at its end. */
export const started = (job: string, queue: string, msgId: bigint, at: number): RunningEntry => {
  const entry: RunningEntry = { job, queue, msgId, startedAt: at, endedAt: undefined, prev: newest, next: undefined }
  if (newest !== undefined) newest.next = entry
  newest = entry
  return entry
}

/** Records a delivery's end. */
export const finished = (entry: RunningEntry, at: number): void => {
  if (entry.endedAt !== undefined) return
  entry.endedAt = at
  if (entry.prev !== undefined) entry.prev.next = entry.next
  if (entry.next !== undefined) entry.next.prev = entry.prev
  else newest = entry.prev
  entry.prev = undefined
  entry.next = undefined
  ended[slot] = entry
  slot = (slot + 1) % ENDED_KEPT
}

/** The deliveries that ran during [from, to] (`performance.now()`): still running, or ended within it. */
export const during = (from: number, to: number): ReadonlyArray<RunningJob> => {
  const out: Array<RunningJob> = []
  const take = (e: RunningEntry | undefined) => {
    if (e === undefined || e.startedAt > to || (e.endedAt !== undefined && e.endedAt < from)) return
    out.push({ job: e.job, queue: e.queue, msgId: String(e.msgId), startedAt: e.startedAt, endedAt: e.endedAt })
  }
  const live: Array<RunningEntry> = []
  for (let e = newest; e !== undefined; e = e.prev) live.push(e)
  // oldest first: the running ones as they started, the ended ones as they ended
  for (let i = live.length - 1; i >= 0; i--) take(live[i])
  for (let i = 0; i < ENDED_KEPT; i++) take(ended[(slot + i) % ENDED_KEPT])
  return out
}
