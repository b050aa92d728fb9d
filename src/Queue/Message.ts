/**
 * Messages as the queue store hands them out, the receipt that guards acknowledgements, the
 * failure record kept on a message, and the `pgbus_dead_letter` header block.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/** Header key of the dead-letter block. */
export const DEAD_LETTER_HEADER = "pgbus_dead_letter"

/** Header key counting trips out of a dead-letter queue. */
export const DLQ_RETRIES_HEADER = "pgbus_dlq_retries"

/**
 * Identifies one delivery of a message: its id and the `read_ct` of the read that claimed it.
 * Acknowledgements carry it, so that an ack landing after the message was delivered again
 * (its visibility lapsed, or a dead process's claims were released) changes nothing.
 *
 * @category models
 */
export interface Receipt {
  readonly msgId: bigint
  readonly readCt: number
}

/**
 * The last failure recorded on a message, in the shape the dead-letter block names it.
 *
 * @category models
 */
export const FailureRecord = Schema.Struct({
  error_class: Schema.String,
  error_message: Schema.String,
  backtrace: Schema.optionalKey(Schema.String),
  error_attempt: Schema.Number,
  error_recorded_at: Schema.optionalKey(Schema.String)
})
export type FailureRecord = typeof FailureRecord.Type

/**
 * Why a message died: the block written under `pgbus_dead_letter` in the DLQ copy's headers.
 *
 * @category models
 */
export const DeadLetterBlock = Schema.Struct({
  version: Schema.Number,
  reason: Schema.String,
  source: Schema.String,
  source_queue: Schema.String,
  /** The message's id in its source queue (written since 0.2: a job's result lookup finds its dead letter by it). */
  source_msg_id: Schema.optionalKey(Schema.Number),
  attempts: Schema.Number,
  max_retries: Schema.Number,
  dead_lettered_at: Schema.String,
  retries_from_dlq: Schema.optionalKey(Schema.Number),
  error_class: Schema.optionalKey(Schema.String),
  error_message: Schema.optionalKey(Schema.String),
  backtrace: Schema.optionalKey(Schema.String),
  error_attempt: Schema.optionalKey(Schema.Number),
  error_recorded_at: Schema.optionalKey(Schema.String)
})
export type DeadLetterBlock = typeof DeadLetterBlock.Type

/**
 * Reasons a message is dead-lettered: its retries were used up, an operator moved it, or its
 * read count reached `READ_COUNT_LIMIT` (no further delivery could be counted).
 */
export type DeadLetterReason = "max_retries_exceeded" | "manual" | "read_count_limit"

/** The highest read count a message can carry (`read_ct` is an int4): a claim stops counting there. */
export const READ_COUNT_LIMIT = 2_147_483_647

/** Which process moved a message to its DLQ. */
export type DeadLetterSource = "worker" | "consumer" | "operator"

/**
 * A message as read from a queue.
 *
 * @category models
 */
export interface Message {
  /** The queue's app-facing name. */
  readonly queue: string
  readonly msgId: bigint
  /** Deliveries so far, this one included. */
  readonly readCt: number
  readonly enqueuedAt: Date
  /** When the message becomes visible again if not acknowledged. */
  readonly vt: Date
  /** The payload, as stored (JSON). */
  readonly message: unknown
  /** Headers (an object; empty when the message carries none). */
  readonly headers: Readonly<Record<string, unknown>>
  /** The failure recorded by the previous delivery, if any. */
  readonly lastError: FailureRecord | undefined
}

/** The receipt of a message's delivery. */
export const receiptOf = (message: Pick<Message, "msgId" | "readCt">): Receipt => ({
  msgId: message.msgId,
  readCt: message.readCt
})

const MAX_ERROR_MESSAGE = 1_000
const MAX_BACKTRACE_LINES = 10
const MAX_BACKTRACE_CHARS = 2_000

/** A failure to record: the class (an error's `_tag` or name), its message and stack. */
export interface Failure {
  readonly errorClass: string
  readonly message: string
  readonly stack?: string | undefined
  readonly attempt: number
}

/** Encodes a failure as stored, with the seed's caps (message 1,000 chars; 10 stack lines, 2,000 chars). */
export const encodeFailure = (failure: Failure): FailureRecord => {
  const lines = failure.stack?.split("\n").slice(0, MAX_BACKTRACE_LINES).join("\n").slice(0, MAX_BACKTRACE_CHARS)
  return {
    error_class: failure.errorClass.slice(0, 200),
    error_message: failure.message.slice(0, MAX_ERROR_MESSAGE),
    ...(lines ? { backtrace: lines } : {}),
    error_attempt: failure.attempt
  }
}
