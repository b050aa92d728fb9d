/**
 * A worker's claim loop: it claims up to its free room from its queues in priority order
 * (archiving successes in the same statement while the queues have more), hands the messages to
 * the executors, backs off over an outage, and waits for freed capacity, a NOTIFY or the poller.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Queue, Semaphore } from "effect"
import { isPassingFailure, retryTransient } from "../../Database.ts"
import * as OutageBackoff from "../../internal/OutageBackoff.ts"
import { jobOf } from "../../Job/Executor.ts"
import type { JobRegistry } from "../../Job/RegisteredJob.ts"
import type { Message } from "../../Queue/Message.ts"
import { pollDelay } from "../../Queue/Notifier.ts"
import type { ReadClaim } from "../../Queue/QueueRows.ts"
import { isBreakerOpen } from "../ConnectionWatch.ts"
import { CLAIM_ARCHIVE_LIMIT, splitDeleted, takeCompleted } from "./Archive.ts"
import { forget, gated, isPaused, type QueueRead, room, type WorkerContext, worthClaiming } from "./Context.ts"
import { readClaimFor } from "./ReadClaimLimits.ts"

/**
 * A rate-limited claim that left jobs behind says when the next token comes, a limited one with
 * full keys when the earliest of their slot leases lapses: no NOTIFY will announce either, so
 * the worker wakes itself then (one pending wake-up, the earliest).
 */
const makeRateWake = (ctx: WorkerContext) => {
  let rateWait: number | undefined
  let rateWakeAt = Number.POSITIVE_INFINITY
  const onRateWait = (ms: number) => {
    rateWait = rateWait === undefined ? ms : Math.min(rateWait, ms)
  }
  const scheduleRateWake = Effect.suspend(() => {
    const ms = rateWait
    rateWait = undefined
    if (ms === undefined) return Effect.void
    const at = ctx.clock.currentTimeMillisUnsafe() + ms
    if (at >= rateWakeAt) return Effect.void
    rateWakeAt = at
    return Effect.forkIn(
      Effect.sleep(Duration.millis(ms)).pipe(
        Effect.andThen(
          Effect.sync(() => {
            if (rateWakeAt === at) rateWakeAt = Number.POSITIVE_INFINITY
            ctx.wakeups.wake()
          })
        )
      ),
      ctx.workerScope
    ).pipe(Effect.asVoid)
  })
  return { onRateWait, scheduleRateWake }
}

// Each claim marks its messages `<process id>#<n>` (fast recovery matches the process id): a
// claim that fails with its connection may have committed with its reply lost, and its
// messages, which this worker never got, are released by that mark instead of waiting for
// their visibility timeout.
// A claim that also claimed woken steps (a read claim) releases those first, by its messages,
// so that their next delivery does not find them held as by a dead worker.
// The worker reads nothing until this ends: retried every second at most, so that it ends
// within a second of the server's return, not five.
const releaseLostClaim = (ctx: WorkerContext, queue: string, mark: string, readClaim: ReadClaim | undefined) =>
  (readClaim === undefined
    ? Effect.void
    : retryTransient(ctx.store.claimedBy(queue, mark), { everySecond: true }).pipe(
        Effect.flatMap((messages) => readClaim.release(messages, false))
      )
  ).pipe(
    Effect.andThen(retryTransient(ctx.store.releaseClaim(queue, mark), { everySecond: true })),
    Effect.flatMap((n) =>
      n === 0
        ? Effect.void
        : Effect.logWarning(`pgbus: released ${n} message(s) of a claim on ${queue} whose reply was lost`)
    ),
    Effect.catch((error) => Effect.logWarning("pgbus: releasing a claim whose reply was lost failed", error))
  )

const readClaims = new WeakMap<QueueRead, ReadClaim | null>()

/**
 * The claim a plain read of this queue makes for the messages of a registered job (a woken
 * workflow step's, `RegisteredJob.readClaim`), if any; looked up once per queue of the worker.
 */
export const readClaimOf = (ctx: WorkerContext, read: QueueRead): ReadClaim | undefined => {
  let found = readClaims.get(read)
  if (found === undefined) {
    found = null
    if (read.cursor === undefined && read.limited === false && !read.ordered) {
      for (const registered of ctx.deps.registry.jobs.values()) {
        const claim = registered.readClaim?.(read.logical)
        if (claim !== undefined) {
          found = claim
          break
        }
      }
    }
    readClaims.set(read, found)
  }
  return found ?? undefined
}

