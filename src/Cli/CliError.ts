/**
 * The errors of the `pgbus` command line. Each one is an expected outcome that the runner
 * prints (its message, no stack trace) and turns into exit code 1.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * The command line is well formed for the parser but not usable (conflicting flags, a bad
 * page number, a capsule that does not exist).
 *
 * @category errors
 */
export class UsageError extends Schema.TaggedError<UsageError>()("UsageError", {
  reason: Schema.String
}) {
  override get message(): string {
    return this.reason
  }
}

/**
 * A dead-letter id that is not `<dlq_queue>:<msg_id>` or a bare `<msg_id>`.
 *
 * @category errors
 */
export class InvalidDeadLetterId extends Schema.TaggedError<InvalidDeadLetterId>()("InvalidDeadLetterId", {
  id: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `invalid dead-letter id ${JSON.stringify(this.id)}: ${this.reason}`
  }
}

/**
 * No dead-letter queue holds a message with this id.
 *
 * @category errors
 */
export class UnknownDeadLetter extends Schema.TaggedError<UnknownDeadLetter>()("UnknownDeadLetter", {
  id: Schema.String,
  hint: Schema.optionalKey(Schema.String)
}) {
  override get message(): string {
    return `no dead letter ${this.id}${this.hint ? ` (${this.hint})` : ""}`
  }
}

/**
 * A bare message id held by more than one dead-letter queue: the queue must be named.
 *
 * @category errors
 */
export class AmbiguousDeadLetter extends Schema.TaggedError<AmbiguousDeadLetter>()("AmbiguousDeadLetter", {
  id: Schema.String,
  candidates: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `dead letter id ${this.id} is ambiguous; name the queue: ${this.candidates.join(", ")}`
  }
}

/**
 * `dlq purge --all` without `--yes`: nothing was purged.
 *
 * @category errors
 */
export class PurgeRefused extends Schema.TaggedError<PurgeRefused>()("PurgeRefused", {
  count: Schema.Number
}) {
  override get message(): string {
    return `refusing to purge ${this.count} dead letter(s) without --yes; nothing was changed`
  }
}

/**
 * The module named by `--app` (or `PGBUS_APP`) could not be loaded or exports no Registry layer.
 *
 * @category errors
 */
export class AppModuleError extends Schema.TaggedError<AppModuleError>()("AppModuleError", {
  module: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `cannot load app module ${this.module}: ${this.reason}`
  }
}

/**
 * `pgbus doctor` (or `start --doctor`) found a failed check: the report was printed.
 *
 * @category errors
 */
export class DoctorFailed extends Schema.TaggedError<DoctorFailed>()("DoctorFailed", {
  failed: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `doctor: ${this.failed.length} check(s) failed: ${this.failed.join(", ")}`
  }
}

/**
 * A write command needs `--yes` (`queues purge`): nothing was changed.
 *
 * @category errors
 */
export class ConfirmationRequired extends Schema.TaggedError<ConfirmationRequired>()("ConfirmationRequired", {
  action: Schema.String
}) {
  override get message(): string {
    return `refusing to ${this.action} without --yes; nothing was changed`
  }
}

/** Every error a command fails with on its own (library errors come on top). */
export type CliError =
  | UsageError
  | InvalidDeadLetterId
  | UnknownDeadLetter
  | AmbiguousDeadLetter
  | PurgeRefused
  | AppModuleError
  | DoctorFailed
  | ConfirmationRequired
