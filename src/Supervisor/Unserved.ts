/**
 * Registered jobs' and workflows' queues that no capsule reads. A job enqueued on such a queue
 * would wait forever without a word, so by default the supervisor serves each in a capsule of
 * its own (as it serves event subscribers' queues); `unservedQueues` may make that a boot
 * failure naming the job and the queue, or a warning (a fleet whose other processes serve it).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { ConfigurationError, type PgBusConfigShape } from "../Config.ts"
import { type Capsule, DEFAULT_CONCURRENCY } from "./Capsule.ts"

/** A queue no capsule reads and who uses it (`job SendWelcome`, `workflow Order`). */
export interface UnservedQueue {
  readonly queue: string
  readonly users: ReadonlyArray<string>
}

/** The used queues that none of `capsules` reads, in registration order. */
export const unservedQueues = (
  queueUsers: ReadonlyMap<string, ReadonlyArray<string>> | undefined,
  capsules: ReadonlyArray<Capsule>
): ReadonlyArray<UnservedQueue> => {
  const served = new Set(capsules.flatMap((c) => c.queues))
  return [...(queueUsers ?? new Map<string, ReadonlyArray<string>>())]
    .filter(([queue]) => !served.has(queue))
    .map(([queue, users]) => ({ queue, users }))
}

const describe = (u: UnservedQueue) => `${u.users.join(", ")} use${u.users.length === 1 ? "s" : ""} queue ${u.queue}`

/**
 * Applies the config's `unservedQueues` rule: the capsules to add (`serve`), a boot failure
 * (`fail`), or a warning (`warn`). The capsules added are named after their queue.
 */
export const serveUnserved = (
  config: Pick<PgBusConfigShape, "unservedQueues" | "workers">,
  unserved: ReadonlyArray<UnservedQueue>,
  taken: ReadonlyArray<Capsule>
): Effect.Effect<ReadonlyArray<Capsule>, ConfigurationError> =>
  Effect.gen(function* () {
    if (unserved.length === 0) return []
    const where = `no capsule of workers ("${config.workers}") reads it`
    if (config.unservedQueues === "fail") {
      const first = unserved[0]!
      return yield* new ConfigurationError({
        key: "workers",
        rule: `${describe(first)} but ${where}: add it (e.g. PGBUS_WORKERS="${config.workers}; ${first.queue}: 5"), or set unservedQueues to serve`,
        value: config.workers
      })
    }
    if (config.unservedQueues === "warn") {
      for (const u of unserved) {
        yield* Effect.logWarning(`[pgbus] boot: ${describe(u)} but ${where}: another process must serve it`)
      }
      return []
    }
    const names = new Set(taken.map((c) => c.name))
    const added: Array<Capsule> = []
    for (const u of unserved) {
      let name = u.queue
      for (let i = 2; names.has(name); i++) name = `${u.queue}_${i}`
      names.add(name)
      added.push({ name, queues: [u.queue], concurrency: DEFAULT_CONCURRENCY })
      yield* Effect.logInfo(
        `[pgbus] boot: ${describe(u)} but ${where}: serving it in capsule ${name} (concurrency ${DEFAULT_CONCURRENCY}); list it in workers to place it, or set unservedQueues`
      )
    }
    return added
  })
