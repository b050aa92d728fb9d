/**
 * Configuration: every knob of effect-pgbus, one row per key (its kind, default, doc and
 * section), loaded from Effect `Config` (env `DATABASE_URL`, `PGBUS_*` and libpq's `PG*`),
 * overridable in code, validated when the layer is built. The Schema, the environment
 * variables, the resolved and input types and the docs' tables are all derived from the rows.
 *
 * @since 0.1.0
 */
import { Cause, Config, Context, Duration, Effect, Layer, Option, Redacted, Result, Schema, SchemaIssue } from "effect"
import {
  completeUrl,
  connectTimeoutOf,
  describeUrl,
  type Environment,
  LIBPQ_VARIABLES,
  SSL_MODES
} from "./Connection.ts"
import * as Kinds from "./internal/ConfigKinds.ts"

/**
 * A configuration value broke a rule. Raised when the config layer is built, never later.
 *
 * @category errors
 */
export class ConfigurationError extends Schema.TaggedError<ConfigurationError>()("ConfigurationError", {
  key: Schema.String,
  rule: Schema.String,
  value: Schema.String
}) {
  override get message(): string {
    return `invalid configuration ${this.key}=${this.value}: ${this.rule}`
  }
}

/** Identifier rule shared by the schema name and the queue prefix: safe to interpolate into SQL. */
export const IDENTIFIER_PATTERN = /^[a-z][a-z0-9_]*$/

/** What a fair-share resolver returns: a key, a key and its weight, or `undefined` (unkeyed). */
export type FairShareKey = string | readonly [key: string, weight: number] | undefined

/** What the jobs' fair-share resolver sees: the job being enqueued. */
export interface JobFairShareInput {
  /** The job's name. */
  readonly name: string
  /** The payload as given to `enqueue` (before its Schema encodes it). */
  readonly payload: unknown
  /** The queue it goes to (before any priority sub-queue). */
  readonly queue: string
  /** The enqueue's headers. */
  readonly headers: Readonly<Record<string, unknown>>
}

/** What the events' fair-share resolver sees: the event as it is about to be written. */
export interface EventFairShareInput {
  readonly routingKey: string
  /** The payload as stored (encoded with the event's Schema, if any). */
  readonly payload: unknown
  readonly headers: Readonly<Record<string, unknown>>
  /** The current attributes (`EventBus.CurrentAttributes`). */
  readonly attributes: Readonly<Record<string, unknown>>
}

const PositiveDuration = Schema.Duration.check(
  Schema.makeFilter<Duration.Duration>((d) => Duration.isPositive(d) || "must be greater than zero")
)
const NonNegativeDuration = Schema.Duration.check(
  Schema.makeFilter<Duration.Duration>((d) => !Duration.isNegative(d) || "must be zero or more")
)
const NonNegativeInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
const PositiveInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))
const Identifier = (max: number) =>
  Schema.String.check(
    Schema.makeFilter<string>(
      (s) =>
        (IDENTIFIER_PATTERN.test(s) && s.length <= max) ||
        `must match ${IDENTIFIER_PATTERN.source} and have at most ${max} characters`
    )
  )
