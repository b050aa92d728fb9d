/**
 * The runner's primitive under `fanOut`: one transaction opens the batch, enqueues its members
 * and parks the step on it (with the `fan_out_opened` event); the batch's callback wakes the step
 * after the commit. The execution halts.
 *
 * @since 0.1.0
 */
import { Cause, Effect, Exit } from "effect"
import { statementNow, withTransaction } from "../../../Database.ts"
import type { FanOutMember, StepOptions } from "../../Runtime.ts"
import type { DatabaseError } from "../../WorkflowError.ts"
import { FAN_OUT_WAIT } from "../../WorkflowSql.ts"
import type { EngineContext } from "../Context.ts"
import type { Outcomes } from "../Outcomes.ts"
import { fanOutCallback, LATE, type Target } from "../Shared.ts"
import type { Apply } from "./Apply.ts"
import type { ExecutionState } from "./State.ts"

/** Opening a fan-out's batch. */
export const makeFanOut = (
  ctx: EngineContext,
  outcomes: Outcomes,
  st: ExecutionState,
  apply: Apply,
  /** A step failed: the policies decide (the step's own handler). */
  failed: (
    step: Target,
    error: unknown,
    options: StepOptions<unknown>,
    startedAt: number
  ) => Effect.Effect<undefined, DatabaseError>
) => {
  const { sql, jobs, batches, statements } = ctx
  const { lateCompletion } = outcomes
  const { def, runId, defaultQueue } = st
  const { halt, recordStep } = apply

  /** Opens the batch and parks the step on it; halts (a step moved on meanwhile: a late completion). */
  const openFanOut = (
    step: Target,
    request: { readonly members: ReadonlyArray<FanOutMember> },
    options: StepOptions<unknown>,
    startedAt: number
  ) =>
    Effect.gen(function* () {
      // one transaction: the batch, its members' messages, the step parked on it and the
      // `fan_out_opened` event; the batch's callback can only finish it after the commit
      const stepKey = `pgbus-wf:${runId}:${step.name}`
      const opened = yield* withTransaction(
        sql,
        Effect.gen(function* () {
          const batch = yield* batches.make({
            onFinish: { job: fanOutCallback, queue: step.queue || defaultQueue },
            description: `${def.name}#${step.name} ${runId}`,
            properties: { workflow_id: runId, step_id: String(step.id) }
          })
          yield* batch.enqueue(
            Effect.forEach(
              request.members,
              (member, i) => {
                const { key, ...enqueueOptions } = member.options
                // the builder's `add` checked the payload's type against the job
                return jobs.enqueue(member.job as never, member.payload as never, {
                  ...enqueueOptions,
                  headers: { ...enqueueOptions.headers, pgbus_idempotency_key: `${stepKey}:${key ?? i}` }
                })
              },
              { discard: true }
            )
          )
          const now = yield* statementNow
          const [parked] = yield* statements.stepPark({
            runId,
            stepId: step.id,
            waitFor: FAN_OUT_WAIT,
            matcher: false,
            timeoutMs: null,
            timeoutAt: null,
            onTimeout: null,
            periodMs: null,
            batch: { id: batch.id, size: request.members.length },
            now
          })
          // the step was moved on while its body ran: no batch
          if (parked === undefined) return yield* Effect.fail(LATE)
          return batch.id
        })
      ).pipe(Effect.exit)
      if (Exit.isFailure(opened)) {
        const error = Cause.squash(opened.cause)
        if (error === LATE) {
          yield* lateCompletion(runId, step, yield* statementNow)
          return yield* halt({ _tag: "applied" })
        }
        return yield* failed(step, error, options, startedAt)
      }
      yield* recordStep(step, "waiting", startedAt)
      return yield* halt({ _tag: "applied" })
    })

  return { openFanOut }
}
