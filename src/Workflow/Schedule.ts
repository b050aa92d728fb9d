/**
 * Workflow schedules (seed 004): a definition's `schedule` is cron (5 fields, or 6 with
 * seconds), a macro or phrase as recurring tasks take them ("every day at 2am", `@hourly`), or a
 * duration ("5m", "1 hour", `{ hours: 6 }`). A duration becomes cron, so it must divide the day:
 * whole seconds or minutes that divide 60, whole hours that divide 24, or exactly one day
 * ("23m" and "7h" are refused; write cron for those). The recurring scheduler's leader fires
 * the slots (once per slot across the cluster, its ledger); the run's body sees its slot.
 *
 * @since 0.1.0
 */
import { Result } from "effect"
import { type ParsedSchedule, parseSchedule } from "../internal/cronSchedule.ts"

export type { ParsedSchedule } from "../internal/cronSchedule.ts"

/** A duration as an object (seed 004's duration object). */
export interface ScheduleDuration {
  readonly weeks?: number | undefined
  readonly days?: number | undefined
  readonly hours?: number | undefined
  readonly minutes?: number | undefined
  readonly seconds?: number | undefined
}

/** What `schedule` takes: cron, a macro or phrase, a duration string, or a duration object. */
export type ScheduleInput = string | ScheduleDuration

/** What a scheduled run's body sees: the slot its schedule fired for. */
export interface ScheduledSlot {
  readonly timestamp: Date
}

const UNIT_SECONDS: ReadonlyArray<readonly [RegExp, number]> = [
  [/^(s|secs?|seconds?)$/, 1],
  [/^(m|mins?|minutes?)$/, 60],
  [/^(h|hrs?|hours?)$/, 3600],
  [/^(d|days?)$/, 86_400],
  [/^(w|weeks?)$/, 604_800]
]

// seed 004: 5 or 6 fields of cron characters only is cron; anything else is a duration
const CRON_FIELD = /^[0-9*/,\-?LW#]+$/

/** A duration string's seconds ("5m", "1 hour", "90s"), undefined when it is not one. */
const durationSeconds = (text: string): number | undefined => {
  const m = /^(\d+(?:\.\d+)?)\s*([a-z]+)$/.exec(text.toLowerCase())
  if (m === null) return undefined
  const unit = UNIT_SECONDS.find(([re]) => re.test(m[2]!))
  return unit === undefined ? undefined : Number(m[1]) * unit[1]
}

const objectSeconds = (d: ScheduleDuration): Result.Result<number, string> => {
  const keys = ["weeks", "days", "hours", "minutes", "seconds"] as const
  for (const key of Object.keys(d)) {
    if (!(keys as ReadonlyArray<string>).includes(key)) return Result.fail(`unknown duration field ${key}`)
  }
  let total = 0
  for (const key of keys) {
    const v = d[key]
    if (v === undefined) continue
    if (typeof v !== "number" || !Number.isFinite(v) || v < 0)
      return Result.fail(`${key} must be a number of 0 or more`)
    total += v * ({ weeks: 604_800, days: 86_400, hours: 3600, minutes: 60, seconds: 1 } as const)[key]
  }
  return Result.succeed(total)
}

/** A duration as cron, when it divides the day; a reason when it does not. */
export const durationToCron = (seconds: number, shown: string): Result.Result<string, string> => {
  const refuse = Result.fail(
    `${shown}: a duration must be whole seconds or minutes that divide 60, whole hours that divide 24, or one day (use cron for others)`
  )
  if (!Number.isInteger(seconds) || seconds <= 0) return refuse
  const every = (n: number) => (n === 1 ? "*" : `*/${n}`)
  if (seconds < 60) return 60 % seconds === 0 ? Result.succeed(`${every(seconds)} * * * * *`) : refuse
  if (seconds % 60 !== 0) return refuse
  const minutes = seconds / 60
  if (minutes < 60) return 60 % minutes === 0 ? Result.succeed(`${every(minutes)} * * * *`) : refuse
  if (minutes % 60 !== 0) return refuse
  const hours = minutes / 60
  if (hours < 24) return 24 % hours === 0 ? Result.succeed(`0 ${every(hours)} * * *`) : refuse
  return hours === 24 ? Result.succeed("0 0 * * *") : refuse
}

/**
 * Parses a workflow's schedule in a time zone (default UTC; a duration is counted in UTC):
 * cron, a macro or phrase, or a duration that divides the day. The reason when it cannot.
 */
export const parseWorkflowSchedule = (
  schedule: ScheduleInput,
  timezone: string | undefined
): Result.Result<ParsedSchedule, string> => {
  if (timezone !== undefined && (typeof timezone !== "string" || timezone.trim() === "")) {
    return Result.fail("timezone must be an IANA time zone name")
  }
  if (typeof schedule === "object" && schedule !== null) {
    const seconds = objectSeconds(schedule)
    if (Result.isFailure(seconds)) return Result.fail(seconds.failure)
    const cron = durationToCron(seconds.success, JSON.stringify(schedule))
    if (Result.isFailure(cron)) return Result.fail(cron.failure)
    return Result.map(parseSchedule(cron.success, "UTC"), (p) => ({ ...p, schedule: JSON.stringify(schedule) }))
  }
  if (typeof schedule !== "string") return Result.fail("schedule must be a string or a duration object")
  const text = schedule.trim().replace(/\s+/g, " ")
  const fields = text.split(" ")
  const isCron = (fields.length === 5 || fields.length === 6) && fields.every((f) => CRON_FIELD.test(f))
  if (!isCron) {
    const seconds = durationSeconds(text)
    if (seconds !== undefined) {
      const cron = durationToCron(seconds, text)
      if (Result.isFailure(cron)) return Result.fail(cron.failure)
      return Result.map(parseSchedule(cron.success, "UTC"), (p) => ({ ...p, schedule }))
    }
  }
  // cron, a macro or a phrase: the recurring tasks' parser
  return parseSchedule(schedule, timezone)
}
