/**
 * The JSON API of effect-pgbus, as an `effect/http-api` definition: every route, its query,
 * path and body Schemas and its responses (the operations service's models), from which the
 * OpenAPI document and the docs page are generated. `Http.layer` implements it.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { HttpApi, HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import * as Model from "../Operations/Model.ts"
import { VERSION } from "../version.ts"
import { ApiAccess } from "./Access.ts"
import { ReadErrors, WriteErrors } from "./ApiError.ts"

const Limit = Schema.optional(Schema.Int)
const Cursor = Schema.optional(Schema.String)
/** Who acts says why: recorded on the audit trail (1 to 500 characters). */
const Reason = Schema.optional(Schema.String.check(Schema.isMaxLength(500)))

/** The Workflows list's filters (times are ISO 8601; `status` is comma-separated). */
export const RunFilterQuery = {
  workflow: Schema.optional(Schema.String),
  status: Schema.optional(Schema.String),
  step: Schema.optional(Schema.String),
  errorClass: Schema.optional(Schema.String),
  subject: Schema.optional(Schema.String),
  id: Schema.optional(Schema.String),
  stuckReason: Schema.optional(Model.StuckReason),
  createdFrom: Schema.optional(Schema.String),
  createdTo: Schema.optional(Schema.String),
  endedFrom: Schema.optional(Schema.String),
  endedTo: Schema.optional(Schema.String)
}

/** The body of a filter in a bulk verb. */
export const RunFilterBody = Schema.Struct({
  workflow: Schema.optional(Schema.String),
  status: Schema.optional(Schema.Array(Model.RunStatus)),
  step: Schema.optional(Schema.String),
  errorClass: Schema.optional(Schema.String),
  subject: Schema.optional(Schema.String),
  stuckReason: Schema.optional(Model.StuckReason),
  createdFrom: Schema.optional(Schema.String),
  createdTo: Schema.optional(Schema.String),
  endedFrom: Schema.optional(Schema.String),
  endedTo: Schema.optional(Schema.String)
})

/** The body of a verb on one run. */
const VerbBody = Schema.Struct({ reason: Reason, expectedStatus: Schema.optional(Model.RunStatus) })

const RunId = { id: Schema.String }

const verb = <const Name extends string, const Path extends `/${string}`>(
  name: Name,
  path: Path,
  description: string
) =>
  HttpApiEndpoint.post(name, path, {
    params: RunId,
    payload: VerbBody,
    success: Model.VerbResult,
    error: WriteErrors
  }).annotate(OpenApi.Description, description)

const health = HttpApiGroup.make("health")
  .add(
    HttpApiEndpoint.get("verdict", "/health", { success: Model.Verdict, error: ReadErrors }).annotate(
      OpenApi.Description,
      "The cluster verdict (OK, DEGRADED, STALLED, ERROR) with its reasons"
    )
  )
  .add(HttpApiEndpoint.get("overview", "/overview", { success: Model.Overview, error: ReadErrors }))
  .add(
    HttpApiEndpoint.get("processes", "/processes", { success: Schema.Array(Model.ProcessSummary), error: ReadErrors })
  )

const queues = HttpApiGroup.make("queues")
  .add(HttpApiEndpoint.get("list", "/queues", { success: Schema.Array(Model.QueueSummary), error: ReadErrors }))
  .add(
    HttpApiEndpoint.get("get", "/queues/:queue", {
      params: { queue: Schema.String },
      success: Model.QueueSummary,
      error: ReadErrors
    })
  )
  .add(
    HttpApiEndpoint.post("pause", "/queues/:queue/pause", {
      params: { queue: Schema.String },
      payload: Schema.Struct({ reason: Reason, until: Schema.optional(Schema.String) }),
      success: Model.QueueSummary,
      error: WriteErrors
    }).annotate(OpenApi.Description, "Stop every worker from claiming from the queue (within a second)")
  )
  .add(
    HttpApiEndpoint.post("resume", "/queues/:queue/resume", {
      params: { queue: Schema.String },
      payload: Schema.Struct({ reason: Reason }),
      success: Model.QueueSummary,
      error: WriteErrors
    })
  )
  .add(
    HttpApiEndpoint.post("purge", "/queues/:queue/purge", {
      params: { queue: Schema.String },
      payload: Schema.Struct({ reason: Reason }),
      success: Schema.Struct({ queue: Schema.String, purged: Schema.Number }),
      error: WriteErrors
    }).annotate(OpenApi.Description, "Delete every message of the queue (not its archive, not its dead letters)")
  )
  .add(
    HttpApiEndpoint.get("jobs", "/queues/:queue/jobs", {
      params: { queue: Schema.String },
      query: {
        state: Schema.optional(Model.JobState),
        job: Schema.optional(Schema.String),
        cursor: Cursor,
        limit: Limit
      },
      success: Model.JobPage,
      error: ReadErrors
    })
  )
  .add(
    HttpApiEndpoint.get("job", "/queues/:queue/jobs/:id", {
      params: { queue: Schema.String, id: Schema.String },
      success: Model.JobDetail,
      error: ReadErrors
    })
  )

