/**
 * The runtime a workflow's body calls: its steps, control verbs, sleeps, waits, polls, fan-outs
 * and patches, each turned into a step of the run.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Option, type Schema } from "effect"
import type { Finished as BatchFinished } from "../../../Batch/Batch.ts"
import { statementNow } from "../../../Database.ts"
import { isStorableText } from "../../../internal/storable.ts"
import * as HistoryCursor from "../../HistoryCursor.ts"
import {
  type FanOutMember,
  type FanOutOptions,
  type FanOutResult,
  StepContext,
  WorkflowRuntime
} from "../../Runtime.ts"
import { FanOutFailed, InvalidWorkflowDefinition } from "../../WorkflowError.ts"
import type { NextAction } from "../../WorkflowSql.ts"
import type { EngineContext } from "../Context.ts"
import { hashNames, textOf } from "../Shared.ts"
import type { Apply } from "./Apply.ts"
import type { Reach } from "./Reach.ts"
import type { ExecutionState } from "./State.ts"

/** Builds this part of one execution. */
export const makeRuntime = (ctx: EngineContext, st: ExecutionState, apply: Apply, reach: Reach) => {
  const { statements, db } = ctx
  const { ex, def, runId, namesSeen } = st
  const { halt, restartFromClaim, pauseWith, applyOutcome } = apply
  const { runtimeStep } = reach

  const runtime = WorkflowRuntime.of({
    step: runtimeStep,

    control: (verbCalled) =>
      Effect.suspend(() => {
        if (st.inStep) {
          st.control = verbCalled
          return Effect.interrupt
        }
        // outside a step: the verb applies after the last completed step
        return Effect.gen(function* () {
          if (st.speculative) return yield* restartFromClaim
          const now = yield* statementNow
          const next: NextAction | undefined =
            verbCalled._tag === "finish"
              ? { _tag: "finish", output: null }
              : verbCalled._tag === "cancel"
                ? { _tag: "cancel", reason: textOf(verbCalled.reason) }
                : verbCalled._tag === "pause"
                  ? { _tag: "pause", reason: "step_pause", error: null, message: textOf(verbCalled.reason) }
                  : undefined
          if (next === undefined) {
            yield* pauseWith(
              new InvalidWorkflowDefinition({
                workflow: def.name,
                reason: `${verbCalled._tag} is only meaningful inside a step`
              }),
              "error"
            )
          } else if (ex.pending !== undefined) {
            const done = ex.pending
            yield* applyOutcome(done.step, done.status, done.output, null, next)
          } else {
            yield* statements
              .runEndFromPerforming({
                runId,
                to: next._tag === "finish" ? "finished" : next._tag === "cancel" ? "cancelled" : "paused",
                output: null,
                error: null,
                pausedReason: next._tag === "pause" ? "step_pause" : null,
                reason: next._tag === "cancel" ? next.reason : next._tag === "pause" ? next.message : null,
                definitionHash: hashNames(namesSeen),
                now
              })
              .pipe(db("end run"))
          }
          return yield* halt({ _tag: "applied" })
        })
      }) as Effect.Effect<never>,

    patched: (id) =>
      Effect.gen(function* () {
        if (st.stop !== undefined) return yield* Effect.interrupt
        if (st.speculative) return yield* restartFromClaim
        if (typeof id !== "string" || !isStorableText(id)) {
          yield* pauseWith(
            new InvalidWorkflowDefinition({
              workflow: def.name,
              reason: `a patch id must be a string without a NUL character or a lone surrogate`
            }),
            "error"
          )
          return yield* halt({ _tag: "applied" })
        }
        const marker = HistoryCursor.markerOf(id)
        const found = HistoryCursor.patch(st.replay, id)
        if (found === "recorded") {
          namesSeen.push(marker)
          return true
        }
        if (found === "unpatched") return false
        // the run reaches the patch new: record the marker, so that replays take this path
        const now = yield* statementNow
        yield* statements
          .markerInsert({ runId, name: marker, position: st.replay.position, now })
          .pipe(db("record patch"))
        HistoryCursor.recordMarker(st.replay, id)
        namesSeen.push(marker)
        return true
      }).pipe(Effect.orDie),

    fanOut: <E, R>(
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
        st.fanOutRequest = { members }
        return yield* Effect.interrupt
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
    },

    poll: <A, E, R>(
      name: string,
      check: Effect.Effect<Option.Option<A>, E, R>,
      options: {
        readonly interval?: Duration.Input | undefined
        readonly timeout?: Duration.Input | undefined
        readonly output?: Schema.ConstraintCodec<unknown, unknown> | undefined
      }
    ) => {
      const intervalMs =
        options.interval === undefined ? 30_000 : Duration.toMillis(Duration.fromInputUnsafe(options.interval))
      const timeoutMs =
        options.timeout === undefined ? null : Duration.toMillis(Duration.fromInputUnsafe(options.timeout))
      const body = Effect.gen(function* () {
        // fast-forwarded: the result was handed over as a signal the step holds
        const given = (yield* StepContext).signal
        if (given !== undefined) return { timedOut: false as const, data: given.payload as A }
        const result = yield* check
        if (Option.isSome(result)) return { timedOut: false as const, data: result.value }
        st.pollRequest = { intervalMs, timeoutMs }
        return yield* Effect.interrupt
      })
      return runtimeStep(name, body, { takesHeldSignal: true }) as Effect.Effect<
        { readonly timedOut: false; readonly data: A } | { readonly timedOut: true },
        never,
        R
      >
    }
  })

  return { runtime }
}
