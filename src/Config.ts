/**
 * Configuration: every knob of effect-pgbus in one Schema, loaded from Effect `Config`
 * (env `DATABASE_URL`, `PGBUS_*`), overridable in code, validated when the layer is built.
 *
 * @since 0.1.0
 */
import { Cause, Config, Context, Duration, Effect, Layer, Option, Redacted, Schema, SchemaIssue } from "effect"

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

/** The resolved configuration: what every service reads. */
export interface PgBusConfigShape {
  /** PostgreSQL URL; the password stays redacted. */
  readonly databaseUrl: Redacted.Redacted<string>
  /** Connections in the pool. */
  readonly poolSize: number
  /** PostgreSQL schema that holds every table. */
  readonly schema: string
  /** Prefix of every physical queue name: `<prefix>_<queue>`. */
  readonly queuePrefix: string
  /** Queue of jobs that name none. */
  readonly defaultQueue: string
  /** How long a read message stays invisible before it can be delivered again. */
  readonly visibilityTimeout: Duration.Duration
  /** Failed deliveries before a message moves to its dead-letter queue. */
  readonly maxRetries: number
  /** Base delay of the exponential retry backoff. */
  readonly retryBackoff: Duration.Duration
  /** Cap of the retry backoff. */
  readonly retryBackoffMax: Duration.Duration
  /** Random spread added to a retry delay, 0 to 1. */
  readonly retryBackoffJitter: number
  /** Interval between polls when no notification arrives. */
  readonly pollingInterval: Duration.Duration
  /** Wake readers with LISTEN/NOTIFY (polling stays as the fallback). */
  readonly listenNotify: boolean
  /** A signal's woken step, or a job enqueued now, goes claimed to an idle worker of the sending process (no read). */
  readonly localDispatch: boolean
  /** How long archived messages are kept; `undefined` keeps them forever. */
  readonly archiveRetention: Duration.Duration | undefined
  /** Byte cap on a message payload (its JSON text). */
  readonly maxPayloadSize: number
  /** Worker capsules, in the seeds' string form: `"default, mailers: 10; critical: 5"`. */
  readonly workers: string
  /** Messages a capsule claims beyond its free slots and holds (heartbeated) until one frees. */
  readonly readAhead: number
  /** Most messages a capsule holds in flight (running + buffered); `undefined` is unlimited. */
  readonly prefetchLimit: number | undefined
  /** Re-arm running jobs' visibility on a heartbeat so long jobs are not delivered twice. */
  readonly visibilityHeartbeat: boolean
  /** Interval of that heartbeat; `undefined` means a third of the visibility timeout. */
  readonly visibilityHeartbeatInterval: Duration.Duration | undefined
  /** On shutdown, how long jobs in flight may take to finish before they are abandoned. */
  readonly drainTimeout: Duration.Duration
  /** Port of the supervisor's `/livez` and `/readyz`; `undefined` serves none. */
  readonly healthPort: number | undefined
  /** Address the health endpoints bind to. */
  readonly healthBind: string
  /** Interval between dispatcher maintenance ticks. */
  readonly dispatchInterval: Duration.Duration
  /** Interval between a supervisor's beats into the processes table. */
  readonly processHeartbeatInterval: Duration.Duration
  /** A process silent this long is dead: its claimed messages are released at once. */
  readonly staleProcessThreshold: Duration.Duration
  /** The app's revision (a git sha, a release), recorded by workers. */
  readonly appRevision: string | undefined
  /** Priority sub-queues per queue (`_p0` highest); `undefined` turns priorities off. */
  readonly priorityLevels: number | undefined
  /** Priority of jobs that name none, when priorities are on. */
  readonly defaultPriority: number
  /** Queue of workflow step messages (a workflow or a step may name another). */
  readonly workflowQueue: string
  /** Finished and cancelled runs are deleted after this long; `undefined` keeps them. */
  readonly workflowRetention: Duration.Duration | undefined
  /** How often the workflow sweep runs. */
  readonly workflowSweepInterval: Duration.Duration
  /** When an in-progress step is stalled, or a scheduled one overdue. */
  readonly workflowStallThreshold: Duration.Duration
  /** What the sweep does with a stalled step: pause, reattempt or cancel. */
  readonly workflowStallAction: "pause" | "reattempt" | "cancel"
  /** Stack lines kept on a failed step. */
  readonly workflowErrorBacktraceLines: number
  /** A wait without a deadline this long counts as stuck. */
  readonly workflowWaitingVisibilityThreshold: Duration.Duration
  /** How long processed-event records are kept for deduplication; `undefined` keeps them. */
  readonly idempotencyTtl: Duration.Duration | undefined
  /** Run the transactional outbox poller. */
  readonly outboxEnabled: boolean
  /** Interval between outbox poll cycles. */
  readonly outboxPollInterval: Duration.Duration
  /** Most outbox entries claimed per cycle. */
  readonly outboxBatchSize: number
  /** Published outbox entries are deleted after this long; `undefined` keeps them. */
  readonly outboxRetention: Duration.Duration | undefined
  /** The bus's own database, when it is not the app's (outbox entries are written to the app's). */
  readonly busDatabaseUrl: Redacted.Redacted<string> | undefined
  /** How often the dispatcher sweeps batches (lost outcomes, unsent members, stalled batches). */
  readonly batchSweepInterval: Duration.Duration
  /** How long a batch may go without a new member, or a member without its message, before a repair. */
  readonly batchStallThreshold: Duration.Duration
  /** Finished batches are deleted after this long; `undefined` keeps them. */
  readonly batchRetention: Duration.Duration | undefined
  /** Claimable work older than this on a queue that live workers serve makes the cluster verdict STALLED. */
  readonly stallThreshold: Duration.Duration
  /** The MCP server offers its write tools (resume, cancel, ... with a reason). */
  readonly mcpWriteTools: boolean
  /** MCP read tools may return payloads, outputs and error text when a call asks (`includePayloads`). */
  readonly mcpAllowPayloads: boolean
  /** Tags each job at enqueue with a fair-share key (and weight); set, workers read job queues fairly. Code only. */
  readonly fairShare: ((job: JobFairShareInput) => FairShareKey) | undefined
  /** Tags each event at publish with a fair-share key (and weight); set, consumers read fairly. Code only. */
  readonly eventFairShare: ((event: EventFairShareInput) => FairShareKey) | undefined
}

