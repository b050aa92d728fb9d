/**
 * Splits a `.sql` file into statements. The driver runs one statement per query (extended
 * protocol only), so migration files are split here: semicolons inside quoted strings,
 * quoted identifiers, dollar-quoted bodies and comments do not split.
 */
export const splitStatements = (text: string): Array<string> => {
  const statements: Array<string> = []
  let start = 0
  let i = 0
  const skipTo = (needle: string, from: number): number => {
    const end = text.indexOf(needle, from)
    return end < 0 ? text.length : end + needle.length
  }
  while (i < text.length) {
    const c = text[i]
    if (c === "'" || c === '"') {
      // a doubled quote inside a literal re-enters the loop as a new literal: same result
      i = skipTo(c, i + 1)
    } else if (c === "-" && text[i + 1] === "-") {
      i = skipTo("\n", i)
    } else if (c === "/" && text[i + 1] === "*") {
      i = skipTo("*/", i + 2)
    } else if (c === "$") {
      const tag = /^\$[A-Za-z_]*\$/.exec(text.slice(i, i + 64))
      if (tag) i = skipTo(tag[0], i + tag[0].length)
      else i++
    } else if (c === ";") {
      statements.push(text.slice(start, i))
      start = ++i
    } else {
      i++
    }
  }
  statements.push(text.slice(start))
  return statements
    .map((s) => s.trim())
    .filter(
      (s) =>
        s
          .replace(/--[^\n]*/g, "")
          .replace(/\/\*[\s\S]*?\*\//g, "")
          .trim().length > 0
    )
}
