/**
 * What the operations service answers, as Schemas: the JSON API's responses, the MCP tools'
 * results and the CLI's `--json` are these, encoded once. Times are ISO 8601 strings, ages and
 * durations milliseconds, ids strings (message ids are int8 in the database). Payload fields
 * hold `"[redacted]"` unless the caller may see payloads.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import { RunStatuses } from "../Workflow/States.ts"

const NullableString = Schema.NullOr(Schema.String)
const NullableNumber = Schema.NullOr(Schema.Number)

/** An error as listed: its class and message (the message redacted without payloads). */
export const ErrorView = Schema.Struct({ class: Schema.String, message: Schema.String })
export type ErrorView = typeof ErrorView.Type

/** A run's state. */
export const RunStatus = Schema.Literals(RunStatuses)

// ---- queues and jobs ----

/** Who paused a queue, why, since when, until when. */
export const QueuePause = Schema.Struct({
  at: Schema.String,
  until: NullableString,
  reason: NullableString,
  actor: Schema.String
})

/** A queue with its figures (dead-letter queues are counted on the queue they serve). */
export const QueueSummary = Schema.Struct({
  name: Schema.String,
  deadLetterQueue: NullableString,
  depth: Schema.Number,
  /** Claimable now. */
  ready: Schema.Number,
  /** Enqueued for later. */
  scheduled: Schema.Number,
  /** Claimed by a worker. */
  running: Schema.Number,
  /** Failed, waiting out their backoff. */
  retrying: Schema.Number,
  oldestAgeMs: NullableNumber,
  /** How long the oldest claimable message has been claimable (0: none waits). */
  claimableLatencyMs: Schema.Number,
  deadLetters: Schema.Number,
  archived: Schema.Number,
  paused: Schema.Boolean,
  pause: Schema.NullOr(QueuePause),
  /** What the queue is doing, in words. */
  status: Schema.String
})
export type QueueSummary = typeof QueueSummary.Type

/** The states a job is listed by. */
export const JobState = Schema.Literals(["ready", "scheduled", "running", "retrying", "archived"])
export type JobState = typeof JobState.Type

/** A job (a queued or archived message). */
export const JobSummary = Schema.Struct({
  queue: Schema.String,
  id: Schema.String,
  job: NullableString,
  state: JobState,
  attempts: Schema.Number,
  enqueuedAt: Schema.String,
  visibleAt: Schema.String,
  archivedAt: NullableString,
  lastError: Schema.NullOr(ErrorView)
})
export type JobSummary = typeof JobSummary.Type

/** A job with its payload and headers. */
export const JobDetail = Schema.Struct({
  ...JobSummary.fields,
  claimedBy: NullableString,
  payload: Schema.Unknown,
  headers: Schema.Unknown
})
export type JobDetail = typeof JobDetail.Type

/** A page of jobs; `next` is the cursor of the following page. */
export const JobPage = Schema.Struct({ jobs: Schema.Array(JobSummary), next: NullableString })
export type JobPage = typeof JobPage.Type

// ---- dead letters ----

/** A dead letter: `id` is `<dlq>:<msg_id>`. */
export const DeadLetterSummary = Schema.Struct({
  id: Schema.String,
  queue: Schema.String,
  origin: NullableString,
  job: NullableString,
  attempts: Schema.Number,
  enqueuedAt: Schema.String,
  deadLetteredAt: NullableString,
  reason: NullableString,
  errorClass: NullableString,
  errorMessage: NullableString,
  retriesFromDlq: Schema.Number
})
export type DeadLetterSummary = typeof DeadLetterSummary.Type

/** A dead letter with its payload, headers and backtrace. */
export const DeadLetterDetail = Schema.Struct({
  ...DeadLetterSummary.fields,
  backtrace: NullableString,
  payload: Schema.Unknown,
  headers: Schema.Unknown
})
export type DeadLetterDetail = typeof DeadLetterDetail.Type

/** A page of dead letters, with how many the filter matches in all. */
export const DeadLetterPage = Schema.Struct({
  deadLetters: Schema.Array(DeadLetterSummary),
  next: NullableString,
  total: Schema.Number
})
export type DeadLetterPage = typeof DeadLetterPage.Type

