/**
 * The errors of streams. Each is raised before anything is written or sent unless it says
 * otherwise; the SSE endpoint answers them with 400 or 403, never with a stack.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { DatabaseError } from "../Database.ts"

const excerpt = (s: string): string => JSON.stringify(s.length > 80 ? `${s.slice(0, 80)}…` : s)

/**
 * A stream name broke the rule: 1 to 200 printable ASCII characters, no spaces.
 *
 * @category errors
 */
export class InvalidStreamName extends Schema.TaggedError<InvalidStreamName>()("InvalidStreamName", {
  name: Schema.String,
  rule: Schema.String
}) {
  override get message(): string {
    return `invalid stream name ${excerpt(this.name)}: ${this.rule}`
  }
}

/**
 * A broadcast cannot be sent: its payload does not encode with its Schema or is not JSON, or an
 * option is invalid (an event name, an exclude id, a coalesce window without a target, an
 * unknown audience filter). Nothing was sent.
 *
 * @category errors
 */
export class InvalidBroadcast extends Schema.TaggedError<InvalidBroadcast>()("InvalidBroadcast", {
  stream: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid broadcast to ${excerpt(this.stream)}: ${this.reason}`
  }
}

/**
 * A broadcast's JSON is larger than its limit: the queue's `maxPayloadSize` for a durable one,
 * what a NOTIFY carries for an ephemeral one. Nothing was sent.
 *
 * @category errors
 */
export class BroadcastTooLarge extends Schema.TaggedError<BroadcastTooLarge>()("BroadcastTooLarge", {
  stream: Schema.String,
  size: Schema.Number,
  limit: Schema.Number
}) {
  override get message(): string {
    return `broadcast of ${this.size} bytes to ${excerpt(this.stream)} exceeds the limit of ${this.limit} bytes`
  }
}

/**
 * A signed stream name is not one this app signed with any of its secrets (unsigned, tampered,
 * or signed with a secret since retired). The endpoint answers 403.
 *
 * @category errors
 */
export class InvalidSignature extends Schema.TaggedError<InvalidSignature>()("InvalidSignature", {
  signed: Schema.String
}) {
  override get message(): string {
    return `stream name ${excerpt(this.signed)} is not signed by this app`
  }
}

/**
 * A presence call's input is invalid (an empty member id, metadata that is not a JSON object).
 * Nothing was written.
 *
 * @category errors
 */
export class InvalidPresence extends Schema.TaggedError<InvalidPresence>()("InvalidPresence", {
  stream: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid presence call on ${excerpt(this.stream)}: ${this.reason}`
  }
}

/** Every error a broadcast can fail with. */
export type BroadcastError = InvalidStreamName | InvalidBroadcast | BroadcastTooLarge | DatabaseError

/** Every error a presence call can fail with. */
export type PresenceError = InvalidStreamName | InvalidPresence | DatabaseError

export { DatabaseError }
