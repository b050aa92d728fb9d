/** The docs' configuration tables say what src/Config.ts's rows say. */
import { readdirSync, readFileSync } from "node:fs"
import { assert, describe, it } from "@effect/vitest"
import { targets, withTable } from "../scripts/config-table.ts"
import { environmentVariables, envName, keys } from "../src/Config.ts"
import { envNames as streamsEnvNames } from "../src/Streams/StreamsConfig.ts"
import { CHILD_CAPSULE_ENV, CHILD_PROCESS_ID_ENV, CHILD_SLOT_ENV } from "../src/Supervisor/ChildCapsule.ts"

const read = (file: string) => readFileSync(new URL(`../${file}`, import.meta.url), "utf8")
const documents = ["README.md", ...readdirSync(new URL("../docs/", import.meta.url)).map((f) => `docs/${f}`)].filter(
  (f) => f.endsWith(".md")
)

describe("configuration docs", () => {
  for (const { file, marker, render } of targets) {
    it(`${file}'s table is the one the rows give (else run npm run docs:config)`, () => {
      const doc = read(file)
      const expected = withTable(doc, marker, render())
      assert.isDefined(expected, `${file} has lost its config-table:${marker} markers`)
      assert.strictEqual(doc, expected, `${file}'s configuration table is out of step: run npm run docs:config`)
    })
  }

  it("every table in the docs that pairs a key with an env variable pairs them as the rows do", () => {
    const pairs: Array<string> = []
    for (const file of documents) {
      for (const line of read(file).split("\n")) {
        // | `key` | `ENV` | ... and | `a` / `b` | `A` / `B` | ...
        const cells = line.split("|").map((c) => c.trim())
        const names = [...(cells[1] ?? "").matchAll(/`([a-z][A-Za-z]*)`/g)].map((m) => m[1]!)
        const envs = [...(cells[2] ?? "").matchAll(/`((?:PGBUS_|DATABASE_URL)[A-Z_]*)`/g)].map((m) => m[1]!)
        if (envs.length === 0 || names.length !== envs.length) continue
        // docs/streams.md documents the streams layer's own keys (src/Streams/StreamsConfig.ts)
        const streams = file === "docs/streams.md"
        const rows: Readonly<Record<string, unknown>> = streams ? streamsEnvNames : keys
        const envOf = (name: string) =>
          streams ? streamsEnvNames[name as keyof typeof streamsEnvNames] : envName(name as keyof typeof keys)
        names.forEach((name, i) => {
          assert.isTrue(Object.hasOwn(rows, name), `${file}: \`${name}\` is not a configuration key`)
          assert.strictEqual(envOf(name), envs[i], `${file}: the env variable of \`${name}\``)
          pairs.push(name)
        })
      }
    }
    assert.isAbove(pairs.length, 40, "the tables were read")
  })

  it("every PGBUS_ variable the docs name is one the configuration or the CLI reads", () => {
    const known = new Set([
      ...environmentVariables,
      ...Object.values(streamsEnvNames).filter((e) => e !== undefined),
      "PGBUS_APP",
      // set by a supervisor for its child processes (read by the child's supervisor, not settings)
      CHILD_CAPSULE_ENV,
      CHILD_PROCESS_ID_ENV,
      CHILD_SLOT_ENV
    ])
    for (const file of documents) {
      for (const [name] of read(file).matchAll(/PGBUS_[A-Z_]*[A-Z](?![A-Z_])/g)) {
        assert.isTrue(known.has(name), `${file} names ${name}, which nothing reads`)
      }
    }
  })
})