/** What a caller may pass in code: every key optional, durations as `Duration.Input`. */
export interface PgBusConfigInput {
  readonly databaseUrl?: string | Redacted.Redacted<string>
  readonly poolSize?: number
  readonly schema?: string
  readonly queuePrefix?: string
  readonly defaultQueue?: string
  readonly visibilityTimeout?: Duration.Input
  readonly maxRetries?: number
  readonly retryBackoff?: Duration.Input
  readonly retryBackoffMax?: Duration.Input
  readonly retryBackoffJitter?: number
  readonly pollingInterval?: Duration.Input
  readonly listenNotify?: boolean
  readonly localDispatch?: boolean
  readonly archiveRetention?: Duration.Input | null
  readonly maxPayloadSize?: number
  readonly workers?: string
  readonly readAhead?: number
  readonly prefetchLimit?: number | null
  readonly visibilityHeartbeat?: boolean
  readonly visibilityHeartbeatInterval?: Duration.Input | null
  readonly drainTimeout?: Duration.Input
  readonly healthPort?: number | null
  readonly healthBind?: string
  readonly dispatchInterval?: Duration.Input
  readonly processHeartbeatInterval?: Duration.Input
  readonly staleProcessThreshold?: Duration.Input
  readonly appRevision?: string | null
  readonly priorityLevels?: number | null
  readonly defaultPriority?: number
  readonly workflowQueue?: string
  readonly workflowRetention?: Duration.Input | null
  readonly workflowSweepInterval?: Duration.Input
  readonly workflowStallThreshold?: Duration.Input
  readonly workflowStallAction?: "pause" | "reattempt" | "cancel"
  readonly workflowErrorBacktraceLines?: number
  readonly workflowWaitingVisibilityThreshold?: Duration.Input
  readonly idempotencyTtl?: Duration.Input | null
  readonly outboxEnabled?: boolean
  readonly outboxPollInterval?: Duration.Input
  readonly outboxBatchSize?: number
  readonly outboxRetention?: Duration.Input | null
  readonly busDatabaseUrl?: string | Redacted.Redacted<string> | null
  readonly batchSweepInterval?: Duration.Input
  readonly batchStallThreshold?: Duration.Input
  readonly batchRetention?: Duration.Input | null
  readonly stallThreshold?: Duration.Input
  readonly mcpWriteTools?: boolean
  readonly mcpAllowPayloads?: boolean
  readonly fairShare?: ((job: JobFairShareInput) => FairShareKey) | null
  readonly eventFairShare?: ((event: EventFairShareInput) => FairShareKey) | null
}

