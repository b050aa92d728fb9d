/**
 * Worker capsules: a set of queues read in list order (strict priority between them) by a
 * bounded number of concurrent jobs. Written as the seeds' string form
 * (`"default, mailers: 10; critical: 5"`) or as structured values.
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import { ConfigurationError, IDENTIFIER_PATTERN } from "../Config.ts"

/** Concurrency of a capsule whose string form names none. */
export const DEFAULT_CONCURRENCY = 5

/**
 * One capsule.
 *
 * @category models
 */
export interface Capsule {
  readonly name: string
  /** Queues in priority order: the first is drained before the second is read. */
  readonly queues: ReadonlyArray<string>
  /** Jobs running at once. */
  readonly concurrency: number
  /** Messages claimed beyond the free slots (default: the config's `readAhead`). */
  readonly readAhead?: number | undefined
  /** Most messages in flight (default: the config's `prefetchLimit`). */
  readonly prefetchLimit?: number | undefined
  /**
   * Its rank among the consumers of its queues (default: none, not ranked): while a live
   * process runs a capsule reading one of these queues at a higher priority, this capsule
   * claims nothing from that queue.
   */
  readonly consumerPriority?: number | undefined
  /** One process at a time reads each of its queues (a session advisory lock per queue). */
  readonly singleActiveConsumer?: boolean | undefined
  /**
   * Runs the capsule in this many child processes of the supervisor instead of in its own
   * (default: none, in-process): a CPU-bound or leaky job then stalls or bloats only its child.
   */
  readonly processes?: number | undefined
  /** A child process is replaced (drained, then a new one started) after this many jobs. */
  readonly maxJobsPerProcess?: number | undefined
  /** A child process is replaced once its resident memory (RSS) passes this many megabytes. */
  readonly maxMemoryMb?: number | undefined
  /** A child process is replaced once it has run this long. */
  readonly maxLifetime?: Duration.Input | undefined
  /**
   * A child process whose event loop stays blocked this long (silent to its parent) is killed
   * and restarted; its claims go back at once (default: 15 minutes; `Infinity`: never).
   */
  readonly maxBlocked?: Duration.Input | undefined
}

/** How long a child's event loop may stay blocked before its parent kills it, by default. */
export const DEFAULT_MAX_BLOCKED = Duration.minutes(15)

/** Bounds of `consumerPriority` (it is kept in an advisory lock key). */
export const CONSUMER_PRIORITY_RANGE = { min: -1_000_000, max: 1_000_000 } as const

const fail = (rule: string, value: string) => new ConfigurationError({ key: "workers", rule, value })

