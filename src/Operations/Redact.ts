/**
 * Payload redaction for the operations surfaces: payloads, outputs, signal payloads, headers and
 * error text are replaced by `"[redacted]"` unless the caller may see them; when shown, values of
 * sensitive-looking keys (passwords, tokens, secrets, API keys) are still filtered.
 *
 * @since 0.1.0
 */

/** What a redacted value is replaced with. */
export const REDACTED = "[redacted]"

/** What a filtered sensitive value is replaced with. */
export const FILTERED = "[FILTERED]"

/** Keys whose values are never shown (case-insensitive, anywhere in the key). */
export const SENSITIVE_KEY = /password|passwd|token|secret|authorization|api[_-]?key/i

const isRecord = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/** Replaces the values of sensitive-looking keys, at any depth, with `[FILTERED]`. */
export const filterSensitive = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(filterSensitive)
  if (isRecord(value)) {
    const out: Record<string, unknown> = {}
    for (const [key, inner] of Object.entries(value)) {
      out[key] = SENSITIVE_KEY.test(key) ? FILTERED : filterSensitive(inner)
    }
    return out
  }
  return value
}

/** A payload as a caller sees it: filtered when shown, `[redacted]` otherwise (null stays null). */
export const payloadView = (value: unknown, payloads: boolean): unknown =>
  value === null || value === undefined ? null : payloads ? filterSensitive(value) : REDACTED

/** Error text as a caller sees it. */
export const textView = (text: string | null | undefined, payloads: boolean): string | null =>
  text === null || text === undefined ? null : payloads ? text : REDACTED
