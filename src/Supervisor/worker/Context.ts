/**
 * The worker's shared record: what it was given, how it reads its queues, and the state its parts
 * (claim loop, executors, archive, lease keeping, local dispatch, drain) share. Built once per
 * worker; its parts are module functions of it, so that nothing is allocated per job for them.
 *
 * @since 0.1.0
 */
import { Clock, type Context, Duration, Effect, Latch, Queue, type Scope, Semaphore } from "effect"
import type { PgBusConfigShape } from "../../Config.ts"
import type { MemberOutcome } from "../../Job/BatchMembership.ts"
import type { Debouncer } from "../../Job/Debounce.ts"
import { logicalQueueOf, servedQueues } from "../../Job/JobClient.ts"
import type { JobStatsRecorder } from "../../Job/JobStats.ts"
import type { UniqueKeys } from "../../Job/Uniqueness.ts"
import { FairCursor } from "../../Queue/FairShare.ts"
import { type Message, type Receipt, receiptOf } from "../../Queue/Message.ts"
import type { Notifier, Wakeups } from "../../Queue/Notifier.ts"
import * as QueueName from "../../Queue/QueueName.ts"
import type { PausedQueues } from "../../Queue/QueueStates.ts"
import type { QueueStore } from "../../Queue/QueueStore.ts"
import type { Registry } from "../../Registry.ts"
import type { Capsule } from "../Capsule.ts"
import * as ReadAhead from "../ReadAhead.ts"

/** Live figures of a worker, read by the supervisor's heartbeat and health. */
export interface WorkerStats {
  readonly capsule: string
  /** Jobs running now. */
  running: number
  /** Messages claimed and waiting for a slot. */
  buffered: number
  readonly capacity: number
  succeeded: number
  retried: number
  deadLettered: number
  abandoned: number
  /** False while the read loop is backing off after a database error. */
  healthy: boolean
}

/** What a worker needs. */
export interface WorkerDeps {
  readonly config: PgBusConfigShape
  readonly store: QueueStore["Service"]
  readonly notifier: Notifier["Service"]
  readonly registry: Registry["Service"]
  /** Recorded in `claimed_by` on every claimed message, as `<id>#<claim>` for the worker's own claims (fast recovery of a dead process). */
  readonly processId: string
  /** Records the end of batch members after their archive or dead-letter (never fails). */
  readonly recordBatchOutcomes?: ((outcomes: ReadonlyArray<MemberOutcome>) => Effect.Effect<void>) | undefined
  /** Runs once, when the worker's first claim has ended (claimed, found nothing, or failed). */
  readonly onFirstClaim?: Effect.Effect<void> | undefined
  /** Paused queues (QueueStates.watch): the worker claims nothing from them, locally dispatched or read. */
  readonly paused?: PausedQueues | undefined
  /** Counts every delivery that ended into the process's job statistics (synchronous, never fails). */
  readonly recordStats?: JobStatsRecorder["record"] | undefined
  /** Unique jobs' keys: taken by `whileExecuting` runs, released when their jobs end. */
  readonly uniqueKeys?: UniqueKeys | undefined
  /** Debounced jobs' windows: a first delivery runs only if it is still its key's last. */
  readonly debouncer?: Debouncer | undefined
  /**
   * Whether the worker may claim from a queue of its capsule now (the capsule's name of it):
   * false while another process is its single active consumer, or while a consumer of a higher
   * priority is active. Read at every claim; the poll tick notices a change.
   */
  readonly mayRead?: ((queue: string) => boolean) | undefined
  /**
   * Most messages the worker takes (a child process's `maxJobsPerProcess`): it claims no more
   * than what is left, so that it never holds a job it will not run, and calls `onSpent` once
   * every one it took has ended.
   */
  readonly jobBudget?: { readonly limit: number; readonly onSpent: () => void } | undefined
  /**
   * Hears of the messages in flight right after each claim, before any of them runs (a child
   * process tells its parent, which keeps their claims while a job blocks the child's event loop).
   */
  readonly reportClaims?: ((inFlight: ReadonlySet<Message>) => void) | undefined
}

