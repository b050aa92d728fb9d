/**
 * The deliveries this process is running, and those that ended a moment ago: what the event-loop
 * watchdog names when the loop was blocked (a CPU-bound handler holds the one thread every
 * heartbeat and claim of the process runs on). Process-wide, in memory, a few entries.
 * Recorded for every delivery, so the record is cheap: the id stays a bigint until `during`
 * reads it, and the ended entries are a ring.
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
}

/** How many ended deliveries are kept (the newest). */
const ENDED_KEPT = 64

const running = new Set<RunningEntry>()
const ended: Array<RunningEntry | undefined> = new Array(ENDED_KEPT).fill(undefined)
/** The ring's next slot. */
let next = 0

/** Records a delivery's start (`performance.now()`); call `finished` at its end. */
export const started = (job: string, queue: string, msgId: bigint, at: number): RunningEntry => {
  const entry: RunningEntry = { job, queue, msgId, startedAt: at, endedAt: undefined }
  running.add(entry)
  return entry
}

/** Records a delivery's end. */
export const finished = (entry: RunningEntry, at: number): void => {
  entry.endedAt = at
  running.delete(entry)
  ended[next] = entry
  next = (next + 1) % ENDED_KEPT
}

/** The deliveries that ran during [from, to] (`performance.now()`): still running, or ended within it. */
export const during = (from: number, to: number): ReadonlyArray<RunningJob> => {
  const out: Array<RunningJob> = []
  const take = (e: RunningEntry | undefined) => {
    if (e === undefined || e.startedAt > to || (e.endedAt !== undefined && e.endedAt < from)) return
    out.push({ job: e.job, queue: e.queue, msgId: String(e.msgId), startedAt: e.startedAt, endedAt: e.endedAt })
  }
  for (const e of running) take(e)
  // oldest first, as they ended
  for (let i = 0; i < ENDED_KEPT; i++) take(ended[(next + i) % ENDED_KEPT])
  return out
}
