/**
 * The workflow engine: the client (start, queries, outside verbs), the runner that executes a
 * step's message by replaying the body, and the sweep. Each part is its own module under
 * `engine/`, built on one shared context (`engine/Context.ts`); this module wires them into
 * the services. Every transition goes through the table in `States.ts` and a guarded statement
 * under `sql/`.
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer } from "effect"
import type { SqlClient } from "effect/sql"
import type { Batches } from "../Batch/Batch.ts"
import type { PgBusConfig, PgBusConfigShape } from "../Config.ts"
import type { WorkerSession } from "../Database.ts"
import type { JobClient } from "../Job/JobClient.ts"
import type { Notifier } from "../Queue/Notifier.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import { WorkflowClient, type WorkflowClientShape } from "./Client.ts"
import { withInputChecks } from "./ClientInput.ts"
import { makeEngineContext } from "./engine/Context.ts"
import { makeExecute } from "./engine/Execute.ts"
import { makeOutcomes } from "./engine/Outcomes.ts"
import { makeQueries } from "./engine/Queries.ts"
import { makeReadClaims } from "./engine/ReadClaims.ts"
import { makeRunner } from "./engine/Runner.ts"
import { WorkflowRunner, WorkflowSweep } from "./engine/Services.ts"
import { makeStarts } from "./engine/Starts.ts"
import { makeSweep } from "./engine/Sweep.ts"
import { makeVerbs } from "./engine/Verbs.ts"

export { ErrorReporter, encodeError } from "./engine/Errors.ts"
export { type Delivery, ENGINE_VERSION, isStepMessage, StepMessage } from "./engine/Messages.ts"
export { WorkflowMetrics } from "./engine/Metrics.ts"
export {
  fanOutOutcomeOf,
  type NextWork,
  type RegisteredWorkflow,
  type SweepReport,
  WorkflowRunner,
  WorkflowSweep
} from "./engine/Services.ts"

/** Builds the engine's services on the database. */
const make = Effect.gen(function* () {
  const ctx = yield* makeEngineContext
  // the parts call the client's own verbs (a handle's, a resume's run_now): bound once built
  const self = (): WorkflowClientShape => client
  const queries = makeQueries(ctx, self)
  const starts = makeStarts(ctx, queries)
  const outcomes = makeOutcomes(ctx)
  const verbs = makeVerbs(ctx, self, queries, outcomes, starts)
  const client: WorkflowClientShape = {
    start: (workflow, payload, options = {}) => starts.startRun(workflow, payload, options, null),
    ...queries.queries,
    ...verbs.verbs
  }
  const execution = makeExecute(ctx, outcomes)
  const runner = makeRunner(ctx, outcomes, execution, queries)
  const sweep = makeSweep(ctx, outcomes, queries, verbs)
  return {
    client,
    runner: WorkflowRunner.of({
      execute: runner.execute,
      next: runner.next,
      fanOutFinished: sweep.fanOutFinished,
      readClaim: makeReadClaims(ctx, outcomes)
    }),
    sweep: WorkflowSweep.of({ runOnce: sweep.sweepOnce, expireWait: sweep.expireWait })
  }
})

/**
 * The workflow client and runner on the database.
 *
 * @category layers
 */
export const layer: Layer.Layer<
  WorkflowClient | WorkflowRunner | WorkflowSweep,
  never,
  PgBusConfig | SqlClient.SqlClient | WorkerSession | QueueStore | Notifier | JobClient | Batches
> = Layer.effectContext(
  Effect.map(make, ({ client, runner, sweep }) =>
    // the service checks every entry point's arguments first (ClientInput)
    Context.make(WorkflowClient, withInputChecks(client)).pipe(
      Context.add(WorkflowRunner, runner),
      Context.add(WorkflowSweep, sweep)
    )
  )
)

export type { PgBusConfigShape }
