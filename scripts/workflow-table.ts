/** Rewrites the transition table at the end of docs/workflows.md from src/Workflow/States.ts. */
import { readFileSync, writeFileSync } from "node:fs"
import { toMarkdown } from "../src/Workflow/States.ts"

const path = new URL("../docs/workflows.md", import.meta.url)
const doc = readFileSync(path, "utf8")
const marker = "The outside verbs:"
const head = doc.includes(marker) ? doc.slice(0, doc.indexOf(marker)) : `${doc.trimEnd()}\n\n`
writeFileSync(path, `${head}${toMarkdown()}\n`)