const DeadLetterTarget = Schema.Struct({
  ids: Schema.optional(Schema.Array(Schema.String)),
  queue: Schema.optional(Schema.String),
  errorClass: Schema.optional(Schema.String),
  reason: Reason
})

const deadLetters = HttpApiGroup.make("deadLetters")
  .add(
    HttpApiEndpoint.get("list", "/dead-letters", {
      query: {
        queue: Schema.optional(Schema.String),
        errorClass: Schema.optional(Schema.String),
        cursor: Cursor,
        limit: Limit
      },
      success: Model.DeadLetterPage,
      error: ReadErrors
    })
  )
  .add(
    HttpApiEndpoint.post("retryMany", "/dead-letters/retry", {
      payload: DeadLetterTarget,
      success: Model.BulkResult,
      error: WriteErrors
    }).annotate(OpenApi.Description, "Retry dead letters by ids or on a filter, at most 500 a call")
  )
  .add(
    HttpApiEndpoint.post("discardMany", "/dead-letters/discard", {
      payload: DeadLetterTarget,
      success: Model.BulkResult,
      error: WriteErrors
    })
  )
  .add(
    HttpApiEndpoint.get("get", "/dead-letters/:id", {
      params: { id: Schema.String },
      success: Model.DeadLetterDetail,
      error: ReadErrors
    })
  )
  .add(
    HttpApiEndpoint.post("retry", "/dead-letters/:id/retry", {
      params: { id: Schema.String },
      payload: Schema.Struct({ reason: Reason }),
      success: Schema.Struct({ id: Schema.String, queue: Schema.String, messageId: Schema.String }),
      error: WriteErrors
    })
  )
  .add(
    HttpApiEndpoint.post("discard", "/dead-letters/:id/discard", {
      params: { id: Schema.String },
      payload: Schema.Struct({ reason: Reason }),
      success: Schema.Struct({ id: Schema.String, discarded: Schema.Boolean }),
      error: WriteErrors
    })
  )

const Window = { windowMs: Schema.optional(Schema.Int) }

