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

/** A run's info. */
export const info = (id: string) => Effect.flatMap(WorkflowClient, (c) => Effect.map(c.get(id), (h) => h.info))
