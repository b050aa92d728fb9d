/**
 * Debounce (Inngest's): of a burst of enqueues of one key, only the last runs, once the key has
 * been quiet for `period` (or `maxWait` after the burst's first enqueue, whichever comes first).
 * Every enqueue sends its message due `period` later and makes it the key's last
 * (`job_debounce`); a first delivery runs only if its message is still the last, which closes
 * the window; the others are archived without running.
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"
import { statementNow, toDatabaseError } from "../Database.ts"
import type { Message } from "../Queue/Message.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import { makeDebounceSql } from "./DebounceSql.ts"
import { InvalidDebounceKey } from "./JobError.ts"

/** The envelope field carrying a debounced job's key. */
export const DEBOUNCE_KEY_FIELD = "pgbus_debounce_key"

/**
 * The `debounce` option of `Job.make`.
 *
 * @category models
 */
export interface DebounceOptions<P> {
  /** The key from the payload (default: the job's name). At most 255 characters. */
  readonly key?: ((payload: P) => string) | undefined
  /** How long a key must be quiet before its last job runs. */
  readonly period: Duration.Input
  /** Longest a burst may delay its job, from its first enqueue (default: no bound). */
  readonly maxWait?: Duration.Input | undefined
}

/** A job's debounce as checked at definition. */
export interface DebounceSpec {
  readonly key: ((payload: never) => string) | undefined
  readonly periodMs: number
  readonly maxWaitMs: number | undefined
}

const positiveMs = (input: Duration.Input): number | undefined => {
  const d = Duration.fromInput(input)
  if (d._tag === "None" || !Duration.isFinite(d.value)) return undefined
  const ms = Duration.toMillis(d.value)
  return ms >= 1 ? ms : undefined
}

/** Checks the `debounce` option; the reason when invalid. */
export const checkDebounce = (options: DebounceOptions<never>): string | undefined => {
  if (typeof options !== "object" || options === null) return "debounce must be an object"
  for (const k of Object.keys(options)) {
    if (!["key", "period", "maxWait"].includes(k)) return `unknown debounce option ${k}`
  }
  if (options.key !== undefined && typeof options.key !== "function") return "debounce.key must be a function"
  const period = positiveMs(options.period)
  if (period === undefined) return "debounce.period must be a finite duration of at least 1 millisecond"
  if (options.maxWait !== undefined) {
    const maxWait = positiveMs(options.maxWait)
    if (maxWait === undefined || maxWait < period)
      return "debounce.maxWait must be a finite duration of at least the period"
  }
  return undefined
}

/** The checked spec of a valid `debounce` option. */
export const debounceSpec = (options: DebounceOptions<never> | undefined): DebounceSpec | undefined =>
  options === undefined
    ? undefined
    : {
        key: options.key,
        periodMs: positiveMs(options.period)!,
        maxWaitMs: options.maxWait === undefined ? undefined : positiveMs(options.maxWait)
      }

/** The debounce key of one payload; the key function may throw. */
export const debounceKeyOf = (
  job: string,
  spec: DebounceSpec,
  payload: unknown
): Effect.Effect<string, InvalidDebounceKey> => {
  const fn = spec.key as ((payload: unknown) => unknown) | undefined
  if (fn === undefined) return Effect.succeed(job)
  return Effect.try({
    try: () => fn(payload),
    catch: (error) =>
      new InvalidDebounceKey({
        job,
        reason: `the key function threw: ${error instanceof Error ? error.message : String(error)}`
      })
  }).pipe(
    Effect.flatMap((key) =>
      typeof key === "string" && key.length > 0 && key.length <= 255
        ? Effect.succeed(key)
        : Effect.fail(
            new InvalidDebounceKey({ job, reason: "a key must be a non-empty string of at most 255 characters" })
          )
    )
  )
}

/** The debounce key a stored message carries, if any. */
export const debounceKeyOfMessage = (m: Pick<Message, "message">): string | undefined => {
  const envelope = m.message
  if (typeof envelope !== "object" || envelope === null) return undefined
  const key = (envelope as Record<string, unknown>)[DEBOUNCE_KEY_FIELD]
  return typeof key === "string" ? key : undefined
}

/**
 * The debounce of one schema.
 *
 * @category models
 */
export interface Debouncer {
  /** Sends a debounced job's message (JSON text) and makes it its key's last; its id. */
  readonly send: (args: {
    readonly job: string
    readonly key: string
    readonly queue: string
    readonly physical: string
    readonly message: string
    readonly headers: string | null
    readonly spec: DebounceSpec
  }) => Effect.Effect<bigint, QueueError>
  /** Whether a delivery is still its key's last (and closes the window if so). */
  readonly close: (job: string, key: string, m: Message) => Effect.Effect<boolean, QueueError>
}

/** Makes the debounce of the configured schema. */
export const makeDebouncer = (
  sql: SqlClient.SqlClient,
  schema: string,
  store: Pick<QueueStore["Service"], "messageCtesWithIds" | "nextMsgId">
): Debouncer => {
  const statements = makeDebounceSql(sql, schema, store)
  return {
    send: (args) =>
      Effect.flatMap(statementNow, (now) =>
        statements.debounceSend(
          {
            job: args.job,
            key: args.key,
            queue: args.queue,
            physical: args.physical,
            message: args.message,
            headers: args.headers,
            periodMs: args.spec.periodMs,
            maxWaitMs: args.spec.maxWaitMs ?? null
          },
          now
        )
      ).pipe(
        Effect.map((rows) => rows[0]!.msg_id),
        Effect.mapError(toDatabaseError(`send a debounced job ${args.job}`))
      ),
    close: (job, key, m) =>
      statements.debounceClose(job, key, m.queue, m.msgId).pipe(
        Effect.map((rows) => rows.length > 0),
        Effect.mapError(toDatabaseError(`close the debounce window of ${job}`))
      )
  }
}