/** What a bulk verb did: at most 500 targets a call, each through its own guarded action. */
export const BulkResult = Schema.Struct({
  /** Targets the call acted on (the filter's first 500 at most). */
  requested: Schema.Number,
  /** Moved (retried, discarded, resumed, ...). */
  moved: Schema.Number,
  /** Had already moved on (gone, or in a state the verb does not apply to): nothing done to them. */
  alreadyMovedOn: Schema.Number,
  /** Failed for another reason (see the log). */
  failed: Schema.Number,
  /** The filter matched more than the cap: call again for the rest. */
  capped: Schema.Boolean,
  /** What the result says, in words ("Resumed 212; 2 had already moved on"). */
  summary: Schema.String
})
export type BulkResult = typeof BulkResult.Type

// ---- processes ----

/** A process with its figures and its status in words. */
export const ProcessSummary = Schema.Struct({
  id: Schema.String,
  pid: Schema.Number,
  host: Schema.String,
  roles: Schema.Array(Schema.String),
  /**
   * The roles it holds now (dispatcher, scheduler, `consumer:<queue>` for the single active
   * consumer of a queue): its session holds their locks.
   */
  leads: Schema.Array(Schema.String),
  capsules: Schema.Array(
    Schema.Struct({
      name: Schema.String,
      queues: Schema.Array(Schema.String),
      concurrency: Schema.Number,
      /** Its rank among its queues' consumers (consumer priority), when it has one. */
      consumerPriority: Schema.optionalKey(Schema.Number),
      /** Whether one process at a time reads its queues. */
      singleActiveConsumer: Schema.optionalKey(Schema.Boolean)
    })
  ),
  busy: Schema.Number,
  capacity: Schema.Number,
  /** busy / capacity (0 without capacity). */
  utilization: Schema.Number,
  succeeded: Schema.Number,
  failed: Schema.Number,
  jobsPerSecond: Schema.Number,
  version: Schema.String,
  appRevision: NullableString,
  startedAt: Schema.String,
  lastBeatAt: Schema.String,
  lastBeatAgeMs: Schema.Number,
  status: Schema.Literals(["healthy", "late", "stale"]),
  /** Why it has that status and what happens next. */
  statusText: Schema.String
})
export type ProcessSummary = typeof ProcessSummary.Type

// ---- health ----

/** The cluster verdict: `STALLED` fails readiness, `ERROR` means the database is unreachable. */
export const VerdictStatus = Schema.Literals(["OK", "DEGRADED", "STALLED", "ERROR"])
export type VerdictStatus = typeof VerdictStatus.Type

/** One verdict across every process, with its reasons. */
export const Verdict = Schema.Struct({
  status: VerdictStatus,
  reasons: Schema.Array(Schema.String),
  checkedAt: Schema.String,
  processes: Schema.Struct({ healthy: Schema.Number, late: Schema.Number, stale: Schema.Number }),
  /** Queues whose claimable work waits past the stall limit. */
  stalledQueues: Schema.Array(Schema.String)
})
export type Verdict = typeof Verdict.Type

/** One table of the schema: tuples, vacuum ages, autovacuum options. */
export const TableHealth = Schema.Struct({
  table: Schema.String,
  liveTuples: Schema.Number,
  deadTuples: Schema.Number,
  /** dead / (dead + live); 0 for an empty table. */
  bloatRatio: Schema.Number,
  lastVacuumAgeSeconds: NullableNumber,
  lastAutovacuumAgeSeconds: NullableNumber,
  options: Schema.Array(Schema.String)
})
export type TableHealth = typeof TableHealth.Type

/** The database as the metrics that tell when to tune see it. */
export const DatabaseHealth = Schema.Struct({
  tables: Schema.Array(TableHealth),
  oldestTransactionAgeMs: NullableNumber,
  /** Connections of effect-pgbus clients on the database, every process's pools together. */
  connections: Schema.Struct({ open: Schema.Number, idle: Schema.Number }),
  settings: Schema.Record(Schema.String, Schema.String)
})
export type DatabaseHealth = typeof DatabaseHealth.Type

// ---- workflows ----

/** The stuck reasons of a run. */
export const StuckReason = Schema.Literals(["paused_error", "stalled", "paused_manual", "overdue", "waiting_overdue"])

