/**
 * The MCP tools: read tools for health, queues, dead letters, processes, workflows, one
 * workflow, needs attention, workflow definitions and stats, flow-control locks, job rates and
 * recurring tasks (annotated read-only), and the write tools (resume, cancel, skip step, resume
 * at, run now, signal, dead-letter retry, set a job's rate, release a uniqueness key, run a
 * recurring task now), each
 * requiring a `reason` (1 to 500 characters after trimming) and the `expectedStatus` the agent
 * read, annotated destructive (cancel also idempotent). There are no bulk tools: one audited
 * call per run.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { Tool, Toolkit } from "effect/ai"
import { McpRequestContext } from "effect/ai/McpSchema"
import * as Model from "../Operations/Model.ts"
import { Conflict, DatabaseError, InvalidRequest, NotFound } from "../Operations/OperationsError.ts"
import { StuckReasons } from "../Workflow/QuerySql.ts"

/** What a read tool fails with (a message the agent can act on). */
const ReadFailure = Schema.Union([NotFound, Conflict, InvalidRequest, DatabaseError])

const IncludePayloads = Schema.optional(
  Schema.Boolean.annotate({
    description: "Return payloads, outputs and error text (only when the server allows payloads)"
  })
)
const Limit = Schema.optional(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 500 })))

const read = <const Name extends string, P extends Schema.Top, S extends Schema.Top>(
  name: Name,
  description: string,
  parameters: P,
  success: S
) =>
  Tool.make(name, { description, parameters, success, failure: ReadFailure })
    .annotate(Tool.Readonly, true)
    .annotate(Tool.Destructive, false)
    .annotate(Tool.Idempotent, true)
    .annotate(Tool.OpenWorld, false)

/** Lists as objects (a tool whose success is an array gets no structured content). */
const Items = <S extends Schema.Top>(item: S) => Schema.Struct({ items: Schema.Array(item) })

export const Health = read(
  "pgbus_health",
  "The cluster verdict (OK, DEGRADED, STALLED, ERROR) with its reasons",
  Tool.EmptyParams,
  Model.Verdict
)
export const Queues = read(
  "pgbus_queues",
  "Every queue: depth, claimable, running, retrying, latency, dead letters, paused",
  Tool.EmptyParams,
  Items(Model.QueueSummary)
)
export const DeadLetters = read(
  "pgbus_dlq",
  "Dead letters, filtered by queue and error class, with why each died",
  Schema.Struct({
    queue: Schema.optional(Schema.String),
    errorClass: Schema.optional(Schema.String),
    cursor: Schema.optional(Schema.String),
    limit: Limit,
    includePayloads: IncludePayloads
  }),
  Model.DeadLetterPage
)
export const Processes = read(
  "pgbus_processes",
  "Every process: its status in words, busy/capacity, jobs/s, last beat",
  Tool.EmptyParams,
  Items(Model.ProcessSummary)
)
export const Workflows = read(
  "pgbus_workflows",
  "Workflow runs newest first, filtered like the Workflows page (class, status, step, error class, subject, stuck reason)",
  Schema.Struct({
    workflowClass: Schema.optional(Schema.String),
    status: Schema.optional(Schema.Array(Model.RunStatus)),
    step: Schema.optional(Schema.String),
    errorClass: Schema.optional(Schema.String),
    subject: Schema.optional(Schema.String),
    stuckReason: Schema.optional(Schema.Literals(StuckReasons)),
    cursor: Schema.optional(Schema.String),
    limit: Limit,
    includePayloads: IncludePayloads
  }),
  Model.RunPage
)
export const WorkflowRun = read(
  "pgbus_workflow",
  "One workflow run with its available actions, attempts, signals and audit trail",
  Schema.Struct({ workflowId: Schema.String, includePayloads: IncludePayloads }),
  Model.RunDetail
)
export const Attention = read(
  "pgbus_workflows_attention",
  "Stuck runs grouped by class, step, stuck reason and error class (the 200 biggest groups)",
  Schema.Struct({ workflowClass: Schema.optional(Schema.String), includePayloads: IncludePayloads }),
  Items(Model.AttentionGroup)
)
export const Definitions = read(
  "pgbus_workflow_definitions",
  "One row per workflow class: going on, paused, stuck, ended in the window, p50/p95 duration",
  Schema.Struct({ windowMs: Schema.optional(Schema.Int) }),
  Items(Model.DefinitionView)
)
export const Stats = read(
  "pgbus_workflow_stats",
  "A workflow class's steps: runs at each now, run time percentiles, failure and skip rates in the window",
  Schema.Struct({ workflowClass: Schema.String, windowMs: Schema.optional(Schema.Int) }),
  Model.WorkflowStats
)

export const Locks = read(
  "pgbus_locks",
  "Flow-control locks: uniqueness keys held (by which message), concurrency keys against their limits (running, waiting, oldest wait), rate buckets",
  Tool.EmptyParams,
  Model.LocksView
)
export const JobRates = read(
  "pgbus_job_rates",
  "Every rate-limited job: its rate as defined, as set at run time (who, why, when) and in force",
  Tool.EmptyParams,
  Items(Model.JobRateView)
)

