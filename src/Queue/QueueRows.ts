/**
 * The rows and parameters of the queue statements (`QueueSql.ts` and its families).
 *
 * @since 0.1.0
 */
import type { Statement } from "effect/sql"

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
