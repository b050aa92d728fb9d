/**
 * The workflow metrics, and their series per workflow, step and outcome (kept, not made per step).
 *
 * @since 0.1.0
 */
import { Metric } from "effect"
import { boundedMemo } from "../../internal/memo.ts"

/** Step attempts, by workflow, step and outcome. */
export const stepsTotal = Metric.counter("pgbus_workflow_steps_total", {
  description: "workflow step attempts by outcome"
})
/** Step attempts' run times in seconds, by workflow, step and outcome. */
export const stepDuration = Metric.histogram("pgbus_workflow_step_duration_seconds", {
  description: "run time of workflow step attempts",
  boundaries: Metric.exponentialBoundaries({ start: 0.001, factor: 4, count: 10 })
})
/** Runs finished, by workflow. */
export const finishedTotal = Metric.counter("pgbus_workflows_finished_total", { description: "runs finished" })
/** Runs paused by a step. */
export const pausedTotal = Metric.counter("pgbus_workflows_paused_total", { description: "runs paused by a step" })
/** Runs cancelled. */
export const cancelledTotal = Metric.counter("pgbus_workflows_cancelled_total", { description: "runs cancelled" })
/** Steps the sweep found stalled. */
export const stallsTotal = Metric.counter("pgbus_workflow_stalls_total", { description: "steps found stalled" })
/** Late notices of notify waits. */
export const waitOverdueTotal = Metric.counter("pgbus_workflow_wait_overdue_total", {
  description: "late notices of notify waits (one per deadline, or one for a sweep that missed several)"
})
/** Runs waiting past the visibility threshold, as of the last sweep. */
export const waitingOverdueGauge = Metric.gauge("pgbus_workflow_waiting_overdue", {
  description: "runs waiting longer than workflowWaitingVisibilityThreshold, as of the last sweep"
})

/** The workflow metrics (read them with `Metric.value`, export them with your metrics layer). */
export const WorkflowMetrics = {
  stepsTotal,
  stepDuration,
  finishedTotal,
  pausedTotal,
  cancelledTotal,
  stallsTotal,
  waitOverdueTotal,
  waitingOverdue: waitingOverdueGauge
} as const

// A metric with attributes keys its series on first use: one per workflow, step and outcome,
// kept, rather than a new one (and its key) for every step.
export const stepMetricsOf = boundedMemo((key) => {
  const [workflow, step, outcome] = key.split("\u0000")
  const attributes = { workflow_class: workflow!, step: step!, outcome: outcome! }
  return {
    total: stepsTotal.pipe(Metric.withAttributes(attributes)),
    duration: stepDuration.pipe(Metric.withAttributes(attributes))
  }
})
/** The step counter and histogram of one workflow, step and outcome. */
export const stepMetrics = (workflow: string, step: string, outcome: string) =>
  stepMetricsOf(`${workflow}\u0000${step}\u0000${outcome}`)
/** The finished-runs counter of one workflow. */
export const finishedOf = boundedMemo((workflow) =>
  finishedTotal.pipe(Metric.withAttributes({ workflow_class: workflow }))
)