/** Checks one capsule. */
export const validateCapsule = (capsule: Capsule): Effect.Effect<Capsule, ConfigurationError> => {
  const label = `${capsule.name}: ${capsule.queues.join(",")}`
  if (capsule.queues.length === 0) return Effect.fail(fail("a capsule needs at least one queue", label))
  for (const queue of capsule.queues) {
    if (!IDENTIFIER_PATTERN.test(queue)) {
      return Effect.fail(fail(`queue ${JSON.stringify(queue)} must use lowercase letters, digits, underscores`, label))
    }
  }
  if (new Set(capsule.queues).size !== capsule.queues.length) {
    return Effect.fail(fail("a capsule names a queue twice", label))
  }
  if (!Number.isInteger(capsule.concurrency) || capsule.concurrency < 1) {
    return Effect.fail(fail("concurrency must be an integer of at least 1", label))
  }
  if (capsule.readAhead !== undefined && (!Number.isInteger(capsule.readAhead) || capsule.readAhead < 0)) {
    return Effect.fail(fail("readAhead must be an integer of at least 0", label))
  }
  if (capsule.prefetchLimit !== undefined && (!Number.isInteger(capsule.prefetchLimit) || capsule.prefetchLimit < 1)) {
    return Effect.fail(fail("prefetchLimit must be an integer of at least 1", label))
  }
  const priority = capsule.consumerPriority
  if (
    priority !== undefined &&
    (!Number.isInteger(priority) || priority < CONSUMER_PRIORITY_RANGE.min || priority > CONSUMER_PRIORITY_RANGE.max)
  ) {
    return Effect.fail(
      fail(
        `consumerPriority must be an integer from ${CONSUMER_PRIORITY_RANGE.min} to ${CONSUMER_PRIORITY_RANGE.max} (got ${String(priority)})`,
        label
      )
    )
  }
  if (capsule.singleActiveConsumer !== undefined && typeof capsule.singleActiveConsumer !== "boolean") {
    return Effect.fail(fail("singleActiveConsumer must be true or false", label))
  }
  // a ranked standby holding the lock would keep the queue from its better-ranked peer
  if (capsule.singleActiveConsumer === true && priority !== undefined) {
    return Effect.fail(fail("a capsule is either singleActiveConsumer or ranked by consumerPriority, not both", label))
  }
  const processes = capsule.processes
  if (processes !== undefined && (!Number.isInteger(processes) || processes < 1)) {
    return Effect.fail(fail(`processes must be an integer of at least 1 (got ${String(processes)})`, label))
  }
  const recycles =
    capsule.maxJobsPerProcess !== undefined ||
    capsule.maxMemoryMb !== undefined ||
    capsule.maxLifetime !== undefined ||
    capsule.maxBlocked !== undefined
  // recycling replaces a child process: an in-process capsule has none to replace
  if (recycles && processes === undefined) {
    return Effect.fail(
      fail("maxJobsPerProcess, maxMemoryMb, maxLifetime and maxBlocked need processes (child processes)", label)
    )
  }
  const maxJobs = capsule.maxJobsPerProcess
  if (maxJobs !== undefined && (!Number.isInteger(maxJobs) || maxJobs < 1)) {
    return Effect.fail(fail(`maxJobsPerProcess must be an integer of at least 1 (got ${String(maxJobs)})`, label))
  }
  const maxMemory = capsule.maxMemoryMb
  if (maxMemory !== undefined && (!Number.isFinite(maxMemory) || maxMemory <= 0)) {
    return Effect.fail(fail(`maxMemoryMb must be a positive number (got ${String(maxMemory)})`, label))
  }
  if (capsule.maxLifetime !== undefined) {
    const lifetime = Duration.fromInput(capsule.maxLifetime)
    if (lifetime._tag === "None" || Duration.toMillis(lifetime.value) <= 0 || !Duration.isFinite(lifetime.value)) {
      return Effect.fail(fail(`maxLifetime must be a positive duration (got ${String(capsule.maxLifetime)})`, label))
    }
  }
  if (capsule.maxBlocked !== undefined) {
    // at least two of the child's 250 ms reports, or a busy child would be taken for a blocked one
    const blocked = Duration.fromInput(capsule.maxBlocked)
    if (blocked._tag === "None" || Duration.toMillis(blocked.value) < 1_000) {
      return Effect.fail(
        fail(`maxBlocked must be a duration of at least 1 second (got ${String(capsule.maxBlocked)})`, label)
      )
    }
  }
  return Effect.succeed(capsule)
}

/**
 * Checks the capsules of one process together: a queue read by a single-active-consumer capsule
 * is read by no other capsule of the process that is not one (it would read beside the lock).
 */
export const validateCapsules = (
  capsules: ReadonlyArray<Capsule>
): Effect.Effect<ReadonlyArray<Capsule>, ConfigurationError> =>
  Effect.gen(function* () {
    const checked: Array<Capsule> = []
    for (const capsule of capsules) checked.push(yield* validateCapsule(capsule))
    const single = new Set(checked.flatMap((c) => (c.singleActiveConsumer === true ? c.queues : [])))
    for (const capsule of checked) {
      if (capsule.singleActiveConsumer === true) continue
      const shared = capsule.queues.find((q) => single.has(q))
      if (shared !== undefined) {
        return yield* fail(
          `queue ${shared} is read by a singleActiveConsumer capsule: every capsule that reads it must be one`,
          `${capsule.name}: ${capsule.queues.join(",")}`
        )
      }
    }
    return checked as ReadonlyArray<Capsule>
  })

