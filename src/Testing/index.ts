/**
 * `effect-pgbus/testing`: helpers for an app's own tests. Jobs (run one inline, drain a queue
 * once, assert what was enqueued), event-bus modes (fake, inline, disabled) and assertions on
 * what a block published, workflows (run the next step inline, speedrun, deliver a signal,
 * expire a wait), and a throwaway database (on the embedded server when the environment names
 * no server).
 *
 * ```ts
 * import * as Testing from "effect-pgbus/testing"
 * const TestLayer = Testing.layerEvents("fake").pipe(Layer.provideMerge(Testing.layerDatabase()))
 * ```
 *
 * @since 0.1.0
 */
export { layerDatabase, layerDatabaseConfig } from "./Database.ts"
export {
  assertNotPublished,
  assertPublished,
  type CapturedEvent,
  clearPublished,
  type EventMatch,
  type EventMode,
  layerEvents,
  PublishedEvents,
  published,
  withEventMode
} from "./Events.ts"
export {
  AssertionFailed,
  assertEnqueued,
  type DrainReport,
  drainQueue,
  type EnqueuedJob,
  enqueued,
  matches,
  performJob,
  refuteEnqueued
} from "./Jobs.ts"
export * as Replay from "./Replay.ts"
export {
  completeFanOut,
  deliverSignal,
  expireWait,
  performNextStep,
  runStepInline,
  speedrun
} from "./Workflows.ts"