/** What is wrong with a database URL, if anything. */
const checkUrl = (url: string): string | undefined => {
  if (!/^postgres(ql)?:\/\//.test(url)) return "must be a postgres:// URL"
  try {
    const parameters = new URL(url).searchParams
    const sslmode = parameters.get("sslmode")
    if (sslmode !== null && !SSL_MODES.includes(sslmode as never))
      return `sslmode (or PGSSLMODE) must be one of ${SSL_MODES.join(", ")}`
    const connectTimeout = parameters.get("connect_timeout")
    if (connectTimeout !== null && connectTimeoutOf(connectTimeout) === undefined)
      return "connect_timeout (or PGCONNECT_TIMEOUT) must be a whole number of seconds"
  } catch {
    return "must be a postgres:// URL"
  }
  return undefined
}

/** The sections of the configuration table in docs/configuration.md, in order. */
export const SECTIONS = {
  connection: "Connection",
  queues: "Queues and jobs",
  workers: "Workers and the supervisor",
  workflows: "Workflows",
  events: "Event bus and outbox",
  batches: "Batches",
  recurring: "Recurring tasks",
  operations: "Operations (health, MCP)"
} as const

/** One configuration key: its kind, its default as code would write it, and its documentation. */
export interface Row<S extends Schema.Constraint, Input> extends Kinds.Kind<S, Input> {
  /** The default, as code would pass it (`null`: unset). */
  readonly default: Input
  /** What the key does, one sentence for the docs. */
  readonly doc: string
  readonly section: keyof typeof SECTIONS
  /** The environment variable when it is not `PGBUS_<KEY_IN_SNAKE_CASE>`. */
  readonly env?: string
  /** The default as the docs say it, when the value alone does not say it well. */
  readonly defaultDoc?: string
  /** Listed in the README's short table (the keys a newcomer needs). */
  readonly readme?: true
}

const key = <S extends Schema.Constraint, Input>(
  kind: Kinds.Kind<S, Input>,
  row: Omit<Row<S, NoInfer<Input>>, keyof Kinds.Kind<S, Input>>
): Row<S, Input> => ({ ...kind, ...row })

/** Every configuration key, one row each. */
export const keys = {
  databaseUrl: key(Kinds.url(checkUrl), {
    default: "postgres://postgres@127.0.0.1:5432/postgres",
    env: "DATABASE_URL",
    doc: "The PostgreSQL URL (`sslmode`, `connect_timeout` and libpq's other query parameters included); parts it leaves out come from `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`, `PGSSLMODE`, `PGCONNECT_TIMEOUT`.",
    defaultDoc: "`postgres://postgres@127.0.0.1:5432/postgres`",
    section: "connection",
    readme: true
  }),
  ssl: key(Kinds.optional(Kinds.ssl), {
    default: null,
    doc: "TLS: `disable`, `allow`, `prefer`, `require`, `verify-ca`, `verify-full` (as libpq's `sslmode`, which it overrides), `true`/`false`, or Node's TLS options in code.",
    defaultDoc: "the URL's `sslmode` (or `PGSSLMODE`), else no TLS",
    section: "connection",
    readme: true
  }),
  directDatabaseUrl: key(Kinds.optional(Kinds.url(checkUrl)), {
    default: null,
    doc: "The server itself when `databaseUrl` goes through a pooler: the connections that keep session state use it (the notifier's LISTEN, the maintenance leaders' advisory locks).",
    defaultDoc: "none (`databaseUrl`)",
    section: "connection"
  }),
  transactionPooler: key(Kinds.boolean, {
    default: false,
    doc: "`databaseUrl` is a transaction-mode pooler (pgbouncer): pooled connections use no named prepared statements and send no session settings (set `statement_timeout` on the server's role or database instead); needs `directDatabaseUrl`.",
    section: "connection"
  }),
  migrate: key(Kinds.boolean, {
    default: false,
    doc: "Apply pending migrations when `PgBus.layer` is built (safe from several processes at once); off, a supervisor on a database with pending migrations fails at boot saying how to apply them.",
    section: "connection",
    readme: true
  }),
  poolSize: key(Kinds.optional(Kinds.int(PositiveInt)), {
    default: null,
    doc: "Connections in the pool. Unset, it is derived from the capsules of `workers` (see `poolNeed`), with room for one capsule of 5 that the supervisor adds for a registered queue no capsule reads or an event consumer (more than that logs a warning naming the size to set); set below what a supervisor's capsules need, the supervisor fails at boot naming both numbers.",
    defaultDoc: "the capsules' total concurrency + 3 + 5, at least 10",
    section: "connection",
    readme: true
  }),
  poolTimeout: key(Kinds.optional(Kinds.duration(PositiveDuration)), {
    default: null,
    doc: "Longest a statement or transaction waits for a free connection of the pool; past it, it fails with a retryable `DatabaseError` naming the pool's state (`pool timeout: no connection free after 5s (pool size 10: 10 in use, 3 waiting)`). Unset (`none`), it waits as long as it takes (the driver's pool has no timeout of its own).",
    defaultDoc: "none",
    section: "connection"
  }),
  statementTimeout: key(Kinds.optional(Kinds.duration(PositiveDuration)), {
    default: "60 seconds",
    doc: "The server cancels a statement of a pooled connection that runs longer (`statement_timeout`, sent when the connection opens; migrations are exempt). `none` turns it off.",
    section: "connection"
  }),
  tcpKeepAlive: key(Kinds.optional(Kinds.duration(PositiveDuration)), {
    default: "30 seconds",
    doc: "TCP keepalive on every connection: probes start after this long idle, so a dead peer (a host gone, a dropped NAT entry) fails the socket instead of hanging it. `none` leaves the OS default (off).",
    section: "connection"
  }),
  schema: key(Kinds.string(Identifier(40)), {
    default: "pgbus",
    doc: "The PostgreSQL schema that holds every table.",
    section: "connection",
    readme: true
  }),
  queuePrefix: key(Kinds.string(Identifier(16)), {
    default: "pgbus",
    doc: "Prefix of every physical queue name (tables are `q_<prefix>_<queue>`).",
    section: "queues",
    readme: true
  }),
  defaultQueue: key(Kinds.string(Identifier(30)), {
    default: "default",
    doc: "Queue of jobs that name none.",
    section: "queues",
    readme: true
  }),
  visibilityTimeout: key(Kinds.duration(PositiveDuration), {
    default: "30 seconds",
    doc: "How long a read message stays invisible before it can be delivered again.",
    section: "queues",
    readme: true
  }),
  maxRetries: key(Kinds.int(PositiveInt), {
    default: 5,
    doc: "Failed deliveries before a message moves to its dead-letter queue.",
    section: "queues",
    readme: true
  }),
  retryBackoff: key(Kinds.duration(PositiveDuration), {
    default: "5 seconds",
    doc: "Base delay of the exponential retry backoff.",
    section: "queues",
    readme: true
  }),
  retryBackoffMax: key(Kinds.duration(PositiveDuration), {
    default: "300 seconds",
    doc: "Cap of the retry backoff (at least `retryBackoff`).",
    section: "queues",
    readme: true
  }),
  retryBackoffJitter: key(Kinds.decimal(Schema.Number.check(Schema.isBetween({ minimum: 0, maximum: 1 }))), {
    default: 0.15,
    doc: "Random spread added to a retry delay, 0 to 1.",
    section: "queues",
    readme: true
  }),
  pollingInterval: key(Kinds.duration(PositiveDuration), {
    default: "100 millis",
    doc: "Interval between polls when no notification arrives.",
    section: "queues",
    readme: true
  }),
  listenNotify: key(Kinds.boolean, {
    default: true,
    doc: "Wake readers with LISTEN/NOTIFY (polling stays as the fallback).",
    section: "queues",
    readme: true
  }),
  localDispatch: key(Kinds.boolean, {
    default: true,
    doc: "A signal's woken step, or a job enqueued now, goes claimed to an idle worker of the sending process (no read).",
    section: "workers"
  }),
  archiveRetention: key(Kinds.optional(Kinds.duration(PositiveDuration)), {
    default: "7 days",
    doc: "How long archived messages are kept (`none` keeps them forever).",
    section: "queues",
    readme: true
  }),
  maxPayloadSize: key(Kinds.int(Schema.Int.check(Schema.isGreaterThanOrEqualTo(64))), {
    default: 131_072,
    doc: "Byte cap on a message payload (its JSON text), step outputs and events included.",
    section: "queues",
    readme: true
  }),
  workers: key(Kinds.string(Schema.String.check(Schema.isNonEmpty())), {
    default: "default: 5",
    doc: 'Worker capsules, in the seeds\' string form: `"default, mailers: 10; critical: 5"`; child processes with the banner\'s words: `"reports: 2 processes=4 max_jobs=1000"`.',
    section: "workers",
    readme: true
  }),
  unservedQueues: key(Kinds.literals(["serve", "fail", "warn"]), {
    default: "serve",
    doc: "A registered job's or workflow's queue that no capsule of `workers` reads: `serve` it in a capsule of its own (concurrency 5), `fail` the boot naming it, or `warn` (another process serves it).",
    section: "workers",
    readme: true
  }),
  readAhead: key(Kinds.optional(Kinds.int(NonNegativeInt)), {
    default: null,
    doc: "Messages a capsule claims beyond its free slots and holds (heartbeated) until one frees. Unset, each worker decides from what it sees: one per slot once a job has ended; while its queues are backlogged, enough to keep its slots busy for a few claim round trips (large for short jobs, small for long ones).",
    defaultDoc: "adaptive",
    section: "workers",
    readme: true
  }),
  prefetchLimit: key(Kinds.optional(Kinds.int(PositiveInt)), {
    default: null,
    doc: "Most messages a capsule holds in flight (running and buffered).",
    defaultDoc: "unlimited",
    section: "workers"
  }),
  circuitBreakerThreshold: key(Kinds.optional(Kinds.int(PositiveInt)), {
    default: 25,
    doc: "Per-queue circuit breaker: after this many failed deliveries of a queue's jobs in a row (in one process, no success between), the queue pauses itself for every process (`none`: off).",
    section: "workers"
  }),
  circuitBreakerBackoff: key(Kinds.duration(PositiveDuration), {
    default: "30 seconds",
    doc: "How long the circuit breaker pauses a queue; doubled at each trip that follows the previous pause within `circuitBreakerBackoffMax`.",
    section: "workers"
  }),
  circuitBreakerBackoffMax: key(Kinds.duration(PositiveDuration), {
    default: "10 minutes",
    doc: "The longest circuit-breaker pause.",
    section: "workers"
  }),
  circuitBreakerExempt: key(Kinds.string(Schema.String), {
    default: "",
    doc: "Queues the circuit breaker never pauses, comma-separated.",
    defaultDoc: "none",
    section: "workers"
  }),
  eventLoopBlockThreshold: key(Kinds.optional(Kinds.duration(PositiveDuration)), {
    default: "5 seconds",
    doc: "The supervisor's event-loop watchdog logs a block of the loop this long or longer (naming the jobs that ran during it) and reports DEGRADED for 30 s (`none`: off).",
    section: "workers"
  }),
  zombieDetection: key(Kinds.boolean, {
    default: true,
    doc: "Log a message delivered again with no failure recorded (its previous delivery ended without an outcome: a process killed or stopped, or a job past its visibility); such deliveries count towards `maxRetries`.",
    section: "workers"
  }),
  visibilityHeartbeat: key(Kinds.boolean, {
    default: true,
    doc: "Re-arm running jobs' visibility on a heartbeat so long jobs are not delivered twice.",
    section: "workers"
  }),
  visibilityHeartbeatInterval: key(Kinds.optional(Kinds.duration(PositiveDuration)), {
    default: null,
    doc: "Interval of that heartbeat (shorter than `visibilityTimeout`).",
    defaultDoc: "a third of `visibilityTimeout`",
    section: "workers"
  }),
  drainTimeout: key(Kinds.duration(NonNegativeDuration), {
    default: "30 seconds",
    doc: "On shutdown, how long jobs in flight may take to finish before they are abandoned.",
    section: "workers",
    readme: true
  }),
  healthPort: key(Kinds.optional(Kinds.int(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 65535 })))), {
    default: null,
    doc: "Port of the supervisor's `/livez` and `/readyz`.",
    defaultDoc: "none (no endpoints)",
    section: "workers",
    readme: true
  }),
  healthBind: key(Kinds.string(Schema.String.check(Schema.isNonEmpty())), {
    default: "127.0.0.1",
    doc: "Address the health endpoints bind to.",
    section: "workers"
  }),
  dispatchInterval: key(Kinds.duration(PositiveDuration), {
    default: "1 second",
    doc: "Interval between dispatcher maintenance ticks.",
    section: "workers"
  }),
  leaderCheckInterval: key(Kinds.duration(PositiveDuration), {
    default: "1 second",
    doc: "How often a supervisor checks (or tries to take) the lock of each maintenance role it runs; a standby takes over within about this long after the leader's session ends.",
    section: "workers"
  }),
  processHeartbeatInterval: key(Kinds.duration(PositiveDuration), {
    default: "2 seconds",
    doc: "Interval between a supervisor's beats into the processes table (also the beat of idempotency claims).",
    section: "workers"
  }),
  staleProcessThreshold: key(Kinds.duration(PositiveDuration), {
    default: "10 seconds",
    doc: "A process silent this long is dead: its claimed messages are released at once (longer than `processHeartbeatInterval`).",
    section: "workers"
  }),
  appRevision: key(Kinds.optional(Kinds.string(Schema.String)), {
    default: null,
    doc: "The app's revision (a git sha, a release), recorded by workers.",
    section: "workers"
  }),
  priorityLevels: key(Kinds.optional(Kinds.int(Schema.Int.check(Schema.isBetween({ minimum: 2, maximum: 10 })))), {
    default: null,
    doc: "Priority sub-queues per queue (`_p0` highest), 2 to 10.",
    defaultDoc: "none (priorities off)",
    section: "queues"
  }),
  defaultPriority: key(Kinds.int(NonNegativeInt), {
    default: 1,
    doc: "Priority of jobs that name none, when priorities are on (below `priorityLevels`).",
    section: "queues"
  }),
  workflowQueue: key(Kinds.string(Identifier(30)), {
    default: "default",
    doc: "Queue of workflow step messages (a workflow or a step may name another).",
    section: "workflows"
  }),
  workflowRetention: key(Kinds.optional(Kinds.duration(PositiveDuration)), {
    default: "30 days",
    doc: "Finished and cancelled runs are deleted after this long (`none` keeps them).",
    section: "workflows"
  }),
  workflowSweepInterval: key(Kinds.duration(PositiveDuration), {
    default: "5 minutes",
    doc: "How often the workflow sweep runs.",
    section: "workflows"
  }),
  workflowStallThreshold: key(Kinds.duration(PositiveDuration), {
    default: "1 hour",
    doc: "When an in-progress step is stalled, or a scheduled one overdue.",
    section: "workflows"
  }),
  workflowStallAction: key(Kinds.literals(["pause", "reattempt", "cancel"]), {
    default: "pause",
    doc: "What the sweep does with a stalled step: `pause`, `reattempt` or `cancel`.",
    section: "workflows"
  }),
  workflowErrorBacktraceLines: key(Kinds.int(NonNegativeInt), {
    default: 50,
    doc: "Stack lines kept on a failed step.",
    section: "workflows"
  }),
  workflowWaitingVisibilityThreshold: key(Kinds.duration(PositiveDuration), {
    default: "7 days",
    doc: "A wait without a deadline this long counts as stuck.",
    section: "workflows"
  }),
  idempotencyTtl: key(Kinds.optional(Kinds.duration(PositiveDuration)), {
    default: "7 days",
    doc: "How long processed-event records are kept for deduplication (`none` keeps them).",
    section: "events"
  }),
  outboxEnabled: key(Kinds.boolean, {
    default: false,
    doc: "Run the transactional outbox poller.",
    section: "events"
  }),
  outboxPollInterval: key(Kinds.duration(PositiveDuration), {
    default: "1 second",
    doc: "Interval between outbox poll cycles.",
    section: "events"
  }),
  outboxBatchSize: key(Kinds.int(PositiveInt), {
    default: 100,
    doc: "Most outbox entries claimed per cycle.",
    section: "events"
  }),
  outboxRetention: key(Kinds.optional(Kinds.duration(PositiveDuration)), {
    default: "1 day",
    doc: "Published outbox entries are deleted after this long (`none` keeps them).",
    section: "events"
  }),
  busDatabaseUrl: key(Kinds.optional(Kinds.url(checkUrl)), {
    default: null,
    doc: "The bus's own database, when it is not the app's (outbox entries are written to the app's).",
    defaultDoc: "none (the app's database)",
    section: "events"
  }),
  recurringEnabled: key(Kinds.boolean, {
    default: true,
    doc: "Run the recurring-task scheduler on supervisors with the scheduler role (one of them leads and fires).",
    section: "recurring"
  }),
  recurringScheduleInterval: key(Kinds.duration(PositiveDuration), {
    default: "1 second",
    doc: "Interval between the scheduler leader's ticks (each fires the slots that came due).",
    section: "recurring"
  }),
  recurringExecutionRetention: key(Kinds.duration(PositiveDuration), {
    default: "7 days",
    doc: "How long the ledger keeps a fire (a task's latest scheduled fire is always kept).",
    section: "recurring"
  }),
  batchSweepInterval: key(Kinds.duration(PositiveDuration), {
    default: "5 minutes",
    doc: "How often the dispatcher sweeps batches (lost outcomes, unsent members, stalled batches).",
    section: "batches"
  }),
  batchStallThreshold: key(Kinds.duration(PositiveDuration), {
    default: "5 minutes",
    doc: "How long a batch may go without a new member, or a member without its message, before a repair.",
    section: "batches"
  }),
  batchRetention: key(Kinds.optional(Kinds.duration(PositiveDuration)), {
    default: "7 days",
    doc: "Finished batches are deleted after this long (`none` keeps them).",
    section: "batches"
  }),
  stallThreshold: key(Kinds.duration(PositiveDuration), {
    default: "5 minutes",
    doc: "Claimable work older than this on a queue that live workers serve makes the cluster verdict STALLED.",
    section: "operations"
  }),
  mcpWriteTools: key(Kinds.boolean, {
    default: false,
    doc: "The MCP server offers its write tools (resume, cancel, ... with a reason).",
    section: "operations"
  }),
  mcpAllowPayloads: key(Kinds.boolean, {
    default: false,
    doc: "MCP read tools may return payloads, outputs and error text when a call asks (`includePayloads`).",
    section: "operations"
  }),
  fairShare: key(Kinds.optional(Kinds.fn<(job: JobFairShareInput) => FairShareKey>()), {
    default: null,
    doc: "Tags each job at enqueue with a fair-share key (and weight); set, workers read job queues fairly.",
    defaultDoc: "none: plain FIFO reads",
    section: "queues"
  }),
  eventFairShare: key(Kinds.optional(Kinds.fn<(event: EventFairShareInput) => FairShareKey>()), {
    default: null,
    doc: "Tags each event at publish with a fair-share key (and weight); set, consumers read fairly.",
    defaultDoc: "none: plain FIFO reads",
    section: "events"
  })
}

