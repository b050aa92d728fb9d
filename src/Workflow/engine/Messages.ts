/**
 * The step message and its delivery: what a start carries, the claim marks a delivery leaves.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import type { ClaimRow } from "../WorkflowSql.ts"

/** Replay rules' version, recorded on every run (bumped if replay ever changes). */
export const ENGINE_VERSION = 1

/** The payload of a workflow step message. */
export const StepMessage = Schema.Struct({
  workflow: Schema.String,
  run: Schema.String,
  step: Schema.NullOr(Schema.String),
  /** A start's message: the run's input, so that its worker replays to the first step before claiming. */
  input: Schema.optionalKey(
    Schema.Struct({
      payload: Schema.Unknown,
      subject: Schema.NullOr(Schema.String),
      resource_id: Schema.NullOr(Schema.String),
      /** A child run's parent (its end wakes the parent, see `verbs/child.ts`). */
      parent_run_id: Schema.optionalKey(Schema.String)
    })
  ),
  /** A notify notice of a per-run deadline: the missed deadline (ISO), to evaluate the deadline again. */
  deadline: Schema.optionalKey(Schema.String)
})
export type StepMessage = typeof StepMessage.Type

const isRecord = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)
const isTextOrNull = (u: unknown) => u === null || typeof u === "string"

/**
 * Whether a value is a `StepMessage` as the engine writes it, checked field by field: the
 * runner's fast path past the Schema's decode (about 1% of its CPU in W3); anything else (an
 * odd or hand-written message) is left to the Schema, which gives the same value or the error.
 */
export const isStepMessage = (u: unknown): u is StepMessage => {
  if (!isRecord(u) || typeof u.workflow !== "string" || typeof u.run !== "string" || !isTextOrNull(u.step)) {
    return false
  }
  if ("deadline" in u && typeof u.deadline !== "string") return false
  if (!("input" in u)) return true
  const input = u.input
  return (
    isRecord(input) &&
    "payload" in input &&
    isTextOrNull(input.subject) &&
    isTextOrNull(input.resource_id) &&
    (!("parent_run_id" in input) || typeof input.parent_run_id === "string")
  )
}

/** What a replay reads from a claim (a fresh run's first replay reads it from its start message). */
export type Claimed = Pick<
  ClaimRow,
  | "id"
  | "payload"
  | "subject"
  | "resource_id"
  | "priority"
  | "scheduled_for"
  | "parent_run_id"
  | "history"
  | "held_signal"
  | "step_id"
  | "step_name"
  | "step_attempt"
  | "step_position"
  | "step_reattempts"
  | "step_timed_out"
>

/** A start's message carries the run's input when its payload is at most this many bytes. */
export const CARRIED_INPUT_LIMIT = 8 * 1024

/** What the runner knows about the delivery it executes. */
export interface Delivery {
  /** The message's read count (above 1: a redelivery). */
  readonly attempt: number
  /** The message's id (a step claimed at its send in this process is found by it). */
  readonly msgId?: bigint | undefined
  /** The queue the message was read from: with its id and read count it marks the claims of this delivery. */
  readonly queue?: string | undefined
  /** The message's last delivery: a run it cannot execute pauses as undeliverable instead of its message dead-lettered. */
  readonly last?: boolean | undefined
  /**
   * The caller (a worker) takes a `Settling` back: a run's last outcome, shared with other runs',
   * may then be left in flight when the execution returns (`execution/Outcome.ts`).
   */
  readonly settles?: boolean | undefined
}

/** Identifies one delivery of a message (id and read count). */
export const deliveryKey = (msgId: bigint, readCt: number) => `${msgId}:${readCt}`

/**
 * The claim mark of a delivery, recorded on every step its execution claims:
 * `<queue>:<msg id>:<read count>` (none without a message, as in the test helpers). A
 * redelivery finds by its prefix the step its predecessor held; a claim whose reply was lost
 * finds by the whole mark the step it holds itself.
 */
export const claimMarkOf = (delivery: Delivery): string | null =>
  delivery.msgId === undefined || delivery.queue === undefined
    ? null
    : `${delivery.queue}:${delivery.msgId}:${delivery.attempt}`

/** The part of a delivery's mark shared by every delivery of its message. */
export const messageMarkOf = (delivery: Delivery): string | null =>
  delivery.msgId === undefined || delivery.queue === undefined ? null : `${delivery.queue}:${delivery.msgId}:`

/** Whether a step's claim mark is a delivery's (else a local hand-over's, or none). */
export const isDeliveryMark = (mark: string | null): boolean => mark !== null && /^[a-z][a-z0-9_]*:\d+:\d+$/.test(mark)
