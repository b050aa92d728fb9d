/**
 * The verbs that move a run on: `resume` (from whatever its latest step left), `resumeAt` a
 * named step, `runNow` and `reschedule` of its scheduled step.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { VerbOptions, WorkflowClientShape } from "../../Client.ts"
import * as States from "../../States.ts"
import { InvalidTransition, UnknownStep } from "../../WorkflowError.ts"
import type { OutsideEnv } from "./Transaction.ts"

/** The verbs that move a run on. */
export const makeResumeVerbs = ({ ctx, queries, tx }: OutsideEnv) => {
  const { config, jobs, statements, queueOf } = ctx
  const { reread } = queries
  const { verb, event, setStatus } = tx

  const moveScheduled = (
    name: "run_now" | "reschedule",
    id: string,
    at: Date | null,
    options: VerbOptions | undefined
  ) =>
    verb(name, id, options, (run, now) =>
      Effect.gen(function* () {
        const [latest] = yield* statements.stepLatest(run.id)
        if (latest?.status !== "scheduled") {
          return yield* new InvalidTransition({ verb: name, current: `${run.status} (no scheduled step)`, run: run.id })
        }
        yield* statements.stepReschedule({
          workflow: run.workflow,
          stepId: latest.id,
          runId: run.id,
          at,
          physicalQueue: queueOf(latest.queue).physical,
          now
        })
        yield* event(run, name === "run_now" ? "run_now" : "rescheduled", options, now, {
          step: latest.name,
          attempt: latest.attempt,
          ...(at === null ? {} : { details: { at: at.toISOString() } })
        })
        return yield* reread(run.id)
      })
    )

  return {
    resume: (id, options) =>
      verb("resume", id, options, (run, now) =>
        Effect.gen(function* () {
          const [latest] = yield* statements.stepLatest(run.id)
          const { physical } = queueOf(latest?.queue || config.workflowQueue)
          if (latest?.status === "in_progress") {
            // the step that ran at the outside pause still runs: the run goes on performing it
            yield* statements.runSetStatus({
              id: run.id,
              from: States.fromStates("unpause"),
              to: States.targetOf("unpause", run.status),
              now
            })
            yield* event(run, "resumed", options, now, { details: { transition: "unpause" } })
          } else if (latest?.status === "waiting") {
            // paused while it waited: it waits again (its deadline moved by the pause), or runs
            // now with the signal it took while paused
            const held = (yield* statements.signalHeldBy(latest.id))[0]
            yield* statements.runRewait(run.id, latest.id, now)
            if (held !== undefined) {
              yield* statements.stepWake({
                workflow: run.workflow,
                runId: run.id,
                stepId: latest.id,
                timedOut: false,
                physicalQueue: physical,
                now
              })
            }
            yield* event(run, "resumed", options, now, {
              step: latest.name,
              attempt: latest.attempt,
              details: { transition: held === undefined ? "rewait" : "wake" }
            })
          } else if (latest?.status === "failed" || latest?.status === "cancelled") {
            yield* jobs.ensureQueue(latest.queue)
            yield* setStatus(run, "resume", now)
            const [next] = yield* statements.stepInsertScheduled({
              workflow: run.workflow,
              runId: run.id,
              name: latest.name,
              attempt: latest.attempt + 1,
              position: latest.position,
              queue: latest.queue,
              physicalQueue: physical,
              reattempts: 0,
              actor: options?.actor ?? "app",
              now
            })
            // the next attempt runs with the signal the failed one held, without matching again
            if (next !== undefined) yield* statements.signalTransfer(latest.id, next.id)
            yield* event(run, "resumed", options, now, { step: latest.name, attempt: latest.attempt + 1 })
          } else if (latest?.status === "scheduled") {
            yield* setStatus(run, "resume", now)
            yield* statements.stepReschedule({
              workflow: run.workflow,
              stepId: latest.id,
              runId: run.id,
              at: latest.due_at,
              physicalQueue: physical,
              now
            })
            yield* event(run, "resumed", options, now, { step: latest.name, attempt: latest.attempt })
          } else {
            yield* setStatus(run, "resume", now)
            yield* statements.runSendContinue(
              run.workflow,
              run.id,
              queueOf(config.workflowQueue, run.priority ?? undefined).physical,
              now
            )
            yield* event(run, "resumed", options, now)
          }
          return yield* reread(run.id)
        })
      ),

    resumeAt: (id, step, options) =>
      verb("resume_at", id, options, (run, now) =>
        Effect.gen(function* () {
          const [latest] = yield* statements.stepLatestNamed(run.id, step)
          if (latest === undefined || step.startsWith("patch:")) return yield* new UnknownStep({ run: run.id, step })
          yield* jobs.ensureQueue(latest.queue)
          yield* statements.stepsCancelOpen(run.id, now)
          yield* setStatus(run, "resume_at", now)
          yield* statements.stepInsertScheduled({
            workflow: run.workflow,
            runId: run.id,
            name: latest.name,
            attempt: latest.attempt + 1,
            position: latest.position,
            queue: latest.queue,
            physicalQueue: queueOf(latest.queue).physical,
            reattempts: 0,
            actor: options?.actor ?? "app",
            now
          })
          yield* event(run, "resumed", options, now, {
            step,
            attempt: latest.attempt + 1,
            details: { resume_at: step }
          })
          return yield* reread(run.id)
        })
      ),

    runNow: (id, options) => moveScheduled("run_now", id, null, options),

    reschedule: (id, at, options) => moveScheduled("reschedule", id, at, options)
  } satisfies Partial<WorkflowClientShape>
}
