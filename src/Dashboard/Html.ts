/**
 * The dashboard's one way to write HTML: the `html` tagged template escapes every interpolated
 * value (`&`, `<`, `>`, `"`, `'`, and the backtick), so a job payload, an error message, a queue
 * name or a subject full of markup is shown as text. Only an `Html` value (another template's
 * result, or `raw(...)` for the library's own constant markup) is inserted as is. effect/http's
 * `Template` does not escape, so the dashboard never uses it.
 *
 * @since 0.1.0
 */

/**
 * Markup that is safe to insert: built by `html` (its interpolations escaped) or `raw`.
 *
 * @category models
 */
export class Html {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value
  }
}

/** A value an `html` template takes: text (escaped), numbers, markup, nothing, or lists of them. */
export type Interpolation = Html | string | number | bigint | boolean | null | undefined | ReadonlyArray<Interpolation>

const ESCAPES: Readonly<Record<string, string>> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&#39;",
  "`": "&#96;"
}

/** Escapes text for an HTML text node or a quoted attribute value. */
export const escapeHtml = (text: string): string => text.replace(/[&<>"'`]/g, (c) => ESCAPES[c]!)

/** One interpolated value as markup: `Html` as is, `false`/`null`/`undefined` as nothing, text escaped. */
const render = (value: Interpolation): string => {
  if (value instanceof Html) return value.value
  if (value === null || value === undefined || value === false || value === true) return ""
  if (Array.isArray(value)) return value.map(render).join("")
  return escapeHtml(String(value))
}

/**
 * Builds markup from a template, escaping every interpolated value that is not already `Html`.
 * `true` and `false` render nothing, so `${cond && html`...`}` works.
 */
export const html = (strings: TemplateStringsArray, ...values: ReadonlyArray<Interpolation>): Html => {
  let out = strings[0]!
  for (let i = 0; i < values.length; i++) out += render(values[i]!) + strings[i + 1]!
  return new Html(out)
}

/** Trusted markup inserted as is: only for the library's own constants, never for data. */
export const raw = (markup: string): Html => new Html(markup)

/** Joins markup with a separator (escaped when text). */
export const join = (parts: ReadonlyArray<Interpolation>, separator: Interpolation = ""): Html =>
  new Html(parts.map(render).join(render(separator)))

/** A JSON value pretty-printed as escaped text (payloads, headers, outputs). */
export const jsonText = (value: unknown): string => {
  if (value === undefined) return ""
  try {
    return JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? v.toString() : v), 2) ?? ""
  } catch {
    return String(value)
  }
}