type Keys = typeof keys
type Key = keyof Keys
type InputOf<R> = R extends { fromCode(value: infer I): Kinds.Parsed } ? I : never

/** The resolved configuration: what every service reads (the doc of each key is its row's). */
export type PgBusConfigShape = { readonly [K in Key]: Keys[K]["schema"]["Type"] } & {
  /** Where the database URL came from (`from DATABASE_URL`, the embedded server, ...): for the boot banner. */
  readonly databaseSource: string
}

/** What a caller may pass in code: every key optional, durations as `Duration.Input`, `null` unsets. */
export type PgBusConfigInput = { readonly [K in Key]?: InputOf<Keys[K]> }

const schemaFields = Object.fromEntries(Object.entries(keys).map(([name, row]) => [name, row.schema])) as {
  readonly [K in Key]: Keys[K]["schema"]
}

/**
 * The configuration Schema: the resolved value of every key and the rule it must keep.
 *
 * @category schemas
 */
export const PgBusConfigSchema = Schema.Struct(schemaFields)

const snake = (name: string) => name.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()

/** A key's environment variable (`PGBUS_<KEY>` unless its row names one); `undefined` for code-only keys. */
export const envName = (name: Key): string | undefined => {
  const row: Row<Schema.Constraint, unknown> = keys[name]
  if (row.fromEnv === undefined) return undefined
  return row.env ?? `PGBUS_${snake(name)}`
}

