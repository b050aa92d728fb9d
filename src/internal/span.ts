import { Effect, type Fiber, Tracer } from "effect"

/**
 * A span for hot paths: no stack trace is captured (capturing one per call cost more than
 * the rest of the call's JavaScript in bench:queue), and no span at all when no tracing
 * backend is installed (the native tracer keeps spans in memory only; making one, its ids
 * and its attributes, and the fiber context it is set in, cost a few percent of a job). One
 * read of the fiber decides.
 */
export const hotSpan =
  (name: string, attributes: Record<string, unknown>) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    withHotSpan(self, name, { attributes })

/** `hotSpan` with the span's options (attributes, links) given whole: `Effect.withSpan` only under a tracing backend. */
export const withHotSpan = <A, E, R>(
  self: Effect.Effect<A, E, R>,
  name: string,
  options: Tracer.SpanOptionsNoTrace
): Effect.Effect<A, E, R> =>
  Effect.withFiber((fiber) =>
    fiber.getRef(Tracer.Tracer) === Tracer.nativeTracer
      ? self
      : Effect.withSpan(self, name, { ...options, captureStackTrace: false })
  )

/**
 * `withHotSpan` of an Effect built from the fiber: with no tracing backend, `body` runs in the
 * same read of the fiber that decides (one primitive for both).
 */
export const withHotSpanOf = <A, E, R>(
  name: string,
  options: Tracer.SpanOptionsNoTrace,
  body: (fiber: Fiber.Fiber<unknown, unknown>) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.withFiber((fiber) =>
    fiber.getRef(Tracer.Tracer) === Tracer.nativeTracer
      ? body(fiber)
      : Effect.withSpan(Effect.withFiber(body), name, { ...options, captureStackTrace: false })
  )

/** The span of one workflow execution and its attributes, named as seed 004's tracing names them. */
export const runSpan = (workflow: string, runId: string) =>
  ["pgbus.workflow.run", { attributes: { "workflow.id": workflow, "workflow.run_id": runId } }] as const

/** The span of one step attempt (`step.type` says which verb). */
export const stepSpan = (workflow: string, runId: string, step: { readonly name: string; readonly attempt: number }) =>
  [
    "pgbus.step.run",
    {
      attributes: {
        "workflow.id": workflow,
        "workflow.run_id": runId,
        "step.id": step.name,
        "step.type": "run",
        "step.attempt": step.attempt
      }
    }
  ] as const
