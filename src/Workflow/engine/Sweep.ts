/**
 * The sweep: stalled steps, lost messages, wait deadlines, fan-outs whose callback was lost, lost
 * child wake-ups, retention.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect, Metric } from "effect"
import { type Finished as BatchFinished, BatchNotFound } from "../../Batch/Batch.ts"
import { statementNow, withTransaction } from "../../Database.ts"
import type { QueueError } from "../../Queue/QueueError.ts"
import { makeChildWake } from "../verbs/child.ts"
import { type DatabaseError, StepStalled, WaitTimedOut } from "../WorkflowError.ts"
import { FAN_OUT_WAIT, type StepRow } from "../WorkflowSql.ts"
import type { EngineContext } from "./Context.ts"
import { stallsTotal, waitingOverdueGauge, waitOverdueTotal } from "./Metrics.ts"
import type { makeOutcomes } from "./Outcomes.ts"
import type { makeQueries } from "./Queries.ts"
import type { SweepReport } from "./Services.ts"
import { fanOutOutcomeOf } from "./Services.ts"
import type { makeVerbs } from "./Verbs.ts"

/** The sweep: stalled steps, lost messages, wait deadlines, fan-outs whose callback was lost, retention. */
export const makeSweep = (
  ctx: EngineContext,
  outcomes: ReturnType<typeof makeOutcomes>,
  queries: ReturnType<typeof makeQueries>,
  verbs: ReturnType<typeof makeVerbs>
) => {
  const { config, sql, store, jobs, batches, statements, db, queueOf, errorJson } = ctx
  const { getRow, isUuid } = queries
  const { finish, stallNext } = outcomes
  const { sendSignal } = verbs
  const { repairLostWakes, withParentWake } = makeChildWake(ctx)

  const SWEEP_BATCH = 200

  /** Applies a waiting step's onTimeout (the sweep at its deadline; `expireWait` at once). */
  const applyTimeout = (step: StepRow & { readonly workflow: string }, now: Date | null) =>
    Effect.gen(function* () {
      const action = step.on_timeout ?? "pause"
      const physical = queueOf(step.queue || config.workflowQueue).physical
      const details = JSON.stringify({ wait_for: step.wait_for, action, timeout_at: step.timeout_at })
      if (action === "notify" && step.wait_deadline_per_run && step.timeout_at !== null) {
        // only a worker has the code of a per-run deadline: it writes the notice as it evaluates it
        const [handed] = yield* statements
          .stepRequestRenewal({
            workflow: step.workflow,
            runId: step.run_id,
            stepId: step.id,
            missedAt: step.timeout_at,
            physicalQueue: physical,
            thresholdMs: Duration.toMillis(config.workflowStallThreshold),
            now
          })
          .pipe(db("hand over a late notice"))
        return handed !== undefined
      }
      if (action === "notify") {
        const [noticed] = yield* statements
          .stepNotifyLate({ runId: step.run_id, stepId: step.id, missedAt: step.timeout_at, now })
          .pipe(db("late notice"))
        if (noticed !== undefined) {
          yield* Metric.update(
            waitOverdueTotal.pipe(Metric.withAttributes({ workflow_class: step.workflow, step: step.name })),
            1
          )
        }
        return noticed !== undefined
      }
      if (action === "run") {
        const [woke] = yield* statements
          .stepWake({
            workflow: step.workflow,
            runId: step.run_id,
            stepId: step.id,
            timedOut: true,
            physicalQueue: physical,
            now
          })
          .pipe(db("wake timed-out step"))
        if (woke !== undefined) {
          yield* statements
            .eventInsert({
              runId: step.run_id,
              type: "wait_timed_out",
              step: step.name,
              attempt: step.attempt,
              actor: "system",
              reason: null,
              details,
              now
            })
            .pipe(db("record timeout"))
        }
        return woke !== undefined
      }
      const error =
        action === "pause"
          ? errorJson(
              new WaitTimedOut({
                step: step.name,
                waitFor: step.wait_for ?? "",
                timeoutAt: step.timeout_at?.toISOString() ?? "now"
              })
            )
          : null
      // a child's wait that cancels or pauses it wakes its parent with it
      const [resolved] = yield* withParentWake(
        step.run_id,
        action === "cancel" || action === "pause",
        statements
          .stepResolveWaiting({
            workflow: step.workflow,
            runId: step.run_id,
            stepId: step.id,
            outcome: action,
            error,
            actor: "system",
            reason: null,
            eventType: "wait_timed_out",
            eventDetails: details,
            physicalQueue: physical,
            now
          })
          .pipe(db("apply timeout"))
      )
      return resolved !== undefined
    })

  /** What one sweep repaired. */
  /**
   * A fan-out's batch finished: its outcome goes to the step waiting on it as a signal (one per
   * batch: the callback and the sweep's make-up share the key). A callback for another attempt's
   * batch, or a run that is over, changes nothing.
   */
  const fanOutFinished = (
    outcome:
      | BatchFinished
      | { readonly batchId: string; readonly gone: true; readonly properties: BatchFinished["properties"] }
  ) =>
    Effect.gen(function* () {
      const runId = String(outcome.properties.workflow_id ?? "")
      const stepId = String(outcome.properties.step_id ?? "")
      if (!isUuid(runId)) return false
      const [waiting] = yield* statements.stepWaitingOf(runId).pipe(db("find waiting step"))
      if (waiting === undefined || waiting.wait_for !== FAN_OUT_WAIT || String(waiting.id) !== stepId) {
        yield* Effect.logDebug(`pgbus: fan-out callback for batch ${outcome.batchId} found no step waiting on it`)
        return false
      }
      const sent = yield* sendSignal(runId, FAN_OUT_WAIT, outcome, {
        idempotencyKey: `fan-out:${outcome.batchId}`,
        actor: "system",
        reason: "gone" in outcome ? "the batch row is gone" : "the batch finished"
      }).pipe(
        Effect.map((receipt) => !receipt.duplicate),
        Effect.catchTag(["NotOngoing", "RunNotFound", "InvalidSignal"], () => Effect.succeed(false))
      )
      return sent
    })

  const stuckWorkflows = new Set<string>()
  const sweepOnce: Effect.Effect<SweepReport, DatabaseError | QueueError> = Effect.gen(function* () {
    const now = yield* statementNow
    const thresholdMs = Duration.toMillis(config.workflowStallThreshold)
    let stalled = 0
    for (const step of yield* statements.stepsStalled(thresholdMs, now, SWEEP_BATCH).pipe(db("find stalled steps"))) {
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
    let resent = 0
    const overdue = yield* statements.stepsOverdue(thresholdMs, now, SWEEP_BATCH).pipe(db("find overdue steps"))
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
    for (const run of yield* statements.runsIdle(thresholdMs, now, SWEEP_BATCH).pipe(db("find idle runs"))) {
      const { queue, physical } = queueOf(config.workflowQueue, run.priority ?? undefined)
      yield* jobs.ensureQueue(queue)
      yield* statements.runSendContinue(run.workflow, run.id, physical, now).pipe(db("re-send run"))
      resent++
    }
    let timedOut = 0
    for (const step of yield* statements
      .waitsTimedOut(now, thresholdMs, SWEEP_BATCH)
      .pipe(db("find timed-out waits"))) {
      if (yield* applyTimeout(step, now)) timedOut++
    }
    let deleted = 0
    if (config.workflowRetention !== undefined) {
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
    }
    // lost fan-out callbacks: the batch finished long ago (or is gone) and the step still waits
    let fanOutsResolved = 0
    for (const step of yield* statements.fanOutsWaiting(thresholdMs, now, SWEEP_BATCH).pipe(db("find fan-outs"))) {
      const batchId = step.batch_id!
      const properties = { workflow_id: step.run_id, step_id: String(step.id) }
      const found = yield* batches.find(batchId).pipe(Effect.result)
      const nowMs = now?.getTime() ?? (yield* Clock.currentTimeMillis)
      if (found._tag === "Failure") {
        // a database error is for the next sweep; a batch row that is gone pauses the run
        if (found.failure instanceof BatchNotFound && (yield* fanOutFinished({ batchId, gone: true, properties }))) {
          fanOutsResolved++
        }
        continue
      }
      const batch = found.success
      if (!batch.finished || batch.finishedAt === undefined || nowMs - batch.finishedAt.getTime() < thresholdMs)
        continue
      if (yield* fanOutFinished(fanOutOutcomeOf(batch))) fanOutsResolved++
    }
    // lost child wake-ups: a parent still waiting on a child that ended (an end the runner did not make)
    const childrenWoken = yield* repairLostWakes(SWEEP_BATCH)
    let waitingOverdue = 0
    const overdueThresholdMs = Duration.toMillis(config.workflowWaitingVisibilityThreshold)
    const stuck = new Map<string, number>()
    for (const row of yield* statements.runsWaitingOverdue(overdueThresholdMs, now).pipe(db("count stuck waits"))) {
      waitingOverdue += Number(row.n)
      stuck.set(row.workflow, Number(row.n))
    }
    // a workflow whose stuck runs moved on goes back to 0
    for (const workflow of stuckWorkflows) if (!stuck.has(workflow)) stuck.set(workflow, 0)
    for (const [workflow, n] of stuck) {
      yield* Metric.update(waitingOverdueGauge.pipe(Metric.withAttributes({ workflow_class: workflow })), n)
      if (n === 0) stuckWorkflows.delete(workflow)
      else stuckWorkflows.add(workflow)
    }
    return { stalled, resent, timedOut, deleted, waitingOverdue, fanOutsResolved, childrenWoken } satisfies SweepReport
  }).pipe(Effect.withSpan("pgbus.workflow.sweep", {}, { captureStackTrace: false }))

  /** Applies the waiting step's onTimeout now, whatever its deadline (test helpers, support tooling). */
  const expireWait = (runId: string) =>
    Effect.gen(function* () {
      const run = yield* getRow(runId, null)
      const [waiting] = yield* statements.stepWaitingOf(runId).pipe(db("find waiting step"))
      if (waiting === undefined) return false
      const now = yield* statementNow
      return yield* applyTimeout({ ...waiting, workflow: run.workflow }, now)
    })

  return { applyTimeout, fanOutFinished, sweepOnce, expireWait }
}
