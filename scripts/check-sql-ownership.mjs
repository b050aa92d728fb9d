// Each table family's SQL lives in the module that owns it: no sql`...` template elsewhere.
// Lists the files allowed to hold SQL; any other file under src/ that writes sql`...` fails.
import { readdirSync, readFileSync, statSync } from "node:fs"
import { join } from "node:path"

const owners = new Set([
  // queue registry, q_<queue>, a_<queue>: one file per statement family (QueueSql.ts assembles them)
  "src/Queue/QueueSql.ts", // the assembled statements of a schema
  "src/Queue/QueueSqlContext.ts", // the shared fragments (tables, NOTIFY, receipts, clock, message expressions)
  "src/Queue/QueueRegistrySql.ts", // the registry and each queue's tables: DDL, locks, the fair index
  "src/Queue/QueueEnqueueSql.ts", // inserts: sends, batches, the insert CTEs other modules use
  "src/Queue/QueueClaimSql.ts", // claims: the plain read, archive-and-read, the fair read
  "src/Queue/QueueLimitSql.ts", // the flow-controlled claim, rate_buckets, rate_overrides
  "src/Queue/QueueAckSql.ts", // archive, delete, visibility, release, failures
  "src/Queue/QueueDeadLetterSql.ts", // dead-lettering and retrying dead letters
  "src/Queue/QueueLookupSql.ts", // purge, get, browse, archive lookup and retention, locate, metrics
  "src/Queue/QueueFeedSql.ts", // q_<queue>, a_<queue> read as feeds (streams)
  "src/Queue/QueueOrderSql.ts", // q_<queue>: ordered (per-key FIFO) claims and their index
  "src/Queue/QueueOutcomeSql.ts", // q_<queue>, a_<queue>: archive with an outcome, snooze, find an outcome
  "src/Batch/BatchSql.ts", // batches, batch_executions
  "src/Migrations.ts", // the schema, schema_migrations
  "src/Supervisor/ProcessSql.ts", // processes, maintenance_leaders
  "src/Queue/QueueStateSql.ts", // queue_states
  "src/Workflow/QuerySql.ts", // workflow tables, read-only queries for operators
  "src/Queue/QueueQuerySql.ts", // q_<queue>, a_<queue>: read-only queries for operators
  "src/EventBus/EventQuerySql.ts", // event_subscriptions, processed_events: read-only queries
  "src/EventBus/OutboxQuerySql.ts", // outbox_entries: read-only queries
  "src/Batch/BatchQuerySql.ts", // batches: read-only queries
  "src/Operations/CatalogSql.ts", // PostgreSQL's catalogs and statistics
  // workflow_runs, workflow_steps, workflow_events, workflow_signals: one file per transition family
  "src/Workflow/sql/Context.ts", // the shared fragments (tables, history, claim columns)
  "src/Workflow/sql/StartSql.ts", // run lifecycle: start, end without a step, release, undeliverable
  "src/Workflow/sql/ClaimSql.ts", // claims
  "src/Workflow/sql/OutcomeSql.ts", // step outcomes: a step scheduled by replay, a poll's next check
  "src/Workflow/sql/FinishSql.ts", // an attempt's outcome and what follows it, one run
  "src/Workflow/sql/OutcomeManySql.ts", // step outcomes shared by concurrent executions
  "src/Workflow/sql/EventSql.ts", // audit events and patch markers on their own
  "src/Workflow/sql/WaitSql.ts", // waits: park, wake, resolve, rewait
  "src/Workflow/sql/SignalSql.ts", // signals
  "src/Workflow/sql/DeadlineSql.ts", // per-run notify deadlines
  "src/Workflow/sql/VerbSql.ts", // the outside verbs
  "src/Workflow/sql/SweepSql.ts", // the sweep
  "src/Workflow/sql/ReadSql.ts", // reads
  "src/Workflow/sql/ChildSql.ts", // child workflows: a step's child, a child's parent, lost wake-ups
  "src/EventBus/EventBusSql.ts", // event_subscriptions, processed_events
  "src/EventBus/OutboxSql.ts", // outbox_entries
  "src/Job/JobStatsSql.ts", // job_stats
  "src/Job/UniqueKeySql.ts", // job_unique_keys
  "src/Job/DebounceSql.ts", // job_debounce
  "src/Streams/StreamsSql.ts", // stream_trims, stream_presence
  "src/Recurring/RecurringSql.ts", // recurring_tasks, recurring_executions
  "src/Embedded/EmbeddedSql.ts" // the embedded server's databases (pg_database)
])

const files = []
const walk = (dir) => {
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry)
    if (statSync(path).isDirectory()) walk(path)
    else if (path.endsWith(".ts")) files.push(path)
  }
}
walk("src")

const offenders = files.filter((f) => !owners.has(f) && /(?<![.\w])sql(<[^>]*>)?`/.test(readFileSync(f, "utf8")))
if (offenders.length > 0) {
  console.error(`SQL outside its owning module (add a statement to the owner instead):\n  ${offenders.join("\n  ")}`)
  process.exit(1)
}
console.log(`sql ownership: ok (${files.length} files, ${owners.size} owners)`)
