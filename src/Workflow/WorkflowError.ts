/**
 * The errors of workflows, each documented with when it happens.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { DatabaseError } from "../Database.ts"
import { InvalidInput } from "../Input.ts"
import type { QueueError } from "../Queue/QueueError.ts"

/**
 * A workflow definition or a step's options are invalid (a negative wait, an unknown option, a
 * duplicate step name in one run, two workflows with one name). Raised where the workflow is
 * defined or registered, or, for step options only known when the body reaches them, fails
 * that attempt (the run pauses with it).
 *
 * @category errors
 */
export class InvalidWorkflowDefinition extends Schema.TaggedError<InvalidWorkflowDefinition>()(
  "InvalidWorkflowDefinition",
  { workflow: Schema.String, reason: Schema.String }
) {
  override get message(): string {
    return `invalid workflow ${this.workflow}: ${this.reason}`
  }
}

/**
 * The payload does not encode with the workflow's Schema, or is over the size cap. Nothing was
 * written.
 *
 * @category errors
 */
export class InvalidWorkflowPayload extends Schema.TaggedError<InvalidWorkflowPayload>()("InvalidWorkflowPayload", {
  workflow: Schema.String,
  issue: Schema.String
}) {
  override get message(): string {
    return `invalid payload for workflow ${this.workflow}: ${this.issue}`
  }
}

/** A run as errors report it. */
export const RunSummary = Schema.Struct({ id: Schema.String, workflow: Schema.String, status: Schema.String })

/**
 * The subject already has an ongoing run of this workflow; `run` is the one holding the slot.
 *
 * @category errors
 */
export class AlreadyRunning extends Schema.TaggedError<AlreadyRunning>()("AlreadyRunning", {
  workflow: Schema.String,
  subject: Schema.String,
  run: RunSummary
}) {
  override get message(): string {
    return `workflow ${this.workflow} already has an ongoing run for ${this.subject}: ${this.run.id} (${this.run.status})`
  }
}

/**
 * The workflow is a singleton and another run holds its slot (ready, performing or waiting):
 * a start, or the resume of a paused run, is refused; `holder` is that run. Nothing was written.
 *
 * @category errors
 */
export class SingletonRunInProgress extends Schema.TaggedError<SingletonRunInProgress>()("SingletonRunInProgress", {
  workflow: Schema.String,
  holder: RunSummary
}) {
  override get message(): string {
    return `workflow ${this.workflow} is a singleton and run ${this.holder.id} (${this.holder.status}) holds its slot`
  }
}

/**
 * No run with this id (or it belongs to another resource).
 *
 * @category errors
 */
export class RunNotFound extends Schema.TaggedError<RunNotFound>()("RunNotFound", {
  id: Schema.String
}) {
  override get message(): string {
    return `workflow run ${this.id} not found`
  }
}

/**
 * A verb that the transition table does not allow from the run's current state. Nothing changed.
 *
 * @category errors
 */
export class InvalidTransition extends Schema.TaggedError<InvalidTransition>()("InvalidTransition", {
  verb: Schema.String,
  current: Schema.String,
  run: Schema.String
}) {
  override get message(): string {
    return `cannot ${this.verb} run ${this.run}: it is ${this.current}`
  }
}

/**
 * `resume` or `resumeAt` of a run that is not paused. Nothing changed.
 *
 * @category errors
 */
export class NotPaused extends Schema.TaggedError<NotPaused>()("NotPaused", {
  verb: Schema.String,
  current: Schema.String,
  run: Schema.String
}) {
  override get message(): string {
    return `cannot ${this.verb} run ${this.run}: it is ${this.current}, not paused`
  }
}

/**
 * A verb on a run that is finished or cancelled. Nothing changed.
 *
 * @category errors
 */
export class NotOngoing extends Schema.TaggedError<NotOngoing>()("NotOngoing", {
  verb: Schema.String,
  current: Schema.String,
  run: Schema.String
}) {
  override get message(): string {
    return `cannot ${this.verb} run ${this.run}: it is ${this.current}`
  }
}

/**
 * `resumeAt` names a step the run has never reached.
 *
 * @category errors
 */
export class UnknownStep extends Schema.TaggedError<UnknownStep>()("UnknownStep", {
  run: Schema.String,
  step: Schema.String
}) {
  override get message(): string {
    return `run ${this.run} has no step ${this.step}`
  }
}

