/**
 * The errors of jobs: defining, enqueueing and running them.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import type { BatchJoinError } from "../Batch/BatchError.ts"
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

/** Errors of an enqueue (a batch's only inside `batch.enqueue`; `InvalidFairShare` only with a `fairShare` resolver). */
export type EnqueueError = InvalidPayload | InvalidFairShare | QueueError | BatchJoinError