/** A run as the Workflows list shows it. */
export const RunSummary = Schema.Struct({
  id: Schema.String,
  workflow: Schema.String,
  subject: NullableString,
  resourceId: NullableString,
  status: RunStatus,
  currentStep: NullableString,
  pausedReason: NullableString,
  stuckReason: Schema.NullOr(StuckReason),
  error: Schema.NullOr(ErrorView),
  createdAt: Schema.String,
  updatedAt: Schema.String,
  finishedAt: NullableString,
  /** The run's priority sub-queue (0 highest); null: the config's default. */
  priority: NullableNumber,
  /** A singleton workflow's run (at most one ready, performing or waiting run of the workflow). */
  singleton: Schema.Boolean,
  /** The schedule's slot, for a run its workflow's schedule started. */
  scheduledFor: NullableString,
  /** A child run: the run whose `Workflow.child` step started it, and that step. */
  parentRunId: NullableString,
  parentStep: NullableString,
  /** What the run is doing and what happens next, in words. */
  description: Schema.String,
  /** The outside verbs the transition table allows now. */
  availableActions: Schema.Array(Schema.String)
})
export type RunSummary = typeof RunSummary.Type

/** A page of runs, newest first. */
export const RunPage = Schema.Struct({ runs: Schema.Array(RunSummary), next: NullableString })
export type RunPage = typeof RunPage.Type

/** One attempt of a step. */
export const StepAttemptView = Schema.Struct({
  name: Schema.String,
  attempt: Schema.Number,
  position: Schema.Number,
  status: Schema.String,
  queue: Schema.String,
  scheduledAt: Schema.String,
  dueAt: Schema.String,
  startedAt: NullableString,
  finishedAt: NullableString,
  durationMs: NullableNumber,
  worker: NullableString,
  appRevision: NullableString,
  waitingFor: NullableString,
  batchId: NullableString,
  output: Schema.Unknown,
  error: Schema.Unknown
})

/** A signal a run received. */
export const SignalView = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  status: Schema.String,
  payload: Schema.Unknown,
  duplicate: Schema.Boolean
})

/** One audit event. */
export const AuditEventView = Schema.Struct({
  id: Schema.String,
  type: Schema.String,
  step: NullableString,
  attempt: NullableNumber,
  actor: Schema.String,
  reason: NullableString,
  details: Schema.Unknown,
  at: Schema.String
})

/** A child run of a run: the step that started it, and where it is. */
export const ChildRunView = Schema.Struct({
  id: Schema.String,
  workflow: Schema.String,
  step: Schema.String,
  status: RunStatus
})
export type ChildRunView = typeof ChildRunView.Type

/** A run with its payload and output, its attempts (newest 100), signals, audit trail and child runs (first 500). */
export const RunDetail = Schema.Struct({
  run: Schema.Struct({
    ...RunSummary.fields,
    payload: Schema.Unknown,
    output: Schema.Unknown,
    idempotencyKey: NullableString,
    rerunOf: NullableString,
    engineVersion: Schema.Number,
    definitionVersion: NullableString
  }),
  steps: Schema.Array(StepAttemptView),
  signals: Schema.Array(SignalView),
  events: Schema.Array(AuditEventView),
  children: Schema.Array(ChildRunView)
})
export type RunDetail = typeof RunDetail.Type

/** Counts of runs by status and of ongoing runs by stuck reason, overall and per workflow. */
export const WorkflowCounts = Schema.Struct({
  byStatus: Schema.Record(Schema.String, Schema.Number),
  stuck: Schema.Record(Schema.String, Schema.Number),
  byWorkflow: Schema.Array(
    Schema.Struct({
      workflow: Schema.String,
      byStatus: Schema.Record(Schema.String, Schema.Number),
      stuck: Schema.Record(Schema.String, Schema.Number)
    })
  )
})
export type WorkflowCounts = typeof WorkflowCounts.Type

/** A group of stuck runs ("needs attention"). */
export const AttentionGroup = Schema.Struct({
  workflow: Schema.String,
  step: NullableString,
  stuckReason: StuckReason,
  errorClass: NullableString,
  count: Schema.Number,
  firstSeen: Schema.String,
  lastSeen: Schema.String,
  newestError: NullableString
})
export type AttentionGroup = typeof AttentionGroup.Type

