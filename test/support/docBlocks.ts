/**
 * The TypeScript blocks of README.md and docs/*.md as modules tsc can check. A block's
 * `import` lines go to the top; the rest becomes the body of a generator when it uses `yield*`
 * at its top level (a fragment of an `Effect.gen`). An HTML comment right above a block, which
 * the rendered page does not show, may give it context:
 *
 * - `<!-- docs-check: declare const order: { readonly id: string } -->`: lines put before it
 *   (what the fragment takes from the surrounding app); several comments add up;
 * - `<!-- docs-check: continues -->`: the block goes on from the previous block of the page;
 * - `<!-- docs-check: skip <reason> -->`: not checked, for the reason given.
 */
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"

export interface DocBlock {
  /** The page (`README.md`, `docs/jobs.md`) and the line of the block's first code line. */
  readonly file: string
  readonly line: number
  readonly code: string
  readonly context: ReadonlyArray<string>
  readonly continues: boolean
  readonly skip: string | undefined
}

/** The pages whose blocks are checked. */
export const pages = (root: string): ReadonlyArray<string> => [
  "README.md",
  ...readdirSync(join(root, "docs"))
    .filter((f) => f.endsWith(".md"))
    .sort()
    .map((f) => `docs/${f}`)
]

/** Every ```ts block of a page, with its docs-check comments. */
export const blocksOf = (root: string, file: string): ReadonlyArray<DocBlock> => {
  const lines = readFileSync(join(root, file), "utf8").split("\n")
  const blocks: Array<DocBlock> = []
  for (let i = 0; i < lines.length; i++) {
    if (!/^```(ts|typescript)\s*$/.test(lines[i]!)) continue
    const context: Array<string> = []
    let continues = false
    let skip: string | undefined
    for (let j = i - 1; j >= 0; j--) {
      const m = /^<!-- docs-check: (.*) -->$/.exec(lines[j]!.trim())
      if (!m) break
      const text = m[1]!
      if (text === "continues") continues = true
      else if (text.startsWith("skip")) skip = text.slice(4).trim()
      else context.unshift(text)
    }
    const start = i + 1
    let end = start
    while (end < lines.length && !/^```\s*$/.test(lines[end]!)) end++
    blocks.push({ file, line: start + 1, code: lines.slice(start, end).join("\n"), context, continues, skip })
    i = end
  }
  return blocks
}

/**
 * Where the names the docs use without importing them come from: a fragment continues the
 * page's code, whose imports it would share. Names a block imports or declares are its own.
 */
const KNOWN_IMPORTS: ReadonlyArray<readonly [module: string, names: ReadonlyArray<string>]> = [
  ["effect", ["Effect", "Layer", "Schema", "Option", "Duration", "DateTime", "Context", "Schedule", "Stream"]],
  ["effect/http", ["HttpRouter", "HttpServerResponse", "HttpServerRequest"]],
  ["effect/sql", ["SqlClient"]],
  ["@effect/platform-node", ["NodeHttpServer", "NodeRuntime"]],
  ["node:http", ["createServer"]],
  [
    "effect-pgbus",
    [
      "Batch",
      "Dashboard",
      "Event",
      "EventBus",
      "Job",
      "JobClient",
      "OperationsApi",
      "Outbox",
      "PgBus",
      "QueueStore",
      "Recurring",
      "Registry",
      "StreamEvent",
      "Streams",
      "Supervisor",
      "Workflow",
      "WorkflowClient"
    ]
  ],
  ["effect-pgbus/testing", []]
]

const importedNames = (imports: ReadonlyArray<string>) =>
  new Set(
    imports.flatMap((text) => {
      const named = /\{([^}]*)\}/.exec(text)?.[1] ?? ""
      const star = /\*\s+as\s+(\w+)/.exec(text)?.[1]
      const def = /^import\s+(?:type\s+)?(\w+)\s*(?:,|from)/.exec(text)?.[1]
      return [
        ...named
          .split(",")
          .map((n) =>
            n
              .trim()
              .replace(/^type\s+/, "")
              .split(/\s+as\s+/)
              .at(-1)!
              .trim()
          )
          .filter((n) => n !== ""),
        ...(star ? [star] : []),
        ...(def ? [def] : [])
      ]
    })
  )

