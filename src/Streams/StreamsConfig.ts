/**
 * The configuration of streams: the seed's "Streams (SSE)" keys that apply, read from
 * `PGBUS_STREAMS_*` through Effect `Config`, overridable in code, validated with Schema when the
 * layer is built. Hooks and pattern tables (retention per pattern, presence, audience filters)
 * are code only.
 *
 * @since 0.1.0
 */
import { Cause, Config, Context, Duration, Effect, Layer, Option, Redacted, Schema } from "effect"
import { ConfigurationError, firstIssue, IDENTIFIER_PATTERN, parseDuration } from "../Config.ts"
import { lookup, type Matcher, matcher, type StreamPattern } from "./StreamName.ts"

/** What the authorize hook decided a connection may see: the app's own value (a user, a role). */
export type StreamContext = unknown

/** A presence member derived from a connection's context. */
export interface PresenceMemberInput {
  readonly id: string
  readonly metadata?: Readonly<Record<string, unknown>> | undefined
}

/** A change of presence, as `onChange` receives it: a join, or a leave (an expiry is a leave). */
export interface PresenceChange {
  readonly type: "join" | "leave"
  readonly memberId: string
  /** The SSE connection of a seat; undefined for a member joined by hand. */
  readonly connectionId: string | undefined
  readonly seat: string | undefined
  readonly metadata: Readonly<Record<string, unknown>>
  /** Whether the leave is an expiry (the member's ttl passed without a heartbeat). */
  readonly expired: boolean
}

/** What a caller may pass in code. */
export interface StreamsOptions {
  /** The queue that holds durable broadcasts (`PGBUS_STREAMS_QUEUE`, default `streams`). */
  readonly queue?: string
  /**
   * Secrets that sign stream names, newest first: the first signs, every one verifies (rotate by
   * putting the new one first, drop the old one later). `PGBUS_STREAMS_SECRET`, comma-separated.
   */
  readonly secrets?: ReadonlyArray<string | Redacted.Redacted<string>>
  /** How long a durable broadcast can be replayed (`PGBUS_STREAMS_DEFAULT_RETENTION`, 300 s). */
  readonly defaultRetention?: Duration.Input
  /** Retention per stream pattern, first match wins (`[[/^chat:/, "2 days"]]`). */
  readonly retention?: ReadonlyArray<readonly [StreamPattern, Duration.Input]>
  /** Streams whose broadcasts are ephemeral (NOTIFY only) unless a broadcast says `durable: true`. */
  readonly ephemeral?: ReadonlyArray<StreamPattern>
  /** SSE heartbeat interval (`PGBUS_STREAMS_HEARTBEAT_INTERVAL`, 15 s). */
  readonly heartbeatInterval?: Duration.Input
  /** Most SSE connections of this process; past it a connect gets 503 (`PGBUS_STREAMS_MAX_CONNECTIONS`, 2000). */
  readonly maxConnections?: number
  /** A connection that delivered no broadcast for this long is closed (`PGBUS_STREAMS_IDLE_TIMEOUT`, 3600 s). */
  readonly idleTimeout?: Duration.Input
  /**
   * A connection whose oldest unwritten frame is older than this is closed, so that a client
   * that stops reading cannot hold up the others; it reconnects and replays
   * (`PGBUS_STREAMS_WRITE_DEADLINE`, 250 ms).
   */
  readonly writeDeadline?: Duration.Input
  /** Bytes a connection may have unwritten before it is closed (default 4 MiB). */
  readonly maxBufferedBytes?: number
  /** How often expired broadcasts are deleted (`PGBUS_STREAMS_RETENTION_SWEEP_INTERVAL`, 30 s). */
  readonly retentionSweepInterval?: Duration.Input
  /**
   * End every SSE response on SIGTERM and SIGINT (default true), so that the HTTP server's
   * graceful close is not held up by responses that never end; clients reconnect elsewhere.
   */
  readonly closeOnSignal?: boolean
  /** Audience filters for `visibleTo`: name → predicate on a connection's context. */
  readonly filters?: Readonly<Record<string, (context: StreamContext) => boolean>>
  /** Connection-driven presence. */
  readonly presence?: {
    /** Streams whose connections join on connect and leave on close. */
    readonly patterns?: ReadonlyArray<StreamPattern>
    /** The member of a context; the default takes `memberId` or `id` (and `metadata`) of an object. */
    readonly member?: (context: StreamContext) => PresenceMemberInput | undefined
    /** How long a member stays without a heartbeat (`PGBUS_STREAMS_PRESENCE_TTL`, 60 s). */
    readonly ttl?: Duration.Input
    /** Ttl per stream pattern, first match wins. */
    readonly ttls?: ReadonlyArray<readonly [StreamPattern, Duration.Input]>
    /** Called after each join and leave (expiries included); failures are logged and dropped. */
    readonly onChange?: (stream: string, change: PresenceChange) => Effect.Effect<void>
  }
}

