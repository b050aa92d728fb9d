/**
 * The deliveries this process is running, and those that ended a moment ago: what the event-loop
 * watchdog names when the loop was blocked (a CPU-bound handler holds the one thread every
 * heartbeat and claim of the process runs on). Process-wide, in memory, a few entries.
 *
 * @since 0.1.0
 */

/** One delivery, from its start to its end. */
export interface RunningJob {
  readonly job: string
  readonly queue: string
  readonly msgId: string
  readonly startedAt: number
  endedAt: number | undefined
}

/** How many ended deliveries are kept (the newest). */
const ENDED_KEPT = 64

const running = new Set<RunningJob>()
const ended: Array<RunningJob> = []

/** Records a delivery's start (`performance.now()`); call `finished` at its end. */
export const started = (job: string, queue: string, msgId: bigint, at: number): RunningJob => {
  const entry: RunningJob = { job, queue, msgId: String(msgId), startedAt: at, endedAt: undefined }
  running.add(entry)
  return entry
}

/** Records a delivery's end. */
export const finished = (entry: RunningJob, at: number): void => {
  entry.endedAt = at
  running.delete(entry)
  ended.push(entry)
  if (ended.length > ENDED_KEPT) ended.shift()
}

/** The deliveries that ran during [from, to] (`performance.now()`): still running, or ended within it. */
export const during = (from: number, to: number): ReadonlyArray<RunningJob> =>
  [...running, ...ended].filter((e) => e.startedAt <= to && (e.endedAt === undefined || e.endedAt >= from))