/** A duration in the string form: a number of seconds, or with a unit (`500ms`, `90s`, `30m`, `1h`, `1d`). */
const compactDuration = (text: string): Duration.Duration | undefined => {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(text)
  if (match === null) return undefined
  const n = Number(match[1])
  switch (match[2]) {
    case "ms":
      return Duration.millis(n)
    case "m":
      return Duration.minutes(n)
    case "h":
      return Duration.hours(n)
    case "d":
      return Duration.days(n)
    default:
      return Duration.seconds(n)
  }
}

/** The `key=value` options of the string form (the banner's own words), onto a capsule. */
const capsuleOption = (capsule: Capsule, token: string, at: string): Effect.Effect<Capsule, ConfigurationError> => {
  const [key, value = ""] = token.split("=", 2)
  const count = Number(value)
  const duration = compactDuration(value)
  switch (key) {
    case "processes":
      return Effect.succeed({ ...capsule, processes: count })
    case "max_jobs":
      return Effect.succeed({ ...capsule, maxJobsPerProcess: count })
    case "max_memory_mb":
      return Effect.succeed({ ...capsule, maxMemoryMb: count })
    case "max_lifetime":
      return duration === undefined
        ? Effect.fail(fail(`max_lifetime must be a duration such as 3600, 90s, 30m or 1h (got ${value})`, at))
        : Effect.succeed({ ...capsule, maxLifetime: duration })
    case "max_blocked":
      return duration === undefined
        ? Effect.fail(fail(`max_blocked must be a duration such as 600, 90s, 30m or 1h (got ${value})`, at))
        : Effect.succeed({ ...capsule, maxBlocked: duration })
    default:
      return Effect.fail(
        fail(
          `unknown option ${JSON.stringify(token)}: expected processes=, max_jobs=, max_memory_mb=, max_lifetime= or max_blocked=`,
          at
        )
      )
  }
}

/**
 * Parses the string form: capsules separated by `;`, each `queue, queue: concurrency` (the
 * concurrency defaults to 5), then optional `key=value` options for child processes
 * (`reports: 2 processes=4 max_jobs=1000 max_memory_mb=512 max_lifetime=1h max_blocked=30m`).
 * Capsules are named after their first queue.
 */
export const parseWorkers = (text: string): Effect.Effect<ReadonlyArray<Capsule>, ConfigurationError> =>
  Effect.gen(function* () {
    const capsules: Array<Capsule> = []
    const names = new Set<string>()
    for (const part of text.split(";")) {
      const trimmed = part.trim()
      if (trimmed === "") continue
      const match = /^([^:]+?)(?::\s*(.+))?$/.exec(trimmed)
      if (!match) return yield* fail("expected `queue, queue: concurrency`", trimmed)
      const queues = match[1]!.split(",").map((q) => q.trim())
      if (queues.some((q) => q === "")) return yield* fail("empty queue name", trimmed)
      const [first, ...options] = (match[2] ?? "").split(/\s+/).filter((t) => t !== "")
      const concurrency = first === undefined || first.includes("=") ? DEFAULT_CONCURRENCY : Number(first)
      if (first?.includes("=")) options.unshift(first)
      let name = queues[0]!
      for (let i = 2; names.has(name); i++) name = `${queues[0]!}_${i}`
      names.add(name)
      let capsule: Capsule = { name, queues, concurrency }
      for (const option of options) capsule = yield* capsuleOption(capsule, option, trimmed)
      capsules.push(yield* validateCapsule(capsule))
    }
    if (capsules.length === 0) return yield* fail("no capsule", text)
    return capsules as ReadonlyArray<Capsule>
  })