/** The resolved configuration. */
export interface StreamsConfigShape {
  readonly queue: string
  readonly secrets: ReadonlyArray<Redacted.Redacted<string>>
  readonly defaultRetention: Duration.Duration
  readonly retention: ReadonlyArray<readonly [Matcher, Duration.Duration]>
  readonly ephemeral: ReadonlyArray<Matcher>
  readonly heartbeatInterval: Duration.Duration
  readonly maxConnections: number
  readonly idleTimeout: Duration.Duration
  readonly writeDeadline: Duration.Duration
  readonly maxBufferedBytes: number
  readonly retentionSweepInterval: Duration.Duration
  readonly closeOnSignal: boolean
  readonly filters: Readonly<Record<string, (context: StreamContext) => boolean>>
  readonly presencePatterns: ReadonlyArray<Matcher>
  readonly presenceMember: (context: StreamContext) => PresenceMemberInput | undefined
  readonly presenceTtl: Duration.Duration
  readonly presenceTtls: ReadonlyArray<readonly [Matcher, Duration.Duration]>
  readonly presenceOnChange: ((stream: string, change: PresenceChange) => Effect.Effect<void>) | undefined
}

const isRecord = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/** The built-in member extractor: an object's `memberId` or `id` (a string or a number), and its `metadata` object. */
export const defaultPresenceMember = (context: StreamContext): PresenceMemberInput | undefined => {
  if (!isRecord(context)) return undefined
  const id = context.memberId ?? context.id
  if (typeof id !== "string" && typeof id !== "number") return undefined
  const metadata = isRecord(context.metadata) ? context.metadata : {}
  return { id: String(id), metadata }
}

const positive = Schema.makeFilter<Duration.Duration>((d) => Duration.isPositive(d) || "must be greater than zero")
const PositiveDuration = Schema.Duration.check(positive)
const PositiveInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))

/** The keys read from the environment and their rules. */
const EnvironmentSchema = Schema.Struct({
  queue: Schema.String.check(
    Schema.makeFilter<string>(
      (s) =>
        (IDENTIFIER_PATTERN.test(s) && s.length <= 30) ||
        `must match ${IDENTIFIER_PATTERN.source}, at most 30 characters`
    )
  ),
  secrets: Schema.Array(
    Schema.String.check(
      Schema.makeFilter<string>((s) => s.length >= 16 || "each secret must have 16 characters or more")
    )
  ),
  defaultRetention: PositiveDuration,
  heartbeatInterval: PositiveDuration,
  maxConnections: PositiveInt,
  idleTimeout: PositiveDuration,
  writeDeadline: PositiveDuration,
  maxBufferedBytes: Schema.Int.check(Schema.isGreaterThanOrEqualTo(65_536)),
  retentionSweepInterval: PositiveDuration,
  presenceTtl: PositiveDuration
})

type EnvKey = keyof typeof EnvironmentSchema.Type

const defaults: { readonly [K in EnvKey]: (typeof EnvironmentSchema.Type)[K] } = {
  queue: "streams",
  secrets: [],
  defaultRetention: Duration.seconds(300),
  heartbeatInterval: Duration.seconds(15),
  maxConnections: 2000,
  idleTimeout: Duration.seconds(3600),
  writeDeadline: Duration.millis(250),
  maxBufferedBytes: 4 * 1024 * 1024,
  retentionSweepInterval: Duration.seconds(30),
  presenceTtl: Duration.seconds(60)
}

/** The environment variable of each streams key that has one. */
export const envNames: { readonly [K in EnvKey]: string | undefined } = {
  queue: "PGBUS_STREAMS_QUEUE",
  secrets: "PGBUS_STREAMS_SECRET",
  defaultRetention: "PGBUS_STREAMS_DEFAULT_RETENTION",
  heartbeatInterval: "PGBUS_STREAMS_HEARTBEAT_INTERVAL",
  maxConnections: "PGBUS_STREAMS_MAX_CONNECTIONS",
  idleTimeout: "PGBUS_STREAMS_IDLE_TIMEOUT",
  writeDeadline: "PGBUS_STREAMS_WRITE_DEADLINE",
  maxBufferedBytes: undefined,
  retentionSweepInterval: "PGBUS_STREAMS_RETENTION_SWEEP_INTERVAL",
  presenceTtl: "PGBUS_STREAMS_PRESENCE_TTL"
}

