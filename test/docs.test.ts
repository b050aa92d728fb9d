/**
 * Docs that compile: every TypeScript block of README.md and docs/*.md is typechecked with the
 * project's strict settings, its `effect-pgbus` imports resolving to the sources; and the
 * README's job example runs as written.
 */
import { spawnSync } from "node:child_process"
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { bundledFixture, spawnWatched } from "./support/child.ts"
import { blocksOf, type DocBlock, moduleOf, pages } from "./support/docBlocks.ts"
import { eventually } from "./support/jobs.ts"
import { urlFor } from "./support/server.ts"
import { emptyDatabase } from "./support/TestDatabase.ts"

const root = resolve(".")
const all = pages(root).flatMap((page) => blocksOf(root, page))

/** Blocks grouped into runs: a block and the ones that continue it. */
const runs = (): ReadonlyArray<ReadonlyArray<DocBlock>> => {
  const out: Array<Array<DocBlock>> = []
  for (const block of all) {
    const last = out.at(-1)
    if (block.continues && last !== undefined && last[0]!.file === block.file) last.push(block)
    else out.push([block])
  }
  return out
}

describe("docs", () => {
  it("every TypeScript block of the README and docs/ typechecks", { timeout: 120_000 }, () => {
    const dir = join(root, "scratch", `docs-check-${process.pid}`)
    rmSync(dir, { recursive: true, force: true })
    mkdirSync(dir, { recursive: true })
    try {
      const origins = new Map<string, ReadonlyArray<{ file: string; line: number } | undefined>>()
      let n = 0
      for (const run of runs()) {
        if (run.some((b) => b.skip !== undefined)) continue
        const { text, origin } = moduleOf(run)
        const name = `block_${String(n++).padStart(3, "0")}.ts`
        writeFileSync(join(dir, name), text)
        origins.set(name, origin)
      }
      writeFileSync(join(dir, "prelude.ts"), readFileSync(join(root, "test/support/docs-prelude.ts"), "utf8"))
      writeFileSync(
        join(dir, "tsconfig.json"),
        JSON.stringify({ extends: "../../tsconfig.json", include: ["./*.ts"], compilerOptions: { noEmit: true } })
      )
      const tsc = spawnSync(
        process.execPath,
        [join(root, "node_modules/typescript/bin/tsc"), "-p", join(dir, "tsconfig.json"), "--pretty", "false"],
        { encoding: "utf8" }
      )
      const errors = `${tsc.stdout}${tsc.stderr}`
        .split("\n")
        .filter((l) => l.includes("error TS"))
        .map((l) => {
          const m = /(block_\d+\.ts)\((\d+),(\d+)\): (.*)$/.exec(l)
          if (!m) return l
          const at = origins.get(m[1]!)?.[Number(m[2]) - 1]
          return `${at ? `${at.file}:${at.line}` : `${m[1]} (generated line ${m[2]})`}: ${m[4]}`
        })
      assert.deepStrictEqual(errors, [], `${errors.length} error(s) in the docs' TypeScript:\n${errors.join("\n")}`)
      assert.isAbove(n, 30, "the blocks were found")
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it("a block is skipped only with a reason, and rarely", () => {
    const skipped = all.filter((b) => b.skip !== undefined)
    for (const b of skipped) assert.isAbove(b.skip!.length, 15, `${b.file}:${b.line} says why it is skipped`)
    assert.isAtMost(skipped.length, 3, skipped.map((b) => `${b.file}:${b.line}`).join(", "))
  })

  it.live(
    "the README's job example runs as written: it migrates, runs the job, and Ctrl-C drains and exits 0",
    () =>
      Effect.gen(function* () {
        const block = all.find(
          (b) => b.file === "README.md" && b.code.includes('signUp("u1")') && b.code.includes("Supervisor.runMain")
        )
        assert.isDefined(block, "the README's job example")
        const dir = join(root, "scratch")
        mkdirSync(dir, { recursive: true })
        const file = join(dir, `readme-job-${process.pid}.ts`)
        writeFileSync(file, block!.code)
        yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(file, { force: true })))
        const database = yield* emptyDatabase
        // bundled (its effect-pgbus import resolved by tsconfig's paths): it boots in about half a
        // second, where tsx took tens of seconds on a loaded machine
        const bundle = yield* bundledFixture(file)
        const child = yield* spawnWatched(process.execPath, [bundle], {
          cwd: root,
          env: { ...process.env, DATABASE_URL: urlFor(database) }
        })
        yield* eventually(
          "the welcome job ran",
          Effect.sync(() => child.output().includes("welcome u1")),
          "60 seconds"
        ).pipe(Effect.catchDefect((defect) => Effect.die(new Error(`${String(defect)}\n${child.output()}`))))
        child.process.kill("SIGINT")
        const exit = yield* child.exited
        assert.strictEqual(exit.code, 0, child.output())
        assert.include(child.output(), "job SendWelcome uses queue mailers")
      }).pipe(Effect.scoped),
    90_000
  )
})
