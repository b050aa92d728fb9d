/**
 * Schedules as text: cron (5 fields, or 6 with seconds) through `effect/Cron` in a time zone,
 * the macros (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`) and the plain phrases of
 * seed 002 ("every hour", "every day at 2am", "every 5 minutes", "every monday at 9:30am")
 * translated to cron before parsing. Shared by recurring tasks and workflow schedules (a leaf:
 * the workflow layer sits below the recurring one).
 *
 * @since 0.1.0
 */
import { Cron, Result } from "effect"

/** A parsed schedule: the text as given, its cron form, the time zone, the `Cron`. */
export interface ParsedSchedule {
  readonly schedule: string
  readonly cron: string
  readonly timeZone: string
  readonly parsed: Cron.Cron
}

const MACROS: Readonly<Record<string, string>> = {
  "@yearly": "0 0 1 1 *",
  "@annually": "0 0 1 1 *",
  "@monthly": "0 0 1 * *",
  "@weekly": "0 0 * * 0",
  "@daily": "0 0 * * *",
  "@midnight": "0 0 * * *",
  "@hourly": "0 * * * *"
}

const EVERY_UNIT: Readonly<Record<string, string>> = {
  second: "* * * * * *",
  minute: "* * * * *",
  hour: "0 * * * *",
  day: "0 0 * * *",
  week: "0 0 * * 0",
  month: "0 0 1 * *",
  year: "0 0 1 1 *"
}

const WEEKDAYS: Readonly<Record<string, string>> = {
  sunday: "0",
  monday: "1",
  tuesday: "2",
  wednesday: "3",
  thursday: "4",
  friday: "5",
  saturday: "6",
  weekday: "1-5",
  weekend: "0,6"
}

/** "2am", "2:30 pm", "14:00", "noon", "midnight" as [hour, minute]; a reason when unreadable. */
const timeOfDay = (text: string): Result.Result<readonly [number, number], string> => {
  if (text === "noon") return Result.succeed([12, 0])
  if (text === "midnight") return Result.succeed([0, 0])
  const m = /^(\d{1,2})(?::(\d{2}))?\s*(am|pm)?$/.exec(text)
  if (m === null) return Result.fail(`unreadable time of day "${text}" (e.g. 2am, 2:30pm, 14:00, noon)`)
  let hour = Number(m[1])
  const minute = m[2] === undefined ? 0 : Number(m[2])
  if (m[3] !== undefined) {
    if (hour < 1 || hour > 12) return Result.fail(`"${text}": an hour with am/pm is 1 to 12`)
    hour = (hour % 12) + (m[3] === "pm" ? 12 : 0)
  } else if (m[2] === undefined) {
    return Result.fail(`"${text}": give am/pm or minutes (2am, 14:00)`)
  }
  if (hour > 23 || minute > 59) return Result.fail(`"${text}" is not a time of day`)
  return Result.succeed([hour, minute])
}

/** A phrase as cron; a reason when it is no phrase this understands. */
const phraseToCron = (phrase: string): Result.Result<string, string> => {
  const every = /^every\s+(\S+)$/.exec(phrase)
  if (every !== null && EVERY_UNIT[every[1]!] !== undefined) return Result.succeed(EVERY_UNIT[every[1]!]!)
  const many = /^every\s+(\d+)\s*(seconds?|minutes?|hours?)$/.exec(phrase)
  if (many !== null) {
    const n = Number(many[1])
    const unit = many[2]!.replace(/s$/, "")
    const period = unit === "hour" ? 24 : 60
    if (n < 1 || period % n !== 0) return Result.fail(`every ${n} ${unit}s: ${n} must divide ${period}`)
    const step = n === 1 ? "*" : `*/${n}`
    if (unit === "second") return Result.succeed(`${step} * * * * *`)
    if (unit === "minute") return Result.succeed(`${step} * * * *`)
    return Result.succeed(`0 ${step} * * *`)
  }
  const at =
    /^every\s+(day|weekday|weekend|sunday|monday|tuesday|wednesday|thursday|friday|saturday)(?:\s+at\s+(.+))?$/.exec(
      phrase
    )
  if (at !== null) {
    const time = at[2] === undefined ? Result.succeed([0, 0] as const) : timeOfDay(at[2].trim())
    if (Result.isFailure(time)) return Result.fail(time.failure)
    const [hour, minute] = time.success
    const weekday = at[1] === "day" ? "*" : WEEKDAYS[at[1]!]!
    return Result.succeed(`${minute} ${hour} * * ${weekday}`)
  }
  return Result.fail(
    `"${phrase}" is neither cron (5 or 6 fields) nor a known phrase (every hour, every day at 2am, every 5 minutes, every monday at 9am, @daily)`
  )
}

const looksLikeZone = (token: string) => token.includes("/") || token === "UTC" || token === "GMT"

/**
 * Parses a schedule in a time zone (a trailing IANA zone in the text wins over `timeZone` when
 * they agree; they may not differ). A reason when it cannot be parsed or never fires.
 */
export const parseSchedule = (
  schedule: string,
  timeZone: string | undefined
): Result.Result<ParsedSchedule, string> => {
  const text = schedule.trim().replace(/\s+/g, " ")
  if (text.length === 0) return Result.fail("the schedule is empty")
  const tokens = text.split(" ")
  let zone = timeZone ?? "UTC"
  if (tokens.length > 1 && looksLikeZone(tokens[tokens.length - 1]!)) {
    const inText = tokens.pop()!
    if (timeZone !== undefined && timeZone !== inText) {
      return Result.fail(`the schedule names time zone ${inText} and the task ${timeZone}`)
    }
    zone = inText
  }
  const body = tokens.join(" ")
  const lower = body.toLowerCase()
  const cron = lower.startsWith("@")
    ? MACROS[lower] === undefined
      ? Result.fail(`unknown macro ${body} (have ${Object.keys(MACROS).join(", ")})`)
      : Result.succeed(MACROS[lower]!)
    : /^every\b/.test(lower)
      ? phraseToCron(lower)
      : tokens.length === 5 || tokens.length === 6
        ? Result.succeed(body)
        : phraseToCron(lower)
  if (Result.isFailure(cron)) return Result.fail(cron.failure)
  const parsed = Cron.parse(cron.success, zone)
  if (Result.isFailure(parsed)) return Result.fail(`${parsed.failure.message} (${cron.success} in ${zone})`)
  // a cron that names no existing date (31 February) has no next fire
  try {
    Cron.next(parsed.success, new Date(0))
  } catch {
    return Result.fail(`${cron.success} never fires`)
  }
  return Result.succeed({ schedule, cron: cron.success, timeZone: zone, parsed: parsed.success })
}
