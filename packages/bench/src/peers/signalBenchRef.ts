/**
 * bench:signals' workflow as a ref: its name and Schemas without its body. The run process
 * implements it (ours-signals.ts); the sender process of the off-process case signals through
 * it (ours-signals-sender.ts), as a web process that imports only refs would.
 */
import { Schema } from "effect"
import { Workflow } from "../../../../src/index.ts"

/** The workflow whose one step waits for the signal `go`. */
export const SignalBenchRef = Workflow.ref("SignalBench", {
  payload: Schema.Struct({ i: Schema.Number }),
  signals: { go: Schema.Struct({ i: Schema.Number }) }
})
