/**
 * Claims: the plain, ordered, fair and limited reads, archive-and-read in one round trip (with
 * the claim cursor), and the read that waits for messages.
 * Part of the queue store (`QueueStore.ts` assembles it).
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect, Option } from "effect"
import { statementNow } from "../Database.ts"
import { hotSpan } from "../internal/span.ts"
import { FairCursor } from "./FairShare.ts"
import type { Message, Receipt } from "./Message.ts"
import { pollDelay } from "./Notifier.ts"
import type { makeQueueControls } from "./QueueControls.ts"
import { InvalidMessage, type QueueError } from "./QueueError.ts"
import type { LimitedClaimMode } from "./QueueLimitSql.ts"
import type { MessageRow, ReadClaimRow } from "./QueueRows.ts"
import type { PollOptions, ReadOptions, Target } from "./QueueStore.ts"
import {
  byMsgId,
  byStart,
  claimOf,
  type QueueStoreContext,
  splitTargets,
  toMessage,
  toNumber
} from "./QueueStoreContext.ts"

/** What the claims need of the rest of the store: the archive, the delete and the flow-controlled claim. */
export interface ClaimsDeps {
  readonly archive: (queue: string, targets: ReadonlyArray<Target>) => Effect.Effect<number, QueueError>
  readonly remove: (queue: string, targets: ReadonlyArray<Target>) => Effect.Effect<number, QueueError>
  readonly readLimited: ReturnType<typeof makeQueueControls>["readLimited"]
}

/** The limited claim a read asks for, if any. */
const limitedMode = (options: ReadOptions | undefined): LimitedClaimMode | undefined =>
  options?.limited === true ? "limits" : options?.limited === "rates" ? "rates" : undefined

