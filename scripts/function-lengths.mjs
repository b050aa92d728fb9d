// Prints the functions in src/ longer than a number of lines (default 250), longest first:
//   node scripts/function-lengths.mjs [dir] [lines] [--check]   (--check: exit 1 when any is found)
// TypeScript 7 has no JS API, so this scans tokens: a `{` whose line holds `=>` or `function` opens
// a function body; strings, template literals (with nested `${}`) and comments are skipped.
import fs from "node:fs"
import path from "node:path"

const args = process.argv.slice(2).filter((a) => a !== "--check")
const check = process.argv.includes("--check")
const root = args[0] ?? "src"
const min = Number(args[1] ?? 250)
const found = []

const bodies = (file) => {
  const text = fs.readFileSync(file, "utf8")
  const stack = [] // { line, head } per open `{`; templates push "tpl" frames
  let line = 1
  let lineStart = 0
  let i = 0
  const modes = [] // "tpl" while inside a template literal's text
  while (i < text.length) {
    const c = text[i]
    if (c === "\n") {
      line++
      lineStart = i + 1
      i++
      continue
    }
    if (modes.at(-1) === "tpl") {
      if (c === "\\") {
        i += 2
        continue
      }
      if (c === "`") {
        modes.pop()
        i++
        continue
      }
      if (c === "$" && text[i + 1] === "{") {
        stack.push({ line, head: null, tplExpr: true })
        modes.push("code")
        i += 2
        continue
      }
      i++
      continue
    }
    if (c === "/" && text[i + 1] === "/") {
      while (i < text.length && text[i] !== "\n") i++
      continue
    }
    if (c === "/" && text[i + 1] === "*") {
      const end = text.indexOf("*/", i + 2)
      for (let k = i; k < end; k++)
        if (text[k] === "\n") {
          line++
          lineStart = k + 1
        }
      i = end + 2
      continue
    }
    if (c === "'" || c === '"') {
      i++
      while (i < text.length && text[i] !== c) {
        if (text[i] === "\\") i++
        i++
      }
      i++
      continue
    }
    if (c === "`") {
      modes.push("tpl")
      i++
      continue
    }
    if (c === "{") {
      stack.push({ line, head: text.slice(lineStart, i) })
      i++
      continue
    }
    if (c === "}") {
      const open = stack.pop()
      if (open?.tplExpr) {
        modes.pop()
        i++
        continue
      }
      if (open && /=>|function\b/.test(open.head)) {
        const n = line - open.line + 1
        if (n >= min) found.push([n, `${file}:${open.line} ${open.head.trim().slice(0, 80)}`])
      }
      i++
      continue
    }
    i++
  }
}

const walk = (dir) => {
  for (const f of fs.readdirSync(dir)) {
    const p = path.join(dir, f)
    if (fs.statSync(p).isDirectory()) walk(p)
    else if (p.endsWith(".ts")) bodies(p)
  }
}
walk(root)
for (const [n, where] of found.sort((a, b) => b[0] - a[0])) console.log(`${n}\t${where}`)
if (check && found.length > 0) {
  console.error(`${found.length} function(s) in ${root} of ${min} lines or more`)
  process.exit(1)
}
if (check) console.log(`function lengths: ok (none in ${root} of ${min} lines or more)`)
