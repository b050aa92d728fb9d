/**
 * The errors of jobs: defining, enqueueing (joining a batch included) and running them.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import type { InvalidFairShare } from "../Queue/FairShare.ts"
import type { QueueError } from "../Queue/QueueError.ts"

export { InvalidFairShare } from "../Queue/FairShare.ts"

/**
 * A job definition is invalid (bad name, bad queue, bad retry policy). Raised where the job is
 * defined or registered, never at run time.
 *
 * @category errors
 */
export class InvalidJobDefinition extends Schema.TaggedError<InvalidJobDefinition>()("InvalidJobDefinition", {
  job: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid job ${this.job}: ${this.reason}`
  }
}

/**
 * A payload does not encode with the job's Schema. Nothing was written.
 *
 * @category errors
 */
export class InvalidPayload extends Schema.TaggedError<InvalidPayload>()("InvalidPayload", {
  job: Schema.String,
  issue: Schema.String
}) {
  override get message(): string {
    return `invalid payload for job ${this.job}: ${this.issue}`
  }
}

/**
 * A message names a job this process has not registered (recorded as the failure of the
 * delivery; the message is retried and then dead-lettered).
 *
 * @category errors
 */
export class UnknownJob extends Schema.TaggedError<UnknownJob>()("UnknownJob", {
  job: Schema.String,
  queue: Schema.String
}) {
  override get message(): string {
    return `no job named ${this.job} is registered in this process (queue ${this.queue})`
  }
}

/**
 * A message's payload no longer decodes with its job's Schema, or the message is not a job
 * envelope at all (recorded as the failure of the delivery).
 *
 * @category errors
 */
export class PayloadDecodeError extends Schema.TaggedError<PayloadDecodeError>()("PayloadDecodeError", {
  job: Schema.String,
  issue: Schema.String
}) {
  override get message(): string {
    return `payload of job ${this.job} does not decode: ${this.issue}`
  }
}

/**
 * A job ran longer than its timeout.
 *
 * @category errors
 */
export class JobTimeout extends Schema.TaggedError<JobTimeout>()("JobTimeout", {
  job: Schema.String,
  timeoutMs: Schema.Number
}) {
  override get message(): string {
    return `job ${this.job} timed out after ${this.timeoutMs} ms`
  }
}

/**
 * The batch has finished: nothing more can join it. Raised by `batch.enqueue` (and by a job
 * enqueue inside it) before any message is sent, even through a handle taken while the batch
 * was still pending.
 *
 * @category errors
 */
export class AlreadyFinished extends Schema.TaggedError<AlreadyFinished>()("AlreadyFinished", {
  batchId: Schema.String
}) {
  override get message(): string {
    return `batch ${this.batchId} has already finished: no job can join it`
  }
}

/**
 * No batch has this id (never made, made in a transaction that rolled back, or deleted after
 * the retention).
 *
 * @category errors
 */
export class BatchNotFound extends Schema.TaggedError<BatchNotFound>()("BatchNotFound", {
  batchId: Schema.String
}) {
  override get message(): string {
    return `no batch ${JSON.stringify(this.batchId.slice(0, 80))}`
  }
}

/**
 * A job with this uniqueness key already exists (the `reject` policy). `holder` is the holding
 * job's id (`<queue>:<msgId>`), empty when it ended between the conflict and the look-up.
 * Nothing was written.
 *
 * @category errors
 */
export class DuplicateJob extends Schema.TaggedError<DuplicateJob>()("DuplicateJob", {
  job: Schema.String,
  key: Schema.String,
  holder: Schema.String
}) {
  override get message(): string {
    return `job ${this.job} with key ${JSON.stringify(this.key.slice(0, 80))} already exists${this.holder === "" ? "" : ` (${this.holder})`}`
  }
}

/**
 * A uniqueness key could not be made: the job's key function threw or returned something other
 * than a non-empty string of at most 255 characters, no key was given, or the enqueue is inside
 * `batch.enqueue`. Nothing was written.
 *
 * @category errors
 */
export class InvalidUniqueKey extends Schema.TaggedError<InvalidUniqueKey>()("InvalidUniqueKey", {
  job: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid uniqueness key for job ${this.job}: ${this.reason}`
  }
}

/**
 * A concurrency or rate limit's key could not be made: the job's key function threw or returned
 * something other than a non-empty string of at most 255 characters. Nothing was written.
 *
 * @category errors
 */
export class InvalidLimitKey extends Schema.TaggedError<InvalidLimitKey>()("InvalidLimitKey", {
  job: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid concurrency key for job ${this.job}: ${this.reason}`
  }
}

/**
 * A debounced job's key could not be made (its key function threw or gave a bad key), or the
 * enqueue asked for what debounce decides (a delay, a time, a batch). Nothing was written.
 *
 * @category errors
 */
export class InvalidDebounceKey extends Schema.TaggedError<InvalidDebounceKey>()("InvalidDebounceKey", {
  job: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid debounce for job ${this.job}: ${this.reason}`
  }
}