/** A key's default as the docs say it. */
export const defaultDoc = (name: Key): string => {
  const row: Row<Schema.Constraint, unknown> = keys[name]
  if (row.defaultDoc !== undefined) return row.defaultDoc
  return row.default === null ? "none" : `\`${row.show(row.default)}\``
}

const show = (value: unknown): string => {
  if (Redacted.isRedacted(value)) return "<redacted>"
  if (Duration.isDuration(value)) return Duration.format(value)
  if (typeof value === "string") return value
  if (typeof value === "function") return "<function>"
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

/**
 * Durations from the environment: a bare number is seconds (as the seeds' reference says),
 * otherwise an Effect duration string such as `500 millis`. In code, `Duration.Input` applies.
 */
export const parseDuration = (value: unknown, fromEnv: boolean): Duration.Duration | undefined => {
  if (fromEnv && typeof value === "string") {
    const trimmed = value.trim()
    if (/^-?\d+(\.\d+)?$/.test(trimmed)) return Duration.seconds(Number(trimmed))
    return Option.getOrUndefined(Duration.fromInput(trimmed as Duration.Input))
  }
  if (typeof value === "number" && !Number.isFinite(value)) return undefined
  return Option.getOrUndefined(Duration.fromInput(value as Duration.Input))
}

/** A value as an error shows it: URLs may carry a password, so they are never echoed. */
const shown = (name: string, value: unknown): string => (name.endsWith("Url") ? "<redacted>" : show(value))

/** The environment variables the configuration reads: every key's, `PGBUS_DATABASE_URL`, libpq's. */
export const environmentVariables: ReadonlyArray<string> = [
  ...(Object.keys(keys) as Array<Key>).flatMap((name) => envName(name) ?? []),
  "PGBUS_DATABASE_URL",
  ...LIBPQ_VARIABLES
]

/** Reads the configuration's environment variables through the current ConfigProvider. */
const readEnvironment: Effect.Effect<Environment, ConfigurationError> = Effect.gen(function* () {
  const out: Record<string, string> = {}
  for (const env of environmentVariables) {
    const value = yield* Config.option(Config.String(env)).pipe(
      Effect.mapError(
        (error) => new ConfigurationError({ key: env, rule: `cannot read ${env}: ${error.message}`, value: "" })
      )
    )
    if (Option.isSome(value)) out[env] = value.value
  }
  return out
})

/**
 * Whether the environment or the overrides name a database server: a URL (`DATABASE_URL`,
 * `PGBUS_DATABASE_URL`, `databaseUrl`) or `PGHOST`. The embedded server is used when none does.
 */
export const namesDatabase = (overrides: PgBusConfigInput = {}): Effect.Effect<boolean, ConfigurationError> =>
  Effect.map(
    readEnvironment,
    (env) =>
      (overrides.databaseUrl !== undefined && overrides.databaseUrl !== null) ||
      ["DATABASE_URL", "PGBUS_DATABASE_URL", "PGHOST"].some((name) => (env[name] ?? "") !== "")
  )

/** The key and rule of the first issue a Schema found (the key is the first path segment). */
/** The first issue of a Schema failure, as the key it concerns and its rule. */
export const firstIssue = (issue: SchemaIssue.Issue): { key: string | undefined; rule: string } => {
  switch (issue._tag) {
    case "Pointer": {
      const inner = firstIssue(issue.issue)
      return { key: String(issue.path[0] ?? inner.key), rule: inner.rule }
    }
    case "Composite":
      return issue.issues[0] ? firstIssue(issue.issues[0]) : { key: undefined, rule: "invalid" }
    case "Filter":
      return firstIssue(issue.issue)
    default:
      return { key: undefined, rule: SchemaIssue.makeFormatterDefault()(issue) }
  }
}

/** Where the database URL came from, for the boot banner. */
const sourceOf = (overrides: PgBusConfigInput, environment: Environment): string => {
  if (overrides.databaseUrl !== undefined && overrides.databaseUrl !== null) return "databaseUrl in code"
  for (const name of ["DATABASE_URL", "PGBUS_DATABASE_URL", "PGHOST"]) {
    if ((environment[name] ?? "") !== "") return `from ${name}`
  }
  return "the default: set DATABASE_URL or PGHOST to use another server"
}

/**
 * Validates a configuration: defaults, then the environment (variables by name), then code
 * overrides, checked against `PgBusConfigSchema`; the database URLs are completed from libpq's
 * `PG*` variables. Fails with a `ConfigurationError` naming the key and the rule.
 */
export const resolve = (
  overrides: PgBusConfigInput = {},
  environment: Environment = {},
  databaseSource: string = sourceOf(overrides, environment)
): Effect.Effect<PgBusConfigShape, ConfigurationError> =>
  Effect.gen(function* () {
    const env: Environment = {
      ...environment,
      DATABASE_URL: environment.DATABASE_URL ?? environment.PGBUS_DATABASE_URL
    }
    const candidate: Record<string, unknown> = {}
    const given: Record<string, unknown> = {}
    const defaulted = new Set<Key>()
    for (const name of Object.keys(keys) as Array<Key>) {
      const row: Row<Schema.Constraint, unknown> = keys[name]
      const fromCode = Object.hasOwn(overrides, name) ? (overrides as Record<string, unknown>)[name] : undefined
      const variable = envName(name)
      const fromEnv = variable === undefined ? undefined : env[variable]
      given[name] = fromCode ?? fromEnv ?? row.default
      if (fromCode === undefined && fromEnv === undefined) defaulted.add(name)
      const parsed =
        fromCode !== undefined
          ? row.fromCode(fromCode)
          : fromEnv !== undefined && row.fromEnv !== undefined
            ? row.fromEnv(fromEnv)
            : row.fromCode(row.default)
      if (Result.isFailure(parsed)) {
        return yield* new ConfigurationError({ key: name, rule: parsed.failure, value: shown(name, given[name]) })
      }
      candidate[name] = parsed.success
    }
    // a URL's missing parts come from libpq's environment (PGHOST, PGPASSWORD, ...), then defaults
    for (const name of ["databaseUrl", "busDatabaseUrl", "directDatabaseUrl"] as const) {
      const url = candidate[name]
      if (Redacted.isRedacted(url)) {
        // the default URL stands for "nothing given": libpq's variables fill every part of it
        const text = defaulted.has(name) ? undefined : String(Redacted.value(url))
        const completed = completeUrl(text, env)
        // what the environment filled in is checked as the URL's own parts are (PGSSLMODE, ...)
        const problem = checkUrl(completed)
        if (problem !== undefined)
          return yield* new ConfigurationError({ key: name, rule: problem, value: "<redacted>" })
        candidate[name] = Redacted.make(completed)
      }
    }
    const decoded = Schema.decodeUnknownExit(PgBusConfigSchema)(candidate)
    if (decoded._tag === "Failure") {
      const error = Cause.findErrorOption(decoded.cause)
      const { key, rule } = Option.isSome(error) ? firstIssue(error.value.issue) : { key: undefined, rule: "invalid" }
      const name = key ?? "config"
      return yield* new ConfigurationError({ key: name, rule, value: shown(name, given[name]) })
    }
    const valid = decoded.value
    if (Duration.isLessThan(valid.retryBackoffMax, valid.retryBackoff)) {
      return yield* new ConfigurationError({
        key: "retryBackoffMax",
        rule: "must be at least retryBackoff",
        value: show(valid.retryBackoffMax)
      })
    }
    if (!Duration.isGreaterThan(valid.staleProcessThreshold, valid.processHeartbeatInterval)) {
      return yield* new ConfigurationError({
        key: "staleProcessThreshold",
        rule: "must be longer than processHeartbeatInterval",
        value: show(valid.staleProcessThreshold)
      })
    }
    if (
      valid.visibilityHeartbeatInterval !== undefined &&
      !Duration.isLessThan(valid.visibilityHeartbeatInterval, valid.visibilityTimeout)
    ) {
      return yield* new ConfigurationError({
        key: "visibilityHeartbeatInterval",
        rule: "must be shorter than visibilityTimeout",
        value: show(valid.visibilityHeartbeatInterval)
      })
    }
    if (valid.transactionPooler && valid.directDatabaseUrl === undefined) {
      return yield* new ConfigurationError({
        key: "directDatabaseUrl",
        rule: "must be set when transactionPooler is on: LISTEN and the leaders' advisory locks need a session of their own on the server itself",
        value: "none"
      })
    }
    if (valid.priorityLevels !== undefined && valid.defaultPriority >= valid.priorityLevels) {
      return yield* new ConfigurationError({
        key: "defaultPriority",
        rule: `must be below priorityLevels (${valid.priorityLevels})`,
        value: show(valid.defaultPriority)
      })
    }
    if (valid.queuePrefix.length + 1 + valid.defaultQueue.length > 40) {
      return yield* new ConfigurationError({
        key: "defaultQueue",
        rule: "queuePrefix_defaultQueue must have at most 40 characters (room for priority sub-queues)",
        value: valid.defaultQueue
      })
    }
    return { ...valid, databaseSource }
  })

/**
 * Loads the environment through Effect `Config`, applies code overrides and validates;
 * `databaseSource` says where the database came from when the caller chose it (the banner).
 */
export const load = (
  overrides: PgBusConfigInput = {},
  databaseSource?: string
): Effect.Effect<PgBusConfigShape, ConfigurationError> =>
  Effect.flatMap(readEnvironment, (env) => resolve(overrides, env, databaseSource))

/**
 * The configuration service: every key, and where the database URL came from.
 *
 * @category services
 */
export class PgBusConfig extends Context.Service<PgBusConfig, PgBusConfigShape>()("effect-pgbus/PgBusConfig") {
  /** Loads the environment through Effect `Config`, applies code overrides, validates. */
  static readonly layer = (overrides: PgBusConfigInput = {}): Layer.Layer<PgBusConfig, ConfigurationError> =>
    Layer.effect(PgBusConfig, load(overrides))

  /** Uses only the given values and the defaults; ignores the environment. */
  static readonly layerWithoutEnvironment = (
    overrides: PgBusConfigInput = {}
  ): Layer.Layer<PgBusConfig, ConfigurationError> => Layer.effect(PgBusConfig, resolve(overrides))
}

/** The connection target without its password: `host:port/database`. */
export const describeTarget = (config: PgBusConfigShape): string => describeUrl(Redacted.value(config.databaseUrl))

/**
 * Connections a supervisor's workers need beside their jobs: the LISTEN connection (when it is on
 * the pool), the process heartbeat, and one for maintenance (the workers' claims and archives
 * have a session of their own, `WorkerSession`, outside the pool).
 */
export const POOL_OVERHEAD = 3

/** The smallest pool a process running capsules of this total concurrency should have. */
export const poolNeed = (totalConcurrency: number): number => totalConcurrency + POOL_OVERHEAD

/** Total concurrency of the string form of `workers` (a capsule naming none counts 5), read leniently. */
export const workersConcurrency = (workers: string): number =>
  workers
    .split(";")
    .map((part) => part.trim())
    .filter((part) => part !== "")
    .reduce((sum, part) => {
      const match = /:\s*(\d+)\s*$/.exec(part)
      return sum + (match ? Number(match[1]) : 5)
    }, 0)

/**
 * Connections a derived pool keeps for one capsule the supervisor adds at boot (a registered
 * queue no capsule of `workers` reads, or an event consumer: concurrency 5 by default). The
 * pool is built before the registry is known, and its connections open only when used.
 */
export const POOL_SERVED_HEADROOM = 5

/** The pool size in force: `poolSize` when set, else derived from `workers` with room for one served capsule (10 at least). */
export const effectivePoolSize = (config: Pick<PgBusConfigShape, "poolSize" | "workers">): number =>
  config.poolSize ?? Math.max(10, poolNeed(workersConcurrency(config.workers)) + POOL_SERVED_HEADROOM)
