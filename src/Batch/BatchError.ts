/**
 * The errors of batches: making one, adding jobs to one, finding one.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

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

/** Why a job could not join a batch. */
export type BatchJoinError = AlreadyFinished | BatchNotFound
