/**
 * The sweep's repairs of the runner's own losses: steps stalled in progress (their policy
 * applied), messages lost (a step's or an idle run's, sent again), finished runs past retention,
 * and the gauge of runs waiting past the visibility threshold.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Metric } from "effect"
import { withTransaction } from "../../../Database.ts"
import { makeChildWake } from "../../verbs/child.ts"
import { StepStalled } from "../../WorkflowError.ts"
import type { EngineContext } from "../Context.ts"
import { stallsTotal, waitingOverdueGauge } from "../Metrics.ts"
import type { makeOutcomes } from "../Outcomes.ts"

/** Builds the sweep's repairs; `limit` bounds the rows each reads per sweep. */
export const makeRepairs = (ctx: EngineContext, outcomes: ReturnType<typeof makeOutcomes>, limit: number) => {
  const { config, sql, store, jobs, statements, db, queueOf, errorJson } = ctx
  const { finish, stallNext } = outcomes
  const { withParentWake } = makeChildWake(ctx)

  /** Steps in progress past their timeout or the stall threshold: failed, their policy applied. How many. */
  const stalledSteps = (thresholdMs: number, now: Date | null) =>
    Effect.gen(function* () {
      let stalled = 0
      for (const step of yield* statements.stepsStalled(thresholdMs, now, limit).pipe(db("find stalled steps"))) {
        const detection = step.timeout_ms !== null && step.timeout_ms < thresholdMs ? "timeout" : "threshold"
        const stalledError = new StepStalled({ step: step.name, detection })
        const next = stallNext(step, stalledError)
        // a child's stall that cancels or pauses it wakes its parent with it
        const [applied] = yield* withParentWake(
          step.run_id,
          next._tag === "cancel" || next._tag === "pause",
          finish({
            workflow: step.workflow,
            runId: step.run_id,
            stepId: step.id,
            status: "failed",
            output: null,
            error: errorJson(stalledError),
            definitionHash: null,
            next,
            now
          })
        )
        if (applied?.applied === 1n) {
          stalled++
          yield* statements
            .eventInsert({
              runId: step.run_id,
              type: "stall_detected",
              step: step.name,
              attempt: step.attempt,
              actor: "system",
              reason: `in progress past its ${detection === "timeout" ? "timeout" : "stall threshold"}`,
              details: JSON.stringify({ detection, action: config.workflowStallAction }),
              now
            })
            .pipe(db("record stall"))
          yield* Metric.update(
            stallsTotal.pipe(Metric.withAttributes({ workflow_class: step.workflow, step: step.name, detection })),
            1
          )
        }
      }
      return stalled
    })

  /** Lost messages sent again: a scheduled step's overdue past the threshold, an idle run's continue. How many. */
  const lostMessages = (thresholdMs: number, now: Date | null) =>
    Effect.gen(function* () {
      let resent = 0
      const overdue = yield* statements.stepsOverdue(thresholdMs, now, limit).pipe(db("find overdue steps"))
      const byQueue = new Map<string, Array<(typeof overdue)[number]>>()
      for (const step of overdue) {
        const queue = step.queue || config.workflowQueue
        byQueue.set(queue, [...(byQueue.get(queue) ?? []), step])
      }
      for (const [logical, group] of byQueue) {
        const { queue, physical } = queueOf(logical)
        yield* jobs.ensureQueue(queue)
        // a step behind a backlog still has its message: only a lost one is sent again
        const queued = yield* store.payloadValuesQueued(
          queue,
          "step",
          group.map((s) => String(s.id))
        )
        for (const step of group) {
          if (queued.has(String(step.id))) continue
          const r = yield* statements
            .stepResend({
              workflow: step.workflow,
              runId: step.run_id,
              stepId: step.id,
              physicalQueue: physical,
              thresholdMs,
              now
            })
            .pipe(db("re-send step"))
          resent += r.length
        }
      }
      for (const run of yield* statements.runsIdle(thresholdMs, now, limit).pipe(db("find idle runs"))) {
        const { queue, physical } = queueOf(config.workflowQueue, run.priority ?? undefined)
        yield* jobs.ensureQueue(queue)
        yield* statements.runSendContinue(run.workflow, run.id, physical, now).pipe(db("re-send run"))
        resent++
      }
      return resent
    })

  /** Finished runs past the retention deleted, a thousand per transaction. How many. */
  const retention = (now: Date | null) =>
    Effect.gen(function* () {
      let deleted = 0
      if (config.workflowRetention === undefined) return deleted
      const retentionMs = Duration.toMillis(config.workflowRetention)
      while (true) {
        const n = yield* withTransaction(
          sql,
          Effect.gen(function* () {
            const ids = (yield* statements.runsDeleteFinished(retentionMs, now, 1_000)).map((r) => r.id)
            if (ids.length > 0) yield* statements.runsDeleteRows(ids)
            return ids.length
          })
        ).pipe(db("delete old runs"))
        deleted += n
        if (n < 1_000) break
      }
      return deleted
    })

  const stuckWorkflows = new Set<string>()
  /** The gauge of runs waiting past the visibility threshold, per workflow. How many in all. */
  const waitingOverdue = (now: Date | null) =>
    Effect.gen(function* () {
      let total = 0
      const overdueThresholdMs = Duration.toMillis(config.workflowWaitingVisibilityThreshold)
      const stuck = new Map<string, number>()
      for (const row of yield* statements.runsWaitingOverdue(overdueThresholdMs, now).pipe(db("count stuck waits"))) {
        total += Number(row.n)
        stuck.set(row.workflow, Number(row.n))
      }
      // a workflow whose stuck runs moved on goes back to 0
      for (const workflow of stuckWorkflows) if (!stuck.has(workflow)) stuck.set(workflow, 0)
      for (const [workflow, n] of stuck) {
        yield* Metric.update(waitingOverdueGauge.pipe(Metric.withAttributes({ workflow_class: workflow })), n)
        if (n === 0) stuckWorkflows.delete(workflow)
        else stuckWorkflows.add(workflow)
      }
      return total
    })

  return { stalledSteps, lostMessages, retention, waitingOverdue }
}
