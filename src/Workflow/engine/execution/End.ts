/**
 * How things end, as typed values: a claimed step's attempt (`StepEnd`, applied in one place by
 * `Step.ts`'s `applyEnd`), a request a verb makes from inside a step (`StepRequest`), and the
 * execution's own end (`Stop`, carried out of the body by `Halted`). The body is unwound by a
 * defect that carries its end, never by interruption: interruption is left for real
 * cancellation (a drain past its timeout, a step's timeout).
 *
 * @since 0.1.0
 */
import { Cause, Exit } from "effect"
import type { ControlVerb, FanOutMember } from "../../Runtime.ts"
import type { ChildRequest } from "../../verbs/child.ts"
import type { DatabaseError } from "../../WorkflowError.ts"
import type { ClaimRow } from "../../WorkflowSql.ts"

/** The end of one execution: what `Execute.ts` returns to the runner. */
export type Stop =
  | { readonly _tag: "applied" }
  /** A fresh run replayed before its claim and must replay again from the claim (none: unclaimed). */
  | { readonly _tag: "restart"; readonly claim: ClaimRow | undefined }
  /** A fresh run's claim failed inside the body: the execution fails with it (the message is retried). */
  | { readonly _tag: "claimFailed"; readonly error: DatabaseError }

/** What a poll's check that found nothing asks for: the next check. */
export interface PollRequest {
  readonly intervalMs: number
  readonly timeoutMs: number | null
}

/** What a verb asks the runner for from inside a step: the step's end is this, not its output. */
export type Requested =
  | { readonly _tag: "Control"; readonly verb: ControlVerb }
  | { readonly _tag: "PollAgain"; readonly request: PollRequest }
  | { readonly _tag: "FanOut"; readonly members: ReadonlyArray<FanOutMember> }
  | { readonly _tag: "Child"; readonly request: ChildRequest }

/**
 * How a claimed step's attempt ended. `Parked` and `Late` were written where they happened (the
 * gate's or the verb's transaction); the others are written by `applyEnd`.
 */
export type StepEnd =
  | { readonly _tag: "Completed"; readonly value: unknown; readonly output: string | null; readonly outcome?: string }
  | { readonly _tag: "Skipped" }
  /** Waiting (a signal, a batch, a child) or polled: written; the metrics' outcome says which. */
  | { readonly _tag: "Parked"; readonly outcome: "waiting" | "polled" }
  /** The definition's `cancelIf` held at the gate. */
  | { readonly _tag: "Cancelled" }
  /** The step was moved on while it ran: its outcome is a late completion. */
  | { readonly _tag: "Late" }
  | { readonly _tag: "Failed"; readonly error: unknown }
  | Requested

/**
 * A verb's request from inside a step: the engine's own step bodies (poll, fanOut, child) return
 * it as their value; a control verb, called from the app's code, ends the step with it as a
 * defect (its type promises no failure).
 */
export class StepRequest {
  readonly _tag = "StepRequest"
  constructor(readonly requested: Requested) {}
}

/** The defect that unwinds a body whose execution ended, carrying the end. */
export class Halted {
  readonly _tag = "Halted"
  constructor(readonly stop: Stop) {}
}

/** A verb's transaction found its step moved on while the step's body ran (it rolls back). */
export const LATE = Symbol("late")

/**
 * How a verb's transaction that parks the step ended (a fan-out's batch, a child): parked, the
 * step moved on meanwhile (it failed with `LATE`), or failed (the policies decide).
 */
export const parkedBy = (opened: Exit.Exit<unknown, unknown>): StepEnd => {
  if (Exit.isSuccess(opened)) return { _tag: "Parked", outcome: "waiting" }
  const error = Cause.squash(opened.cause)
  return error === LATE ? { _tag: "Late" } : { _tag: "Failed", error }
}

/** The request a step's value or cause carries, if any. */
export const requestOf = (u: unknown): Requested | undefined => (u instanceof StepRequest ? u.requested : undefined)

/** The request a failed step's cause carries (a control verb's defect), if any. */
export const requestInCause = (cause: Cause.Cause<unknown>): Requested | undefined => {
  for (const reason of cause.reasons) {
    if (Cause.isDieReason(reason) && reason.defect instanceof StepRequest) return reason.defect.requested
  }
  return undefined
}

/** Whether a cause is only the unwinding of a halted body (its end is the execution's). */
export const isHalt = (cause: Cause.Cause<unknown>): boolean =>
  cause.reasons.length > 0 &&
  cause.reasons.every(
    (reason) => (Cause.isDieReason(reason) && reason.defect instanceof Halted) || Cause.isInterruptReason(reason)
  )
