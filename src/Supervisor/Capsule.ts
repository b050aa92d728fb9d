/**
 * Worker capsules: a set of queues read in list order (strict priority between them) by a
 * bounded number of concurrent jobs. Written as the seeds' string form
 * (`"default, mailers: 10; critical: 5"`) or as structured values.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
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
}

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
  return Effect.succeed(capsule)
}

/**
 * Parses the string form: capsules separated by `;`, each `queue, queue: concurrency` (the
 * concurrency defaults to 5). Capsules are named after their first queue.
 */
export const parseWorkers = (text: string): Effect.Effect<ReadonlyArray<Capsule>, ConfigurationError> =>
  Effect.gen(function* () {
    const capsules: Array<Capsule> = []
    const names = new Set<string>()
    for (const part of text.split(";")) {
      const trimmed = part.trim()
      if (trimmed === "") continue
      const match = /^([^:]+?)(?::\s*(\S+))?$/.exec(trimmed)
      if (!match) return yield* fail("expected `queue, queue: concurrency`", trimmed)
      const queues = match[1]!.split(",").map((q) => q.trim())
      if (queues.some((q) => q === "")) return yield* fail("empty queue name", trimmed)
      const concurrency = match[2] === undefined ? DEFAULT_CONCURRENCY : Number(match[2])
      let name = queues[0]!
      for (let i = 2; names.has(name); i++) name = `${queues[0]!}_${i}`
      names.add(name)
      capsules.push(yield* validateCapsule({ name, queues, concurrency }))
    }
    if (capsules.length === 0) return yield* fail("no capsule", text)
    return capsules as ReadonlyArray<Capsule>
  })
