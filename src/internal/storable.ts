/**
 * Text PostgreSQL cannot store: a NUL character (text and jsonb refuse it) and a lone surrogate
 * (not UTF-8: the driver would write U+FFFD in its place, and jsonb refuses its `\u` escape).
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: a NUL is what it looks for
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/
const UNSTORABLE_ALL = new RegExp(UNSTORABLE.source, "g")

// JSON.stringify escapes a NUL as \u0000 and a lone surrogate as \udXXX (a pair it writes as
// is): an escape not itself escaped (after an even run of backslashes) is one of them.
const UNSTORABLE_ESCAPE = /(?:^|[^\\])(?:\\\\)*\\u(?:0000|d[89a-f][0-9a-f]{2})/i

/** Whether a string can be stored as PostgreSQL text (or inside jsonb) as it is. */
export const isStorableText = (text: string): boolean => !UNSTORABLE.test(text)

/** The string with each character PostgreSQL cannot store replaced by U+FFFD (for what is only recorded: errors, reasons). */
export const storableText = (text: string): string =>
  UNSTORABLE.test(text) ? text.replace(UNSTORABLE_ALL, "\ufffd") : text

/** Whether JSON text, as `JSON.stringify` writes it, casts to jsonb (no NUL, no lone surrogate). */
export const isStorableJson = (json: string): boolean => !json.includes("\\u") || !UNSTORABLE_ESCAPE.test(json)
