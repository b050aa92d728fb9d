/**
 * The `pgbus` command (`npm run pgbus -- <args>`, or `bin/pgbus.mjs`): runs the CLI as the
 * process's main program on Node's services; SIGTERM/SIGINT interrupt it, and a supervisor
 * that drained exits 0.
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Effect } from "effect"
import * as Cli from "../Cli/Cli.ts"

const state = { supervising: false }

const program = Cli.run(process.argv.slice(2)).pipe(
  Effect.provideService(Cli.RunState, state),
  Effect.provide(NodeServices.layer)
)

NodeRuntime.runMain(program, {
  disableErrorReporting: true,
  teardown: (exit, onExit) => onExit(Cli.exitCodeOf(exit, state))
})