type Kind =
  | "string"
  | "optionalString"
  | "int"
  | "optionalInt"
  | "number"
  | "boolean"
  | "duration"
  | "optionalDuration"
  | "secret"
  | "optionalSecret"
  | "resolver"

const positive = Schema.makeFilter<Duration.Duration>((d) => Duration.isPositive(d) || "must be greater than zero")
const PositiveDuration = Schema.Duration.check(positive)
const NonNegativeInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
const PositiveInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))
/** A function given in code (a resolver); the environment cannot set one. */
const Resolver = <F extends (input: never) => unknown>() =>
  Schema.declare<F>((u): u is F => typeof u === "function", { expected: "a function" })
const Identifier = (max: number) =>
  Schema.String.check(
    Schema.makeFilter<string>(
      (s) =>
        (IDENTIFIER_PATTERN.test(s) && s.length <= max) ||
        `must match ${IDENTIFIER_PATTERN.source} and have at most ${max} characters`
    )
  )

/**
 * The configuration Schema: the resolved value of every key and the rule it must keep.
 *
 * @category schemas
 */
export const PgBusConfigSchema = Schema.Struct({
  databaseUrl: Schema.String.check(
    Schema.makeFilter<string>((url) => /^postgres(ql)?:\/\//.test(url) || "must be a postgres:// URL")
  ),
  poolSize: PositiveInt,
  schema: Identifier(40),
  queuePrefix: Identifier(16),
  defaultQueue: Identifier(30),
  visibilityTimeout: PositiveDuration,
  maxRetries: PositiveInt,
  retryBackoff: PositiveDuration,
  retryBackoffMax: PositiveDuration,
  retryBackoffJitter: Schema.Number.check(Schema.isBetween({ minimum: 0, maximum: 1 })),
  pollingInterval: PositiveDuration,
  listenNotify: Schema.Boolean,
  localDispatch: Schema.Boolean,
  archiveRetention: Schema.UndefinedOr(PositiveDuration),
  maxPayloadSize: Schema.Int.check(Schema.isGreaterThanOrEqualTo(64)),
  workers: Schema.String.check(Schema.isNonEmpty()),
  readAhead: NonNegativeInt,
  prefetchLimit: Schema.UndefinedOr(PositiveInt),
  visibilityHeartbeat: Schema.Boolean,
  visibilityHeartbeatInterval: Schema.UndefinedOr(PositiveDuration),
  drainTimeout: Schema.Duration,
  healthPort: Schema.UndefinedOr(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 65535 }))),
  healthBind: Schema.String.check(Schema.isNonEmpty()),
  dispatchInterval: PositiveDuration,
  processHeartbeatInterval: PositiveDuration,
  staleProcessThreshold: PositiveDuration,
  appRevision: Schema.UndefinedOr(Schema.String),
  priorityLevels: Schema.UndefinedOr(Schema.Int.check(Schema.isBetween({ minimum: 2, maximum: 10 }))),
  defaultPriority: NonNegativeInt,
  workflowQueue: Identifier(30),
  workflowRetention: Schema.UndefinedOr(PositiveDuration),
  workflowSweepInterval: PositiveDuration,
  workflowStallThreshold: PositiveDuration,
  workflowStallAction: Schema.Literals(["pause", "reattempt", "cancel"]),
  workflowErrorBacktraceLines: NonNegativeInt,
  workflowWaitingVisibilityThreshold: PositiveDuration,
  idempotencyTtl: Schema.UndefinedOr(PositiveDuration),
  outboxEnabled: Schema.Boolean,
  outboxPollInterval: PositiveDuration,
  outboxBatchSize: PositiveInt,
  outboxRetention: Schema.UndefinedOr(PositiveDuration),
  busDatabaseUrl: Schema.UndefinedOr(
    Schema.String.check(
      Schema.makeFilter<string>((url) => /^postgres(ql)?:\/\//.test(url) || "must be a postgres:// URL")
    )
  ),
  batchSweepInterval: PositiveDuration,
  batchStallThreshold: PositiveDuration,
  batchRetention: Schema.UndefinedOr(PositiveDuration),
  stallThreshold: PositiveDuration,
  mcpWriteTools: Schema.Boolean,
  mcpAllowPayloads: Schema.Boolean,
  fairShare: Schema.UndefinedOr(Resolver<(job: JobFairShareInput) => FairShareKey>()),
  eventFairShare: Schema.UndefinedOr(Resolver<(event: EventFairShareInput) => FairShareKey>())
})