/** How the worker reads one (physical) queue of its capsule: one claim statement per queue. */
export interface QueueRead {
  readonly queue: string
  /** The capsule's name of the queue (the consumer gate is by it). */
  readonly logical: string
  /** A fair queue's reads share a cursor; undefined for a plain read. */
  readonly cursor: FairCursor | undefined
  /** Claimed by the limited claim (a job with a concurrency or rate limit on it); `"rates"`: rates alone. */
  readonly limited: boolean | "rates"
  /** Read in order (per-key FIFO). */
  readonly ordered: boolean
}

/** One worker's shared record: fixed parts, and the mutable state its parts share. */
export interface WorkerContext {
  readonly capsule: Capsule
  readonly deps: WorkerDeps
  readonly config: PgBusConfigShape
  readonly store: QueueStore["Service"]
  readonly stats: WorkerStats
  /** Strict order between the queues (and priority sub-queues). */
  readonly reads: ReadonlyArray<QueueRead>
  /** Queues read in order: a key's next job becomes claimable when its head leaves, so that wakes the reader. */
  readonly orderedQueues: ReadonlySet<string>
  /** Physical queue -> the capsule's name of it (the consumer gate is by the capsule's queue). */
  readonly logicalOf: ReadonlyMap<string, string>
  readonly prefetchLimit: number | undefined
  readonly visibilityMs: number
  /**
   * While the queues have more, a claim is coming and archives the successes in its statement
   * (one round trip instead of two). Not with a prefetch limit: unarchived successes count
   * against it, so the claim could wait for the flush.
   */
  readonly claimArchives: boolean
  // the job metrics are updated synchronously on the hot path (see recordJobUnsafe)
  readonly clock: Clock.Clock
  readonly metricsContext: Context.Context<never>
  readonly wakeups: Wakeups
  readonly workerScope: Scope.Scope
  /** Claimed messages waiting for an executor. */
  readonly work: Queue.Queue<Message>
  /** Every message this worker holds a claim on: buffered, running, or succeeded but not yet archived. */
  readonly inFlight: Set<Message>
  /**
   * Woken steps' messages a local hand-over delivered (LocalDispatch.ts): their steps are claimed
   * under the hand-over's mark, which no later delivery of the message owns, so one that goes back
   * from the buffer goes as a refused hand-over does (its step released first).
   */
  readonly handedOver: WeakMap<Message, HandOver>
  /** Successes waiting for their archive (a flush, or the next claim's statement). */
  readonly completed: Array<Message>
  /** The messages running now, for the drain's log line. */
  readonly running: Set<Message>
  /** Held by a flush, a claim that archives, the heartbeat, and outcomes that set a row's visibility. */
  readonly flushLock: Semaphore.Semaphore
  /** Opened by executors when enough capacity is free to be worth a read. */
  readonly capacityFreed: Latch.Latch
  /** Opened when a success waits for its archive (or a failed flush is tried again). */
  readonly flushSignal: Latch.Latch
  /** Opened after every claim: a deferred flush checks whether the claim archived its successes. */
  readonly claimEnded: Latch.Latch
  readonly readAhead: ReadAhead.ReadAhead
  /** Set by the drain: no more claims or local hand-overs. */
  stopping: boolean
  /** Successes still settling (`Job/Settling.ts`): their slots are free, their messages held until they commit. */
  settling: number
  /** Whether the last claim left messages behind (else only a notification or the poll is news). */
  queuesMayHaveMore: boolean
  /** Drained, woken while every slot was taken: the next freed slot wakes the read loop again. */
  wokenWhileFull: boolean
  /** A freed slot made a claim due: the next executor to end a job yields, so that the claim loop runs. */
  claimDue: boolean
  /** Messages taken against the job budget (claimed, or reserved by local dispatch). */
  taken: number
  /** The budget is spent once every message it took has ended. */
  spent: boolean
  /** Claims made so far: each claim's mark is `<process id>#<n>`. */
  claims: number
  /** The queues the last claim read without fairness: the next claim likely reads them again. */
  lastRead: Set<string>
  /** Runs once, when the first claim has ended. */
  onFirstClaim: Effect.Effect<void> | undefined
}

/** A local hand-over's claim: its mark, and what releases what it holds before its message goes back. */
export interface HandOver {
  readonly claimedBy: string
  readonly beforeGiveBack: Effect.Effect<void, unknown> | undefined
}

/**
 * Whether workers read a queue fairly across fair-share keys: a subscriber queue when the
 * config's `eventFairShare` is set, any other queue when its `fairShare` is.
 */
