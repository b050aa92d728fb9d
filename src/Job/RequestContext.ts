/**
 * Request context: values captured where a job is enqueued (or an event published), carried
 * with its message, and provided again while its handler runs, through retries, a trip out of
 * the dead-letter queue and a batch's callbacks. One JSON object holds them
 * (`CurrentAttributes`, which events carry too); `RequestContext.make(key, schema)` is a typed
 * view of one key of it.
 *
 * @since 0.1.0
 */
import { Context, Effect, Option, Schema } from "effect"

/** Header of a job message holding the request context captured at enqueue. */
export const CONTEXT_HEADER = "pgbus_context"

/**
 * The current request context: a JSON object captured by every enqueue (into the
 * `pgbus_context` header) and every publish (into the event's envelope), and provided again
 * around each handler. Typed access: `RequestContext.make`; untyped: `EventBus.withAttributes`.
 *
 * @category references
 */
export const CurrentAttributes = Context.Reference<Readonly<Record<string, unknown>>>(
  "effect-pgbus/EventBus/CurrentAttributes",
  { defaultValue: () => ({}) }
)

/**
 * A request context value does not encode (when set) or decode (when read) with its Schema.
 *
 * @category errors
 */
export class InvalidRequestContext extends Schema.TaggedError<InvalidRequestContext>()("InvalidRequestContext", {
  key: Schema.String,
  issue: Schema.String
}) {
  override get message(): string {
    return `request context ${this.key} is invalid: ${this.issue}`
  }
}

/**
 * No request context value is set under this key (the job was enqueued without it).
 *
 * @category errors
 */
export class RequestContextMissing extends Schema.TaggedError<RequestContextMissing>()("RequestContextMissing", {
  key: Schema.String
}) {
  override get message(): string {
    return `no request context ${this.key} is set`
  }
}

/**
 * A typed request context: one key of `CurrentAttributes`, with its Schema.
 *
 * @category models
 */
export interface RequestContext<A> {
  readonly key: string
  readonly schema: Schema.ConstraintCodec<A, unknown>
  /** Runs `effect` with the value set: jobs enqueued and events published inside carry it. */
  readonly provide: (
    value: A
  ) => <X, E, R>(effect: Effect.Effect<X, E, R>) => Effect.Effect<X, E | InvalidRequestContext, R>
  /** The value: in a job's handler, the one captured where the job was enqueued. */
  readonly get: Effect.Effect<A, RequestContextMissing | InvalidRequestContext>
  /** The value, if one is set. */
  readonly getOption: Effect.Effect<Option.Option<A>, InvalidRequestContext>
}

/** Makes a typed request context stored under `key` (e.g. `RequestContext.make("tenant", Tenant)`). */
export const make = <A>(key: string, schema: Schema.ConstraintCodec<A, unknown>): RequestContext<A> => {
  const encode = Schema.encodeUnknownEffect(schema)
  const decode = Schema.decodeUnknownEffect(schema)
  const getOption = Effect.flatMap(CurrentAttributes, (current) =>
    Object.hasOwn(current, key)
      ? decode(current[key]).pipe(
          Effect.map(Option.some),
          Effect.mapError((error) => new InvalidRequestContext({ key, issue: error.message }))
        )
      : Effect.succeed(Option.none<A>())
  )
  return {
    key,
    schema,
    provide:
      (value) =>
      <X, E, R>(effect: Effect.Effect<X, E, R>) =>
        encode(value).pipe(
          Effect.mapError((error) => new InvalidRequestContext({ key, issue: error.message })),
          Effect.flatMap((encoded) =>
            Effect.flatMap(CurrentAttributes, (current) =>
              Effect.provideService(effect, CurrentAttributes, { ...current, [key]: encoded })
            )
          )
        ),
    getOption,
    get: Effect.flatMap(getOption, (value) =>
      Option.isSome(value) ? Effect.succeed(value.value) : Effect.fail(new RequestContextMissing({ key }))
    )
  }
}

/** The request context a message carries (its `pgbus_context` header), if any. */
export const contextOf = (
  headers: Readonly<Record<string, unknown>>
): Readonly<Record<string, unknown>> | undefined => {
  const value = headers[CONTEXT_HEADER]
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? (value as Readonly<Record<string, unknown>>)
    : undefined
}