interface Field {
  readonly kind: Kind
  readonly default: unknown
  /** Its environment variable; `undefined` for keys only code can set (resolvers). */
  readonly env: string | undefined
}

/** How each key is read (its kind), its default and its environment variable. */
export const fields = {
  databaseUrl: { kind: "secret", default: "postgres://postgres@127.0.0.1:5432/postgres", env: "DATABASE_URL" },
  poolSize: { kind: "int", default: 10, env: "PGBUS_POOL_SIZE" },
  schema: { kind: "string", default: "pgbus", env: "PGBUS_SCHEMA" },
  queuePrefix: { kind: "string", default: "pgbus", env: "PGBUS_QUEUE_PREFIX" },
  defaultQueue: { kind: "string", default: "default", env: "PGBUS_DEFAULT_QUEUE" },
  visibilityTimeout: { kind: "duration", default: Duration.seconds(30), env: "PGBUS_VISIBILITY_TIMEOUT" },
  maxRetries: { kind: "int", default: 5, env: "PGBUS_MAX_RETRIES" },
  retryBackoff: { kind: "duration", default: Duration.seconds(5), env: "PGBUS_RETRY_BACKOFF" },
  retryBackoffMax: { kind: "duration", default: Duration.seconds(300), env: "PGBUS_RETRY_BACKOFF_MAX" },
  retryBackoffJitter: { kind: "number", default: 0.15, env: "PGBUS_RETRY_BACKOFF_JITTER" },
  pollingInterval: { kind: "duration", default: Duration.millis(100), env: "PGBUS_POLLING_INTERVAL" },
  listenNotify: { kind: "boolean", default: true, env: "PGBUS_LISTEN_NOTIFY" },
  localDispatch: { kind: "boolean", default: true, env: "PGBUS_LOCAL_DISPATCH" },
  archiveRetention: { kind: "optionalDuration", default: Duration.days(7), env: "PGBUS_ARCHIVE_RETENTION" },
  maxPayloadSize: { kind: "int", default: 131_072, env: "PGBUS_MAX_PAYLOAD_SIZE" },
  workers: { kind: "string", default: "default: 5", env: "PGBUS_WORKERS" },
  readAhead: { kind: "int", default: 0, env: "PGBUS_READ_AHEAD" },
  prefetchLimit: { kind: "optionalInt", default: undefined, env: "PGBUS_PREFETCH_LIMIT" },
  visibilityHeartbeat: { kind: "boolean", default: true, env: "PGBUS_VISIBILITY_HEARTBEAT" },
  visibilityHeartbeatInterval: {
    kind: "optionalDuration",
    default: undefined,
    env: "PGBUS_VISIBILITY_HEARTBEAT_INTERVAL"
  },
  drainTimeout: { kind: "duration", default: Duration.seconds(30), env: "PGBUS_DRAIN_TIMEOUT" },
  healthPort: { kind: "optionalInt", default: undefined, env: "PGBUS_HEALTH_PORT" },
  healthBind: { kind: "string", default: "127.0.0.1", env: "PGBUS_HEALTH_BIND" },
  dispatchInterval: { kind: "duration", default: Duration.seconds(1), env: "PGBUS_DISPATCH_INTERVAL" },
  processHeartbeatInterval: {
    kind: "duration",
    default: Duration.seconds(2),
    env: "PGBUS_PROCESS_HEARTBEAT_INTERVAL"
  },
  staleProcessThreshold: { kind: "duration", default: Duration.seconds(10), env: "PGBUS_STALE_PROCESS_THRESHOLD" },
  appRevision: { kind: "optionalString", default: undefined, env: "PGBUS_APP_REVISION" },
  priorityLevels: { kind: "optionalInt", default: undefined, env: "PGBUS_PRIORITY_LEVELS" },
  defaultPriority: { kind: "int", default: 1, env: "PGBUS_DEFAULT_PRIORITY" },
  workflowQueue: { kind: "string", default: "default", env: "PGBUS_WORKFLOW_QUEUE" },
  workflowRetention: { kind: "optionalDuration", default: Duration.days(30), env: "PGBUS_WORKFLOW_RETENTION" },
  workflowSweepInterval: { kind: "duration", default: Duration.minutes(5), env: "PGBUS_WORKFLOW_SWEEP_INTERVAL" },
  workflowStallThreshold: { kind: "duration", default: Duration.hours(1), env: "PGBUS_WORKFLOW_STALL_THRESHOLD" },
  workflowStallAction: { kind: "string", default: "pause", env: "PGBUS_WORKFLOW_STALL_ACTION" },
  workflowErrorBacktraceLines: { kind: "int", default: 50, env: "PGBUS_WORKFLOW_ERROR_BACKTRACE_LINES" },
  workflowWaitingVisibilityThreshold: {
    kind: "duration",
    default: Duration.days(7),
    env: "PGBUS_WORKFLOW_WAITING_VISIBILITY_THRESHOLD"
  },
  idempotencyTtl: { kind: "optionalDuration", default: Duration.days(7), env: "PGBUS_IDEMPOTENCY_TTL" },
  outboxEnabled: { kind: "boolean", default: false, env: "PGBUS_OUTBOX_ENABLED" },
  outboxPollInterval: { kind: "duration", default: Duration.seconds(1), env: "PGBUS_OUTBOX_POLL_INTERVAL" },
  outboxBatchSize: { kind: "int", default: 100, env: "PGBUS_OUTBOX_BATCH_SIZE" },
  outboxRetention: { kind: "optionalDuration", default: Duration.days(1), env: "PGBUS_OUTBOX_RETENTION" },
  busDatabaseUrl: { kind: "optionalSecret", default: undefined, env: "PGBUS_BUS_DATABASE_URL" },
  batchSweepInterval: { kind: "duration", default: Duration.minutes(5), env: "PGBUS_BATCH_SWEEP_INTERVAL" },
  batchStallThreshold: { kind: "duration", default: Duration.minutes(5), env: "PGBUS_BATCH_STALL_THRESHOLD" },
  batchRetention: { kind: "optionalDuration", default: Duration.days(7), env: "PGBUS_BATCH_RETENTION" },
  stallThreshold: { kind: "duration", default: Duration.minutes(5), env: "PGBUS_STALL_THRESHOLD" },
  mcpWriteTools: { kind: "boolean", default: false, env: "PGBUS_MCP_WRITE_TOOLS" },
  mcpAllowPayloads: { kind: "boolean", default: false, env: "PGBUS_MCP_ALLOW_PAYLOADS" },
  fairShare: { kind: "resolver", default: undefined, env: undefined },
  eventFairShare: { kind: "resolver", default: undefined, env: undefined }
} satisfies Record<keyof PgBusConfigShape, Field>