/** Imports for the known names a body uses without importing or declaring them. */
const autoImports = (body: string, imports: ReadonlyArray<string>): ReadonlyArray<string> => {
  const have = importedNames(imports)
  const out: Array<string> = []
  for (const [module, names] of KNOWN_IMPORTS) {
    const wanted = names.filter(
      (name) =>
        !have.has(name) &&
        new RegExp(`(?<![.\\w$])${name}\\b`).test(body) &&
        !new RegExp(`\\b(const|let|function|class|interface|type)\\s+${name}\\b`).test(body)
    )
    if (wanted.length > 0) out.push(`import { ${wanted.join(", ")} } from "${module}"`)
  }
  return out
}

const IMPORT = /^import\s[\s\S]*?from\s+["'][^"']+["'];?\s*$|^import\s+["'][^"']+["'];?\s*$/

/** Whether a line starts a statement at the block's top level with `yield*` (roughly: not indented). */
const topLevelYield = (code: string) => code.split("\n").some((l) => /^(const .*=\s*)?yield\*/.test(l))

/**
 * The module for a run of blocks (one, or one and those that continue it): imports first,
 * then context, then the code, wrapped in a generator when it yields at its top level. Returns
 * the text and, per line of the text, the page line it came from (or undefined).
 */
export const moduleOf = (
  run: ReadonlyArray<DocBlock>
): { readonly text: string; readonly origin: ReadonlyArray<{ file: string; line: number } | undefined> } => {
  const imports: Array<{ text: string; origin: { file: string; line: number } }> = []
  const body: Array<{ text: string; origin: { file: string; line: number } | undefined }> = []
  const context: Array<string> = []
  for (const block of run) {
    context.push(...block.context)
    const lines = block.code.split("\n")
    for (let i = 0; i < lines.length; i++) {
      const origin = { file: block.file, line: block.line + i }
      // a multi-line import: gather until its `from "..."`
      if (/^import\s/.test(lines[i]!)) {
        let text = lines[i]!
        while (!IMPORT.test(text) && i + 1 < lines.length) text += `\n${lines[++i]}`
        imports.push({ text, origin })
        continue
      }
      body.push({ text: lines[i]!, origin })
    }
  }
  const wrap = run.some((b) => topLevelYield(b.code))
  for (const text of autoImports(
    body.map((b) => b.text).join("\n"),
    imports.map((i) => i.text)
  )) {
    imports.push({ text, origin: { file: run[0]!.file, line: run[0]!.line } })
  }
  // a page's blocks that continue one another may repeat an import line
  const unique = imports.filter((i, k) => imports.findIndex((j) => j.text === i.text) === k)
  imports.length = 0
  imports.push(...unique)
  const out: Array<{ text: string; origin: { file: string; line: number } | undefined }> = []
  const usesEffect = imports.some((i) => /\bEffect\b/.test(i.text) && /from "effect"/.test(i.text))
  for (const i of imports)
    for (const [k, t] of i.text.split("\n").entries())
      out.push({ text: t, origin: { ...i.origin, line: i.origin.line + k } })
  if (wrap && !usesEffect) out.push({ text: 'import { Effect as DocsCheckEffect } from "effect"', origin: undefined })
  for (const c of context) out.push({ text: c, origin: undefined })
  if (wrap)
    out.push({
      text: `export const docsCheck = ${usesEffect ? "Effect" : "DocsCheckEffect"}.gen(function* () {`,
      origin: undefined
    })
  for (const b of body) out.push({ text: wrap ? b.text.replace(/^export /, "") : b.text, origin: b.origin })
  if (wrap) out.push({ text: "})", origin: undefined })
  out.push({ text: "export {}", origin: undefined })
  return { text: out.map((o) => o.text).join("\n"), origin: out.map((o) => o.origin) }
}