/** A workflow class over a window. */
export const DefinitionView = Schema.Struct({
  workflow: Schema.String,
  /** Registered in this process (its code is loaded). */
  loaded: Schema.Boolean,
  ongoing: Schema.Number,
  paused: Schema.Number,
  stuck: Schema.Number,
  finished: Schema.Number,
  cancelled: Schema.Number,
  p50Ms: NullableNumber,
  p95Ms: NullableNumber
})
export type DefinitionView = typeof DefinitionView.Type

/** A step of a workflow class: runs at it now, and its attempts that ended in the window. */
export const StepStatsView = Schema.Struct({
  step: Schema.String,
  scheduled: Schema.Number,
  running: Schema.Number,
  waiting: Schema.Number,
  paused: Schema.Number,
  attempts: Schema.Number,
  failureRate: NullableNumber,
  skipRate: NullableNumber,
  /** Of the attempts, those that were a step's second or later (reattempts). */
  reattemptRate: NullableNumber,
  p50Ms: NullableNumber,
  p95Ms: NullableNumber,
  p99Ms: NullableNumber,
  pickupP50Ms: NullableNumber,
  /** Fewer than 20 attempts: the percentiles are a few samples. */
  fewSamples: Schema.Boolean
})

/** A workflow class's pipeline. */
export const WorkflowStats = Schema.Struct({
  workflow: Schema.String,
  windowMs: Schema.Number,
  steps: Schema.Array(StepStatsView)
})
export type WorkflowStats = typeof WorkflowStats.Type

// ---- events, outbox, batches ----

/** A subscriber: its queue's figures and its handler's processed-events records. */
export const SubscriptionView = Schema.Struct({
  handler: Schema.String,
  pattern: Schema.String,
  queue: Schema.String,
  pending: Schema.Number,
  ready: Schema.Number,
  running: Schema.Number,
  retrying: Schema.Number,
  deadLetters: Schema.Number,
  completed: Schema.Number,
  handling: Schema.Number,
  silent: Schema.Number,
  /** Whether a live process runs a consumer of its queue. */
  consumed: Schema.Boolean
})
export type SubscriptionView = typeof SubscriptionView.Type

/** A pending event in a subscriber queue. */
export const PendingEventView = Schema.Struct({
  queue: Schema.String,
  id: Schema.String,
  eventId: NullableString,
  routingKey: NullableString,
  handler: NullableString,
  state: JobState,
  attempts: Schema.Number,
  enqueuedAt: Schema.String,
  lastError: Schema.NullOr(ErrorView),
  payload: Schema.Unknown
})

/** The event bus: subscribers and the events waiting in their queues. */
export const EventsView = Schema.Struct({
  subscriptions: Schema.Array(SubscriptionView),
  pending: Schema.Array(PendingEventView)
})
export type EventsView = typeof EventsView.Type

/** An outbox entry. */
export const OutboxEntryView = Schema.Struct({
  id: Schema.String,
  kind: Schema.Literals(["queue", "event"]),
  state: Schema.Literals(["pending", "failing", "published"]),
  target: Schema.String,
  attempts: Schema.Number,
  createdAt: Schema.String,
  deliverAt: NullableString,
  publishedAt: NullableString,
  lastError: NullableString,
  payload: Schema.Unknown
})

/** A page of outbox entries and the counts by state. */
export const OutboxPage = Schema.Struct({
  entries: Schema.Array(OutboxEntryView),
  next: NullableString,
  counts: Schema.Struct({
    pending: Schema.Number,
    failing: Schema.Number,
    published: Schema.Number,
    oldestPendingAgeMs: NullableNumber
  })
})
export type OutboxPage = typeof OutboxPage.Type

/** A batch with its counters. */
export const BatchView = Schema.Struct({
  id: Schema.String,
  description: NullableString,
  status: Schema.Literals(["pending", "finished"]),
  stalled: Schema.Boolean,
  total: Schema.Number,
  completed: Schema.Number,
  failed: Schema.Number,
  openBlocks: Schema.Number,
  createdAt: Schema.String,
  lastEnqueuedAt: Schema.String,
  finishedAt: NullableString,
  callbacksSent: Schema.Boolean
})
export type BatchView = typeof BatchView.Type

