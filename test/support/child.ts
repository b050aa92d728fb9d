/** Spawns the child supervisor fixture and watches its output. */
import { type ChildProcess, spawn } from "node:child_process"
import { Effect } from "effect"

export interface Child {
  readonly process: ChildProcess
  readonly output: () => string
  /** Resolves with the exit code (or the signal that killed it). */
  readonly exited: Effect.Effect<{ readonly code: number | null; readonly signal: NodeJS.Signals | null }>
}

/** Starts the child supervisor with extra environment; killed (SIGKILL) when the scope closes. */
export const spawnSupervisor = (env: Record<string, string>) =>
  Effect.acquireRelease(
    Effect.sync((): Child => {
      let output = ""
      const child = spawn(process.execPath, ["--import", "tsx", "test/fixtures/supervisor-child.ts"], {
        env: { ...process.env, ...env },
        stdio: ["ignore", "pipe", "pipe"]
      })
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