/**
 * Whether archiving these successes is a lease: every one is a workflow step's (its outcome was
 * committed with the step), so a crash that loses the archive only makes it visible again. A
 * job's archive is its completion: one among them keeps the statement's commit durable.
 */
export const archiveIsLease = (registry: JobRegistry, done: ReadonlyArray<Message>): boolean =>
  done.length > 0 && done.every((m) => jobOf(registry, m).registered?.archiveIsLease === true)

/** Archives the given successes with the read (one statement); on failure they go back on the list. */
const archiveAndRead = (
  ctx: WorkerContext,
  onRateWait: (ms: number) => void,
  queue: string,
  done: ReadonlyArray<Message>,
  limit: number,
  mark: string,
  limited: boolean | "rates",
  ordered: boolean,
  readClaim: ReturnType<typeof readClaimFor> | undefined
) => {
  const { archived: kept, deleted } = splitDeleted(ctx.deps.registry, done)
  return ctx.store
    .archiveAndRead(queue, kept, {
      ...(deleted.length > 0 ? { deleted } : {}),
      limit,
      visibilityTimeout: ctx.config.visibilityTimeout,
      claimedBy: mark,
      ...(archiveIsLease(ctx.deps.registry, done) ? { archiveIsLease: true } : {}),
      ...(readClaim === undefined ? {} : { readClaim: readClaim.option }),
      ...(limited !== false ? { limited, onRateWait } : {}),
      ...(ordered ? { ordered } : {})
    })
    .pipe(
      Effect.tapError(() =>
        Effect.sync(() => {
          ctx.completed.push(...done)
          ctx.flushSignal.openUnsafe()
        })
      ),
      Effect.tap(({ archived, messages }) => {
        readClaim?.settled(messages)
        for (const m of done) forget(ctx, m)
        return archived < done.length
          ? Effect.logWarning(
              `pgbus: ${done.length - archived} succeeded job(s) on ${queue} had been delivered again before their archive`
            )
          : Effect.void
      })
    )
}

/** Claims up to `limit` of a queue (archiving successes on the way when allowed); `more`: it left some. */
const readOne = (
  ctx: WorkerContext,
  onRateWait: (ms: number) => void,
  read: QueueRead,
  limit: number,
  withArchive: boolean
) => {
  const { queue, cursor, limited, ordered } = read
  const readClaim = readClaimOf(ctx, read)
  // a limited claim archives first too (then claims in its own transaction: the archived
  // jobs' slots are free for it, so no wake-up is needed for the jobs it archives)
  const plain = cursor === undefined
  const done = withArchive && plain && ctx.completed.length > 0 ? takeCompleted(ctx, queue) : []
  const mark = `${ctx.deps.processId}#${++ctx.claims}`
  const claimed = plain
    ? archiveAndRead(
        ctx,
        onRateWait,
        queue,
        done,
        limit,
        mark,
        limited,
        ordered,
        readClaim === undefined ? undefined : readClaimFor(ctx, read, readClaim)
      )
    : ctx.store
        .read(queue, {
          limit,
          visibilityTimeout: ctx.config.visibilityTimeout,
          claimedBy: mark,
          fair: cursor
        })
        .pipe(Effect.map((messages) => ({ messages, more: messages.length >= limit })))
  return Effect.tapError(claimed, (error) =>
    isPassingFailure(error) ? releaseLostClaim(ctx, queue, mark, readClaim) : Effect.void
  )
}

