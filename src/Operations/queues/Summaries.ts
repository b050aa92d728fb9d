/**
 * Each queue's figures and state in words, for operators: the registered queues, a queue's
 * summary (its dead letters counted on it), and the queues a name stands for (itself and its
 * priority sub-queues).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { statementNow } from "../../Database.ts"
import type { QueueFiguresRow } from "../../Queue/QueueQuerySql.ts"
import type { QueueState } from "../../Queue/QueueStates.ts"
import type { QueueInfo } from "../../Queue/QueueStore.ts"
import { count, type Deps, inWords, iso, isoOrNull } from "../Deps.ts"
import type { QueueSummary } from "../Model.ts"
import { NotFound, type OperationsError } from "../OperationsError.ts"
import { fromQueueError, fromSql } from "./QueueErrors.ts"

/** What a queue is doing, in words. */
const describeQueue = (f: QueueFiguresRow, paused: QueueState | undefined, deadLetters: number): string => {
  const parts: Array<string> = []
  if (paused?.paused) {
    parts.push(`paused by ${paused.actor}${paused.reason ? ` (${paused.reason})` : ""}: nothing is claimed`)
  }
  const depth = count(f.depth)
  if (depth === 0) parts.push("empty")
  else {
    const ready = count(f.ready)
    if (ready > 0) parts.push(`${ready} ready, the oldest claimable for ${inWords(f.claimable_latency_ms ?? 0)}`)
    if (count(f.running) > 0) parts.push(`${count(f.running)} running`)
    if (count(f.retrying) > 0) parts.push(`${count(f.retrying)} retrying`)
    if (count(f.scheduled) > 0) parts.push(`${count(f.scheduled)} scheduled`)
  }
  if (deadLetters > 0) parts.push(`${deadLetters} dead-lettered`)
  return parts.join("; ")
}

/** The queues' summaries and the look-ups of queues by name. */
export const makeQueueSummaries = (deps: Deps) => {
  const { store, states, queueSql } = deps

  /** One queue's figures now (a missing table is `NotFound`). */
  const figuresOf = (q: QueueInfo) =>
    Effect.flatMap(statementNow, (now) => queueSql.queueFigures(q.physical, now)).pipe(
      Effect.map((rows) => rows[0]!),
      Effect.mapError(fromSql(q.name, "read figures of"))
    )

  /** Every registered queue, dead-letter queues included. */
  const registered = store.list.pipe(Effect.mapError(fromQueueError("(registry)")))

  const summaryOf = (
    q: QueueInfo,
    all: ReadonlyArray<QueueInfo>,
    stateOf: ReadonlyMap<string, QueueState>
  ): Effect.Effect<QueueSummary, OperationsError> =>
    Effect.gen(function* () {
      const f = yield* figuresOf(q)
      const dlq = all.find((d) => d.deadLetterOf === q.physical || d.name === `${q.name}_dlq`)
      const deadLetters = dlq === undefined ? 0 : count((yield* figuresOf(dlq)).depth)
      const state = stateOf.get(q.name)
      const paused = state?.paused === true
      return {
        name: q.name,
        deadLetterQueue: dlq?.name ?? null,
        depth: count(f.depth),
        ready: count(f.ready),
        scheduled: count(f.scheduled),
        running: count(f.running),
        retrying: count(f.retrying),
        oldestAgeMs: f.oldest_age_ms,
        claimableLatencyMs: f.claimable_latency_ms ?? 0,
        deadLetters,
        archived: count(f.archived),
        paused,
        pause:
          paused && state !== undefined
            ? {
                at: isoOrNull(state.pausedAt) ?? iso(state.updatedAt),
                until: isoOrNull(state.pausedUntil),
                reason: state.reason ?? null,
                actor: state.actor
              }
            : null,
        status: describeQueue(f, state, deadLetters)
      }
    })

  const stateMap = Effect.map(states.list.pipe(Effect.mapError(fromQueueError("(states)"))), (list) => {
    const map = new Map<string, QueueState>()
    for (const s of list) map.set(s.queue, s)
    return map as ReadonlyMap<string, QueueState>
  })

  /** Every queue but the dead-letter queues (counted on the queue they serve), by name. */
  const queues: Effect.Effect<ReadonlyArray<QueueSummary>, OperationsError> = Effect.gen(function* () {
    const all = yield* registered
    const stateOf = yield* stateMap
    const live = all.filter((q) => q.deadLetterOf === undefined)
    return yield* Effect.forEach(live, (q) => summaryOf(q, all, stateOf))
  })

  /** The registered queues a name stands for: itself and its priority sub-queues. */
  const targetsOf = (name: string) =>
    Effect.gen(function* () {
      const all = yield* registered
      const sub = new RegExp(`^${name.replace(/[^a-z0-9_]/g, "")}_p\\d+$`)
      const targets = all.filter((q) => q.deadLetterOf === undefined && (q.name === name || sub.test(q.name)))
      if (targets.length === 0) return yield* new NotFound({ kind: "queue", id: name })
      return { all, targets }
    })

  /** One queue (its first sub-queue when it has only sub-queues). */
  const queue = (name: string): Effect.Effect<QueueSummary, OperationsError> =>
    Effect.gen(function* () {
      const { all, targets } = yield* targetsOf(name)
      return yield* summaryOf(targets.find((q) => q.name === name) ?? targets[0]!, all, yield* stateMap)
    })

  return { figuresOf, registered, queues, targetsOf, queue }
}

/** The queue summaries and look-ups (`makeQueueSummaries`). */
export type QueueSummaries = ReturnType<typeof makeQueueSummaries>
