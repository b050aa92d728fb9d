/**
 * The errors of the queue store, each raised before any SQL runs unless it says otherwise.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { DatabaseError } from "../Database.ts"

/**
 * A queue name broke the naming rule (lowercase letters, digits and underscores, starting
 * with a letter, bounded length). Raised before any SQL, since names become table names.
 *
 * @category errors
 */
export class InvalidQueueName extends Schema.TaggedError<InvalidQueueName>()("InvalidQueueName", {
  name: Schema.String,
  rule: Schema.String
}) {
  override get message(): string {
    return `invalid queue name ${JSON.stringify(this.name.length > 80 ? `${this.name.slice(0, 80)}…` : this.name)}: ${this.rule}`
  }
}

/**
 * The queue's tables do not exist (never created, or dropped).
 *
 * @category errors
 */
export class QueueNotFound extends Schema.TaggedError<QueueNotFound>()("QueueNotFound", {
  queue: Schema.String
}) {
  override get message(): string {
    return `queue ${this.queue} does not exist`
  }
}

/**
 * A payload's JSON text is larger than `maxPayloadSize`. Nothing was written.
 *
 * @category errors
 */
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", {
  queue: Schema.String,
  size: Schema.Number,
  limit: Schema.Number
}) {
  override get message(): string {
    return `payload of ${this.size} bytes for queue ${this.queue} exceeds the limit of ${this.limit} bytes`
  }
}

/**
 * A message, its headers or a send option cannot be stored (not JSON, headers not an object,
 * a negative or non-finite delay, an invalid date). Nothing was written.
 *
 * @category errors
 */
export class InvalidMessage extends Schema.TaggedError<InvalidMessage>()("InvalidMessage", {
  queue: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid message for queue ${this.queue}: ${this.reason}`
  }
}

/** Every error the queue store can fail with. */
export type QueueError = InvalidQueueName | QueueNotFound | PayloadTooLarge | InvalidMessage | DatabaseError

export { DatabaseError }