type Key = keyof typeof fields

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

const parseValue = (key: Key, raw: unknown, fromEnv: boolean): Effect.Effect<unknown, ConfigurationError> => {
  const field: Field = fields[key]
  const fail = (rule: string) => Effect.fail(new ConfigurationError({ key, rule, value: show(raw) }))
  switch (field.kind) {
    case "optionalString": {
      if (raw === null) return Effect.succeed(undefined)
      if (typeof raw !== "string") return fail("must be a string")
      return Effect.succeed(raw)
    }
    case "optionalInt": {
      if (raw === null || (fromEnv && typeof raw === "string" && ["", "none"].includes(raw.trim()))) {
        return Effect.succeed(undefined)
      }
      const n = typeof raw === "string" && fromEnv ? Number(raw) : raw
      if (typeof n !== "number" || !Number.isInteger(n)) return fail("must be an integer")
      return Effect.succeed(n)
    }
    case "optionalSecret": {
      if (raw === null || (fromEnv && typeof raw === "string" && raw.trim() === "")) return Effect.succeed(undefined)
      const s = Redacted.isRedacted(raw) ? Redacted.value(raw) : raw
      if (typeof s !== "string") return fail("must be a string")
      return Effect.succeed(s)
    }
    case "secret":
    case "string": {
      const s = Redacted.isRedacted(raw) ? Redacted.value(raw) : raw
      if (typeof s !== "string") return fail("must be a string")
      return Effect.succeed(s)
    }
    case "int":
    case "number": {
      const n = typeof raw === "string" && fromEnv && raw.trim() !== "" ? Number(raw) : raw
      if (typeof n !== "number" || !Number.isFinite(n)) return fail("must be a finite number")
      if (field.kind === "int" && !Number.isInteger(n)) return fail("must be an integer")
      return Effect.succeed(n)
    }
    case "boolean": {
      if (typeof raw === "boolean") return Effect.succeed(raw)
      if (fromEnv && typeof raw === "string") {
        const s = raw.trim().toLowerCase()
        if (["true", "1", "yes", "on"].includes(s)) return Effect.succeed(true)
        if (["false", "0", "no", "off"].includes(s)) return Effect.succeed(false)
      }
      return fail("must be a boolean")
    }
    case "resolver": {
      if (raw === null) return Effect.succeed(undefined)
      if (typeof raw !== "function") return fail("must be a function (set it in code)")
      return Effect.succeed(raw)
    }
    case "duration":
    case "optionalDuration": {
      if (field.kind === "optionalDuration" && (raw === null || (fromEnv && raw === "none"))) {
        return Effect.succeed(undefined)
      }
      const d = parseDuration(raw, fromEnv)
      if (d === undefined) return fail("must be a duration (seconds, or e.g. '500 millis')")
      return Effect.succeed(d)
    }
  }
}

