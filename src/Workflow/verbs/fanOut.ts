/**
 * `Workflow.fanOut`: a step whose body builds a batch of jobs; the runner opens the batch and
 * parks the step on it (`openFanOut`), the batch's callback wakes it with the outcome.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { Finished as BatchFinished } from "../../Batch/Batch.ts"
import { statementNow, withTransaction } from "../../Database.ts"
import type { EngineContext } from "../engine/Context.ts"
import { LATE, parkedBy, StepRequest } from "../engine/execution/End.ts"
import type { ExecutionState, Target } from "../engine/execution/State.ts"
import { fanOutCallback } from "../engine/Services.ts"
import {
  type FanOutMember,
  type FanOutOptions,
  type FanOutResult,
  StepContext,
  type WorkflowRuntime
} from "../Runtime.ts"
import { FanOutFailed } from "../WorkflowError.ts"
import { FAN_OUT_WAIT } from "../WorkflowSql.ts"
import type { VerbEnv } from "./Env.ts"

/** The body's `fanOut`, on one execution. */
export const makeFanOutVerb = ({ ctx, st, reach }: VerbEnv) => {
  const { statements } = ctx
  const { runId } = st
  const { runtimeStep } = reach
  const fanOut: WorkflowRuntime["Service"]["fanOut"] = <E, R>(
    name: string,
    build: (add: (member: FanOutMember) => Effect.Effect<void>) => Effect.Effect<unknown, E, R>,
    options: FanOutOptions
  ) => {
    const body = Effect.gen(function* () {
      const context = yield* StepContext
      const given = context.signal
      if (given !== undefined) {
        // the batch finished (its callback, or the sweep, delivered the outcome)
        const outcome = given.payload as Partial<BatchFinished> & { readonly gone?: boolean }
        const batchId = String(outcome.batchId ?? "")
        const result: FanOutResult = {
          batchId,
          totalJobs: Number(outcome.totalJobs ?? 0),
          completedJobs: Number(outcome.completedJobs ?? 0),
          failedJobs: Number(outcome.failedJobs ?? 0)
        }
        yield* statements.eventInsert({
          runId,
          type: "fan_out_finished",
          step: name,
          attempt: context.attempt,
          actor: "system",
          reason: outcome.gone === true ? "the batch row is gone" : null,
          details: JSON.stringify({
            batch_id: batchId,
            failed_jobs: result.failedJobs,
            total_jobs: result.totalJobs
          }),
          now: yield* statementNow
        })
        if (outcome.gone === true || result.failedJobs > 0) {
          // consumed now: the next attempt (resume, reattempt) opens a fresh batch
          yield* statements.signalConsume(BigInt(given.id))
          return yield* new FanOutFailed({
            step: name,
            batchId,
            reason: outcome.gone === true ? "batch_gone" : "dead_lettered",
            failedJobs: result.failedJobs,
            totalJobs: result.totalJobs
          })
        }
        return result
      }
      const members: Array<FanOutMember> = []
      yield* build((member) => Effect.sync(() => void members.push(member)))
      if (members.length === 0) {
        return { batchId: null, totalJobs: 0, completedJobs: 0, failedJobs: 0 } satisfies FanOutResult
      }
      return new StepRequest({ _tag: "FanOut", members })
    })
    const onError = [
      // a batch whose row is gone has an unknown outcome: always pause
      {
        match: (e: unknown) => e instanceof FanOutFailed && e.reason === "batch_gone",
        action: "pause" as const
      },
      { match: "FanOutFailed", action: options.onBatchFailure ?? ("pause" as const) },
      ...(options.onError ?? [])
    ]
    return runtimeStep(name, body, {
      takesHeldSignal: true,
      onError,
      ...(options.queue !== undefined ? { queue: options.queue } : {})
    }) as Effect.Effect<FanOutResult | undefined, never, R>
  }
  return fanOut
}

// the runner's primitive under the verb: what the step's end asks for, applied

/** Opening a fan-out's batch. */
export const makeFanOut = (ctx: EngineContext, st: ExecutionState) => {
  const { sql, jobs, batches, statements } = ctx
  const { def, runId, defaultQueue } = st

  /** Opens the batch and parks the step on it: the step's end (`parkedBy`). */
  const openFanOut = (step: Target, members: ReadonlyArray<FanOutMember>) =>
    Effect.gen(function* () {
      // one transaction: the batch, its members' messages, the step parked on it and the
      // `fan_out_opened` event; the batch's callback can only finish it after the commit
      const stepKey = `pgbus-wf:${runId}:${step.name}`
      return yield* withTransaction(
        sql,
        Effect.gen(function* () {
          const batch = yield* batches.make({
            onFinish: { job: fanOutCallback, queue: step.queue || defaultQueue },
            description: `${def.name}#${step.name} ${runId}`,
            properties: { workflow_id: runId, step_id: String(step.id) }
          })
          yield* batch.enqueue(
            Effect.forEach(
              members,
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
            batch: { id: batch.id, size: members.length },
            now
          })
          // the step was moved on while its body ran: no batch
          if (parked === undefined) return yield* Effect.fail(LATE)
          return batch.id
        })
      ).pipe(Effect.exit, Effect.map(parkedBy))
    })

  return { openFanOut }
}
