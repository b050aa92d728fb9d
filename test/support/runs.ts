/** Reading a workflow run in tests: its attempts, its audit trail, its info. */
import { Effect } from "effect"
import { WorkflowClient } from "../../src/Workflow/Client.ts"

/** Every attempt of a run, as `<step>#<attempt>:<status>`. */
export const stepRows = (id: string) =>
  Effect.flatMap(WorkflowClient, (c) =>
    Effect.map(c.steps(id), (ss) => ss.map((s) => `${s.name}#${s.attempt}:${s.status}`))
  )

/** The types of a run's audit events, in order. */
export const eventTypes = (id: string) =>
  Effect.flatMap(WorkflowClient, (c) => Effect.map(c.events(id), (es) => es.map((e) => e.type)))

/** The trail of a one-step run woken by a signal through the queue (its step claimed by `stepClaim`, or as it, in the read). */
export const WOKEN_TRAIL = [
  "started",
  "step_scheduled",
  "step_started",
  "step_waiting",
  "signal_received",
  "signal_claimed",
  "step_started",
  "step_completed",
  "finished"
]

/** A run's info. */
export const info = (id: string) => Effect.flatMap(WorkflowClient, (c) => Effect.map(c.get(id), (h) => h.info))
