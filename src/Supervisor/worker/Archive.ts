/**
 * Archiving a worker's successes: in batches, a few by the next claim's statement while the
 * queues have more (see `Claim.ts`), else by the flusher, one statement per queue.
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import { archivableByClaim, type Completer } from "../../Job/Completer.ts"
import { jobOf } from "../../Job/Executor.ts"
import type { JobRegistry } from "../../Job/RegisteredJob.ts"
import type { Message } from "../../Queue/Message.ts"
import { forget, groupMessagesByQueue, type WorkerContext } from "./Context.ts"

/** Longest a success waits for the next claim to archive it before the flusher does (backlog only). */
const FLUSH_DEFER = Duration.millis(250)

/**
 * Successes past this many are the flusher's, not the next claim's: its statement then runs
 * beside the claim's on another connection (a backlog of short jobs: ~300 successes a claim
 * doubled the claim's statement, and the two ran one after the other; W1 +6.5%, 4 of 6 pairs),
 * while a few (a workflow's steps, slow jobs) still ride the claim's statement and commit.
 */
export const CLAIM_ARCHIVE_LIMIT = 64

/** Splits successes into those archived and those deleted (their job's `deleteOnSuccess`: a workflow step's). */
export const splitDeleted = (
  registry: JobRegistry,
  done: ReadonlyArray<Message>
): { readonly archived: ReadonlyArray<Message>; readonly deleted: ReadonlyArray<Message> } => {
  const deletes = (m: Message) => jobOf(registry, m).registered?.deleteOnSuccess === true
  const deleted = done.filter(deletes)
  if (deleted.length === 0) return { archived: done, deleted }
  return { archived: deleted.length === done.length ? [] : done.filter((m) => !deletes(m)), deleted }
}

/**
 * Archives completed messages in one statement per queue (deletes those of a job that is
 * deleted on success, in one more). What fails to archive stays in flight
 * (heartbeated) and goes back on the list for the next flush; the flush returns false then.
 */
export const makeFlush = (ctx: WorkerContext, completer: Completer): Effect.Effect<boolean> => {
  const { completed, store, orderedQueues, wakeups } = ctx
  return ctx.flushLock.withPermit(
    Effect.uninterruptible(
      Effect.gen(function* () {
        if (completed.length === 0) return true
        let ok = true
        const batch = completed.splice(0, completed.length)
        for (const [queue, messages] of groupMessagesByQueue(batch)) {
          const { archived: kept, deleted } = splitDeleted(ctx.deps.registry, messages)
          const archived = yield* Effect.result(
            Effect.zipWith(
              kept.length === 0 ? Effect.succeed(0) : store.archive(queue, kept),
              deleted.length === 0 ? Effect.succeed(0) : store.delete(queue, deleted),
              (a, d) => a + d
            )
          )
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
          for (const m of messages) forget(ctx, m)
          yield* completer.archived(messages)
          if (orderedQueues.has(queue)) wakeups.wake()
        }
        return ok
      })
    )
  )
}

/** Whether the next claim is expected to archive a success (else the flusher does, at once). */
// An ordered queue's successes too: while its last read left more heads, the next claim
// comes soon (a claim per success would skip-scan the keys per job); once it is drained the
// flusher archives at once and wakes the reader, for the keys' next jobs.
const takenByNextClaim = (ctx: WorkerContext, m: Message) => archivableByClaim(m) && ctx.lastRead.has(m.queue)

/**
 * The flusher: woken by a success, it leaves a backlogged queue's few successes to the next claim
 * (waiting at most FLUSH_DEFER for it), else flushes; a failed flush is tried again after 1 s.
 */
export const makeFlusher = (ctx: WorkerContext, flush: Effect.Effect<boolean>): Effect.Effect<never> => {
  const { completed, flushSignal, claimEnded } = ctx
  const allTakenByNextClaim = (m: Message) => takenByNextClaim(ctx, m)
  return Effect.forever(
    Effect.gen(function* () {
      yield* flushSignal.await
      flushSignal.closeUnsafe()
      while (
        ctx.claimArchives &&
        ctx.queuesMayHaveMore &&
        !ctx.stopping &&
        completed.length < CLAIM_ARCHIVE_LIMIT &&
        completed.every(allTakenByNextClaim)
      ) {
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
}

/** Takes the successes of `queue` that a claim may archive off the list (under the flush lock). */
export const takeCompleted = (ctx: WorkerContext, queue: string): Array<Message> => {
  const { completed } = ctx
  const taken: Array<Message> = []
  let kept = 0
  for (const m of completed) {
    if (m.queue === queue && archivableByClaim(m)) taken.push(m)
    else completed[kept++] = m
  }
  completed.length = kept
  return taken
}
