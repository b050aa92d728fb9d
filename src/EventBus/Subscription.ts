/**
 * Subscriber definitions: a pattern, a handler, a name (the handler's identity), a queue, and
 * whether the handler is idempotent. `subscribe` checks them where they are written; the
 * `Registry` layer registers them.
 *
 * @since 0.1.0
 */
import type { Effect, Schema } from "effect"
import { IDENTIFIER_PATTERN } from "../Config.ts"
import type { Event } from "./Envelope.ts"
import type { EventDefinition } from "./Event.ts"
import type { EventBus } from "./EventBus.ts"
import { InvalidSubscriberDefinition } from "./EventBusError.ts"
import type { ProcessedEvents } from "./ProcessedEvents.ts"
import * as Topic from "./Topic.ts"

/** Handler runs at once on a subscriber queue when the subscriber names none. */
export const DEFAULT_CONCURRENCY = 5

/** Longest queue name `subscribe` derives (room for the prefix, priority and DLQ suffixes). */
const DERIVED_QUEUE_LENGTH = 24

/** The services a process needs to run subscribers (what `PgBus.layer` provides). */
export type SubscriberServices = EventBus | ProcessedEvents

/** The options of `subscribe`. */
export interface SubscribeOptions<P = unknown> {
  /**
   * The subscriber's identity: the key of its idempotency records and of its subscription
   * row. Keep it stable across deploys. Default: the pattern.
   */
  readonly name?: string | undefined
  /** Its queue; two subscribers naming one queue share it and both run on its delivery. Default: derived from the name. */
  readonly queue?: string | undefined
  /** Deduplicate by `(event_id, name)`: a completed event is never handled twice. */
  readonly idempotent?: boolean | undefined
  /** Handler runs at once on its queue (default 5). */
  readonly concurrency?: number | undefined
  /** Schema of the payload, decoded before the handler runs. */
  readonly payload?: Schema.ConstraintCodec<P, unknown> | undefined
}

const TypeId = "~effect-pgbus/Subscriber"

/**
 * A subscriber definition. Its handler's requirements include the bus's services, so that a
 * `Registry.layer` listing subscribers asks for them (`PgBus.layer` provides them).
 *
 * @category models
 */
export interface Subscriber<in out P, out A = unknown, out E = unknown, out R = never> {
  readonly [TypeId]: typeof TypeId
  readonly name: string
  readonly pattern: string
  readonly queue: string
  readonly idempotent: boolean
  readonly concurrency: number
  readonly payload: Schema.ConstraintCodec<P, unknown> | undefined
  readonly handler: (event: Event<P>) => Effect.Effect<A, E, R | SubscriberServices>
}

/** Any subscriber, for registries and lists. */
export interface AnySubscriber {
  readonly [TypeId]: typeof TypeId
  readonly name: string
  readonly pattern: string
  readonly queue: string
  readonly idempotent: boolean
  readonly concurrency: number
  readonly payload: Schema.ConstraintCodec<unknown, unknown> | undefined
  readonly handler: (event: never) => Effect.Effect<unknown, unknown, unknown>
}

/** Whether a value is a subscriber definition. */
export const isSubscriber = (u: unknown): u is AnySubscriber => typeof u === "object" && u !== null && TypeId in u

/** A short stable hash (FNV-1a, 32 bits, hex) for derived names. */
const hash = (text: string): string => {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193) >>> 0
  }
  return h.toString(16).padStart(8, "0").slice(0, 6)
}

/**
 * The queue a subscriber gets when it names none: `ev_` and its name in queue characters
 * (`orders.#` → `ev_orders_all`, `orders.*` → `ev_orders_any`), shortened with a hash when long.
 */
export const defaultQueueFor = (name: string): string => {
  const slug = name
    .toLowerCase()
    .replaceAll("#", "all")
    .replaceAll("*", "any")
    .replace(/[^a-z0-9]+/g, "_")
    .replace(/^_+|_+$/g, "")
  const queue = `ev_${slug}`
  if (slug !== "" && queue.length <= DERIVED_QUEUE_LENGTH) return queue
  const head = slug.slice(0, DERIVED_QUEUE_LENGTH - 11).replace(/_+$/, "")
  return head === "" ? `ev_${hash(name)}` : `ev_${head}_${hash(name)}`
}

/** Checks a subscriber's options; the reason when invalid. */
export const validateSubscriber = (
  pattern: string,
  options: SubscribeOptions<unknown>
): { readonly name: string; readonly problem: string | undefined } => {
  const name = options.name ?? pattern
  const check = (): string | undefined => {
    const badPattern = Topic.patternProblem(pattern)
    if (badPattern !== undefined) return `pattern ${JSON.stringify(pattern)} ${badPattern}`
    if (typeof name !== "string" || !/^\S{1,128}$/.test(name)) {
      return "the name must be 1 to 128 characters without whitespace"
    }
    if (options.queue !== undefined) {
      if (!IDENTIFIER_PATTERN.test(options.queue) || options.queue.length > 30) {
        return `queue ${JSON.stringify(options.queue)} must use lowercase letters, digits and underscores (at most 30)`
      }
      if (options.queue.endsWith("_dlq")) return "a subscriber cannot read a dead-letter queue"
    }
    if (
      options.concurrency !== undefined &&
      (!Number.isInteger(options.concurrency) || options.concurrency < 1 || options.concurrency > 1_000)
    ) {
      return "concurrency must be an integer from 1 to 1000"
    }
    if (options.idempotent !== undefined && typeof options.idempotent !== "boolean")
      return "idempotent must be a boolean"
    const allowed = new Set(["name", "queue", "idempotent", "concurrency", "payload"])
    for (const key of Object.keys(options)) if (!allowed.has(key)) return `unknown option ${key}`
    return undefined
  }
  return { name, problem: check() }
}

/**
 * Subscribes a handler to a pattern (`*` one segment, `#` zero or more) or to a declared event
 * (its routing key, its payload Schema). Returns a definition to list in `Registry.layer`.
 * Throws `InvalidSubscriberDefinition` for a bad pattern or option, when the module loads.
 */
export function subscribe<P, A, E, R>(
  event: EventDefinition<string, P>,
  handler: (event: Event<P>) => Effect.Effect<A, E, R>,
  options?: Omit<SubscribeOptions<P>, "payload">
): Subscriber<P, A, E, R>
export function subscribe<P, A, E, R>(
  pattern: string,
  handler: (event: Event<P>) => Effect.Effect<A, E, R>,
  options: SubscribeOptions<P> & { readonly payload: Schema.ConstraintCodec<P, unknown> }
): Subscriber<P, A, E, R>
export function subscribe<A, E, R>(
  pattern: string,
  handler: (event: Event<unknown>) => Effect.Effect<A, E, R>,
  options?: SubscribeOptions<unknown>
): Subscriber<unknown, A, E, R>
export function subscribe(
  target: string | EventDefinition<string, unknown>,
  handler: (event: Event<unknown>) => Effect.Effect<unknown, unknown, unknown>,
  options: SubscribeOptions<unknown> = {}
): AnySubscriber {
  const pattern = typeof target === "string" ? target : target.routingKey
  const payload = typeof target === "string" ? options.payload : target.payload
  const { name, problem } = validateSubscriber(pattern, options)
  if (problem !== undefined) throw new InvalidSubscriberDefinition({ subscriber: name, reason: problem })
  return {
    [TypeId]: TypeId,
    name,
    pattern,
    queue: options.queue ?? defaultQueueFor(name),
    idempotent: options.idempotent ?? false,
    concurrency: options.concurrency ?? DEFAULT_CONCURRENCY,
    payload,
    handler
  }
}