const show = (value: unknown): string =>
  Redacted.isRedacted(value) ? "<redacted>" : Duration.isDuration(value) ? Duration.format(value) : String(value)

const fail = (key: string, rule: string, value: unknown) =>
  Effect.fail(
    new ConfigurationError({ key: `streams.${key}`, rule, value: key === "secrets" ? "<redacted>" : show(value) })
  )

/** A value of an environment key or of code, in the key's type (before the Schema's rules). */
const parse = (key: EnvKey, raw: unknown, fromEnv: boolean): Effect.Effect<unknown, ConfigurationError> => {
  switch (key) {
    case "queue":
      return typeof raw === "string" ? Effect.succeed(raw) : fail(key, "must be a string", raw)
    case "secrets": {
      if (fromEnv && typeof raw === "string") {
        return Effect.succeed(
          raw
            .split(",")
            .map((s) => s.trim())
            .filter((s) => s !== "")
        )
      }
      if (!Array.isArray(raw)) return fail(key, "must be an array of strings", raw)
      const out: Array<string> = []
      for (const s of raw) {
        const v = Redacted.isRedacted(s) ? Redacted.value(s) : s
        if (typeof v !== "string") return fail(key, "must be an array of strings", raw)
        out.push(v)
      }
      return Effect.succeed(out)
    }
    case "maxConnections":
    case "maxBufferedBytes": {
      const n = fromEnv && typeof raw === "string" ? Number(raw) : raw
      return typeof n === "number" && Number.isFinite(n) ? Effect.succeed(n) : fail(key, "must be a number", raw)
    }
    default: {
      const d = parseDuration(raw, fromEnv)
      return d === undefined ? fail(key, "must be a duration (seconds, or e.g. '500 millis')", raw) : Effect.succeed(d)
    }
  }
}

const durationTable = (key: string, table: ReadonlyArray<readonly [StreamPattern, Duration.Input]> | undefined) =>
  Effect.forEach(table ?? [], ([pattern, input]) => {
    if (typeof pattern !== "string" && !(pattern instanceof RegExp)) {
      return fail(key, "each pattern must be a string or a RegExp", pattern)
    }
    const d = parseDuration(input, false)
    if (d === undefined || !Duration.isPositive(d)) return fail(key, "each duration must be greater than zero", input)
    return Effect.succeed([matcher(pattern), d] as const)
  })

const patterns = (key: string, list: ReadonlyArray<StreamPattern> | undefined) =>
  Effect.forEach(list ?? [], (pattern) =>
    typeof pattern === "string" || pattern instanceof RegExp
      ? Effect.succeed(matcher(pattern))
      : fail(key, "each pattern must be a string or a RegExp", pattern)
  )

const isFunction = (u: unknown): u is (...args: ReadonlyArray<never>) => unknown => typeof u === "function"