/** A page of batches, newest first, with counts. */
export const BatchPage = Schema.Struct({
  batches: Schema.Array(BatchView),
  next: NullableString,
  counts: Schema.Struct({ pending: Schema.Number, stalled: Schema.Number, finished: Schema.Number })
})
export type BatchPage = typeof BatchPage.Type

// ---- overview ----

/** The home page: the verdict and one number per area. */
export const Overview = Schema.Struct({
  verdict: Verdict,
  queues: Schema.Struct({
    total: Schema.Number,
    paused: Schema.Number,
    depth: Schema.Number,
    ready: Schema.Number,
    retrying: Schema.Number,
    deadLetters: Schema.Number
  }),
  processes: Schema.Array(ProcessSummary),
  workflows: Schema.Struct({ ongoing: Schema.Number, paused: Schema.Number, stuck: Schema.Number }),
  outboxPending: Schema.Number,
  batchesPending: Schema.Number,
  /** Recurring tasks stored, and the soonest next fire among them. */
  recurring: Schema.Struct({ total: Schema.Number, nextTask: NullableString, nextRunAt: NullableString })
})
export type Overview = typeof Overview.Type

/** What an outside verb answered: the run as it is after. */
export const VerbResult = Schema.Struct({ verb: Schema.String, run: RunSummary, summary: Schema.String })
export type VerbResult = typeof VerbResult.Type

/** What a signal answered. */
export const SignalResult = Schema.Struct({
  run: RunSummary,
  signal: Schema.Struct({ id: Schema.String, name: Schema.String, duplicate: Schema.Boolean, claimed: Schema.Boolean })
})
export type SignalResult = typeof SignalResult.Type

// ---- job statistics ----

/** The jobs that ended in one time bucket, with run-time and pickup-latency percentiles. */
export const JobStatsBucket = Schema.Struct({
  /** Start of the bucket. */
  at: Schema.String,
  completed: Schema.Number,
  /** Failed deliveries: retried or dead-lettered. */
  failed: Schema.Number,
  retried: Schema.Number,
  deadLettered: Schema.Number,
  durationP50Ms: NullableNumber,
  durationP95Ms: NullableNumber,
  durationP99Ms: NullableNumber,
  /** Enqueued to started, of first deliveries (a scheduled job's delay included). */
  latencyP50Ms: NullableNumber,
  latencyP95Ms: NullableNumber
})
export type JobStatsBucket = typeof JobStatsBucket.Type

/** Job statistics over a window: every queue together, and each queue. */
export const JobStatsView = Schema.Struct({
  windowMs: Schema.Number,
  bucketMs: Schema.Number,
  total: Schema.Array(JobStatsBucket),
  queues: Schema.Array(Schema.Struct({ queue: Schema.String, buckets: Schema.Array(JobStatsBucket) }))
})
export type JobStatsView = typeof JobStatsView.Type

// ---- flow controls ----

/** A uniqueness key held: by which message, running where, since and until when. */
export const UniqueKeyView = Schema.Struct({
  job: Schema.String,
  key: Schema.String,
  strategy: Schema.Literals(["untilExecuted", "whileExecuting"]),
  /** `<queue>:<msg_id>` of the message holding it. */
  holder: Schema.String,
  runningOn: NullableString,
  acquiredAt: Schema.String,
  expiresAt: NullableString
})

/** A concurrency key: running against its limit, waiting, the oldest wait. */
export const ConcurrencyKeyView = Schema.Struct({
  queue: Schema.String,
  key: Schema.String,
  running: Schema.Number,
  limit: Schema.Number,
  waiting: Schema.Number,
  oldestWaitMs: NullableNumber
})

/** A rate bucket as the last claim left it. */
export const RateBucketView = Schema.Struct({
  queue: Schema.String,
  key: Schema.String,
  tokens: Schema.Number,
  refilledAt: Schema.String
})

