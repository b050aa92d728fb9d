/**
 * The rules every public input follows, checked before any SQL so that a bad value gets the
 * entry point's typed error instead of PostgreSQL's refusal (a non-retryable `DatabaseError`)
 * or a silent change (a string spread into an indexed object, `NaN` run as zero): text
 * PostgreSQL can store, finite numbers, integers in range, JSON-storable values, durations.
 * Each rule is a function answering what is wrong (or `undefined`), which the entry points run
 * synchronously (the send path is hot) and map to their own tagged error; the same rules are
 * Schema checks (`StorableText`, `StorableJson`, `Headers`, ...) for payload schemas of your
 * own, so that an encode refuses such a value as `InvalidPayload` already.
 *
 * @since 0.1.0
 */
import { Duration, Option, Schema } from "effect"
import { isStorableJson, isStorableText } from "./internal/storable.ts"

/**
 * An argument of a public call broke one of these rules (where the call has no error of its
 * own for it): `input` names the argument, `issue` says what is wrong. Nothing was written.
 *
 * @category errors
 */
export class InvalidInput extends Schema.TaggedError<InvalidInput>()("InvalidInput", {
  input: Schema.String,
  issue: Schema.String
}) {
  override get message(): string {
    return `invalid ${this.input}: ${this.issue}`
  }
}

/** The largest PostgreSQL `integer` (int4). */
export const INT4_MAX = 2_147_483_647

/** The largest PostgreSQL `bigint` (int8): message ids. */
export const INT8_MAX = 9_223_372_036_854_775_807n

const where = (path: string) => (path === "" ? "" : `${path}: `)

/** What makes a string unstorable (a NUL character, a lone surrogate), or undefined. */
export const textProblem = (text: unknown, path = ""): string | undefined =>
  typeof text !== "string"
    ? `${where(path)}must be a string`
    : isStorableText(text)
      ? undefined
      : `${where(path)}contains a NUL character or a lone surrogate (PostgreSQL cannot store it)`

/** A name for an error message: the text with what PostgreSQL cannot store replaced (U+FFFD). */
export { storableText as storableName } from "./internal/storable.ts"

/** What makes a number unusable as an integer in `[min, max]`, or undefined. */
export const intProblem = (value: unknown, min: number, max: number, path = ""): string | undefined =>
  typeof value !== "number" || !Number.isInteger(value) || value < min || value > max
    ? `${where(path)}must be an integer from ${min} to ${max}`
    : undefined

/**
 * What keeps a value from being stored as JSON as it is, or undefined: `undefined` (but as
 * an object's property, which JSON leaves out), functions, symbols, bigints, numbers that are
 * not finite (JSON would write `null`), unstorable strings and keys, cycles, Maps and Sets
 * (JSON would write `{}`).
 */
export const jsonProblem = (value: unknown, path = ""): string | undefined => walk(value, path, new Set())

const walk = (value: unknown, path: string, seen: Set<object>): string | undefined => {
  switch (typeof value) {
    case "string":
      return isStorableText(value) ? undefined : textProblem(value, path)
    case "number":
      return Number.isFinite(value) ? undefined : `${where(path)}${value} is not a finite number`
    case "boolean":
      return undefined
    case "object": {
      if (value === null) return undefined
      if (seen.has(value)) return `${where(path)}is a cycle`
      if (value instanceof Map || value instanceof Set) return `${where(path)}a Map or a Set is not JSON`
      const toJSON = (value as { readonly toJSON?: unknown }).toJSON
      if (typeof toJSON === "function") {
        // a Date (an invalid one writes null), or any object that says how it is written
        if (value instanceof Date && Number.isNaN(value.getTime())) return `${where(path)}is an invalid Date`
        return value instanceof Date ? undefined : walk(toJSON.call(value), path, seen)
      }
      seen.add(value)
      try {
        if (Array.isArray(value)) {
          for (let i = 0; i < value.length; i++) {
            const problem = walk(value[i], `${path}[${i}]`, seen)
            if (problem !== undefined) return problem
          }
          return undefined
        }
        for (const key of Object.keys(value)) {
          const inner = path === "" ? key : `${path}.${key}`
          if (!isStorableText(key)) return textProblem(key, `${inner} (the key)`)
          const v = (value as Record<string, unknown>)[key]
          if (v === undefined) continue
          const problem = walk(v, inner, seen)
          if (problem !== undefined) return problem
        }
        return undefined
      } finally {
        seen.delete(value)
      }
    }
    case "undefined":
      return `${where(path)}undefined is not JSON`
    default:
      return `${where(path)}a ${typeof value} is not JSON`
  }
}

/** A plain object (not an array, not null): what headers and attributes must be. */
export const isPlainObject = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Date)

/** What keeps `headers` from being a JSON object of storable values, or undefined. */
export const headersProblem = (headers: unknown, path = "headers"): string | undefined =>
  isPlainObject(headers) ? jsonProblem(headers, path) : `${path} must be a JSON object`

/**
 * The JSON text of a value if it can be stored as it is; the problem otherwise. Fast for the
 * common case (one `JSON.stringify` and a scan of the text); the walk runs only to name a
 * problem or when the text could hide one (a `null` that may have been a NaN or a dropped
 * array element, a `{}` that may have been a Map). A function-valued property, which JSON
 * leaves out like an undefined one, passes here: `jsonProblem` finds it.
 */