/** Validates options: defaults, then the environment, then code, checked against the rules. */
export const resolve = (
  options: StreamsOptions = {},
  environment: Partial<Record<EnvKey, string>> = {}
): Effect.Effect<StreamsConfigShape, ConfigurationError> =>
  Effect.gen(function* () {
    const fromCode: Partial<Record<EnvKey, unknown>> = {
      queue: options.queue,
      secrets: options.secrets,
      defaultRetention: options.defaultRetention,
      heartbeatInterval: options.heartbeatInterval,
      maxConnections: options.maxConnections,
      idleTimeout: options.idleTimeout,
      writeDeadline: options.writeDeadline,
      maxBufferedBytes: options.maxBufferedBytes,
      retentionSweepInterval: options.retentionSweepInterval,
      presenceTtl: options.presence?.ttl
    }
    const candidate: Record<string, unknown> = {}
    for (const key of Object.keys(defaults) as Array<EnvKey>) {
      const code = fromCode[key]
      const env = environment[key]
      candidate[key] =
        code !== undefined
          ? yield* parse(key, code, false)
          : env !== undefined
            ? yield* parse(key, env, true)
            : defaults[key]
    }
    const decoded = Schema.decodeUnknownExit(EnvironmentSchema)(candidate)
    if (decoded._tag === "Failure") {
      const error = Cause.findErrorOption(decoded.cause)
      const { key, rule } = Option.isSome(error) ? firstIssue(error.value.issue) : { key: undefined, rule: "invalid" }
      return yield* fail(key ?? "config", rule, key === undefined ? "" : candidate[key])
    }
    const valid = decoded.value
    const presence = options.presence ?? {}
    if (options.closeOnSignal !== undefined && typeof options.closeOnSignal !== "boolean") {
      return yield* fail("closeOnSignal", "must be a boolean", options.closeOnSignal)
    }
    if (presence.member !== undefined && !isFunction(presence.member)) {
      return yield* fail("presence.member", "must be a function", presence.member)
    }
    if (presence.onChange !== undefined && !isFunction(presence.onChange)) {
      return yield* fail("presence.onChange", "must be a function", presence.onChange)
    }
    const filters = options.filters ?? {}
    for (const [name, filter] of Object.entries(filters)) {
      if (!isFunction(filter)) return yield* fail(`filters.${name}`, "must be a function", filter)
    }
    const presenceTtls = yield* durationTable("presence.ttls", presence.ttls)
    for (const ttl of [valid.presenceTtl, ...presenceTtls.map(([, d]) => d)]) {
      if (!Duration.isGreaterThan(ttl, valid.heartbeatInterval)) {
        yield* Effect.logWarning(
          `pgbus streams: a presence ttl of ${Duration.format(ttl)} is not above the heartbeat interval (${Duration.format(valid.heartbeatInterval)}): members will expire between heartbeats`
        )
      }
    }
    return {
      ...valid,
      secrets: valid.secrets.map((s) => Redacted.make(s)),
      retention: yield* durationTable("retention", options.retention),
      ephemeral: yield* patterns("ephemeral", options.ephemeral),
      closeOnSignal: options.closeOnSignal ?? true,
      filters,
      presencePatterns: yield* patterns("presence.patterns", presence.patterns),
      presenceMember: presence.member ?? defaultPresenceMember,
      presenceTtls,
      presenceOnChange: presence.onChange
    } satisfies StreamsConfigShape
  })

/** Reads `PGBUS_STREAMS_*` through the current ConfigProvider. */
const readEnvironment = Effect.gen(function* () {
  const out: Partial<Record<EnvKey, string>> = {}
  for (const key of Object.keys(envNames) as Array<EnvKey>) {
    const env = envNames[key]
    if (env === undefined) continue
    const value = yield* Config.option(Config.String(env)).pipe(
      Effect.mapError(
        (error) =>
          new ConfigurationError({ key: `streams.${key}`, rule: `cannot read ${env}: ${error.message}`, value: "" })
      )
    )
    if (Option.isSome(value)) out[key] = value.value
  }
  return out
})

/**
 * The streams configuration service.
 *
 * @category services
 */
export class StreamsConfig extends Context.Service<StreamsConfig, StreamsConfigShape>()("effect-pgbus/StreamsConfig") {
  /** Loads `PGBUS_STREAMS_*`, applies code options, validates. */
  static readonly layer = (options: StreamsOptions = {}): Layer.Layer<StreamsConfig, ConfigurationError> =>
    Layer.effect(
      StreamsConfig,
      Effect.flatMap(readEnvironment, (env) => resolve(options, env))
    )

  /** Uses only the given options and the defaults; ignores the environment. */
  static readonly layerWithoutEnvironment = (
    options: StreamsOptions = {}
  ): Layer.Layer<StreamsConfig, ConfigurationError> => Layer.effect(StreamsConfig, resolve(options))
}

/** A stream's retention. */
export const retentionOf = (config: StreamsConfigShape, stream: string): Duration.Duration =>
  lookup(config.retention, stream, config.defaultRetention)

/** A stream's presence ttl. */
export const presenceTtlOf = (config: StreamsConfigShape, stream: string): Duration.Duration =>
  lookup(config.presenceTtls, stream, config.presenceTtl)

/** Whether a stream's broadcasts are ephemeral by default. */
export const isEphemeral = (config: StreamsConfigShape, stream: string): boolean =>
  config.ephemeral.some((matches) => matches(stream))

/** Whether a stream has connection-driven presence. */
export const hasPresence = (config: StreamsConfigShape, stream: string): boolean =>
  config.presencePatterns.some((matches) => matches(stream))
