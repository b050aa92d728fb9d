/**
 * The `pgbus` command (`npm run pgbus -- <args>`, or `bin/pgbus.mjs`): runs the CLI as the
 * process's main program on Node's services; SIGTERM/SIGINT interrupt it, a supervisor that
 * drained exits 0, and a second signal exits at once. Logs go to stderr.
 */
import { NodeServices } from "@effect/platform-node"
import { Effect, Logger } from "effect"
import * as Cli from "../Cli/Cli.ts"
import { runMainWith } from "../Supervisor/Supervisor.ts"

const state = { supervising: false }

const program = Cli.run(process.argv.slice(2)).pipe(
  Effect.provideService(Cli.RunState, state),
  // logs go to stderr: stdout carries the commands' output (tables, JSON)
  Effect.provideService(Logger.LogToStderr, true),
  Effect.provide(NodeServices.layer)
)

// a second Ctrl-C during a supervisor's drain exits at once
runMainWith(program, {
  disableErrorReporting: true,
  teardown: (exit, onExit) => onExit(Cli.exitCodeOf(exit, state))
})