/**
 * The body no longer replays the run's recorded history: a recorded step does not come where
 * it came, or a name repeats. The run pauses with this error (reason `version_mismatch`).
 *
 * @category errors
 */
export class ReplayDivergence extends Schema.TaggedError<ReplayDivergence>()("ReplayDivergence", {
  run: Schema.String,
  position: Schema.Number,
  expected: Schema.String,
  found: Schema.String
}) {
  override get message(): string {
    return `run ${this.run} diverged from its history at step ${this.position}: the history has ${this.expected}, the code reached ${this.found}`
  }
}

/**
 * A step ran longer than its `timeout` (or was found stalled by the sweep).
 *
 * @category errors
 */
export class StepTimeout extends Schema.TaggedError<StepTimeout>()("StepTimeout", {
  step: Schema.String,
  timeoutMs: Schema.Number
}) {
  override get message(): string {
    return `step ${this.step} timed out after ${this.timeoutMs} ms`
  }
}

/**
 * A step output or a payload is larger than `maxPayloadSize`.
 *
 * @category errors
 */
export class OutputTooLarge extends Schema.TaggedError<OutputTooLarge>()("OutputTooLarge", {
  step: Schema.String,
  size: Schema.Number,
  limit: Schema.Number
}) {
  override get message(): string {
    return `output of step ${this.step} is ${this.size} bytes, over the limit of ${this.limit}`
  }
}

/**
 * A test helper found the run waiting (it names what for), so it cannot run the next step inline.
 *
 * @category errors
 */
export class StepWaiting extends Schema.TaggedError<StepWaiting>()("StepWaiting", {
  run: Schema.String,
  step: Schema.String,
  waitingFor: Schema.String
}) {
  override get message(): string {
    return `run ${this.run} waits at step ${this.step} for ${this.waitingFor}`
  }
}

/**
 * A test helper was asked to run one step, but another one is next.
 *
 * @category errors
 */
export class UnexpectedStep extends Schema.TaggedError<UnexpectedStep>()("UnexpectedStep", {
  run: Schema.String,
  expected: Schema.String,
  next: Schema.String
}) {
  override get message(): string {
    return `run ${this.run}: expected step ${this.expected} next, but ${this.next} is`
  }
}

/**
 * A step reader (`woken`, `signalReady`) was used outside a step's guards or body.
 *
 * @category errors
 */
export class NotInStep extends Schema.TaggedError<NotInStep>()("NotInStep", { reader: Schema.String }) {
  override get message(): string {
    return `${this.reader} can only be read inside a step (its guards or its body)`
  }
}

/**
 * A fan-out step's batch finished with dead-lettered members, or its batch row is gone.
 *
 * @category errors
 */
export class FanOutFailed extends Schema.TaggedError<FanOutFailed>()("FanOutFailed", {
  step: Schema.String,
  batchId: Schema.String,
  reason: Schema.Literals(["dead_lettered", "batch_gone"]),
  failedJobs: Schema.Number,
  totalJobs: Schema.Number
}) {
  override get message(): string {
    return this.reason === "batch_gone"
      ? `step ${this.step}: batch ${this.batchId} is gone, its outcome is unknown`
      : `step ${this.step}: ${this.failedJobs} of ${this.totalJobs} jobs dead-lettered`
  }
}

/**
 * A `Workflow.child` step's child run ended cancelled, or paused when the step raises a pause
 * (`onChildPause: "fail"`): the parent's step fails with this and its policies decide (default
 * pause). A reattempt of the step finds the same child (one child per step): it fails again
 * unless the child was resumed meanwhile.
 *
 * @category errors
 */
export class ChildWorkflowFailed extends Schema.TaggedError<ChildWorkflowFailed>()("ChildWorkflowFailed", {
  step: Schema.String,
  workflow: Schema.String,
  child: Schema.String,
  status: Schema.Literals(["cancelled", "paused"]),
  /** The child's error (a pause), or why it was cancelled, when known. */
  detail: Schema.optional(Schema.String)
}) {
  override get message(): string {
    return `step ${this.step}: child workflow ${this.workflow} run ${this.child} ${this.status}${this.detail ? `: ${this.detail}` : ""}`
  }
}

/**
 * A `Workflow.child` step's child output does not decode with the step's `output` Schema.
 *
 * @category errors
 */