/**
 * A job's concurrency key already has as many unfinished jobs as its limit allows
 * (`limit.onConflict: "raise"`). Nothing was written.
 *
 * @category errors
 */
export class ConcurrencyLimitExceeded extends Schema.TaggedError<ConcurrencyLimitExceeded>()(
  "ConcurrencyLimitExceeded",
  { job: Schema.String, key: Schema.String, limit: Schema.Number }
) {
  override get message(): string {
    return `job ${this.job}: key ${JSON.stringify(this.key.slice(0, 80))} already has ${this.limit} unfinished job(s)`
  }
}

/** Why a job could not join a batch. */
export type BatchJoinError = AlreadyFinished | BatchNotFound

/**
 * Errors of an enqueue (a batch's only inside `batch.enqueue`; `InvalidFairShare` only with a
 * `fairShare` resolver; `DuplicateJob` and `InvalidUniqueKey` only for a unique job, `InvalidLimitKey` for a limited one).
 */
export type EnqueueError =
  | InvalidPayload
  | InvalidFairShare
  | QueueError
  | BatchJoinError
  | DuplicateJob
  | InvalidUniqueKey
  | InvalidLimitKey
  | InvalidDebounceKey
  | ConcurrencyLimitExceeded
/**
 * A job's handler returned a value that its `success` Schema does not encode, or whose encoded
 * form is over the payload limit (`maxPayloadSize`). Recorded as the failure of the delivery.
 *
 * @category errors
 */
export class InvalidResult extends Schema.TaggedError<InvalidResult>()("InvalidResult", {
  job: Schema.String,
  issue: Schema.String
}) {
  override get message(): string {
    return `the result of job ${this.job} cannot be kept: ${this.issue}`
  }
}

/**
 * The awaited job was dead-lettered: its last failure, as recorded in the dead-letter block.
 *
 * @category errors
 */
export class JobDeadLettered extends Schema.TaggedError<JobDeadLettered>()("JobDeadLettered", {
  job: Schema.String,
  id: Schema.String,
  attempts: Schema.optional(Schema.Number),
  errorClass: Schema.optional(Schema.String),
  errorMessage: Schema.optional(Schema.String)
}) {
  override get message(): string {
    return `job ${this.job} (${this.id}) was dead-lettered${this.errorClass ? `: ${this.errorClass}: ${this.errorMessage ?? ""}` : ""}`
  }
}

/**
 * The awaited job was discarded (a failure its definition's `discardOn` names): archived
 * with a `discarded` mark, no result, no dead letter.
 *
 * @category errors
 */
export class JobDiscarded extends Schema.TaggedError<JobDiscarded>()("JobDiscarded", {
  job: Schema.String,
  id: Schema.String,
  errorClass: Schema.optional(Schema.String),
  errorMessage: Schema.optional(Schema.String)
}) {
  override get message(): string {
    return `job ${this.job} (${this.id}) was discarded${this.errorClass ? `: ${this.errorClass}: ${this.errorMessage ?? ""}` : ""}`
  }
}

/**
 * The awaited job did not finish within the timeout (it may still run later).
 *
 * @category errors
 */
export class JobResultTimeout extends Schema.TaggedError<JobResultTimeout>()("JobResultTimeout", {
  job: Schema.String,
  id: Schema.String,
  timeoutMs: Schema.Number
}) {
  override get message(): string {
    return `job ${this.job} (${this.id}) did not finish within ${this.timeoutMs} ms`
  }
}

/**
 * No result can be found for the job: `missing` (no such message, or its archive was removed
 * by the retention, or it was retried out of the dead-letter queue under a new id) or
 * `not_kept` (it finished, but its definition has no `success` Schema, or its stored result no
 * longer decodes: see `issue`).
 *
 * @category errors
 */
export class JobResultUnavailable extends Schema.TaggedError<JobResultUnavailable>()("JobResultUnavailable", {
  job: Schema.String,
  id: Schema.String,
  reason: Schema.Literals(["missing", "not_kept"]),
  issue: Schema.optional(Schema.String)
}) {
  override get message(): string {
    return `no result for job ${this.job} (${this.id}): ${this.reason}${this.issue ? `: ${this.issue}` : ""}`
  }
}

/** Why awaiting a job's result failed. */
export type ResultError = JobDeadLettered | JobDiscarded | JobResultTimeout | JobResultUnavailable | QueueError

/**
 * A handler asked to run again later (`Job.snooze`): the message goes back to its queue for
 * `delayMs` without counting the delivery as an attempt. Not a failure: nothing is recorded.
 *
 * @category errors
 */
export class JobSnoozed extends Schema.TaggedError<JobSnoozed>()("JobSnoozed", {
  delayMs: Schema.Number
}) {
  override get message(): string {
    return `snoozed for ${this.delayMs} ms`
  }
}
