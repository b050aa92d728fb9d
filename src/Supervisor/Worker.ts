/**
 * A worker runs one capsule: a read loop that claims up to its free slots (plus `readAhead`)
 * from its queues in priority order, `concurrency` executor fibers, successes archived in
 * batches (by the next claim while the queues have more, else by a flusher), a poller that
 * wakes the read loop as a NOTIFY would, and a heartbeat that keeps the visibility of every
 * message in flight from lapsing. Closing its scope drains it: stop claiming, give buffered
 * messages back at once, let running jobs finish up to the drain timeout, give back what is left.
 *
 * @since 0.1.0
 */
import { Cause, Clock, Duration, Effect, Fiber, FiberSet, Latch, Queue, Schedule, Semaphore } from "effect"
import type { PgBusConfigShape } from "../Config.ts"
import { isPassingFailure, retryTransient } from "../Database.ts"
import * as OutageBackoff from "../internal/OutageBackoff.ts"
import type { MemberOutcome } from "../Job/BatchMembership.ts"
import { archivableByClaim, makeCompleter, type Outcome, runDebounced, runExclusive } from "../Job/Completer.ts"
import { type Debouncer, debounceKeyOfMessage } from "../Job/Debounce.ts"
import { execute, jobOf } from "../Job/Executor.ts"
import { logicalQueueOf, servedQueues } from "../Job/JobClient.ts"
import { recordJobUnsafe } from "../Job/JobMetrics.ts"
import type { JobStatsRecorder } from "../Job/JobStats.ts"
import { resolvePolicy } from "../Job/Retry.ts"
import { keyOfMessage, type UniqueKeys } from "../Job/Uniqueness.ts"
import { FairCursor } from "../Queue/FairShare.ts"
import { type Message, type Receipt, receiptOf } from "../Queue/Message.ts"
import type { Notifier } from "../Queue/Notifier.ts"
import { pollDelay } from "../Queue/Notifier.ts"
import * as QueueName from "../Queue/QueueName.ts"
import type { PausedQueues } from "../Queue/QueueStates.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import { claimLeaseMs, heartbeatIntervalMs, leaseFloorMs } from "../Queue/SlotLease.ts"
import type { Registry } from "../Registry.ts"
import type { Capsule } from "./Capsule.ts"
import { isBreakerOpen } from "./ConnectionWatch.ts"
import * as ReadAhead from "./ReadAhead.ts"

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

/** The metrics' status of each outcome that ends a delivery. */
const STATUS_OF = {
  Succeeded: "completed",
  Retry: "retried",
  DeadLetter: "dead_lettered",
  Discarded: "discarded",
  Superseded: "superseded"
} as const

/** Longest a success waits for the next claim to archive it before the flusher does (backlog only). */
const FLUSH_DEFER = Duration.millis(250)

const groupMessagesByQueue = (messages: Iterable<Message>): Map<string, Array<Message>> => {
  const out = new Map<string, Array<Message>>()
  for (const m of messages) {
    const list = out.get(m.queue)
    if (list) list.push(m)
    else out.set(m.queue, [m])
  }
  return out
}

const groupByQueue = (messages: Iterable<Message>): Map<string, Array<Receipt>> => {
  const out = new Map<string, Array<Receipt>>()
  for (const [queue, list] of groupMessagesByQueue(messages)) out.set(queue, list.map(receiptOf))
  return out
}

/**
 * The receipts of `messages` by queue and by claim lease (a limited job's `limit.duration`, or
 * the visibility timeout): one heartbeat statement per group, usually one per queue.
 */
