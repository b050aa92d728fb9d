/**
 * `Workflow.sleep` and `Workflow.waitUntil`: a durable timer, a step that does nothing and is
 * due after its wait (or at its date); the run holds no worker until then. Composed from the
 * step primitive: a step with `wait` (or `at`) is scheduled due later (`verbs/step.ts`'s
 * `reachNew`), and its message wakes the run. The runner's primitive under it: `dueOf`.
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import type { StepOptions, WorkflowRuntime } from "../Runtime.ts"

/** The body's `sleep` (and `waitUntil`), composed from a step primitive (the engine's, or a replay's). */
export const sleepVia =
  (step: WorkflowRuntime["Service"]["step"]): WorkflowRuntime["Service"]["sleep"] =>
  (name, until) =>
    Effect.asVoid(step(name, Effect.void, "at" in until ? { at: until.at } : { wait: until.wait }))

/** When a new step is due: after its `wait` (on the database's clock), or at `at`; neither: now. */
export const dueOf = (options: Pick<StepOptions<unknown>, "wait" | "at">) => ({
  delayMs: options.wait === undefined ? 0 : Duration.toMillis(Duration.fromInputUnsafe(options.wait)),
  dueAt: options.at ?? null
})
