/**
 * Batch membership as the job layer sees it: the headers a member's message carries, the
 * reference `batch.enqueue` sets so that the jobs enqueued inside it join, and the outcomes
 * the completer reports. The port batches plug into: the job client and the completer depend
 * on this module only, and the batch service (above the job layer) implements it.
 *
 * @since 0.1.0
 */
import { Context, type Effect } from "effect"
import type { QueueError } from "../Queue/QueueError.ts"
import type { BatchEntry } from "../Queue/QueueStore.ts"
import type { BatchJoinError } from "./JobError.ts"

/** Header naming the batch a member's message belongs to. */
export const BATCH_ID_HEADER = "pgbus_batch_id"

/** Header naming the member's execution row (its id, as text). */
export const BATCH_EXECUTION_HEADER = "pgbus_batch_execution"

/** The batch jobs join while `batch.enqueue(effect)` runs `effect`. */
export interface BatchMembership {
  readonly batchId: string
  /** Joins the messages to the batch (guarded on an unfinished batch), then sends them; their ids in order. */
  readonly send: (
    queue: string,
    entries: ReadonlyArray<BatchEntry>
  ) => Effect.Effect<ReadonlyArray<bigint>, QueueError | BatchJoinError>
}

/**
 * The batch that jobs enqueued now join; unset outside `batch.enqueue`. A reference rather
 * than a service so that every enqueue can read it without a requirement.
 *
 * @category references
 */
export const CurrentBatch = Context.Reference<BatchMembership | undefined>("effect-pgbus/CurrentBatch", {
  defaultValue: () => undefined
})

/** A member's terminal outcome, reported by the completer after its archive or dead-letter. */
export interface MemberOutcome {
  readonly batchId: string
  readonly execution: bigint
  readonly outcome: "completed" | "failed"
}

/** The batch member a message's headers name, if any. */
export const memberOf = (
  headers: Readonly<Record<string, unknown>>
): { readonly batchId: string; readonly execution: bigint } | undefined => {
  const batchId = headers[BATCH_ID_HEADER]
  const execution = headers[BATCH_EXECUTION_HEADER]
  if (typeof batchId !== "string" || typeof execution !== "string" || !/^\d{1,19}$/.test(execution)) return undefined
  return { batchId, execution: BigInt(execution) }
}

/** The outcomes to report for messages that ended the same way (empty for messages of no batch). */
export const outcomesOf = (
  messages: Iterable<{ readonly headers: Readonly<Record<string, unknown>> }>,
  outcome: MemberOutcome["outcome"]
): Array<MemberOutcome> => {
  const out: Array<MemberOutcome> = []
  for (const m of messages) {
    // the cheap test first: most messages belong to no batch
    if (m.headers[BATCH_ID_HEADER] === undefined) continue
    const member = memberOf(m.headers)
    if (member !== undefined) out.push({ ...member, outcome })
  }
  return out
}