export const RecurringTasks = read(
  "pgbus_recurring",
  "Every recurring task: its schedule (cron, zone), the job or workflow it fires, its queue, catch-up, last and next fire, fires in the ledger",
  Tool.EmptyParams,
  Items(Model.RecurringTaskView)
)

/** The read tools. */
export const ReadTools = Toolkit.make(
  Health,
  Queues,
  DeadLetters,
  Processes,
  Workflows,
  WorkflowRun,
  Attention,
  Definitions,
  Stats,
  Locks,
  JobRates,
  RecurringTasks
)

// ---- write tools ----

/** Why the agent acts: 1 to 500 characters once trimmed. */
export const Reason = Schema.String.check(
  Schema.makeFilter<string>((s) => {
    const n = s.trim().length
    return (n >= 1 && n <= 500) || "reason must have 1 to 500 characters (after trimming)"
  })
)

/** What every write tool answers: whether it acted, why not, and the run as it is after. */
export const WriteResult = Schema.Struct({
  ok: Schema.Boolean,
  reason: Schema.String,
  workflow: Schema.NullOr(Model.RunSummary),
  /** A refused transition: what refused it, and the status the run is in now. */
  code: Schema.optional(Schema.String),
  status: Schema.optional(Schema.String),
  allowed: Schema.optional(Schema.Array(Schema.String)),
  /** A rate tool: the job's rate after (null: it has none). */
  rate: Schema.optional(Schema.NullOr(Model.JobRateView)),
  /** The recurring run-now tool: what the fire did. */
  fire: Schema.optional(Model.RecurringFireView)
})
export type WriteResult = typeof WriteResult.Type

const verbParameters = {
  workflowId: Schema.String,
  reason: Reason,
  expectedStatus: Model.RunStatus
}

const write = <const Name extends string, P extends Schema.Struct.Fields>(
  name: Name,
  description: string,
  parameters: P,
  idempotent = false
) =>
  Tool.make(name, {
    description,
    parameters: Schema.Struct(parameters),
    success: WriteResult,
    dependencies: [McpRequestContext]
  })
    .annotate(Tool.Readonly, false)
    .annotate(Tool.Destructive, true)
    .annotate(Tool.Idempotent, idempotent)
    .annotate(Tool.OpenWorld, false)

export const Resume = write("pgbus_workflow_resume", "Resume a paused run", verbParameters)
export const Cancel = write(
  "pgbus_workflow_cancel",
  "Cancel a run (with cancelChildren, also its child runs that have not ended)",
  {
    ...verbParameters,
    cancelChildren: Schema.optional(Schema.Boolean).annotate({
      description: "Also cancel the run's live child runs (and theirs); default false: they run on"
    })
  },
  true
)
export const SkipStep = write("pgbus_workflow_skip_step", "Skip the step a waiting run waits at", verbParameters)
export const ResumeAt = write("pgbus_workflow_resume_at", "Resume a paused run at a named step (a new attempt)", {
  ...verbParameters,
  step: Schema.String
})
export const RunNow = write("pgbus_workflow_run_now", "Cut a scheduled step's wait short", verbParameters)
export const Signal = write("pgbus_workflow_signal", "Send a signal (a JSON object payload) to a run", {
  ...verbParameters,
  name: Schema.String,
  payload: Schema.Record(Schema.String, Schema.Unknown),
  idempotencyKey: Schema.optional(Schema.String)
})
export const DeadLetterRetry = write("pgbus_dlq_retry", "Put one dead letter back on its origin queue", {
  id: Schema.String.annotate({ description: "<dlq>:<msg_id>" }),
  reason: Reason
})

export const SetJobRate = write(
  "pgbus_job_rate_set",
  "Set a rate-limited job's rate at run time (limit per period, e.g. 100 per \"1 minute\"), or drop it (reset: true) back to its definition's; every process uses it from its next claim",
  {
    job: Schema.String,
    limit: Schema.optional(Schema.Int),
    period: Schema.optional(Schema.String.annotate({ description: 'a duration: "1 minute", "500 millis"' })),
    reset: Schema.optional(Schema.Boolean),
    reason: Reason
  },
  true
)
export const ReleaseUniqueKey = write(
  "pgbus_unique_key_release",
  "Release a uniqueness key whoever holds it (a holder that will never end); its job, if still queued, runs on",
  { job: Schema.String, key: Schema.String, reason: Reason }
)

export const RecurringRunNow = write(
  "pgbus_recurring_run_now",
  "Fire a recurring task now (its schedule is unchanged; recorded in the ledger as a manual fire): enqueue its job, or start its workflow's run when the workflow is registered in this server's process",
  { key: Schema.String.annotate({ description: "the task's key, as pgbus_recurring lists it" }), reason: Reason }
)

/** The write tools (present only when `mcpWriteTools` is on). */
export const WriteTools = Toolkit.make(
  Resume,
  Cancel,
  SkipStep,
  ResumeAt,
  RunNow,
  Signal,
  DeadLetterRetry,
  SetJobRate,
  ReleaseUniqueKey,
  RecurringRunNow
)

/** Every tool. */
export const AllTools = Toolkit.merge(ReadTools, WriteTools)