/** Every flow-control lock: uniqueness keys, concurrency keys, rate buckets. */
export const LocksView = Schema.Struct({
  unique: Schema.Struct({ total: Schema.Number, keys: Schema.Array(UniqueKeyView) }),
  concurrency: Schema.Struct({
    parked: Schema.Number,
    oldestParkedMs: NullableNumber,
    slotsHeld: Schema.Number,
    keysAtLimit: Schema.Number,
    keys: Schema.Array(ConcurrencyKeyView)
  }),
  rates: Schema.Array(RateBucketView)
})
export type LocksView = typeof LocksView.Type

/** A rate: `limit` per `periodMs`. */
export const RateView = Schema.Struct({ limit: Schema.Number, periodMs: Schema.Number })

/** A job's rate: its definition's, the one set at run time (who, why, when), the one in force. */
export const JobRateView = Schema.Struct({
  job: Schema.String,
  defined: Schema.NullOr(RateView),
  override: Schema.NullOr(
    Schema.Struct({
      limit: Schema.Number,
      periodMs: Schema.Number,
      actor: Schema.String,
      reason: NullableString,
      updatedAt: Schema.String
    })
  ),
  effective: Schema.NullOr(RateView)
})
export type JobRateView = typeof JobRateView.Type

/** A uniqueness key released by hand, and the message that held it. */
export const ReleasedKey = Schema.Struct({ job: Schema.String, key: Schema.String, holder: Schema.String })

// ---- recurring tasks ----

/** A recurring task as the scheduler's leader stored it, with its last and next fire. */
export const RecurringTaskView = Schema.Struct({
  key: Schema.String,
  /** As written in code (a cron, a macro or a phrase). */
  schedule: Schema.String,
  cron: Schema.String,
  timeZone: Schema.String,
  /** `job`: each fire enqueues `job`; `workflow`: each fire starts a run of `workflow`. */
  kind: Schema.Literals(["job", "workflow"]),
  job: NullableString,
  workflow: NullableString,
  queue: Schema.String,
  description: NullableString,
  /** Slots missed while no scheduler ran: the newest fires (`one`), none, or all. */
  catchUp: Schema.Literals(["one", "none", "all"]),
  /** Since when its schedule (cron and zone) is the one stored. */
  activeSince: Schema.String,
  /** Its latest fire, scheduled or run now. */
  lastRunAt: NullableString,
  /** Its next slot after now (null when the stored cron cannot be read). */
  nextRunAt: NullableString,
  /** Fires in the ledger (kept for the retention). */
  fires: Schema.Number,
  /**
   * Its latest manual fire (run-now) in the ledger: when, who fired it (`api:<actor>`,
   * `dashboard:<actor>`, `mcp:<client>`, `cli:<user>`) and why; null when none is. `actor` is null
   * for a fire recorded before the ledger kept it.
   */
  lastManualRun: Schema.NullOr(Schema.Struct({ runAt: Schema.String, actor: NullableString, reason: NullableString }))
})
export type RecurringTaskView = typeof RecurringTaskView.Type

/** A fire in a recurring task's ledger: scheduled, or run now (by whom and why). */
export const RecurringExecutionView = Schema.Struct({
  /** The slot it fired for (a run-now: the time it was asked). */
  runAt: Schema.String,
  /** A run-now (true) or a scheduled fire. */
  manual: Schema.Boolean,
  queue: Schema.String,
  /** `<queue>:<msg_id>` of the job's message (null for a workflow's schedule). */
  messageId: NullableString,
  createdAt: Schema.String,
  /**
   * Who ran it now (`api:<actor>`, `dashboard:<actor>`, `mcp:<client>`, `cli:<user>`); null for a
   * scheduled fire, or a run-now recorded before the ledger kept it.
   */
  actor: NullableString,
  /** Why it was run now (null when no reason was given, and for a scheduled fire). */
  reason: NullableString
})
export type RecurringExecutionView = typeof RecurringExecutionView.Type

/** What a run-now did: the job's message, the run it started, or the singleton run holding the slot. */
export const RecurringFireView = Schema.Struct({
  task: Schema.String,
  /** The manual fire's time, as recorded in the ledger. */
  runAt: Schema.String,
  queue: Schema.String,
  /** `<queue>:<msg_id>` of the job's message (null for a workflow's schedule). */
  messageId: NullableString,
  runId: NullableString,
  skippedFor: NullableString,
  /** What it did, in words. */
  summary: Schema.String
})
export type RecurringFireView = typeof RecurringFireView.Type