export const readsFairly = (
  config: PgBusConfigShape,
  registry: Pick<Registry["Service"], "events">,
  queue: string
): boolean =>
  registry.events?.consumers.some((c) => c.queue === queue) === true
    ? config.eventFairShare !== undefined
    : config.fairShare !== undefined

/**
 * Whether workers read a queue in order (per-key FIFO): a registered job on it has an
 * `orderKey`. Fair share wins on a queue read fairly.
 */
export const readsInOrder = (
  config: PgBusConfigShape,
  registry: Pick<Registry["Service"], "jobs">,
  queue: string
): boolean => {
  for (const { job } of registry.jobs.values()) {
    if (job.orderKey !== undefined && logicalQueueOf(config, job) === queue) return true
  }
  return false
}

/** Creates the figures of a capsule. */
export const makeStats = (capsule: Capsule): WorkerStats => ({
  capsule: capsule.name,
  running: 0,
  buffered: 0,
  capacity: capsule.concurrency,
  succeeded: 0,
  retried: 0,
  deadLettered: 0,
  abandoned: 0,
  healthy: true
})

/** How a capsule reads each of its queues, in priority order. */
const queueReads = (capsule: Capsule, config: PgBusConfigShape, registry: Registry["Service"]): Array<QueueRead> => {
  // a queue of a job with a concurrency limit or a rate is claimed by the limited claim (oldest
  // first); one whose jobs have rates but no limits by its rates-only form (running jobs not counted)
  const limited = new Map<string, true | "rates">()
  for (const { job } of registry.jobs.values()) {
    const q = logicalQueueOf(config, job)
    if (job.limit !== undefined) limited.set(q, true)
    else if (job.rate !== undefined && !limited.has(q)) limited.set(q, "rates")
  }
  return capsule.queues.flatMap((q) => {
    // one claim statement per queue: limits win over order (a queue may not have both, see
    // orderedLimitConflicts), order wins over fairness
    const isLimited = limited.get(q) ?? false
    const ordered = isLimited === false && readsInOrder(config, registry, q)
    const fair = isLimited === false && !ordered && readsFairly(config, registry, q)
    return servedQueues(config, q).map((queue) => ({
      queue,
      logical: q,
      cursor: fair ? new FairCursor() : undefined,
      limited: isLimited,
      ordered
    }))
  })
}

/** Builds a worker's record and subscribes it to its queues' wake-ups (in the worker's scope). */
export const makeWorkerContext = (capsule: Capsule, deps: WorkerDeps, stats: WorkerStats) =>
  Effect.gen(function* () {
    const { config, notifier, registry } = deps
    const reads = queueReads(capsule, config, registry)
    const physical = reads.map((r) => QueueName.physicalOf(config.queuePrefix, r.queue))
    const explicitReadAhead = capsule.readAhead ?? config.readAhead
    const prefetchLimit = capsule.prefetchLimit ?? config.prefetchLimit
    const visibilityMs = Duration.toMillis(config.visibilityTimeout)
    const clock = yield* Clock.Clock
    const metricsContext = yield* Effect.context<never>()
    const wakeups = yield* notifier.subscribe(physical)
    const workerScope = yield* Effect.scope
    const work = yield* Queue.unbounded<Message>()
    const flushLock = yield* Semaphore.make(1)
    const ctx: WorkerContext = {
      capsule,
      deps,
      config,
      store: deps.store,
      stats,
      reads,
      orderedQueues: new Set(reads.flatMap((r) => (r.ordered ? [r.queue] : []))),
      logicalOf: new Map(reads.map((r) => [QueueName.physicalOf(config.queuePrefix, r.queue), r.logical])),
      prefetchLimit,
      visibilityMs,
      claimArchives: prefetchLimit === undefined,
      clock,
      metricsContext,
      wakeups,
      workerScope,
      work,
      inFlight: new Set<Message>(),
      handedOver: new WeakMap<Message, HandOver>(),
      completed: [],
      running: new Set<Message>(),
      flushLock,
      capacityFreed: Latch.makeUnsafe(false),
      flushSignal: Latch.makeUnsafe(false),
      claimEnded: Latch.makeUnsafe(false),
      // no readAhead given: the worker decides from its claims and jobs (ReadAhead.ts)
      readAhead:
        explicitReadAhead === undefined
          ? ReadAhead.adaptive(capsule.concurrency, visibilityMs)
          : ReadAhead.fixed(explicitReadAhead),
      stopping: false,
      settling: 0,
      queuesMayHaveMore: true,
      wokenWhileFull: false,
      claimDue: false,
      taken: 0,
      spent: false,
      claims: 0,
      lastRead: new Set<string>(),
      onFirstClaim: deps.onFirstClaim
    }
    return ctx
  })

