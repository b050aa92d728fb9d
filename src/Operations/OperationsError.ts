/**
 * The errors of the operations service, each documented with when it happens. Every surface
 * (HTTP API, CLI, MCP) maps them the same way: not found, conflict (the run has moved on or the
 * verb is not allowed from its state), invalid request, database failure.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { DatabaseError } from "../Database.ts"

/**
 * The queue, job, dead letter, run, batch or recurring task does not exist (or, for a run, belongs to another
 * resource than the caller's).
 *
 * @category errors
 */
export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", {
  kind: Schema.Literals([
    "queue",
    "job",
    "dead letter",
    "run",
    "batch",
    "step",
    "uniqueness key",
    "blocked key",
    "recurring task"
  ]),
  id: Schema.String
}) {
  override get message(): string {
    return `${this.kind} ${this.id} not found`
  }
}

/**
 * A verb the run's state does not allow (the transition table), or a run whose status is not
 * the one the caller expected (`expectedStatus`): nothing changed. `current` is where it is now.
 *
 * @category errors
 */
export class Conflict extends Schema.TaggedError<Conflict>()("Conflict", {
  verb: Schema.String,
  run: Schema.String,
  current: Schema.String,
  /** The outside verbs its state allows now. */
  allowed: Schema.Array(Schema.String),
  reason: Schema.Literals(["invalid_transition", "status_mismatch"]),
  expected: Schema.optionalKey(Schema.String)
}) {
  override get message(): string {
    return this.reason === "status_mismatch"
      ? `run ${this.run} is ${this.current}, not ${this.expected ?? "?"}: nothing was done`
      : `cannot ${this.verb} run ${this.run}: it is ${this.current} (allowed: ${this.allowed.join(", ") || "none"})`
  }
}

/**
 * The request is not usable: a bad id, filter or payload, a bulk verb over its cap, an
 * unknown verb. Nothing was written.
 *
 * @category errors
 */
export class InvalidRequest extends Schema.TaggedError<InvalidRequest>()("InvalidRequest", {
  reason: Schema.String
}) {
  override get message(): string {
    return this.reason
  }
}

/** Every error of the operations service. */
export type OperationsError = NotFound | Conflict | InvalidRequest | DatabaseError

export { DatabaseError }
