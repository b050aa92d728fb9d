import { Effect, Tracer } from "effect"

/**
 * A span for hot paths: no stack trace is captured (capturing one per call cost more than
 * the rest of the call's JavaScript in bench:queue), and no span at all when no tracing
 * backend is installed (the native tracer keeps spans in memory only; making one, its ids
 * and its attributes, and the fiber context it is set in, cost a few percent of a job).
 */
export const hotSpan =
  (name: string, attributes: Record<string, unknown>) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.flatMap(Effect.tracer, (tracer) =>
      tracer === Tracer.nativeTracer
        ? self
        : self.pipe(Effect.withSpan(name, { attributes }, { captureStackTrace: false }))
    )
