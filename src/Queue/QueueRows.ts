/**
 * The rows and parameters of the queue statements (`QueueSql.ts` and its families).
 *
 * @since 0.1.0
 */
import type { Effect } from "effect"
import type { Statement } from "effect/sql"
import type { Message } from "./Message.ts"

/** A message row as stored. */
export interface MessageRow {
  readonly msg_id: bigint
  readonly read_ct: number
  readonly enqueued_at: Date
  readonly vt: Date
  readonly message: unknown
  readonly headers: unknown
  readonly last_error: unknown
}

/**
 * Builds CTEs that insert messages into a queue from another module's statement
 * (`messageSendCtes`; see there for `claim` and `claimed`).
 */
export type MessageCtes = (
  physical: string,
  name: string,
  rows: Statement.Fragment,
  now: Date | null,
  claim?: { readonly claimedBy: string; readonly visibilityMs: number }
) => {
  readonly ctes: Statement.Fragment
  readonly notifyRef: Statement.Fragment
  readonly claimed: Statement.Fragment
}

/**
 * A claim another module makes in a worker's plain read, in the read's own statement, for some
 * of the messages it delivers (a workflow step's claim, for the step messages of the workflows
 * the process runs). Its CTEs come after the read's `u` (the claimed messages: `msg_id`,
 * `read_ct`, `message`) and end in `rc`: one row per message claimed for, `rc_msg_id` its id,
 * its other columns returned on that message's row (no column named as a message row's).
 */
export interface ReadClaim {
  /**
   * The CTEs for a read of `queue` (the name its messages carry) claiming for its first `limit`
   * messages (an executor takes them at once) and, of the `soon` after them (they wait briefly
   * in the worker's buffer), for those the claim allows to wait.
   */
  readonly ctes: (queue: string, limit: number, soon: number, now: Date | null) => Statement.Fragment
  /** Whether the read could have claimed for this message it delivered (a first delivery of a kind it claims). */
  readonly claimable: (message: Message) => boolean
  /** Takes the claims a read made (its rows with `rc_msg_id` set), right after the read. */
  readonly claimed: (queue: string, rows: ReadonlyArray<ReadClaimRow>) => void
  /**
   * Releases what reads claimed for these messages, which go back unrun (a drain gives them back,
   * or the read's reply was lost): their next delivery must not find a claim it did not make.
   * `taken`: only the claims `claimed` took (a drain's; a lost reply's were never taken).
   */
  readonly release: (messages: ReadonlyArray<Message>, taken: boolean) => Effect.Effect<void>
}

/** A read's row with what a `ReadClaim` claimed for its message (`rc_msg_id` null: nothing). */
export interface ReadClaimRow extends MessageRow {
  readonly rc_msg_id: bigint | null
}

/** A message inserted claimed by `messageSendCtes` (its `claimed` columns; all null when none was sent). */
export interface ClaimedMessageRow {
  readonly claimed_msg_id: bigint | null
  readonly claimed_read_ct?: number | null
  readonly claimed_enqueued_at?: Date | null
  readonly claimed_vt?: Date | null
  readonly claimed_message?: unknown
  readonly claimed_headers?: unknown
}

/** An archived row. */
export interface ArchivedRow {
  readonly msg_id: bigint
  readonly read_ct: number
  readonly enqueued_at: Date
  readonly archived_at: Date
  readonly message: unknown
  readonly headers: unknown
}

/** A message row of the fair read, with its key, weight and start tag (see `FairShare.ts`). */
export interface FairMessageRow extends MessageRow {
  readonly fair_key: string
  readonly fair_weight: number
  readonly fair_start: number
}

/** A fair index's catalog state: whether it is valid, and whether a build of it is running now. */
export interface IndexStateRow {
  readonly valid: boolean
  readonly building: boolean
}

/** A job's rate set at run time. */
export interface RateOverrideRow {
  readonly job: string
  readonly rate_limit: number
  readonly period_ms: number
  readonly actor: string
  readonly reason: string | null
  readonly updated_at: Date
}

/** A queue of the registry. */
export interface QueueRow {
  readonly name: string
  readonly dead_letter_of: string | null
  readonly created_at: Date
}

/** A queue's figures. */
export interface MetricsRow {
  readonly depth: bigint
  readonly visible: bigint
  readonly oldest_age_ms: number | null
  readonly oldest_visible_age_ms: number | null
  readonly archive_size: bigint
}

/** A (msg_id, read_ct) pair: the receipt that guards acknowledgements. */
export interface ReceiptParams {
  readonly ids: ReadonlyArray<bigint>
  readonly readCounts: ReadonlyArray<number>
}

/** One message to insert, its JSON already encoded (its size was checked on that text). */
export interface EncodedMessage {
  readonly message: string
  readonly headers: string | null
  readonly delayMs: number
  readonly at: Date | null
}
