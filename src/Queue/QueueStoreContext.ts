/**
 * What every part of the queue store shares: its statements, the checked queue name (cached),
 * how a database error becomes a queue error, input checks, and the mapping of rows to messages.
 *
 * @since 0.1.0
 */

import { Duration, Effect, Option, Schema } from "effect"
import type { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import type { PgBusConfigShape } from "../Config.ts"
import { serverError, toDatabaseError } from "../Database.ts"
import * as Input from "../Input.ts"
import * as ClaimCursor from "./ClaimCursor.ts"
import type { FairClaim } from "./FairShare.ts"
import type { Message } from "./Message.ts"
import { DeadLetterBlock, FailureRecord } from "./Message.ts"
import type { Notifier } from "./Notifier.ts"
import { InvalidMessage, type QueueError, QueueNotFound } from "./QueueError.ts"
import * as QueueName from "./QueueName.ts"
import { makeQueueOrderSql } from "./QueueOrderSql.ts"
import type { ClaimedMessageRow, FairMessageRow, MessageRow, ReceiptParams } from "./QueueRows.ts"
import { makeQueueSql } from "./QueueSql.ts"
import type { Target } from "./QueueStore.ts"

/** A count from the driver (bigint or number) as a number. */
export const toNumber = (n: bigint | number): number => Number(n)

/** Whether a value is a plain JSON object (not null, not an array). */
export const isObject = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

const decodeFailure = Schema.decodeUnknownOption(FailureRecord)
/** The dead-letter block of a message's headers, if it has a valid one. */
export const decodeDeadLetter = Schema.decodeUnknownOption(DeadLetterBlock)

/** A message row of `queue` as the `Message` handlers and callers see. */
export const toMessage = (queue: string, row: MessageRow): Message => ({
  queue,
  msgId: row.msg_id,
  readCt: row.read_ct,
  enqueuedAt: row.enqueued_at,
  vt: row.vt,
  message: row.message,
  headers: isObject(row.headers) ? row.headers : {},
  lastError: row.last_error === null ? undefined : Option.getOrUndefined(decodeFailure(row.last_error))
})

/** The message a combined statement claimed (its `claimed_*` columns), if it claimed one. */
export const claimedMessage = (queue: string, row: ClaimedMessageRow): Message | undefined =>
  row.claimed_msg_id === null || row.claimed_msg_id === undefined
    ? undefined
    : toMessage(queue, {
        msg_id: row.claimed_msg_id,
        read_ct: row.claimed_read_ct ?? 1,
        enqueued_at: row.claimed_enqueued_at ?? new Date(0),
        vt: row.claimed_vt ?? new Date(0),
        message: row.claimed_message,
        headers: row.claimed_headers,
        last_error: null
      })

/** Orders messages by id (oldest first). */
export const byMsgId = (a: Message, b: Message) => (a.msgId < b.msgId ? -1 : a.msgId > b.msgId ? 1 : 0)

/** Orders fair-share rows by virtual start, then by id. */
export const byStart = (a: FairMessageRow, b: FairMessageRow) =>
  a.fair_start !== b.fair_start ? a.fair_start - b.fair_start : a.msg_id < b.msg_id ? -1 : a.msg_id > b.msg_id ? 1 : 0

/** The fair-share claim of a row: its key, weight and virtual start. */
export const claimOf = (row: FairMessageRow): FairClaim => ({
  key: row.fair_key,
  weight: row.fair_weight,
  start: row.fair_start
})

/** Splits targets into receipts (id and read count, checked against the lease) and bare ids. */
export const splitTargets = (targets: ReadonlyArray<Target>): { receipts: ReceiptParams; ids: Array<bigint> } => {
  const ids: Array<bigint> = []
  const receiptIds: Array<bigint> = []
  const readCounts: Array<number> = []
  for (const t of targets) {
    if (typeof t === "bigint") ids.push(t)
    else {
      receiptIds.push(t.msgId)
      readCounts.push(t.readCt)
    }
  }
  return { receipts: { ids: receiptIds, readCounts }, ids }
}

/** Builds the shared context of one queue store. */
export const makeQueueStoreContext = (
  config: PgBusConfigShape,
  sql: SqlClient.SqlClient,
  notifier: Notifier["Service"]
) => {
  const statements = makeQueueSql(sql, config.schema, notifier.channel)
  const orderStatements = makeQueueOrderSql(sql, config.schema)
  const prefix = config.queuePrefix
  const defaultVisibilityMs = Duration.toMillis(config.visibilityTimeout)

  const validNames = new Map<string, Effect.Effect<QueueName.QueueName>>()
  const validateName = (queue: string): Effect.Effect<QueueName.QueueName, QueueError> => {
    const known = validNames.get(queue)
    if (known) return known
    return QueueName.validate(queue, prefix).pipe(
      Effect.tap((name) => Effect.sync(() => validNames.size < 10_000 && validNames.set(queue, Effect.succeed(name))))
    )
  }

  const fail =
    (operation: string, queue: string) =>
    (error: SqlError): QueueError => {
      const server = serverError(error)
      if (server.code === "42P01" && !server.message.includes(`"${config.schema}.queues"`)) {
        return new QueueNotFound({ queue })
      }
      return toDatabaseError(`${operation} ${queue}`)(error)
    }

  const durationMs = (queue: string, input: Duration.Input | undefined, fallback: number, what: string) => {
    if (input === undefined) return Effect.succeed(fallback)
    const ms = Input.durationMillis(input)
    return ms === undefined
      ? Effect.fail(new InvalidMessage({ queue, reason: `${what} must be a finite, non-negative duration` }))
      : Effect.succeed(ms)
  }

  // where each plain claim of this store starts, and the rows this process made due below it (ClaimCursor)
  const floors = ClaimCursor.make()
  /** Notes rows this process made claimable again at `atMs` (a retry, a snooze, a give-back) for the next claim. */
  const noteDue = (physical: string, ids: ReadonlyArray<bigint>, atMs: number) => floors.due(physical, ids, atMs)

  /** Fails with InvalidMessage when `problem` names one. */
  const refuse = (queue: string, problem: string | undefined) =>
    problem === undefined ? Effect.void : Effect.fail(new InvalidMessage({ queue, reason: problem }))

  return {
    config,
    sql,
    notifier,
    statements,
    orderStatements,
    prefix,
    defaultVisibilityMs,
    validateName,
    fail,
    durationMs,
    refuse,
    floors,
    noteDue
  }
}

/** The shared context of one queue store. */
export type QueueStoreContext = ReturnType<typeof makeQueueStoreContext>
