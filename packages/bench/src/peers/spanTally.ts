/**
 * A diagnostic run's statement counter (ours-workflows.ts, ours-signals.ts): the default tracer
 * plus a count of the statement spans that end while recording, and with `profile` a tally of
 * every span by name or statement text (count and time). Installing any tracer other than the
 * native one makes the library open the spans it skips without a tracing backend, a cost a user
 * without tracing does not pay: such runs are diagnostics, not measurements.
 */
import { type Exit, Tracer } from "effect"

interface Tally {
  count: number
  ns: bigint
}

/** A counter and its span class; `recording` is read when each span ends. */
export const makeSpanTally = (profile: boolean) => {
  const tally = new Map<string, Tally>()
  const state = { recording: false, statements: 0 }
  class CountingSpan extends Tracer.NativeSpan {
    override end(endTime: bigint, exit: Exit.Exit<unknown, unknown>): void {
      if (state.recording && this.status._tag === "Started") {
        const text = this._attributes?.get("db.query.text")
        if (text !== undefined) state.statements++
        if (profile) {
          const key = typeof text === "string" ? `sql ${text.replace(/\s+/g, " ").slice(0, 110)}` : `span ${this.name}`
          const t = tally.get(key) ?? { count: 0, ns: 0n }
          t.count++
          t.ns += endTime - this.status.startTime
          tally.set(key, t)
        }
      }
      super.end(endTime, exit)
    }
  }
  return {
    state,
    CountingSpan,
    /** Prints the 40 costliest tally rows to stderr, with their count per `unit` (`per` of them). */
    print: (title: string, unit: string, per: number): void => {
      const rows = [...tally].sort((a, b) => Number(b[1].ns - a[1].ns))
      console.error(`${title}: count, per ${unit}, total ms, mean ms`)
      for (const [key, t] of rows.slice(0, 40)) {
        const ms = Number(t.ns) / 1e6
        console.error(
          `  ${String(t.count).padStart(7)} ${(t.count / Math.max(1, per)).toFixed(2).padStart(6)} ${ms.toFixed(0).padStart(7)} ${(ms / t.count).toFixed(2).padStart(7)}  ${key}`
        )
      }
    }
  }
}
