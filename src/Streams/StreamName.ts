/**
 * Stream names and the patterns that configure them. A name is any 1 to 200 printable ASCII
 * characters without spaces (`room:42`, `account:7:orders`); it travels in URLs only signed.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import { InvalidStreamName } from "./StreamsError.ts"

/** Longest stream name. */
export const MAX_STREAM_NAME = 200

const NAME_PATTERN = /^[\x21-\x7e]+$/

/**
 * A stream name, as a Schema.
 *
 * @category schemas
 */
export const StreamName = Schema.String.check(
  Schema.makeFilter<string>(
    (s) =>
      (s.length >= 1 && s.length <= MAX_STREAM_NAME && NAME_PATTERN.test(s)) ||
      `must be 1 to ${MAX_STREAM_NAME} printable ASCII characters without spaces`
  )
)

/** Whether a value is a valid stream name. */
export const isValid = (name: unknown): name is string =>
  typeof name === "string" && name.length >= 1 && name.length <= MAX_STREAM_NAME && NAME_PATTERN.test(name)

/** Checks a stream name (no I/O). */
export const validate = (name: unknown): Effect.Effect<string, InvalidStreamName> => {
  if (typeof name !== "string")
    return Effect.fail(new InvalidStreamName({ name: String(name), rule: "must be a string" }))
  if (name.length === 0 || name.length > MAX_STREAM_NAME) {
    return Effect.fail(new InvalidStreamName({ name, rule: `must have 1 to ${MAX_STREAM_NAME} characters` }))
  }
  if (!NAME_PATTERN.test(name)) {
    return Effect.fail(new InvalidStreamName({ name, rule: "must be printable ASCII without spaces" }))
  }
  return Effect.succeed(name)
}

/** A stream pattern: an exact name or a RegExp. */
export type StreamPattern = string | RegExp

/** A compiled pattern. */
export type Matcher = (name: string) => boolean

/** Compiles a pattern (a RegExp is copied without its `g` and `y` flags, whose state would make tests alternate). */
export const matcher = (pattern: StreamPattern): Matcher => {
  if (typeof pattern === "string") return (name) => name === pattern
  const re = new RegExp(pattern.source, pattern.flags.replace(/[gy]/g, ""))
  return (name) => re.test(name)
}

/** The value of the first matcher a name matches, else the fallback. */
export const lookup = <A>(table: ReadonlyArray<readonly [Matcher, A]>, name: string, fallback: A): A => {
  for (const [matches, value] of table) if (matches(name)) return value
  return fallback
}
