/**
 * The queue store's flow controls: the limited claim (concurrency limits and rate buckets, see
 * `QueueLimitSql.messageReadLimited`), jobs' rates set at run time, waking a queue's readers, and
 * which messages are still in a queue. Part of the queue store (`QueueStore.ts` builds it with
 * its statements), in a module of its own.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"
import { isSqlError, type SqlError } from "effect/sql/SqlError"
import { statementNow, withTransaction } from "../Database.ts"
import type { Message } from "./Message.ts"
import { InvalidMessage, type QueueError } from "./QueueError.ts"
import type { LimitedClaimMode } from "./QueueLimitSql.ts"
import type * as QueueName from "./QueueName.ts"
import type { MessageRow, RateOverrideRow, ReceiptParams } from "./QueueRows.ts"
import type { QueueSql } from "./QueueSql.ts"

/** A job's rate set at run time. */
export interface RateOverride {
  readonly job: string
  readonly limit: number
  readonly periodMs: number
  readonly actor: string
  readonly reason: string | undefined
  readonly updatedAt: Date
}

/** A limited claim's outcome: its messages, the successes it archived, and its summary (see `messageReadLimited`). */
export interface LimitedClaim {
  readonly messages: ReadonlyArray<Message>
  readonly archived: number
  /** Admissible messages were left behind, or a key reached its limit within the claim. */
  readonly more: boolean
  /** The lowest visible id from the claim's start on (its cursor's next floor). */
  readonly lo: bigint | undefined
}

/** What the controls need of the queue store. */
export interface QueueControlsDeps {
  readonly sql: SqlClient.SqlClient
  readonly statements: QueueSql
  readonly validateName: (queue: string) => Effect.Effect<QueueName.QueueName, QueueError>
  readonly fail: (operation: string, queue: string) => (error: SqlError) => QueueError
  readonly toMessage: (queue: string, row: MessageRow) => Message
  /** The shortest slot lease a limited job's own `duration` gets (SlotLease.ts). */
  readonly leaseFloorMs: number
}

const byMsgId = (a: Message, b: Message) => (a.msgId < b.msgId ? -1 : a.msgId > b.msgId ? 1 : 0)

const toOverride = (row: RateOverrideRow): RateOverride => ({
  job: row.job,
  limit: row.rate_limit,
  periodMs: row.period_ms,
  actor: row.actor,
  reason: row.reason ?? undefined,
  updatedAt: row.updated_at
})

/** Builds the controls on the queue store's statements. */
export const makeQueueControls = ({
  sql,
  statements,
  validateName,
  fail,
  toMessage,
  leaseFloorMs
}: QueueControlsDeps) => {
  // The limited claim is one statement: it takes the queue's limits lock itself and counts the
  // running messages of each key in a snapshot taken once the lock is held (QueueLimitSql.ts).
  const readLimited = (
    queue: string,
    physical: string,
    limit: number,
    vtMs: number,
    claimedBy: string | null,
    now: Date | null,
    onRateWait: ((ms: number) => void) | undefined,
    receipts?: ReceiptParams | undefined,
    options: { readonly mode?: LimitedClaimMode | undefined; readonly from?: bigint | undefined } = {}
  ): Effect.Effect<LimitedClaim, QueueError> =>
    statements.messageReadLimited(physical, limit, vtMs, leaseFloorMs, claimedBy, now, receipts, options).pipe(
      Effect.mapError(fail("read from", queue)),
      Effect.map((rows) => {
        const messages: Array<Message> = []
        let archived = 0
        let more = false
        let lo: bigint | undefined
        for (const row of rows) {
          if (row.msg_id !== null) messages.push(toMessage(queue, row))
          else {
            archived = Number(row.archived ?? 0)
            more = row.more === true
            lo = row.lo ?? undefined
            if (row.wait_ms !== null && onRateWait !== undefined) onRateWait(Math.max(1, Math.ceil(row.wait_ms)))
          }
        }
        return { messages: messages.sort(byMsgId) as ReadonlyArray<Message>, archived, more, lo }
      })
    )

  /** Sets or clears a job's run-time rate (see `QueueStore.setRate`). */
  const setRate = (
    job: string,
    rate: { readonly limit: number; readonly periodMs: number } | undefined,
    change: { readonly actor: string; readonly reason?: string | undefined }
  ): Effect.Effect<RateOverride | undefined, QueueError> =>
    Effect.gen(function* () {
      if (rate !== undefined) {
        if (!Number.isInteger(rate.limit) || rate.limit < 1 || rate.limit > 1_000_000_000) {
          return yield* new InvalidMessage({ queue: job, reason: "a rate's limit must be a positive integer" })
        }
        if (!Number.isFinite(rate.periodMs) || rate.periodMs < 1) {
          return yield* new InvalidMessage({ queue: job, reason: "a rate's period must be at least 1 millisecond" })
        }
      }
      const now = yield* statementNow
      const rows = yield* (
        rate === undefined
          ? statements.rateOverrideClear(job)
          : statements.rateOverrideSet(job, rate.limit, rate.periodMs, change.actor, change.reason ?? null, now)
      ).pipe(Effect.mapError(fail("set the rate of job", job)))
      return rows[0] === undefined ? undefined : toOverride(rows[0])
    })

  const rateOverrides: Effect.Effect<ReadonlyArray<RateOverride>, QueueError> = statements.rateOverrideList().pipe(
    Effect.map((rows) => rows.map(toOverride)),
    Effect.mapError(fail("list rates", "*"))
  )

  /** Wakes a queue's readers, as a send does. */
  const wake = (queue: string): Effect.Effect<void, QueueError> =>
    Effect.flatMap(validateName(queue), (name) =>
      statements.queueWake(name.physical).pipe(Effect.asVoid, Effect.mapError(fail("wake", queue)))
    )

  /** Which of `ids` are still in the queue. */
  const present = (queue: string, ids: ReadonlyArray<bigint>): Effect.Effect<ReadonlySet<bigint>, QueueError> =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      if (ids.length === 0) return new Set<bigint>() as ReadonlySet<bigint>
      const rows = yield* statements
        .messageIdsPresent(name.physical, ids)
        .pipe(Effect.mapError(fail("look up messages in", queue)))
      return new Set(rows.map((r) => r.msg_id)) as ReadonlySet<bigint>
    })

  /**
   * Runs `effect` in a transaction holding the queue's limits lock (the one limited claims take):
   * an enqueue-time check of a concurrency limit and the send it admits are then one step.
   */
  const withLimitLock = <A, E, R>(queue: string, effect: Effect.Effect<A, E, R>) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      return yield* withTransaction(sql, Effect.andThen(statements.queueLockLimits(name.physical), effect)).pipe(
        Effect.mapError((error): E | QueueError =>
          isSqlError(error) ? fail("lock the limits of", queue)(error) : error
        )
      )
    })

  /** The unfinished messages of each key (and the oldest's id) in a queue. */
  const limitCounts = (queue: string, keys: ReadonlyArray<string>) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const rows = yield* statements
        .messageLimitCounts(name.physical, keys)
        .pipe(Effect.mapError(fail("count the limited jobs of", queue)))
      return new Map(rows.map((r) => [r.key, { n: Number(r.n), first: r.first }]))
    })

  return { readLimited, setRate, rateOverrides, wake, present, withLimitLock, limitCounts }
}
