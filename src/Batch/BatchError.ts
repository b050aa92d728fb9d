/**
 * The errors of batches: making one, adding jobs to one, finding one.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

// raised by the job client when a job joins a batch: defined with the job layer's errors
export { AlreadyFinished, type BatchJoinError, BatchNotFound } from "../Job/JobError.ts"

/**
 * `Batch.make` was given a bad option (properties that are not a JSON object, a callback that
 * is not a job, a bad callback queue or delay, ...). Nothing was written.
 *
 * @category errors
 */
export class InvalidBatchOptions extends Schema.TaggedError<InvalidBatchOptions>()("InvalidBatchOptions", {
  option: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid batch option ${this.option}: ${this.reason}`
  }
}