export class ChildOutputInvalid extends Schema.TaggedError<ChildOutputInvalid>()("ChildOutputInvalid", {
  step: Schema.String,
  workflow: Schema.String,
  child: Schema.String,
  issue: Schema.String
}) {
  override get message(): string {
    return `step ${this.step}: the output of child workflow ${this.workflow} run ${this.child} does not decode: ${this.issue}`
  }
}

/**
 * A wait's deadline passed (`onTimeout: "pause"`, the default): the step failed with this.
 *
 * @category errors
 */
export class WaitTimedOut extends Schema.TaggedError<WaitTimedOut>()("WaitTimedOut", {
  step: Schema.String,
  waitFor: Schema.String,
  timeoutAt: Schema.String
}) {
  override get message(): string {
    return `step ${this.step} waited for ${this.waitFor} past its deadline ${this.timeoutAt}`
  }
}

/**
 * A step was in progress past its timeout or the stall threshold (its worker died or hung).
 *
 * @category errors
 */
export class StepStalled extends Schema.TaggedError<StepStalled>()("StepStalled", {
  step: Schema.String,
  detection: Schema.String
}) {
  override get message(): string {
    return `step ${this.step} stalled (${this.detection})`
  }
}

/**
 * An attempt did not finish because its execution was stopped from outside: its worker stopped
 * (a drain past its timeout), or a step handed to a worker of this process was refused (the
 * worker was stopping or full). Recorded on the attempt, with a `step_interrupted` event; a new
 * attempt is scheduled at once. Not an error of the step: the policies never see it.
 *
 * @category errors
 */
export class StepInterrupted extends Schema.TaggedError<StepInterrupted>()("StepInterrupted", {
  step: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `step ${this.step} was interrupted: ${this.reason}`
  }
}

/**
 * The run's message reached a worker whose process does not register its workflow. The message
 * is retried like a failed job (another process may register it); on its last delivery the run
 * pauses as `undeliverable` with this error.
 *
 * @category errors
 */
export class WorkflowNotRegistered extends Schema.TaggedError<WorkflowNotRegistered>()("WorkflowNotRegistered", {
  workflow: Schema.String
}) {
  override get message(): string {
    return `workflow ${this.workflow} is not registered in this process`
  }
}

/**
 * A step's output, or the workflow's, holds text PostgreSQL cannot store (a NUL character or a
 * lone surrogate, in a string or a key). The step fails with it (the policies decide).
 *
 * @category errors
 */
export class OutputNotStorable extends Schema.TaggedError<OutputNotStorable>()("OutputNotStorable", {
  step: Schema.String
}) {
  override get message(): string {
    return `the output of ${this.step} holds a NUL character or a lone surrogate, which PostgreSQL cannot store`
  }
}

/**
 * A step's output is stored as JSON and read back on replay, and this one would not come back
 * the same: without an `output` Schema it holds a `Date`, a `bigint`, a class instance, a `Map`,
 * `NaN`...; with one, the Schema encodes to such a value (`Schema.Date` in place of
 * `Schema.DateFromString`). Declare an `output` Schema that encodes to JSON. The step fails with it.
 *
 * @category errors
 */
export class OutputNotJson extends Schema.TaggedError<OutputNotJson>()("OutputNotJson", {
  step: Schema.String,
  detail: Schema.String
}) {
  override get message(): string {
    return `the output of step ${this.step} does not survive JSON: ${this.detail}; declare a step output Schema that encodes to JSON (Workflow.step(name, effect, { output: Schema.DateFromString }))`
  }
}

/**
 * A signal's payload does not encode with the Schema its workflow declares, or is over the
 * size cap. Nothing was stored.
 *
 * @category errors
 */
export class InvalidSignal extends Schema.TaggedError<InvalidSignal>()("InvalidSignal", {
  workflow: Schema.String,
  signal: Schema.String,
  issue: Schema.String
}) {
  override get message(): string {
    return `invalid signal ${this.signal} for workflow ${this.workflow}: ${this.issue}`
  }
}

/** Errors of starting a run. */
export type StartError = InvalidWorkflowPayload | AlreadyRunning | SingletonRunInProgress | QueueError

/** Errors of an outside verb. */
export type VerbError =
  | RunNotFound
  | InvalidTransition
  | NotPaused
  | NotOngoing
  | UnknownStep
  | SingletonRunInProgress
  | DatabaseError
  | QueueError

/** Errors of sending a signal. */
export type SignalError = RunNotFound | NotOngoing | InvalidSignal | DatabaseError | QueueError

export { DatabaseError, InvalidInput }
