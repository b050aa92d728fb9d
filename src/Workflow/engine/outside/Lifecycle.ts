/**
 * The verbs that stop or restart a run: `pause`, `cancel` (with its children, when asked),
 * `skip` of its waiting step, and `rerun` as a new run.
 *
 * @since 0.1.0
 */
import { Effect, Metric, Schema } from "effect"
import type { WorkflowClientShape, WorkflowRef } from "../../Client.ts"
import { makeChildWake } from "../../verbs/child.ts"
import { InvalidTransition } from "../../WorkflowError.ts"
import { cancelledTotal } from "../Metrics.ts"
import type { OutsideEnv } from "./Transaction.ts"

/** The verbs that stop or restart a run. */
export const makeLifecycleVerbs = ({ ctx, client, queries, starts, tx }: OutsideEnv) => {
  const { config, statements, db, queueOf } = ctx
  const { reread } = queries
  const { startRun } = starts
  const { wakeParentOf } = makeChildWake(ctx)
  const { verb, event, setStatus } = tx

  return {
    pause: (id, options) =>
      verb("pause", id, options, (run, now) =>
        Effect.gen(function* () {
          yield* setStatus(run, "pause", now, "manual")
          yield* event(run, "paused", options, now)
          return yield* reread(run.id)
        })
      ),

    cancel: (id, options) =>
      Effect.gen(function* () {
        const info = yield* verb("cancel", id, options, (run, now) =>
          Effect.gen(function* () {
            yield* statements.stepsCancelOpen(run.id, now)
            yield* setStatus(run, "cancel", now)
            yield* event(run, "cancelled", options, now)
            yield* Metric.update(cancelledTotal.pipe(Metric.withAttributes({ workflow_class: run.workflow })), 1)
            // a child's cancel wakes its parent in the same transaction
            if (run.parent_run_id != null) yield* wakeParentOf(run.id, now)
            return yield* reread(run.id)
          })
        )
        // asked for: the run's children are cancelled after it, each in its own transaction
        // (locking the parent before its children could deadlock with a child's end, which locks
        // the child, then its parent), and theirs after them
        if (options?.cancelChildren === true) {
          const children = yield* statements.runChildrenOngoing(info.id).pipe(db("find child runs"))
          for (const child of children) {
            yield* client()
              .cancel(child.id, { ...options, resourceId: undefined })
              .pipe(Effect.catchTag(["NotOngoing", "InvalidTransition"], () => Effect.void))
          }
        }
        return info
      }),

    rerun: (id, options) =>
      Effect.gen(function* () {
        const run = yield* verb("rerun", id, options, (row) => Effect.succeed(row))
        const ref: WorkflowRef<unknown> = {
          name: run.workflow,
          payload: Schema.Unknown,
          version: run.definition_version ?? undefined,
          queue: undefined
        }
        return yield* startRun(
          ref,
          run.payload,
          {
            subject: run.subject ?? undefined,
            resourceId: run.resource_id ?? undefined,
            actor: options?.actor,
            reason: options?.reason,
            // the new run keeps the old one's priority and its claim on a singleton's slot
            priority: run.priority ?? undefined,
            singleton: run.singleton
          },
          run.id
        )
      }),
    skip: (id, options) =>
      verb("skip", id, options, (run, now) =>
        Effect.gen(function* () {
          const [waiting] = yield* statements.stepWaitingOf(run.id)
          if (waiting === undefined) {
            return yield* new InvalidTransition({
              verb: "skip",
              current: `${run.status} (no waiting step)`,
              run: run.id
            })
          }
          yield* statements.stepResolveWaiting({
            workflow: run.workflow,
            runId: run.id,
            stepId: waiting.id,
            outcome: "skip",
            error: null,
            actor: options?.actor ?? "app",
            reason: options?.reason ?? null,
            eventType: "skipped",
            eventDetails: null,
            physicalQueue: queueOf(waiting.queue || config.workflowQueue).physical,
            now
          })
          return yield* reread(run.id)
        })
      )
  } satisfies Partial<WorkflowClientShape>
}
