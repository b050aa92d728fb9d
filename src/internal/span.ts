import { Effect } from "effect"

/**
 * A span for hot paths: no stack trace is captured (capturing one per call cost more than
 * the rest of the call's JavaScript in bench:queue).
 */
export const hotSpan = (name: string, attributes: Record<string, unknown>) =>
  Effect.withSpan(name, { attributes }, { captureStackTrace: false })