const workflows = HttpApiGroup.make("workflows")
  .add(
    HttpApiEndpoint.get("list", "/workflows", {
      query: { ...RunFilterQuery, cursor: Cursor, limit: Limit },
      success: Model.RunPage,
      error: ReadErrors
    }).annotate(OpenApi.Description, "Runs newest first; the filters combine and survive paging")
  )
  .add(
    HttpApiEndpoint.get("counts", "/workflows/counts", {
      query: { workflow: Schema.optional(Schema.String) },
      success: Model.WorkflowCounts,
      error: ReadErrors
    })
  )
  .add(
    HttpApiEndpoint.get("attention", "/workflows/attention", {
      query: { workflow: Schema.optional(Schema.String) },
      success: Schema.Array(Model.AttentionGroup),
      error: ReadErrors
    }).annotate(OpenApi.Description, "Stuck runs grouped by class, step, stuck reason and error class")
  )
  .add(
    HttpApiEndpoint.get("definitions", "/workflows/definitions", {
      query: Window,
      success: Schema.Array(Model.DefinitionView),
      error: ReadErrors
    })
  )
  .add(
    HttpApiEndpoint.get("stats", "/workflows/definitions/:workflow", {
      params: { workflow: Schema.String },
      query: Window,
      success: Model.WorkflowStats,
      error: ReadErrors
    })
  )
  .add(
    HttpApiEndpoint.post("bulk", "/workflows/bulk/:verb", {
      params: { verb: Schema.Literals(["pause", "resume", "cancel", "run_now", "rerun", "skip"]) },
      payload: Schema.Struct({
        ids: Schema.optional(Schema.Array(Schema.String)),
        filter: Schema.optional(RunFilterBody),
        reason: Reason,
        /** cancel: also cancel each run's child runs that have not ended (and theirs). */
        cancelChildren: Schema.optional(Schema.Boolean)
      }),
      success: Model.BulkResult,
      error: WriteErrors
    }).annotate(OpenApi.Description, "One verb on many runs (ids, or a filter's first 500), each through its guard")
  )
  .add(HttpApiEndpoint.get("get", "/workflows/:id", { params: RunId, success: Model.RunDetail, error: ReadErrors }))
  .add(verb("pause", "/workflows/:id/pause", "Pause the run"))
  .add(verb("resume", "/workflows/:id/resume", "Resume a paused run"))
  .add(
    HttpApiEndpoint.post("cancel", "/workflows/:id/cancel", {
      params: RunId,
      payload: Schema.Struct({
        ...VerbBody.fields,
        cancelChildren: Schema.optional(Schema.Boolean).annotate({
          description: "Also cancel the run's child runs that have not ended (and theirs); default false"
        })
      }),
      success: Model.VerbResult,
      error: WriteErrors
    }).annotate(OpenApi.Description, "Cancel the run (and, with cancelChildren, its live child runs)")
  )
  .add(verb("runNow", "/workflows/:id/run-now", "Cut a scheduled step's wait short"))
  .add(verb("rerun", "/workflows/:id/rerun", "Start a new run with the same subject and payload"))
  .add(verb("skip", "/workflows/:id/skip", "Skip the step the run waits at"))
  .add(
    HttpApiEndpoint.post("resumeAt", "/workflows/:id/resume-at", {
      params: RunId,
      payload: Schema.Struct({ step: Schema.String, reason: Reason, expectedStatus: Schema.optional(Model.RunStatus) }),
      success: Model.VerbResult,
      error: WriteErrors
    })
  )
  .add(
    HttpApiEndpoint.post("reschedule", "/workflows/:id/reschedule", {
      params: RunId,
      payload: Schema.Struct({ at: Schema.String, reason: Reason, expectedStatus: Schema.optional(Model.RunStatus) }),
      success: Model.VerbResult,
      error: WriteErrors
    })
  )
  .add(
    HttpApiEndpoint.post("signal", "/workflows/:id/signal", {
      params: RunId,
      payload: Schema.Struct({
        name: Schema.String,
        payload: Schema.Unknown,
        idempotencyKey: Schema.optional(Schema.String),
        reason: Reason,
        expectedStatus: Schema.optional(Model.RunStatus)
      }),
      success: Model.SignalResult,
      error: WriteErrors
    })
  )

const bus = HttpApiGroup.make("bus")
  .add(
    HttpApiEndpoint.get("events", "/events", {
      query: { handler: Schema.optional(Schema.String), limit: Limit },
      success: Model.EventsView,
      error: ReadErrors
    })
  )
  .add(
    HttpApiEndpoint.get("outbox", "/outbox", {
      query: {
        state: Schema.optional(Schema.Literals(["pending", "failing", "published"])),
        cursor: Cursor,
        limit: Limit
      },
      success: Model.OutboxPage,
      error: ReadErrors
    })
  )
  .add(
    HttpApiEndpoint.get("batches", "/batches", {
      query: { status: Schema.optional(Schema.Literals(["pending", "finished"])), cursor: Cursor, limit: Limit },
      success: Model.BatchPage,
      error: ReadErrors
    })
  )
  .add(
    HttpApiEndpoint.get("batch", "/batches/:id", {
      params: { id: Schema.String },
      success: Model.BatchView,
      error: ReadErrors
    })
  )

