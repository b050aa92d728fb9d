/** Capturing log lines in tests. */
import { Effect, Logger } from "effect"

/** Log lines written while `effect` runs (its fibers included), added to `lines`. */
export const withCapturedLogs = <A, E, R>(lines: Array<string>, effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(Logger.CurrentLoggers, (current) => {
    const capture = Logger.make(({ message }) => {
      lines.push((Array.isArray(message) ? message : [message]).map(String).join(" "))
    })
    return Effect.provideService(effect, Logger.CurrentLoggers, new Set([...current, capture]))
  })
