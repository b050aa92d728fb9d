/**
 * The configuration tables of README.md (the keys a newcomer needs) and docs/configuration.md
 * (every key, by section), rendered from the rows of src/Config.ts. `npm run docs:config`
 * rewrites them between their markers; test/config-docs.test.ts fails when they are out of step.
 */
import { readFileSync, writeFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { defaultDoc, envName, keys, SECTIONS } from "../src/Config.ts"

type Key = keyof typeof keys

const names = Object.keys(keys) as Array<Key>

const line = (name: Key, withDoc: boolean): string => {
  const env = envName(name)
  const cells = [`\`${name}\``, env === undefined ? "code only" : `\`${env}\``, defaultDoc(name)]
  return `| ${[...cells, ...(withDoc ? [keys[name].doc] : [])].join(" | ")} |`
}

/** The README's table: the keys whose row says `readme`. */
export const readmeTable = (): string =>
  [
    "| key | env | default |",
    "| --- | --- | --- |",
    ...names.filter((name) => keys[name].readme === true).map((name) => line(name, false))
  ].join("\n")

/** docs/configuration.md's tables: every key, a table per section. */
export const fullTable = (): string =>
  (Object.keys(SECTIONS) as Array<keyof typeof SECTIONS>)
    .map((section) =>
      [
        `### ${SECTIONS[section]}`,
        "",
        "| key | env | default | what |",
        "| --- | --- | --- | --- |",
        ...names.filter((name) => keys[name].section === section).map((name) => line(name, true))
      ].join("\n")
    )
    .join("\n\n")

/** The files and what goes between their markers. */
export const targets = [
  { file: "README.md", marker: "readme", render: readmeTable },
  { file: "docs/configuration.md", marker: "all", render: fullTable }
] as const

const begin = (marker: string) => `<!-- config-table:${marker} (npm run docs:config writes it from src/Config.ts) -->`
const end = (marker: string) => `<!-- /config-table:${marker} -->`

/** A document with its table block replaced by `table`; `undefined` when it has no markers. */
export const withTable = (doc: string, marker: string, table: string): string | undefined => {
  const from = doc.indexOf(begin(marker))
  const to = doc.indexOf(end(marker))
  if (from < 0 || to < from) return undefined
  return `${doc.slice(0, from)}${begin(marker)}\n${table}\n${doc.slice(to)}`
}

const root = new URL("../", import.meta.url)

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const { file, marker, render } of targets) {
    const path = new URL(file, root)
    const updated = withTable(readFileSync(path, "utf8"), marker, render())
    if (updated === undefined) throw new Error(`${file} has no ${begin(marker)} ... ${end(marker)} block`)
    writeFileSync(path, updated)
  }
}