export const storableJson = (
  value: unknown,
  path = ""
):
  | { readonly text: string; readonly problem?: undefined }
  | { readonly text?: undefined; readonly problem: string } => {
  let text: string | undefined
  try {
    text = JSON.stringify(value)
  } catch {
    return { problem: jsonProblem(value, path) ?? `${where(path)}is not JSON` }
  }
  if (text === undefined) return { problem: jsonProblem(value, path) ?? `${where(path)}is not JSON` }
  // NaN, Infinity and unJSONable array items are written as null, Maps and Sets as {}
  if (!isStorableJson(text) || text.includes("null") || text.includes("{}")) {
    const problem = jsonProblem(value, path)
    if (problem !== undefined) return { problem }
  }
  return { text }
}

/** The longest delay or timeout accepted: 10,000 years (a timestamp past it overflows PostgreSQL's range sooner or later). */
export const MAX_DURATION_MS = 10_000 * 365.25 * 24 * 3_600_000

/** A duration given as `Duration.Input` that is finite, not negative and at most 10,000 years, in milliseconds; undefined otherwise. */
export const durationMillis = (input: unknown): number | undefined => {
  if (input === undefined || input === null) return undefined
  if (typeof input === "number" && !Number.isFinite(input)) return undefined
  if (typeof input === "object" && !Duration.isDuration(input) && !Array.isArray(input)) return undefined
  const d = Duration.fromInput(input as Duration.Input)
  if (Option.isNone(d) || !Duration.isFinite(d.value) || Duration.isNegative(d.value)) return undefined
  const ms = Duration.toMillis(d.value)
  return Number.isFinite(ms) && ms <= MAX_DURATION_MS ? ms : undefined
}

/** A valid Date. */
export const isValidDate = (value: unknown): value is Date => value instanceof Date && !Number.isNaN(value.getTime())

/** Schema of a string PostgreSQL can store. */
export const StorableText = Schema.String.check(Schema.makeFilter((s: string) => textProblem(s) ?? true))

/** Schema of a JSON-storable value. */
export const StorableJson = Schema.Unknown.check(Schema.makeFilter((u: unknown) => jsonProblem(u) ?? true))

/** Schema of headers: a JSON object of storable values. */
export const Headers = Schema.Record(Schema.String, Schema.Unknown).check(
  Schema.makeFilter((h: Readonly<Record<string, unknown>>) => headersProblem(h, "") ?? true)
)

/** Schema of a duration given as `Duration.Input` that is finite and not negative. */
export const NonNegativeDurationInput = Schema.Unknown.check(
  Schema.makeFilter((u: unknown) => durationMillis(u) !== undefined || "must be a finite, non-negative duration")
)

/** Schema of a valid Date. */
export const ValidDate = Schema.Unknown.check(
  Schema.makeFilter((u: unknown) => isValidDate(u) || "must be a valid Date")
)

/** Options objects: a plain object whose keys are all known, or undefined; the problem otherwise. */
export const optionsProblem = (options: unknown, known: ReadonlyArray<string>, what: string): string | undefined => {
  if (options === undefined) return undefined
  if (!isPlainObject(options)) return `${what} must be an object`
  const unknown = Object.keys(options).filter((k) => !known.includes(k))
  return unknown.length === 0 ? undefined : `${what}: unknown key${unknown.length > 1 ? "s" : ""} ${unknown.join(", ")}`
}

/** What keeps a value from being a message id (a positive int8 as a bigint), or undefined. */
export const messageIdProblem = (id: unknown, path = "id"): string | undefined =>
  typeof id === "bigint" && id >= 0n && id <= INT8_MAX
    ? undefined
    : `${path} must be a message id (a bigint of 0 or more)`

/** What keeps a value from being a receipt (`{ msgId, readCt }`), or undefined. */
export const receiptProblem = (receipt: unknown, path = "receipt"): string | undefined => {
  if (!isPlainObject(receipt)) return `${path} must be a receipt { msgId, readCt }`
  // the fields' paths are built for a problem only (checked per receipt of every archive)
  return messageIdProblem(receipt.msgId, path) === undefined && intProblem(receipt.readCt, 0, INT4_MAX) === undefined
    ? undefined
    : (messageIdProblem(receipt.msgId, `${path}.msgId`) ?? intProblem(receipt.readCt, 0, INT4_MAX, `${path}.readCt`))
}

/** What keeps a value from being a message id or a receipt, or undefined. */
export const targetProblem = (target: unknown, path = "target"): string | undefined =>
  typeof target === "bigint" ? messageIdProblem(target, path) : receiptProblem(target, path)

/** The first problem of a list (an array whose items `problem` accepts), or undefined. */
export const listProblem = (
  list: unknown,
  problem: (item: unknown, path: string) => string | undefined,
  path: string
): string | undefined => {
  if (!Array.isArray(list)) return `${path} must be an array`
  // an item's path is built for its problem only: a worker's archive checks every receipt
  for (let i = 0; i < list.length; i++) {
    if (problem(list[i], path) !== undefined) return problem(list[i], `${path}[${i}]`)
  }
  return undefined
}

/** Schema of a message target: an id or a receipt. */
export const Target = Schema.Unknown.check(Schema.makeFilter((u: unknown) => targetProblem(u, "") ?? true))
