/**
 * Topic routing, AMQP style: a routing key is dotted segments (`orders.line.added`); a pattern
 * matches keys segment by segment, where `*` matches exactly one segment and `#` zero or more.
 * Pure: no Effect, no database, so it is property-tested on its own.
 *
 * @since 0.1.0
 */

import { isStorableText } from "../internal/storable.ts"

/** Longest routing key or pattern, in characters. */
export const MAX_LENGTH = 255

/** A segment: anything but the separator, the two wildcards and whitespace. */
const SEGMENT = /^[^.*#\s]+$/

/** Why a routing key is invalid; `undefined` when it is valid (no wildcards allowed). */
export const routingKeyProblem = (key: string): string | undefined => {
  if (typeof key !== "string" || key.length === 0) return "must be a non-empty string"
  if (key.length > MAX_LENGTH) return `must have at most ${MAX_LENGTH} characters`
  if (!isStorableText(key)) return "must not contain a NUL character or a lone surrogate"
  for (const segment of key.split(".")) {
    if (segment === "") return "must not have an empty segment (leading, trailing or doubled dot)"
    if (!SEGMENT.test(segment)) return "segments must not contain *, # or whitespace (wildcards belong in patterns)"
  }
  return undefined
}

/** Why a pattern is invalid; `undefined` when it is valid. */
export const patternProblem = (pattern: string): string | undefined => {
  if (typeof pattern !== "string" || pattern.length === 0) return "must be a non-empty string"
  if (pattern.length > MAX_LENGTH) return `must have at most ${MAX_LENGTH} characters`
  if (!isStorableText(pattern)) return "must not contain a NUL character or a lone surrogate"
  for (const segment of pattern.split(".")) {
    if (segment === "") return "must not have an empty segment (leading, trailing or doubled dot)"
    if (segment === "*" || segment === "#") continue
    if (!SEGMENT.test(segment)) return "a segment is `*`, `#` or a word without *, # or whitespace"
  }
  return undefined
}

/** Whether a (valid) pattern has a wildcard. */
export const isWildcard = (pattern: string): boolean => pattern.split(".").some((s) => s === "*" || s === "#")

/**
 * Matches split segments. `reach[j]` says whether the pattern's segments so far match the
 * key's first `j` segments; one pass per pattern segment, O(pattern × key), no backtracking
 * (a pattern like `#.#.#.x` cannot blow up).
 */
const matchSegments = (pattern: ReadonlyArray<string>, key: ReadonlyArray<string>): boolean => {
  const n = key.length
  let reach: Array<boolean> = new Array(n + 1).fill(false)
  reach[0] = true
  for (const segment of pattern) {
    const next: Array<boolean> = new Array(n + 1).fill(false)
    if (segment === "#") {
      let any = false
      for (let j = 0; j <= n; j++) {
        any = any || reach[j]!
        next[j] = any
      }
    } else {
      for (let j = 1; j <= n; j++) next[j] = reach[j - 1]! && (segment === "*" || segment === key[j - 1])
    }
    reach = next
  }
  return reach[n]!
}

/** Whether `pattern` matches `routingKey` (both assumed valid). */
export const matches = (pattern: string, routingKey: string): boolean => compile(pattern)(routingKey)

const compiled = new Map<string, (key: string) => boolean>()

/**
 * A matcher for one pattern, cached: a pattern without wildcards is string equality, `#`
 * matches everything, the rest split the key once per call.
 */
export const compile = (pattern: string): ((routingKey: string) => boolean) => {
  const known = compiled.get(pattern)
  if (known) return known
  const segments = pattern.split(".")
  const matcher: (key: string) => boolean =
    pattern === "#"
      ? () => true
      : !isWildcard(pattern)
        ? (key) => key === pattern
        : (key) => matchSegments(segments, key.split("."))
  if (compiled.size < 10_000) compiled.set(pattern, matcher)
  return matcher
}
