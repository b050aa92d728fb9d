/**
 * Schedules of recurring tasks: cron (5 fields, or 6 with seconds) through `effect/Cron` in a
 * time zone, with the macros (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`) and the
 * plain phrases of seed 002 ("every hour", "every day at 2am", "every 5 minutes", "every monday
 * at 9:30am") translated to cron before parsing; and which slots are due at a tick.
 *
 * @since 0.1.0
 */
import { Cron } from "effect"

/** How a task treats slots that came due while no scheduler ran (downtime, a leader change). */
export type CatchUp = "one" | "none" | "all"

export { type ParsedSchedule, parseSchedule } from "../internal/cronSchedule.ts"

/** At most this many slots fire in one tick for one task, whatever its catch-up. */
export const MAX_SLOTS_PER_TICK = 1000

/**
 * The slots due at `now`, oldest first. Slots at or before `after` (the last fire, or when the
 * task became active) never fire. Slots after `since` (this scheduler's previous tick) came due
 * while it ran and all fire; older ones were missed (no scheduler ran) and follow `catchUp`:
 * `one` fires the newest missed slot, `none` none, `all` the newest `limit`.
 */
export const dueSlots = (
  cron: Cron.Cron,
  options: {
    readonly after: Date
    readonly since: Date | undefined
    readonly now: Date
    readonly catchUp: CatchUp
    readonly limit: number
  }
): ReadonlyArray<Date> => {
  const { after, since, now, catchUp, limit } = options
  const onTime: Array<Date> = []
  const missed: Array<Date> = []
  let cursor = new Date(now.getTime() + 1)
  while (onTime.length + missed.length < MAX_SLOTS_PER_TICK) {
    const slot = Cron.prev(cron, cursor)
    if (slot.getTime() <= after.getTime()) break
    if (since !== undefined && slot.getTime() > since.getTime()) onTime.push(slot)
    else {
      if (catchUp === "none") break
      missed.push(slot)
      if (catchUp === "one" || missed.length >= limit) break
    }
    cursor = slot
  }
  return [...onTime, ...missed].reverse()
}