/** A rate as a body: `limit` per `period` (a duration such as "1 minute" or "500 millis"). */
const RateBody = Schema.Struct({
  limit: Schema.Int,
  period: Schema.String,
  reason: Reason
})

const flow = HttpApiGroup.make("flow")
  .add(
    HttpApiEndpoint.get("locks", "/locks", { success: Model.LocksView, error: ReadErrors }).annotate(
      OpenApi.Description,
      "Flow-control locks: uniqueness keys held, concurrency keys against their limits, rate buckets"
    )
  )
  .add(
    HttpApiEndpoint.post("releaseUniqueKey", "/locks/unique/release", {
      payload: Schema.Struct({ job: Schema.String, key: Schema.String, reason: Reason }),
      success: Model.ReleasedKey,
      error: WriteErrors
    }).annotate(OpenApi.Description, "Release a uniqueness key whoever holds it (its job, if queued, runs on)")
  )
  .add(
    HttpApiEndpoint.get("rates", "/rates", { success: Schema.Array(Model.JobRateView), error: ReadErrors }).annotate(
      OpenApi.Description,
      "Every rate-limited job: its rate as defined, as set at run time, and in force"
    )
  )
  .add(
    HttpApiEndpoint.put("setRate", "/rates/:job", {
      params: { job: Schema.String },
      payload: RateBody,
      success: Model.JobRateView,
      error: WriteErrors
    }).annotate(OpenApi.Description, "Set a job's rate at run time (every process uses it from its next claim)")
  )
  .add(
    HttpApiEndpoint.post("resetRate", "/rates/:job/reset", {
      params: { job: Schema.String },
      payload: Schema.Struct({ reason: Reason }),
      success: Schema.NullOr(Model.JobRateView),
      error: WriteErrors
    }).annotate(OpenApi.Description, "Drop a job's run-time rate: back to its definition's (null: it has none)")
  )

const recurring = HttpApiGroup.make("recurring")
  .add(
    HttpApiEndpoint.get("list", "/recurring", {
      success: Schema.Array(Model.RecurringTaskView),
      error: ReadErrors
    }).annotate(
      OpenApi.Description,
      "Every recurring task the scheduler's leader stored: its schedule, the job or workflow it fires, its queue, catch-up, last and next fire, and its fires in the ledger"
    )
  )
  .add(
    HttpApiEndpoint.get("executions", "/recurring/:key/executions", {
      params: { key: Schema.String },
      query: { limit: Limit },
      success: Schema.Array(Model.RecurringExecutionView),
      error: ReadErrors
    }).annotate(
      OpenApi.Description,
      "A recurring task's fires in the ledger, newest first (limit: 1 to 500, default 50): scheduled, or run now with who ran it (actor) and why (reason). Unknown key: 404"
    )
  )
  .add(
    HttpApiEndpoint.post("runNow", "/recurring/:key/run-now", {
      params: { key: Schema.String },
      payload: Schema.Struct({ reason: Reason }),
      success: Model.RecurringFireView,
      error: WriteErrors
    }).annotate(
      OpenApi.Description,
      "Fire a recurring task now (a manual fire in the ledger; its schedule is unchanged): enqueue its job, or start its workflow's run (the workflow must be registered in the serving process). Unknown key: 404"
    )
  )

/**
 * The API, unprefixed (`Http.layer` mounts it under its path).
 *
 * @category models
 */
export const PgBusApi = HttpApi.make("pgbus")
  .add(health, queues, deadLetters, workflows, bus, flow, recurring)
  .middleware(ApiAccess)
  .annotate(OpenApi.Title, "effect-pgbus operations API")
  .annotate(OpenApi.Version, VERSION)
  .annotate(
    OpenApi.Description,
    "Queues, jobs, dead letters, processes, workflows, events, the outbox, batches, flow-control locks and rates, and recurring tasks. Write routes need the app's authorize hook."
  )

/** The API mounted under a path (every route prefixed). */
export const apiAt = (path: `/${string}`) => PgBusApi.prefix(path)

/** The API as mounted. */
export type MountedApi = ReturnType<typeof apiAt>
