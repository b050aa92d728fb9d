/**
 * `Workflow.waitForSignal`: a step that takes a signal at its gate, or parks until one comes (or
 * its deadline passes); the run holds no worker meanwhile. Composed from the step primitive (the
 * step with `waitFor`), by the engine and by `Testing/Replay.ts` alike. The runner's primitives
 * under it are `signalGate.ts`'s: the gate every step with a guard or a wait passes, a per-run
 * deadline's late notice and the deadline of a wait.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { type SignalMatcher, StepContext, type WaitForSignalOptions, type WorkflowRuntime } from "../Runtime.ts"

/** The name of a wait's step: its own, else `wait:<signal>` (a second wait for one signal names its step). */
export const waitStepName = (signal: string | SignalMatcher, options: WaitForSignalOptions): string =>
  options.step ?? `wait:${typeof signal === "string" ? signal : signal.name}`

/** The body's `waitForSignal`, composed from a step primitive (the engine's, or a replay's). */
export const waitForSignalVia =
  (step: WorkflowRuntime["Service"]["step"]): WorkflowRuntime["Service"]["waitForSignal"] =>
  (signal, options) =>
    step(
      waitStepName(signal, options),
      Effect.map(Effect.serviceOption(StepContext), (c) => (c._tag === "Some" ? c.value.signal?.payload : undefined)),
      {
        waitFor: signal,
        ...(options.timeout !== undefined ? { waitTimeout: options.timeout } : {}),
        ...(options.onTimeout !== undefined ? { onTimeout: options.onTimeout } : {}),
        ...(options.skipIf !== undefined ? { skipIf: options.skipIf } : {}),
        ...(options.onError !== undefined ? { onError: options.onError } : {}),
        ...(options.queue !== undefined ? { queue: options.queue } : {}),
        ...(options.output !== undefined ? { output: options.output } : {})
      }
    )