/** Slots plus read-ahead. */
const total = (ctx: WorkerContext) => ctx.capsule.concurrency + ctx.readAhead.current()

/** Free room for claims: slots not running or buffered, read-ahead included, within the job budget and the prefetch limit. */
export const room = (ctx: WorkerContext): number => roomWithin(ctx, total(ctx))

/** Free slots: room without the read-ahead (what local dispatch may fill, so that a handed-over message never waits behind a busy slot). */
export const freeSlots = (ctx: WorkerContext): number => roomWithin(ctx, ctx.capsule.concurrency)

const roomWithin = (ctx: WorkerContext, capacity: number): number => {
  const { stats, deps, prefetchLimit } = ctx
  const free = capacity - stats.running - stats.buffered
  const within = deps.jobBudget === undefined ? free : Math.min(free, deps.jobBudget.limit - ctx.taken)
  return prefetchLimit === undefined ? within : Math.min(within, prefetchLimit - ctx.inFlight.size)
}

/** While the queues have more: claim once half the room is free, or when nothing is buffered. */
export const worthClaiming = (ctx: WorkerContext): boolean => {
  const want = room(ctx)
  return want > 0 && (want >= Math.max(1, Math.floor(total(ctx) / 2)) || ctx.stats.buffered === 0)
}

/**
 * Room was freed (a slot, or buffered messages given back): the claim loop, waiting for capacity,
 * is told once a claim is worth it, or a wake-up that came while every slot was taken is passed on.
 */
export const roomFreedUnsafe = (ctx: WorkerContext): void => {
  if (ctx.queuesMayHaveMore) {
    if (worthClaiming(ctx) && !Latch.isOpen(ctx.capacityFreed)) {
      ctx.capacityFreed.openUnsafe()
      ctx.claimDue = true
    }
  } else if (ctx.wokenWhileFull) {
    // a wake-up came while every slot was taken: its message waits for this room
    ctx.wokenWhileFull = false
    ctx.wakeups.wake()
    ctx.claimDue = true
  }
}

/** Calls the budget's `onSpent` once every message it took has ended. */
export const checkBudget = (ctx: WorkerContext): void => {
  const jobBudget = ctx.deps.jobBudget
  if (jobBudget === undefined || ctx.spent || ctx.taken < jobBudget.limit) return
  if (ctx.stats.running > 0 || ctx.stats.buffered > 0) return
  ctx.spent = true
  jobBudget.onSpent()
}

/** Whether a queue of the capsule is paused (QueueStates.watch). */
export const isPaused = (ctx: WorkerContext, queue: string): boolean =>
  ctx.deps.paused?.isPaused(QueueName.physicalOf(ctx.config.queuePrefix, queue)) === true

/** Whether the consumer gate (single active consumer, consumer priority) closes a queue of the capsule now. */
export const gated = (ctx: WorkerContext, logical: string | undefined): boolean =>
  ctx.deps.mayRead !== undefined && logical !== undefined && !ctx.deps.mayRead(logical)

/** Drops a message the worker no longer holds a claim on. */
export const forget = (ctx: WorkerContext, m: Message): boolean => ctx.inFlight.delete(m)

/** Messages grouped by queue, in the order met. */
export const groupMessagesByQueue = (messages: Iterable<Message>): Map<string, Array<Message>> => {
  const out = new Map<string, Array<Message>>()
  for (const m of messages) {
    const list = out.get(m.queue)
    if (list) list.push(m)
    else out.set(m.queue, [m])
  }
  return out
}

/** The receipts of messages, grouped by queue. */
export const groupByQueue = (messages: Iterable<Message>): Map<string, Array<Receipt>> => {
  const out = new Map<string, Array<Receipt>>()
  for (const [queue, list] of groupMessagesByQueue(messages)) out.set(queue, list.map(receiptOf))
  return out
}
