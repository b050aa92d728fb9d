/**
 * Plain-text rendering for the `pgbus` command line: aligned tables, ages, JSON, and the
 * sensitive-data filter applied to payloads and headers before they are printed.
 *
 * @since 0.1.0
 */

import { CliOutput } from "effect/cli"
import { inWords } from "../Operations/Deps.ts"

export { FILTERED, filterSensitive, SENSITIVE_KEY } from "../Operations/Redact.ts"

/**
 * Renders rows under a header as columns separated by two spaces (no trailing blanks). Cells are
 * measured by their display width (wide characters count two columns, ANSI codes none).
 */
export const table = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const width = (text: string) => CliOutput.displayWidth(text)
  const widths = header.map((h, i) => Math.max(width(h), ...rows.map((r) => width(r[i] ?? ""))))
  const pad = (cell: string, to: number) => cell + " ".repeat(Math.max(0, to - width(cell)))
  const line = (cells: ReadonlyArray<string>) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : pad(cell, widths[i] ?? 0)))
      .join("  ")
      .trimEnd()
  return [line(header), ...rows.map(line)].join("\n")
}

/** An age in milliseconds as `42s`, `3m 4s`, `2h 5m`, `3d 4h`; `-` when there is none. */
export const age = (ms: number | undefined): string =>
  ms === undefined || !Number.isFinite(ms) ? "-" : ms < 1000 ? "0s" : inWords(ms)

/** JSON text, pretty-printed and indented by `indent` spaces on every line. */
export const json = (value: unknown, indent = 0): string => {
  const text = JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? v.toString() : v), 2) ?? "null"
  const pad = " ".repeat(indent)
  return text
    .split("\n")
    .map((l) => pad + l)
    .join("\n")
}

/** Key/value lines with the keys padded to one width (multi-line values stay in their column). */
export const fields = (entries: ReadonlyArray<readonly [string, string]>, indent = 0): string => {
  const width = Math.max(0, ...entries.map(([k]) => k.length))
  const pad = " ".repeat(indent)
  const continuation = `\n${" ".repeat(indent + width + 2)}`
  return entries.map(([k, v]) => `${pad}${k.padEnd(width)}  ${v.split("\n").join(continuation)}`.trimEnd()).join("\n")
}