/** Builds this part of the queue store on its shared context. */
export const makeQueueClaims = (
  {
    config,
    notifier,
    sql,
    statements,
    orderStatements,
    defaultVisibilityMs,
    validateName,
    fail,
    durationMs,
    floors
  }: QueueStoreContext,
  { archive, remove, readLimited }: ClaimsDeps
) => {
  /** A read's checked inputs: the queue's name, the limit, the visibility timeout and the statement time. */
  const readParams = (queue: string, options: ReadOptions | undefined) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const limit = options?.limit ?? 1
      if (!Number.isInteger(limit) || limit < 1) {
        return yield* new InvalidMessage({ queue, reason: "limit must be a positive integer" })
      }
      const vtMs = yield* durationMs(queue, options?.visibilityTimeout, defaultVisibilityMs, "visibilityTimeout")
      const now = yield* statementNow
      return { name, limit, vtMs, now }
    })

  const read = (queue: string, options?: ReadOptions) =>
    Effect.gen(function* () {
      const { name, limit, vtMs, now } = yield* readParams(queue, options)
      const mode = limitedMode(options)
      if (mode !== undefined) {
        const claimed = yield* readLimited(
          queue,
          name.physical,
          limit,
          vtMs,
          options?.claimedBy ?? null,
          now,
          options?.onRateWait,
          undefined,
          { mode }
        )
        return claimed.messages
      }
      const fair = options?.fair
      if (fair !== undefined && fair !== false) {
        return yield* readFair(queue, name.physical, limit, vtMs, options?.claimedBy ?? null, fair, now)
      }
      const rows = yield* (
        options?.ordered === true
          ? orderStatements.messageReadOrdered(name.physical, limit, vtMs, options?.claimedBy ?? null, now)
          : statements.messageRead(name.physical, limit, vtMs, options?.claimedBy ?? null, now)
      ).pipe(Effect.mapError(fail("read from", queue)))
      return rows.map((row) => toMessage(queue, row)).sort(byMsgId) as ReadonlyArray<Message>
    }).pipe(hotSpan("QueueStore.read", { queue }))

  const archiveAndRead = (queue: string, receipts: ReadonlyArray<Receipt>, options?: ReadOptions) => {
    const deleted = options?.deleted ?? []
    if (deleted.length === 0) return archiveAndReadAll(queue, receipts, options)
    // the plain claim deletes them in its statement; the others first, in one of their own
    const fair = options?.fair
    if (limitedMode(options) === undefined && options?.ordered !== true && (fair === undefined || fair === false)) {
      return archiveAndReadAll(queue, [...receipts, ...deleted], options, deleted)
    }
    return Effect.flatMap(remove(queue, deleted), (n) =>
      Effect.map(archiveAndReadAll(queue, receipts, options), (r) => ({ ...r, archived: r.archived + n }))
    )
  }

  const archiveAndReadAll = (
    queue: string,
    receipts: ReadonlyArray<Receipt>,
    options: ReadOptions | undefined,
    unarchived: ReadonlyArray<Receipt> = []
  ) =>
    Effect.gen(function* () {
      const fair = options?.fair
      const mode = limitedMode(options)
      if (mode !== undefined) {
        // the limited claim archives the successes in its own statement (their slots free); it
        // starts at the claim cursor too, from the lowest visible id its last claim saw
        const p = yield* readParams(queue, options)
        const startedAt = yield* Clock.currentTimeMillis
        const from = floors.start(p.name.physical, startedAt)
        const claimed = yield* readLimited(
          queue,
          p.name.physical,
          p.limit,
          p.vtMs,
          options?.claimedBy ?? null,
          p.now,
          options?.onRateWait,
          splitTargets(receipts).receipts,
          { mode, from }
        )
        const at = yield* Clock.currentTimeMillis
        floors.claimed(p.name.physical, from, startedAt, at - startedAt, claimed.lo === undefined ? [] : [claimed.lo])
        return {
          archived: claimed.archived,
          messages: claimed.messages,
          more: claimed.more || claimed.messages.length >= p.limit
        }
      }
      // an ordered claim archives in its own statement, which takes the archived heads as gone
      // (their keys pass to their next messages); a fair read archives first, then claims
      if (options?.ordered === true && receipts.length > 0 && (fair === undefined || fair === false)) {
        return yield* archiveAndReadOrdered(queue, receipts, options)
      }
      if ((fair !== undefined && fair !== false) || options?.ordered === true) {
        const archived = receipts.length === 0 ? 0 : yield* archive(queue, receipts)
        const messages = yield* read(queue, options)
        return { archived, messages, more: messages.length >= (options?.limit ?? 1) }
      }
      const { name, limit, vtMs, now } = yield* readParams(queue, options)
      const startedAt = yield* Clock.currentTimeMillis
      const from = floors.start(name.physical, startedAt)
      const ended = (messages: ReadonlyArray<Message>) =>
        Effect.map(Clock.currentTimeMillis, (at) =>
          floors.claimed(
            name.physical,
            from,
            startedAt,
            at - startedAt,
            messages.map((m) => m.msgId)
          )
        )
      // on its own (not in a caller's transaction), the claim commits without waiting for the
      // WAL flush: a lease, redelivered if a crash loses it (internal/leaseCommit.ts)
      const lease = Option.isNone(yield* Effect.serviceOption(sql.transactionService))
      // another module's claim in the read (a woken step's), for the messages that go to an
      // executor at once or soon after
      const readClaim = options?.readClaim
      const atOnce = Math.max(0, readClaim?.limit ?? 0)
      const soon = Math.max(0, readClaim?.soon ?? 0)
      const claims =
        readClaim === undefined || atOnce + soon <= 0 ? undefined : readClaim.claim.ctes(queue, atOnce, soon, now)
      const handOver = (rows: ReadonlyArray<MessageRow & { readonly rc_msg_id?: bigint | null }>) => {
        if (claims === undefined || readClaim === undefined) return
        const claimed = rows.filter((row): row is ReadClaimRow => row.rc_msg_id !== null && row.rc_msg_id !== undefined)
        if (claimed.length > 0) readClaim.claim.claimed(queue, claimed)
      }
      if (receipts.length === 0) {
        const claimed = yield* statements
          .messageRead(name.physical, limit, vtMs, options?.claimedBy ?? null, now, from, lease, claims)
          .pipe(Effect.mapError(fail("read from", queue)))
        handOver(claimed)
        const messages = claimed.map((row) => toMessage(queue, row)).sort(byMsgId) as ReadonlyArray<Message>
        yield* ended(messages)
        return { archived: 0, messages, more: claimed[0]?.more === true }
      }
      const rows = yield* statements
        .messageArchiveAndRead(
          name.physical,
          splitTargets(receipts).receipts,
          limit,
          vtMs,
          options?.claimedBy ?? null,
          now,
          from,
          // an archive that is no outcome (workflow steps'): a crash that loses it makes the
          // messages visible again, as a lost claim does
          lease && options?.archiveIsLease === true,
          claims,
          unarchived.map((m) => m.msgId)
        )
        .pipe(Effect.mapError(fail("archive and read in", queue)))
      handOver(rows)
      let archived = 0
      let more = false
      const messages: Array<Message> = []
      for (const row of rows) {
        if (row.archived !== null) {
          archived = toNumber(row.archived)
          more = row.more === true
        } else messages.push(toMessage(queue, row))
      }
      yield* ended(messages)
      return { archived, messages: messages.sort(byMsgId) as ReadonlyArray<Message>, more }
    }).pipe(hotSpan("QueueStore.archiveAndRead", { queue }))

  const archiveAndReadOrdered = (queue: string, receipts: ReadonlyArray<Receipt>, options: ReadOptions) =>
    Effect.gen(function* () {
      const { name, limit, vtMs, now } = yield* readParams(queue, options)
      const rows = yield* orderStatements
        .messageArchiveAndReadOrdered(
          name.physical,
          splitTargets(receipts).receipts,
          limit,
          vtMs,
          options.claimedBy ?? null,
          now
        )
        .pipe(Effect.mapError(fail("archive and read in", queue)))
      let archived = 0
      const messages: Array<Message> = []
      for (const row of rows) {
        if (row.archived !== null) archived = toNumber(row.archived)
        else messages.push(toMessage(queue, row))
      }
      // `more` as the ordered read's: a full claim may have left heads behind
      return { archived, messages: messages.sort(byMsgId) as ReadonlyArray<Message>, more: messages.length >= limit }
    })

  const readFair = (
    queue: string,
    physical: string,
    limit: number,
    vtMs: number,
    claimedBy: string | null,
    fair: true | FairCursor,
    now: Date | null
  ) =>
    Effect.gen(function* () {
      const cursor = fair === true ? new FairCursor() : fair
      const rows = yield* statements
        .messageReadFair(physical, limit, vtMs, claimedBy, cursor.snapshot(), now)
        .pipe(Effect.mapError(fail("read from", queue)))
      // claim order: by start tag, ties to the oldest (the executors take them in this order)
      const ordered = [...rows].sort(byStart)
      cursor.advance(ordered.map(claimOf), rows.length < limit)
      return ordered.map((row) => toMessage(queue, row)) as ReadonlyArray<Message>
    })

  const readWithPoll = (queue: string, options: PollOptions) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const maxWaitMs = yield* durationMs(queue, options.maxWait, 0, "maxWait")
      const pollMs = yield* durationMs(
        queue,
        options.pollInterval,
        Duration.toMillis(config.pollingInterval),
        "pollInterval"
      )
      // subscribe before the first read, so a send committed in between still wakes us
      const wakeups = yield* notifier.subscribe([name.physical])
      const deadline = (yield* Clock.currentTimeMillis) + maxWaitMs
      while (true) {
        const messages = yield* read(queue, options)
        if (messages.length > 0) return messages
        const remaining = deadline - (yield* Clock.currentTimeMillis)
        if (remaining <= 0) return messages
        const status = yield* notifier.status
        const wait = Duration.min(Duration.millis(remaining), pollDelay(status, Duration.millis(pollMs)))
        yield* wakeups.await(wait)
      }
    }).pipe(Effect.scoped, Effect.withSpan("QueueStore.readWithPoll"))

  return { read, archiveAndRead, readWithPoll }
}
