/**
 * Adaptive read-ahead (issue 24, item 1): how many messages a worker claims beyond its free
 * slots, decided from what it sees, so that users need not tune it.
 *
 * - Backlog (the last claim left claimable messages behind): enough buffered to keep the slots busy for several claim round trips, so one claim
 *   (one statement, one commit) feeds many jobs: `concurrency × HORIZON × claim time / job time`,
 *   and never less than `SLOT_BUFFER_MS` of each slot's work (`concurrency × SLOT_BUFFER_MS / job
 *   time`, rounded down): a claim costs more than its round trip (CPU on both sides, a commit),
 *   and jobs that wait on the database (a workflow run's steps) take long next to a fast claim,
 *   which the first term alone (with 4 round trips) answered with a read-ahead of about 4 where
 *   10 to 20 took fewer statements and less CPU per run (W3). Short jobs get large batches, long jobs small ones (fairness
 *   between workers: a job bought by one worker waits in its buffer while another may be idle).
 * - Bounded: at most `MAX_PER_SLOT × concurrency` (one job per slot for jobs that outlast
 *   `LONG_JOB_CLAIMS` claims), and never more than the slots can run within a quarter of the
 *   visibility timeout (a buffered message's lease runs while it waits).
 * - Starts at `concurrency` (one message per slot), used once a job has ended, and grows by
 *   doubling while backlogged. A drained queue keeps it (a claim of a drained queue takes what
 *   there is, so it costs no latency; halving it there cost W3 a fifth of its throughput), only
 *   brought down to what the jobs' time warrants.
 *
 * An explicit `readAhead` (capsule or config) overrides it.
 *
 * @since 0.1.0
 */

/**
 * The read-ahead covers this many claim round trips of the slots' work (8, not 4: W3 at load
 * ~10, three alternated pairs, 0.88 -> 0.83 statements and 1.59 -> 1.49 ms of Node CPU per run).
 */
export const HORIZON = 8
/** The read-ahead holds at least this much of each slot's work, in milliseconds (a buffered message waits about that long). */
export const SLOT_BUFFER_MS = 25
/** Upper bound per slot of concurrency. */
export const MAX_PER_SLOT = 64
/**
 * A job that lasts this many claims or more is long: the read-ahead is then at most one job per
 * slot. One each covers any claim, and a deeper buffer kept a workflow runner's executions apart
 * (each started its next run the moment it ended its last), so that nearly every shared
 * statement carried a fresh run's claim (2.05 ms in PostgreSQL against 1.45 for outcomes alone):
 * W3 at 3,000 runs ran 610 → 682 runs/s at the median, faster in 8 of 9 alternated rounds, as a
 * fixed read-ahead of 10 did (the buffer, dry as a group of runs ends, hands the next read's runs
 * to idle executors together).
 */
export const LONG_JOB_CLAIMS = 4
/** Weight of a new sample in the moving averages. */
const ALPHA = 0.2

/** A worker's read-ahead controller. */
export interface ReadAhead {
  /** The read-ahead to use for the next claim. */
  readonly current: () => number
  /** A claim took `ms` and `more` says whether it left claimable messages behind. */
  readonly claimed: (ms: number, more: boolean) => void
  /** A job ran for `ms` (handler and completion). */
  readonly ran: (ms: number) => void
  /** The jobs' moving average time in milliseconds (undefined until one has ended). */
  readonly jobMs: () => number | undefined
}

/** The moving average with a new sample `x` (the sample itself when there is none yet). */
const ewma = (avg: number | undefined, x: number) => (avg === undefined ? x : avg + ALPHA * (x - avg))

/** A fixed read-ahead (the explicit override); it keeps the jobs' time all the same. */
export const fixed = (n: number): ReadAhead => {
  let jobMs: number | undefined
  return {
    current: () => n,
    claimed: () => {},
    ran: (ms) => {
      jobMs = ewma(jobMs, ms)
    },
    jobMs: () => jobMs
  }
}

/** The adaptive controller for `concurrency` slots and a visibility timeout of `visibilityMs`. */
export const adaptive = (concurrency: number, visibilityMs: number): ReadAhead => {
  // one message per slot from the start (a queue that never backlogs, such as a workflow
  // runner's, would otherwise never read ahead), but none until a job has ended: a read-ahead
  // bought before any job time is known can wait behind a job that never ends
  let ra = concurrency
  let claimMs: number | undefined
  let jobMs: number | undefined
  const target = (): number => {
    const job = Math.max(jobMs ?? 1, 0.01)
    const claim = Math.max(claimMs ?? 1, 0.1)
    const want = Math.max(
      Math.ceil((concurrency * HORIZON * claim) / job),
      Math.floor((concurrency * SLOT_BUFFER_MS) / job)
    )
    const byLease = Math.floor((concurrency * visibilityMs) / (4 * job)) - concurrency
    const bound = job >= LONG_JOB_CLAIMS * claim ? concurrency : MAX_PER_SLOT * concurrency
    return Math.max(0, Math.min(want, bound, byLease))
  }
  return {
    current: () => (jobMs === undefined ? 0 : ra),
    claimed: (ms, more) => {
      claimMs = ewma(claimMs, ms)
      ra = more ? Math.min(target(), Math.max(ra * 2, concurrency)) : Math.min(ra, target())
    },
    ran: (ms) => {
      const first = jobMs === undefined
      jobMs = ewma(jobMs, ms)
      // grown on a guess before any job ended: the first job's time bounds it at once (bounding
      // it at every read instead made W3 slower in 3 of 3 alternated pairs)
      if (first) ra = Math.min(ra, target())
    },
    jobMs: () => jobMs
  }
}
