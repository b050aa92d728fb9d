/** Spawns processes of a test (child supervisor fixtures, or any program) and watches their output. */
import { type ChildProcess, type SpawnOptions, spawn } from "node:child_process"
import { rmSync } from "node:fs"
import { basename } from "node:path"
import { Effect } from "effect"
import { build } from "esbuild"

export interface Child {
  readonly process: ChildProcess
  readonly output: () => string
  /** Resolves with the exit code (or the signal that killed it). */
  readonly exited: Effect.Effect<{ readonly code: number | null; readonly signal: NodeJS.Signals | null }>
}

/** Starts `file args`, collecting stdout and stderr; killed (SIGKILL) when the scope closes if still running. */
export const spawnWatched = (file: string, args: ReadonlyArray<string>, options: SpawnOptions = {}) =>
  Effect.acquireRelease(
    Effect.sync((): Child => {
      let output = ""
      const child = spawn(file, [...args], { ...options, stdio: ["ignore", "pipe", "pipe"] })
      child.stdout?.on("data", (d) => {
        output += String(d)
      })
      child.stderr?.on("data", (d) => {
        output += String(d)
      })
      const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
        child.once("exit", (code, signal) => resolve({ code, signal }))
      )
      return { process: child, output: () => output, exited: Effect.promise(() => exit) }
    }),
    (child) => Effect.sync(() => child.process.exitCode === null && child.process.kill("SIGKILL"))
  )

/**
 * Starts a child supervisor (a fixture: a `.ts` file run through tsx, or a bundle from
 * `bundledFixture`) with extra environment; killed (SIGKILL) when the scope closes.
 */
export const spawnSupervisor = (env: Record<string, string>, fixture = "test/fixtures/supervisor-child.ts") =>
  spawnWatched(process.execPath, fixture.endsWith(".mjs") ? [fixture] : ["--import", "tsx", fixture], {
    env: { ...process.env, ...env }
  })

let bundles = 0

/**
 * A fixture bundled into one ESM file for the scope (removed when it closes): a child started
 * from it boots in about half a second, where `--import tsx` took ten on a loaded 2-core machine
 * (tsx, and effect's module graph), which bounds how often a test can kill and restart one. It
 * goes in scratch/, beside migrations/, which the bundled code finds relative to itself.
 */
export const bundledFixture = (fixture: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const outfile = `scratch/${basename(fixture, ".ts")}-${process.pid}-${bundles++}.mjs`
      await build({
        entryPoints: [fixture],
        bundle: true,
        platform: "node",
        format: "esm",
        outfile,
        // the driver's CommonJS parts call require
        banner: {
          js: "import { createRequire as __pgbusRequire } from 'node:module'; const require = __pgbusRequire(import.meta.url);"
        },
        logLevel: "warning"
      })
      return outfile
    }),
    (outfile) => Effect.sync(() => rmSync(outfile, { force: true }))
  )