/** One claim over the capsule's queues in priority order; returns how many messages it claimed. */
const claimWith = (ctx: WorkerContext, rate: ReturnType<typeof makeRateWake>, withArchive: boolean) =>
  Effect.gen(function* () {
    const { stats, inFlight, clock } = ctx
    let want = room(ctx)
    if (want <= 0) return 0
    const startedAt = clock.currentTimeMillisUnsafe()
    let claimed = 0
    let more = false
    const read = new Set<string>()
    for (const queueRead of ctx.reads) {
      const { queue, logical, cursor } = queueRead
      // full before the last queues: those may have more
      if (want <= 0) {
        more = true
        break
      }
      if (isPaused(ctx, queue) || gated(ctx, logical)) continue
      if (cursor === undefined) read.add(queue)
      const got = yield* readOne(ctx, rate.onRateWait, queueRead, want, withArchive)
      for (const m of got.messages) inFlight.add(m)
      if (got.messages.length > 0) ctx.deps.reportClaims?.(inFlight)
      ctx.taken += got.messages.length
      stats.buffered += got.messages.length
      yield* Queue.offerAll(ctx.work, got.messages)
      want -= got.messages.length
      claimed += got.messages.length
      if (got.more) more = true
    }
    yield* rate.scheduleRateWake
    ctx.readAhead.claimed(clock.currentTimeMillisUnsafe() - startedAt, more)
    // every queue read was drained: only a notification (or the poll) is news
    ctx.queuesMayHaveMore = more
    ctx.lastRead = read
    return claimed
  })

/**
 * The claim loop, until the drain stops it. While the queues have more, it claims only once a
 * good part of the capacity is free (one read feeds many jobs; in bench:jobs reading at every
 * freed slot cost a read per job). Once they are drained, any free slot is claimed at the next
 * notification or poll.
 */
export const makeReadLoop = (ctx: WorkerContext) => {
  const { stats, capacityFreed, wakeups } = ctx
  const rate = makeRateWake(ctx)
  // Backlogged, the flusher leaves a few successes to the claim (under the flush lock, as a
  // flush); otherwise (woken by a notification, many successes, or a flush under way) the claim
  // reads without waiting for a flush.
  const claim = Effect.suspend(() =>
    ctx.claimArchives && ctx.queuesMayHaveMore && ctx.completed.length > 0 && ctx.completed.length < CLAIM_ARCHIVE_LIMIT
      ? Semaphore.withPermitsIfAvailable(
          ctx.flushLock,
          1
        )(claimWith(ctx, rate, true)).pipe(
          Effect.flatMap((claimed) =>
            claimed._tag === "Some" ? Effect.succeed(claimed.value) : claimWith(ctx, rate, false)
          )
        )
      : claimWith(ctx, rate, false)
  ).pipe(
    Effect.ensuring(
      Effect.suspend(() => {
        ctx.claimEnded.openUnsafe()
        const first = ctx.onFirstClaim
        ctx.onFirstClaim = undefined
        return first ?? Effect.void
      })
    ),
    Effect.uninterruptible
  )
  // 100 ms doubling to 5 s over one outage: a successful claim starts the next at 100 ms
  const readBackoff = OutageBackoff.make("100 millis", "5 seconds")
  const readLoop = Effect.gen(function* () {
    while (!ctx.stopping) {
      if (ctx.queuesMayHaveMore ? worthClaiming(ctx) : room(ctx) > 0) {
        capacityFreed.closeUnsafe()
        yield* claim
        readBackoff.succeeded()
        stats.healthy = true
        // let the executors start what was just claimed first: short jobs free their slots
        // meanwhile, so the next claim is larger (fewer statements per job)
        yield* Effect.yieldNow
        if (ctx.queuesMayHaveMore) continue
      }
      if (ctx.queuesMayHaveMore) {
        // full: an executor opens the latch once claiming is worth it again
        capacityFreed.closeUnsafe()
        if (!worthClaiming(ctx)) yield* capacityFreed.await
      } else {
        // woken by a NOTIFY, or by the poller below
        yield* wakeups.next
        if (room(ctx) <= 0) ctx.wokenWhileFull = true
      }
    }
  })
  return OutageBackoff.retryLoop(readLoop, readBackoff, (error, pause) =>
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
}

/**
 * The polling backstop: it wakes the read loop like a NOTIFY does, so that the loop waits on the
 * wake-up alone (a wait with a timeout forks a race: two more hops from NOTIFY to claim).
 */
export const makePoller = (ctx: WorkerContext): Effect.Effect<never> =>
  Effect.forever(
    Effect.flatMap(ctx.deps.notifier.status, (status) =>
      Effect.sleep(pollDelay(status, ctx.config.pollingInterval)).pipe(
        Effect.andThen(Effect.sync(() => ctx.wakeups.wake()))
      )
    )
  )
