/**
 * The context an enqueue carries in its headers: the W3C trace context of the enqueuer's span
 * and the request context (`CurrentAttributes`); and the trace header read back into a span.
 *
 * @since 0.1.0
 */
import { Effect, Option, Tracer } from "effect"
import { CONTEXT_HEADER, CurrentAttributes } from "./RequestContext.ts"

/** W3C trace context header carrying the enqueuer's span. */
export const TRACEPARENT = "traceparent"

/** The `traceparent` header of the current span (none outside a span). */
export const traceHeaders: Effect.Effect<Record<string, string>> = Effect.map(
  Effect.option(Effect.currentSpan),
  (span) =>
    Option.match(span, {
      onNone: () => ({}),
      onSome: (s) => ({ [TRACEPARENT]: `00-${s.traceId}-${s.spanId}-${s.sampled ? "01" : "00"}` })
    })
)

/** The request context, in a header of its own (none when it is empty). */
export const contextHeaders: Effect.Effect<Record<string, unknown>> = Effect.map(CurrentAttributes, (attributes) =>
  Object.keys(attributes).length === 0 ? {} : { [CONTEXT_HEADER]: attributes }
)

// The last header read and its span: the jobs of one enqueueMany share one traceparent.
let lastTraceparent: string | undefined
let lastLinked: Tracer.ExternalSpan | undefined

/** Reads a `traceparent` header back into a span to link to. */
export const linkedSpan = (headers: Readonly<Record<string, unknown>>): Tracer.ExternalSpan | undefined => {
  const value = headers[TRACEPARENT]
  if (typeof value !== "string") return undefined
  if (value === lastTraceparent) return lastLinked
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(value)
  const span = match
    ? Tracer.externalSpan({ traceId: match[1]!, spanId: match[2]!, sampled: match[3] === "01" })
    : undefined
  lastTraceparent = value
  lastLinked = span
  return span
}