/** Reads `PGBUS_*` (and `DATABASE_URL`) through the current ConfigProvider. */
const readEnvironment: Effect.Effect<Partial<Record<Key, string>>, ConfigurationError> = Effect.gen(function* () {
  const out: Partial<Record<Key, string>> = {}
  for (const key of Object.keys(fields) as Array<Key>) {
    const env = fields[key].env
    if (env === undefined) continue
    const value = yield* Config.option(Config.String(env)).pipe(
      Effect.mapError(
        (error) => new ConfigurationError({ key, rule: `cannot read ${env}: ${error.message}`, value: "" })
      )
    )
    if (Option.isSome(value)) out[key] = value.value
  }
  if (out.databaseUrl === undefined) {
    const alt = yield* Config.option(Config.String("PGBUS_DATABASE_URL")).pipe(
      Effect.orElseSucceed(() => Option.none())
    )
    if (Option.isSome(alt)) out.databaseUrl = alt.value
  }
  return out
})

/** The key and rule of the first issue a Schema found (the key is the first path segment). */
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

/**
 * Validates a configuration: defaults, then the environment, then code overrides, checked
 * against `PgBusConfigSchema`. Fails with a `ConfigurationError` naming the key and the rule.
 */
export const resolve = (
  overrides: PgBusConfigInput = {},
  environment: Partial<Record<Key, string>> = {}
): Effect.Effect<PgBusConfigShape, ConfigurationError> =>
  Effect.gen(function* () {
    const candidate: Record<string, unknown> = {}
    const given: Record<string, unknown> = {}
    for (const key of Object.keys(fields) as Array<Key>) {
      const field: Field = fields[key]
      const fromCode = Object.hasOwn(overrides, key) ? (overrides as Record<string, unknown>)[key] : undefined
      const fromEnv = environment[key]
      given[key] = fromCode ?? fromEnv ?? field.default
      candidate[key] =
        fromCode !== undefined
          ? yield* parseValue(key, fromCode, false)
          : fromEnv !== undefined
            ? yield* parseValue(key, fromEnv, true)
            : field.default
    }
    const decoded = Schema.decodeUnknownExit(PgBusConfigSchema)(candidate)
    if (decoded._tag === "Failure") {
      const error = Cause.findErrorOption(decoded.cause)
      const { key, rule } = Option.isSome(error) ? firstIssue(error.value.issue) : { key: undefined, rule: "invalid" }
      const name = key ?? "config"
      // URLs may carry a password: never echo them
      const value = name.endsWith("Url") ? "<redacted>" : show(given[name])
      return yield* new ConfigurationError({ key: name, rule, value })
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
    return {
      ...valid,
      databaseUrl: Redacted.make(valid.databaseUrl),
      busDatabaseUrl: valid.busDatabaseUrl === undefined ? undefined : Redacted.make(valid.busDatabaseUrl)
    }
  })

/**
 * The configuration service.
 *
 * @category services
 */
export class PgBusConfig extends Context.Service<PgBusConfig, PgBusConfigShape>()("effect-pgbus/PgBusConfig") {
  /** Loads the environment through Effect `Config`, applies code overrides, validates. */
  static readonly layer = (overrides: PgBusConfigInput = {}): Layer.Layer<PgBusConfig, ConfigurationError> =>
    Layer.effect(
      PgBusConfig,
      Effect.flatMap(readEnvironment, (env) => resolve(overrides, env))
    )

  /** Uses only the given values and the defaults; ignores the environment. */
  static readonly layerWithoutEnvironment = (
    overrides: PgBusConfigInput = {}
  ): Layer.Layer<PgBusConfig, ConfigurationError> => Layer.effect(PgBusConfig, resolve(overrides))
}

/** The connection target without its password: `host:port/database`. */
export const describeTarget = (config: PgBusConfigShape): string => {
  try {
    const url = new URL(Redacted.value(config.databaseUrl))
    return `${url.hostname}:${url.port || "5432"}${url.pathname}`
  } catch {
    return "unknown"
  }
}