const groupByQueueAndLease = (
  messages: Iterable<Message>,
  visibilityMs: number,
  floorMs: number
): Array<{ readonly queue: string; readonly leaseMs: number; readonly receipts: Array<Receipt> }> => {
  const out = new Map<string, { readonly queue: string; readonly leaseMs: number; readonly receipts: Array<Receipt> }>()
  for (const m of messages) {
    const leaseMs = claimLeaseMs(m, visibilityMs, floorMs)
    const key = `${m.queue}\u0000${leaseMs}`
    const group = out.get(key)
    if (group === undefined) out.set(key, { queue: m.queue, leaseMs, receipts: [receiptOf(m)] })
    else group.receipts.push(receiptOf(m))
  }
  return [...out.values()]
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

/** Builds the order index of queues read in order (CONCURRENTLY: writes go on), one at a time. */
const ensureOrderIndexes = (store: QueueStore["Service"], queues: ReadonlyArray<string>) =>
  Effect.forEach(
    queues,
    (queue) =>
      store.ensureOrderIndex(queue).pipe(
        Effect.flatMap((status) =>
          status === "built"
            ? Effect.logInfo(`pgbus: built the order index of queue ${queue}`)
            : status === "invalid"
              ? Effect.logError(
                  `pgbus: the order index of queue ${queue} is INVALID (an interrupted build); ordered reads of it scan the table. Drop it (DROP INDEX CONCURRENTLY) and restart a worker to build it again`
                )
              : Effect.void
        ),
        Effect.catch((error) =>
          Effect.logWarning(`pgbus: could not build the order index of queue ${queue}`, error).pipe(
            Effect.annotateLogs({ queue })
          )
        )
      ),
    { discard: true }
  )

/**
 * Builds the fair index of queues served fairly that lack it (CONCURRENTLY: writes go on), one
 * at a time. An INVALID index (an interrupted build) is left alone: the log says how to drop it.
 */
const ensureFairIndexes = (store: QueueStore["Service"], queues: ReadonlyArray<string>) =>
  Effect.forEach(
    queues,
    (queue) =>
      store.ensureFairIndex(queue).pipe(
        Effect.flatMap((status) =>
          status._tag === "built"
            ? Effect.logInfo(`pgbus: built the fair-share index of queue ${queue}`)
            : status._tag === "building"
              ? Effect.logInfo(`pgbus: the fair-share index of queue ${queue} is being built by another session`)
              : status._tag === "invalid"
                ? Effect.logError(
                    `pgbus: the fair-share index of queue ${queue} is INVALID (an interrupted build); fair reads of it scan the table until it is rebuilt. Run: ${status.drop} and restart a worker to build it again`
                  )
                : Effect.void
        ),
        Effect.catch((error) =>
          Effect.logWarning(`pgbus: could not build the fair-share index of queue ${queue}`, error)
        ),
        Effect.annotateLogs({ queue })
      ),
    { discard: true }
  )

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

/**
 * Runs a capsule until interrupted, then drains it. Needs a Scope: the drain runs when it closes.
 */
export const runWorker = (capsule: Capsule, deps: WorkerDeps, stats: WorkerStats) =>
  Effect.gen(function* () {
    const {
      config,
      store,
      notifier,
      registry,
      processId,
      recordBatchOutcomes,
      paused,
      recordStats,
      uniqueKeys,
      debouncer,
      mayRead,
      jobBudget,
      reportClaims
    } = deps
    let onFirstClaim = deps.onFirstClaim
    // strict order between the queues (and priority sub-queues); a fair queue's reads share a cursor
    // a queue of a job with a concurrency limit is claimed by the limited claim (oldest first)
    const limited = new Set<string>()
    for (const { job } of registry.jobs.values()) {
      if (job.limit !== undefined || job.rate !== undefined) limited.add(logicalQueueOf(config, job))
    }
    const reads = capsule.queues.flatMap((q) => {
      // one claim statement per queue: limits win over order (a queue may not have both, see
      // orderedLimitConflicts), order wins over fairness
      const isLimited = limited.has(q)
      const ordered = !isLimited && readsInOrder(config, registry, q)
      const fair = !isLimited && !ordered && readsFairly(config, registry, q)
      return servedQueues(config, q).map((queue) => ({
        queue,
        logical: q,
        cursor: fair ? new FairCursor() : undefined,
        limited: isLimited,
        ordered
      }))
    })
    const queues = reads.map((r) => r.queue)
    /** Queues read in order: a key's next job becomes claimable when its head leaves, so that wakes the reader. */
    const orderedQueues = new Set(reads.flatMap((r) => (r.ordered ? [r.queue] : [])))
    const physical = queues.map((q) => QueueName.physicalOf(config.queuePrefix, q))
    const explicitReadAhead = capsule.readAhead ?? config.readAhead
    const prefetchLimit = capsule.prefetchLimit ?? config.prefetchLimit
    const visibilityMs = Duration.toMillis(config.visibilityTimeout)
    const defaultPolicy = resolvePolicy(config, undefined)
    // the job metrics are updated synchronously on the hot path (see recordJobUnsafe)
    const clock = yield* Clock.Clock
    const metricsContext = yield* Effect.context<never>()

    const wakeups = yield* notifier.subscribe(physical)
    const workerScope = yield* Effect.scope
    const work = yield* Queue.unbounded<Message>()
    /** Every message this worker holds a claim on: buffered, running, or succeeded but not yet archived. */
    const inFlight = new Set<Message>()
    const completed: Array<Message> = []
    let stopping = false
    let queuesMayHaveMore = true
    /** Drained, woken while every slot was taken: the next freed slot wakes the read loop again. */
    let wokenWhileFull = false
    const flushLock = yield* Semaphore.make(1)
    /** Opened by executors when enough capacity is free to be worth a read. */
    const capacityFreed = Latch.makeUnsafe(false)
    // no readAhead given: the worker decides from its claims and jobs (ReadAhead.ts)
    const readAhead =
      explicitReadAhead === undefined
        ? ReadAhead.adaptive(capsule.concurrency, visibilityMs)
        : ReadAhead.fixed(explicitReadAhead)
    const total = () => capsule.concurrency + readAhead.current()
    /** Free room for claims: slots not running or buffered, read-ahead included, within the prefetch limit. */
    /** Messages taken against the job budget (claimed, or reserved by local dispatch). */
    let taken = 0
    const room = () => {
      const free = total() - stats.running - stats.buffered
      const within = jobBudget === undefined ? free : Math.min(free, jobBudget.limit - taken)
      return prefetchLimit === undefined ? within : Math.min(within, prefetchLimit - inFlight.size)
    }
    /** The budget is spent once every message it took has ended. */
    let spent = false
    const checkBudget = () => {
      if (jobBudget === undefined || spent || taken < jobBudget.limit) return
      if (stats.running > 0 || stats.buffered > 0) return
      spent = true
      jobBudget.onSpent()
    }
    const isPaused = (queue: string) => paused?.isPaused(QueueName.physicalOf(config.queuePrefix, queue)) === true
    /** Physical queue -> the capsule's name of it (the consumer gate is by the capsule's queue). */
    const logicalOf = new Map(reads.map((r) => [QueueName.physicalOf(config.queuePrefix, r.queue), r.logical]))
    const gated = (logical: string | undefined) => mayRead !== undefined && logical !== undefined && !mayRead(logical)
    const refillAt = () => Math.max(1, Math.floor(total() / 2))
    /** While the queues have more: claim once half the room is free, or when nothing is buffered. */
    const worthClaiming = () => {
      const want = room()
      return want > 0 && (want >= refillAt() || stats.buffered === 0)
    }
    const flushSignal = Latch.makeUnsafe(false)
    /** Opened after every claim: a deferred flush checks whether the claim archived its successes. */
    const claimEnded = Latch.makeUnsafe(false)
    // While the queues have more, a claim is coming and archives the successes in its statement
    // (one round trip instead of two). Not with a prefetch limit: unarchived successes count
    // against it, so the claim could wait for the flush.
    const claimArchives = prefetchLimit === undefined

    const forget = (m: Message) => inFlight.delete(m)
    // what becomes of each delivery (retries, dead letters, batch members' ends) is the completer's
    const completer = makeCompleter({ store, registry, recordBatchOutcomes, uniqueKeys })
    // a debounced job's first delivery runs only if it is its key's last; a whileExecuting job's
    // run holds its key (plain messages pay two field lookups)
    const executeOne = (m: Message) => {
      const run = execute(registry, defaultPolicy, m)
      const unique = uniqueKeys !== undefined && keyOfMessage(m) !== undefined
      const debounced = debouncer !== undefined && debounceKeyOfMessage(m) !== undefined
      if (!unique && !debounced) return run
      const policy = jobOf(registry, m).registered?.policy ?? defaultPolicy
      const guarded = unique ? runExclusive(uniqueKeys!, registry, m, processId, policy, run) : run
      return debounced ? runDebounced(debouncer!, registry, m, policy, guarded) : guarded
    }

    // Archives completed messages in one statement per queue. What fails to archive stays in
    // flight (heartbeated) and goes back on the list for the next flush. Returns false then.
    const flush: Effect.Effect<boolean> = flushLock.withPermit(
      Effect.uninterruptible(
        Effect.gen(function* () {
          if (completed.length === 0) return true
          let ok = true
          const batch = completed.splice(0, completed.length)
          for (const [queue, messages] of groupMessagesByQueue(batch)) {
            const archived = yield* Effect.result(store.archive(queue, messages.map(receiptOf)))
            if (archived._tag === "Failure") {
              ok = false
              completed.push(...messages)
              yield* Effect.logWarning("pgbus: archive failed, will retry", archived.failure)
              continue
            }
            if (archived.success < messages.length) {
              yield* Effect.logWarning(
                `pgbus: ${messages.length - archived.success} succeeded job(s) on ${queue} had been delivered again before their archive`
              )
            }
            for (const m of messages) forget(m)
            yield* completer.archived(messages)
            if (orderedQueues.has(queue)) wakeups.wake()
          }
          return ok
        })
      )
    )

    // A success waits for the next archive (a flush, or the next claim's statement); any other
    // outcome is applied by the completer at once.
    const applyOutcome = (m: Message, outcome: Outcome): Effect.Effect<void> => {
      switch (outcome._tag) {
        case "Succeeded":
          stats.succeeded++
          // a result is archived at once, with it, by the completer (its awaiters wake)
          if (outcome.result !== undefined) break
          completed.push(m)
          flushSignal.openUnsafe()
          return Effect.void
        case "Retry":
          stats.retried++
          break
        case "DeadLetter":
          stats.deadLettered++
          break
        case "Abandoned":
          stats.abandoned++
          break
        case "Discarded":
        case "Superseded":
        case "Snoozed":
          break
      }
      const end = Effect.ensuring(
        completer.complete(m, outcome),
        Effect.sync(() => {
          forget(m)
          // a head that left its queue (archived, dead-lettered, discarded) hands its key on
          if (orderedQueues.has(m.queue)) wakeups.wake()
        })
      )
      // A retry, a snooze and a give-back set the row's visibility: under the heartbeat's lock,
      // so that a heartbeat that still counts the message in flight cannot extend it to a whole
      // visibility timeout right after (a 1 s backoff became 30 s on a loaded machine).
      return outcome._tag === "Retry" || outcome._tag === "Snoozed" || outcome._tag === "Abandoned"
        ? flushLock.withPermit(end)
        : end
    }

    /** Counts and times a delivery that ended (an abandoned one did not). */
    const recordOutcome = (m: Message, outcome: Outcome, startedAt: number) => {
      // an abandoned or snoozed delivery did not end; a discarded or superseded one is in the
      // metrics only (job_stats has no column for it; a superseded one did not run)
      if (outcome._tag === "Abandoned" || outcome._tag === "Snoozed") return
      const status = STATUS_OF[outcome._tag]
      const now = clock.currentTimeMillisUnsafe()
      const ms = now - startedAt
      if (status !== "superseded") readAhead.ran(ms)
      const name = jobOf(registry, m).name
      recordJobUnsafe(metricsContext, m.queue, name, status, ms)
      // pickup latency of a first delivery: enqueued -> started (a scheduled job's delay included)
      if (status !== "discarded" && status !== "superseded") {
        recordStats?.(m.queue, name, status, ms, m.readCt === 1 ? startedAt - m.enqueuedAt.getTime() : undefined, now)
      }
    }

    // the messages running now, for the drain's log line
    const running = new Set<Message>()
    const runOne = (m: Message) =>
      Effect.suspend(() => {
        stats.buffered = Math.max(0, stats.buffered - 1)
        stats.running++
        running.add(m)
        const startedAt = clock.currentTimeMillisUnsafe()
        return executeOne(m).pipe(
          Effect.onInterrupt(() => applyOutcome(m, { _tag: "Abandoned" })),
          Effect.flatMap((outcome) => {
            recordOutcome(m, outcome, startedAt)
            return Effect.uninterruptible(applyOutcome(m, outcome))
          }),
          Effect.ensuring(
            Effect.sync(() => {
              stats.running--
              running.delete(m)
              checkBudget()
              if (queuesMayHaveMore) {
                if (worthClaiming()) capacityFreed.openUnsafe()
              } else if (wokenWhileFull) {
                // a wake-up came while every slot was taken: its message waits for this slot
                wokenWhileFull = false
                wakeups.wake()
              }
            })
          )
        )
      })

    // An executor never dies: a defect in the machinery around a job is logged, and the
    // message is left to its visibility timeout (it is still held by the heartbeat until then).
    const executor = Effect.forever(
      Effect.flatMap(Queue.take(work), (m) =>
        runOne(m).pipe(
          Effect.catchCause((cause) =>
            Cause.hasInterruptsOnly(cause)
              ? Effect.failCause(cause)
              : Effect.logError("pgbus: executing a message failed unexpectedly", Cause.pretty(cause)).pipe(
                  Effect.andThen(Effect.sync(() => forget(m)))
                )
          )
        )
      )
    )

    const flusher = Effect.forever(
      Effect.gen(function* () {
        yield* flushSignal.await
        flushSignal.closeUnsafe()
        while (claimArchives && queuesMayHaveMore && !stopping && completed.every(takenByNextClaim)) {
          claimEnded.closeUnsafe()
          const ended = yield* Effect.timeoutOption(claimEnded.await, FLUSH_DEFER)
          if (ended._tag === "None" || completed.length === 0) break
        }
        if (!(yield* flush)) {
          yield* Effect.sleep("1 second")
          flushSignal.openUnsafe()
        }
      })
    )

    const heartbeatEvery = Duration.millis(heartbeatIntervalMs(config))
    // a limited job's own slot lease (`limit.duration`) is renewed as such, raised to two beats
    const leaseFloor = leaseFloorMs(config)
    // under the flush lock: a message archived while its visibility is being extended is not lost
    const heartbeat = flushLock
      .withPermit(
        Effect.gen(function* () {
          if (inFlight.size === 0) return
          for (const { queue, leaseMs, receipts } of groupByQueueAndLease(inFlight, visibilityMs, leaseFloor)) {
            const extended = yield* store
              .setVisibility(queue, receipts, Duration.millis(leaseMs))
              .pipe(
                Effect.catch((error) => Effect.as(Effect.logWarning("pgbus: heartbeat failed", error), receipts.length))
              )
            if (extended < receipts.length) {
              yield* Effect.logWarning(`pgbus: ${receipts.length - extended} message(s) on ${queue} lost their claim`)
            }
          }
        })
      )
      .pipe(Effect.repeat(Schedule.spaced(heartbeatEvery)), Effect.forever)

    /** Takes the successes of `queue` that a claim may archive off the list (under the flush lock). */
    const takeCompleted = (queue: string): Array<Message> => {
      const taken: Array<Message> = []
      let kept = 0
      for (const m of completed) {
        if (m.queue === queue && archivableByClaim(m)) taken.push(m)
        else completed[kept++] = m
      }
      completed.length = kept
      return taken
    }

    // Archives the given successes with the read (one statement); on failure they go back on the list.
    const archiveAndRead = (
      queue: string,
      done: ReadonlyArray<Message>,
      limit: number,
      mark: string,
      limited: boolean,
      ordered: boolean
    ) =>
      store
        .archiveAndRead(queue, done.map(receiptOf), {
          limit,
          visibilityTimeout: config.visibilityTimeout,
          claimedBy: mark,
          ...(limited ? { limited, onRateWait } : {}),
          ...(ordered ? { ordered } : {})
        })
        .pipe(
          Effect.tapError(() =>
            Effect.sync(() => {
              completed.push(...done)
              flushSignal.openUnsafe()
            })
          ),
          Effect.tap(({ archived }) => {
            for (const m of done) forget(m)
            return archived < done.length
              ? Effect.logWarning(
                  `pgbus: ${done.length - archived} succeeded job(s) on ${queue} had been delivered again before their archive`
                )
              : Effect.void
          })
        )

    // Each claim marks its messages `<process id>#<n>` (fast recovery matches the process id): a
    // claim that fails with its connection may have committed with its reply lost, and its
    // messages, which this worker never got, are released by that mark instead of waiting for
    // their visibility timeout.
    let claims = 0
    const releaseLostClaim = (queue: string, mark: string) =>
      retryTransient(store.releaseClaim(queue, mark)).pipe(
        Effect.flatMap((n) =>
          n === 0
            ? Effect.void
            : Effect.logWarning(`pgbus: released ${n} message(s) of a claim on ${queue} whose reply was lost`)
        ),
        Effect.catch((error) => Effect.logWarning("pgbus: releasing a claim whose reply was lost failed", error))
      )

    /** Claims up to `limit` of a queue (archiving successes on the way when allowed); `more`: it left some. */
    // A rate-limited claim that left jobs behind says when the next token comes: no NOTIFY will
    // announce it, so the worker wakes itself then (one pending wake-up, the earliest).
    let rateWait: number | undefined
    let rateWakeAt = Number.POSITIVE_INFINITY
    const onRateWait = (ms: number) => {
      rateWait = rateWait === undefined ? ms : Math.min(rateWait, ms)
    }
    const scheduleRateWake = Effect.suspend(() => {
      const ms = rateWait
      rateWait = undefined
      if (ms === undefined) return Effect.void
      const at = clock.currentTimeMillisUnsafe() + ms
      if (at >= rateWakeAt) return Effect.void
      rateWakeAt = at
      return Effect.forkIn(
        Effect.sleep(Duration.millis(ms)).pipe(
          Effect.andThen(
            Effect.sync(() => {
              if (rateWakeAt === at) rateWakeAt = Number.POSITIVE_INFINITY
              wakeups.wake()
            })
          )
        ),
        workerScope
      ).pipe(Effect.asVoid)
    })

    const readOne = (
      queue: string,
      cursor: FairCursor | undefined,
      limited: boolean,
      limit: number,
      withArchive: boolean,
      ordered: boolean
    ) => {
      // a limited claim archives first too (then claims in its own transaction: the archived
      // jobs' slots are free for it, so no wake-up is needed for the jobs it archives)
      const plain = cursor === undefined
      const done = withArchive && plain && completed.length > 0 ? takeCompleted(queue) : []
      const mark = `${processId}#${++claims}`
      const claimed = plain
        ? archiveAndRead(queue, done, limit, mark, limited, ordered)
        : store
            .read(queue, {
              limit,
              visibilityTimeout: config.visibilityTimeout,
              claimedBy: mark,
              fair: cursor
            })
            .pipe(Effect.map((messages) => ({ messages, more: messages.length >= limit })))
      return Effect.tapError(claimed, (error) =>
        isPassingFailure(error) ? releaseLostClaim(queue, mark) : Effect.void
      )
    }

    /** The queues the last claim read without fairness: the next claim likely reads them again. */
    let lastRead = new Set<string>()
    /** Whether the next claim is expected to archive a success (else the flusher does, at once). */
    // An ordered queue's successes too: while its last read left more heads, the next claim
    // comes soon (a claim per success would skip-scan the keys per job); once it is drained the
    // flusher archives at once and wakes the reader, for the keys' next jobs.
    const takenByNextClaim = (m: Message) => archivableByClaim(m) && lastRead.has(m.queue)

    const claimWith = (withArchive: boolean) =>
      Effect.gen(function* () {
        let want = room()
        if (want <= 0) return 0
        const startedAt = clock.currentTimeMillisUnsafe()
        let claimed = 0
        let more = false
        const read = new Set<string>()
        for (const { queue, logical, cursor, limited, ordered } of reads) {
          // full before the last queues: those may have more
          if (want <= 0) {
            more = true
            break
          }
          if (isPaused(queue) || gated(logical)) continue
          if (cursor === undefined) read.add(queue)
          const got = yield* readOne(queue, cursor, limited, want, withArchive, ordered)
          for (const m of got.messages) inFlight.add(m)
          if (got.messages.length > 0) reportClaims?.(inFlight)
          taken += got.messages.length
          stats.buffered += got.messages.length
          yield* Queue.offerAll(work, got.messages)
          want -= got.messages.length
          claimed += got.messages.length
          if (got.more) more = true
        }
        yield* scheduleRateWake
        readAhead.claimed(clock.currentTimeMillisUnsafe() - startedAt, more)
        // every queue read was drained: only a notification (or the poll) is news
        queuesMayHaveMore = more
        lastRead = read
        return claimed
      })

    // Backlogged, the flusher leaves successes to the claim (under the flush lock, as a flush);
    // otherwise (woken by a notification) the claim reads without waiting for a flush.
    const claim = Effect.suspend(() =>
      claimArchives && queuesMayHaveMore && completed.length > 0
        ? flushLock.withPermit(claimWith(true))
        : claimWith(false)
    ).pipe(
      Effect.ensuring(
        Effect.suspend(() => {
          claimEnded.openUnsafe()
          const first = onFirstClaim
          onFirstClaim = undefined
          return first ?? Effect.void
        })
      ),
      Effect.uninterruptible
    )

    // While the queues have more, claim only once a good part of the capacity is free (one
    // read feeds many jobs; in bench:jobs reading at every freed slot cost a read per job).
    // Once they are drained, any free slot is claimed at the next notification or poll.
    // 100 ms doubling to 5 s over one outage: a successful claim starts the next at 100 ms
    const readBackoff = OutageBackoff.make("100 millis", "5 seconds")
    const readLoop = Effect.gen(function* () {
      while (!stopping) {
        if (queuesMayHaveMore ? worthClaiming() : room() > 0) {
          capacityFreed.closeUnsafe()
          yield* claim
          readBackoff.succeeded()
          stats.healthy = true
          // let the executors start what was just claimed first: short jobs free their slots
          // meanwhile, so the next claim is larger (fewer statements per job)
          yield* Effect.yieldNow
          if (queuesMayHaveMore) continue
        }
        if (queuesMayHaveMore) {
          // full: an executor opens the latch once claiming is worth it again
          capacityFreed.closeUnsafe()
          if (!worthClaiming()) yield* capacityFreed.await
        } else {
          // woken by a NOTIFY, or by the poller below
          yield* wakeups.next
          if (room() <= 0) wokenWhileFull = true
        }
      }
    }).pipe((loop) =>
      OutageBackoff.retryLoop(loop, readBackoff, (error, pause) =>
        isBreakerOpen(error)
          ? // the connection breaker refused the read without a connection: the outage was logged
            // once, and the next read (100 ms on) costs nothing, so that claims resume at once after
            Effect.sync(() => {
              stats.healthy = false
              readBackoff.succeeded()
            })
          : Effect.sync(() => {
              stats.healthy = false
            }).pipe(
              Effect.andThen(
                Effect.logWarning(`pgbus: worker read failed, retrying in ${Duration.toMillis(pause)} ms`, error).pipe(
                  Effect.annotateLogs({ retryInMs: Duration.toMillis(pause) })
                )
              )
            )
      )
    )

    // The polling backstop wakes the read loop like a NOTIFY does, so that the loop waits on the
    // wake-up alone (a wait with a timeout forks a race: two more hops from NOTIFY to claim).
    const poller = Effect.forever(
      Effect.flatMap(notifier.status, (status) =>
        Effect.sleep(pollDelay(status, config.pollingInterval)).pipe(Effect.andThen(Effect.sync(() => wakeups.wake())))
      )
    )

    // Local dispatch (Notifier.reserveLocal): a sender of this process may insert a message
    // claimed for this worker and hand it over after its commit, with no NOTIFY and no read,
    // while a slot is free, and, for a worker of several queues (priority order) or a job (FIFO),
    // only while they are drained. With more to read, the read loop still claims whenever nothing is buffered, so
    // the queue is not starved. The reserved slot counts as buffered until the message arrives or
    // the send gives it back.
    const localQueues = reads.flatMap((r) =>
      r.cursor === undefined ? [QueueName.physicalOf(config.queuePrefix, r.queue)] : []
    )
    if (config.localDispatch && localQueues.length > 0) {
      yield* notifier.offerLocal(localQueues, {
        reserve: (physicalQueue, request) => {
          // with more to read, only a worker of one queue (no priority order to keep), and only
          // for a message that may overtake the others (a woken step, not a job)
          if (stopping || room() <= 0 || (queuesMayHaveMore && (reads.length > 1 || request.inOrder))) return undefined
          if (paused?.isPaused(physicalQueue) === true || gated(logicalOf.get(physicalQueue))) return undefined
          // a message this process cannot run goes the usual way, to a process that can
          const known =
            "job" in request.runs ? registry.jobs.has(request.runs.job) : registry.workflows.has(request.runs.workflow)
          if (!known) return undefined
          // a step goes only to a free executor, never behind read-ahead: given back at a drain, its
          // claim would look like a dead worker's to the message's next delivery (one that finds the
          // executors taken by the time it arrives is refused, and released by its sender)
          const step = "workflow" in request.runs
          if (step && stats.running + stats.buffered >= capsule.concurrency) return undefined
          stats.buffered++
          taken++
          let open = true
          const close = () => {
            if (!open) return false
            open = false
            return true
          }
          return {
            // a mark of its own, as a claim's: a send that loses its reply releases by it
            claimedBy: `${processId}#${++claims}`,
            visibilityMs,
            deliver: (m, beforeGiveBack) =>
              Effect.suspend(() => {
                if (!close()) return Effect.succeed(false)
                // this slot counts in `buffered`: with it, no more than the executors
                if (!stopping && (!step || stats.running + stats.buffered <= capsule.concurrency)) {
                  inFlight.add(m)
                  reportClaims?.(inFlight)
                  return Queue.offer(work, m).pipe(Effect.as(true))
                }
                // drained meanwhile (or no executor free for a step): give it back at once
                stats.buffered = Math.max(0, stats.buffered - 1)
                taken--
                return (beforeGiveBack ?? Effect.void).pipe(
                  Effect.andThen(store.release(m.queue, [receiptOf(m)])),
                  Effect.catch((e) => Effect.logWarning("pgbus: release failed", e)),
                  Effect.as(false)
                )
              }),
            cancel: () => {
              if (close()) {
                stats.buffered = Math.max(0, stats.buffered - 1)
                taken--
              }
            }
          }
        }
      })
    }

    const fairQueues = reads.flatMap((r) => (r.cursor === undefined ? [] : [r.queue]))
    if (fairQueues.length > 0) yield* Effect.forkScoped(ensureFairIndexes(store, fairQueues))
    if (orderedQueues.size > 0) yield* Effect.forkScoped(ensureOrderIndexes(store, [...orderedQueues]))

    const executors = yield* FiberSet.make()
    for (let i = 0; i < capsule.concurrency; i++) yield* FiberSet.run(executors, executor)
    const flusherFiber = yield* Effect.forkScoped(flusher)
    yield* Effect.forkScoped(poller)
    if (config.visibilityHeartbeat) yield* Effect.forkScoped(heartbeat)

    // Added after the fibers above, so it runs before they are interrupted.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function* () {
        stopping = true
        const buffered = yield* Queue.clear(work)
        stats.buffered = 0
        if (buffered.length > 0) {
          for (const [queue, receipts] of groupByQueue(buffered)) {
            yield* store
              .release(queue, receipts)
              .pipe(Effect.catch((e) => Effect.as(Effect.logWarning("pgbus: release failed", e), 0)))
          }
          for (const m of buffered) forget(m)
          yield* Effect.logInfo(`pgbus: gave ${buffered.length} buffered message(s) back`)
        }
        if (running.size > 0) {
          const shown = [...running].slice(0, 5).map((m) => `${jobOf(registry, m).name} #${m.msgId} on ${m.queue}`)
          const more = running.size > shown.length ? ` and ${running.size - shown.length} more` : ""
          yield* Effect.logInfo(
            `pgbus: draining: waiting for ${running.size} running job(s) to finish (${shown.join(", ")}${more}), at most ${Duration.format(config.drainTimeout)}`
          )
        }
        const waited = yield* Effect.repeat(
          Effect.sync(() => stats.running),
          { until: (running) => running === 0, schedule: Schedule.spaced("10 millis") }
        ).pipe(Effect.timeoutOption(config.drainTimeout))
        if (waited._tag === "None") {
          yield* Effect.logWarning(`pgbus: drain timeout: abandoning ${stats.running} running job(s)`)
        }
        // interrupting executors gives back what still runs; then archive what succeeded
        yield* FiberSet.clear(executors)
        yield* Fiber.interrupt(flusherFiber)
        yield* flush
      }).pipe(Effect.annotateLogs({ capsule: capsule.name }))
    )

    return yield* readLoop
  })
