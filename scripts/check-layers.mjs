// Layers import downward only (DESIGN.md, "Layers, bottom to top"): a module may import from
// its own layer or one below it, never from one above. Queue and Job never import Workflow,
// EventBus or Batch; the registry, which lists what a process runs, sits above all of them.
// Every import of a file under src/ (static, dynamic, type-only, re-export) is checked; a file
// whose layer is not listed here fails too, so that a new folder is placed on purpose.
import { readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"

// Bottom to top. A layer is named by the first segment of a path under src/ (a folder, or a
// file without its extension: `Config` is `Config.ts` and `Config/`). One row holds peers.
const layers = [
  ["internal", "version", "Connection"], // leaf helpers: they import nothing of the library (Connection: the URL, libpq's variables, TLS)
  ["Input"], // the rules of public inputs (text, numbers, JSON, durations, targets) every entry point checks
  ["Config"],
  ["Database"],
  ["Migrations"],
  ["Queue"], // the one door to queue tables
  ["Job"],
  ["Batch"],
  ["Workflow"],
  ["EventBus"],
  ["Streams"], // SSE streams: broadcasts ride on the queue store and the notifier
  ["Recurring"], // recurring tasks: jobs enqueued on a schedule, once per slot (a ledger)
  ["Registry"], // what a process runs: each feature registers its own jobs
  ["Supervisor"],
  ["PgBus"], // the one Layer an app provides
  ["Embedded"], // effect-pgbus/embedded: PgBus on the embedded server (the CLI uses it)
  ["Operations"],
  ["Http", "Cli", "Mcp", "Dashboard", "Testing"],
  ["index", "bin"] // entry points
]
const rank = new Map(layers.flatMap((names, i) => names.map((name) => [name, i])))

const src = resolve("src")
const files = []
const walk = (dir) => {
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry)
    if (statSync(path).isDirectory()) walk(path)
    else if (path.endsWith(".ts")) files.push(path)
  }
}
walk(src)

/** The layer of a path under src/: its first segment without the extension. */
const layerOf = (path) =>
  relative(src, path)
    .split(/[\\/]/)[0]
    .replace(/\.[cm]?[tj]s$/, "")

// from "x", import "x", import("x"), export ... from "x"; comments are not stripped, so a
// commented-out import counts too (rare, and better caught than missed)
const specifiers = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)["']([^"']+)["']/g

const problems = []
for (const file of files) {
  const from = layerOf(file)
  const fromRank = rank.get(from)
  if (fromRank === undefined) {
    problems.push(`${relative(".", file)}: layer ${from} is not listed in scripts/check-layers.mjs (place it)`)
    continue
  }
  const text = readFileSync(file, "utf8")
  for (const [, specifier] of text.matchAll(specifiers)) {
    if (!specifier.startsWith(".")) continue
    const target = resolve(dirname(file), specifier)
    if (!target.startsWith(src)) continue
    const to = layerOf(target)
    const toRank = rank.get(to)
    if (toRank === undefined) {
      problems.push(
        `${relative(".", file)} imports ${specifier}: layer ${to} is not listed in scripts/check-layers.mjs`
      )
    } else if (toRank > fromRank) {
      problems.push(`${relative(".", file)} (${from}) imports ${specifier} (${to}), a layer above it`)
    }
  }
}
if (problems.length > 0) {
  console.error(`Layers import downward only (DESIGN.md):\n  ${problems.join("\n  ")}`)
  process.exit(1)
}
console.log(`layers: ok (${files.length} files, ${layers.length} layers)`)
