/**
 * Fair share across keys (tenants) inside one queue. A resolver tags each message at enqueue
 * (or publish) with a key and a weight, carried in the message as `pgbus_fair_key` and
 * `pgbus_fair_weight`; a fair read interleaves claims across keys instead of taking the
 * oldest first. This module holds the rules of a tag, and the reader's memory that turns
 * successive reads into a weighted round-robin (start-time fair queueing).
 *
 * The ordering of one read: every key with visible messages ranks them oldest first
 * (`vt, msg_id`), rank `r` of a key of weight `w` gets the start tag `credit + (r - 1) / w`,
 * and the lowest tags win, ties to the oldest message. `credit` is how far ahead of the others
 * the key was served by earlier reads of the same reader (0 for a key it has not served).
 * `fairOrder` is that function in TypeScript; the queue store runs it in SQL.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import type { FairShareKey } from "../Config.ts"

/** Message field of the fair-share key (messages without one share the key `""`). */
export const FAIR_KEY_FIELD = "pgbus_fair_key"

/** Message field of the weight (absent: 1). */
export const FAIR_WEIGHT_FIELD = "pgbus_fair_weight"

/** Longest key: it is an index entry, and B-tree entries are bounded. */
export const MAX_FAIR_KEY_LENGTH = 255

/** Largest weight (the read clamps stored weights to 1..this). */
export const MAX_FAIR_WEIGHT = 1_000_000

/**
 * A fair-share resolver returned something that is not a key, `[key, weight]` or `undefined`
 * (an empty or over-long key, a weight that is not a positive integer), or threw. Raised at
 * enqueue or publish; nothing was written.
 *
 * @category errors
 */
export class InvalidFairShare extends Schema.TaggedError<InvalidFairShare>()("InvalidFairShare", {
  /** What was being tagged: `job <name>` or `event <routing key>`. */
  subject: Schema.String,
  issue: Schema.String
}) {
  override get message(): string {
    return `invalid fair-share key for ${this.subject}: ${this.issue}`
  }
}

/**
 * A checked tag.
 *
 * @category models
 */
export interface FairTag {
  readonly key: string
  /** A positive integer; 1 unless the resolver said otherwise. */
  readonly weight: number
}

const describeValue = (u: unknown): string => {
  if (typeof u === "string") return JSON.stringify(u.length > 40 ? `${u.slice(0, 40)}…` : u)
  if (typeof u === "number" || typeof u === "boolean" || u === null || u === undefined) return String(u)
  return typeof u
}

const checkKey = (key: unknown): string | undefined => {
  if (typeof key !== "string") return `the key must be a string, got ${describeValue(key)}`
  if (key === "") return "the key must not be empty (return undefined to leave the message unkeyed)"
  if (key.length > MAX_FAIR_KEY_LENGTH) return `the key must have at most ${MAX_FAIR_KEY_LENGTH} characters`
  return undefined
}

/** Checks what a resolver returned: a tag, `undefined` (unkeyed), or the rule it broke. */
export const checkFairShare = (
  resolved: unknown
):
  | { readonly _tag: "Ok"; readonly tag: FairTag | undefined }
  | { readonly _tag: "Invalid"; readonly issue: string } => {
  if (resolved === undefined) return { _tag: "Ok", tag: undefined }
  if (Array.isArray(resolved)) {
    if (resolved.length !== 2) return { _tag: "Invalid", issue: "expected [key, weight]" }
    const [key, weight] = resolved as ReadonlyArray<unknown>
    const badKey = checkKey(key)
    if (badKey !== undefined) return { _tag: "Invalid", issue: badKey }
    if (typeof weight !== "number" || !Number.isInteger(weight) || weight < 1 || weight > MAX_FAIR_WEIGHT) {
      return {
        _tag: "Invalid",
        issue: `the weight must be an integer from 1 to ${MAX_FAIR_WEIGHT}, got ${describeValue(weight)}`
      }
    }
    return { _tag: "Ok", tag: { key: key as string, weight } }
  }
  const badKey = checkKey(resolved)
  if (badKey !== undefined) return { _tag: "Invalid", issue: badKey }
  return { _tag: "Ok", tag: { key: resolved as string, weight: 1 } }
}

/** Runs a resolver and checks its answer; a resolver that throws fails the same way. */
export const resolveFairShare = (
  subject: string,
  resolve: () => FairShareKey
): Effect.Effect<FairTag | undefined, InvalidFairShare> =>
  Effect.suspend(() => {
    let resolved: unknown
    try {
      resolved = resolve()
    } catch (cause) {
      // a resolver is user code: its throw is a bad answer, reported like one
      const reason = cause instanceof Error ? cause.message : String(cause)
      return Effect.fail(new InvalidFairShare({ subject, issue: `the resolver threw: ${reason}` }))
    }
    const checked = checkFairShare(resolved)
    return checked._tag === "Ok"
      ? Effect.succeed(checked.tag)
      : Effect.fail(new InvalidFairShare({ subject, issue: checked.issue }))
  })

/** The message fields of a tag; weight 1 is left out (it is the default). */
export const fairFields = (
  tag: FairTag | undefined
): { readonly pgbus_fair_key?: string; readonly pgbus_fair_weight?: number } =>
  tag === undefined
    ? {}
    : tag.weight === 1
      ? { [FAIR_KEY_FIELD]: tag.key }
      : { [FAIR_KEY_FIELD]: tag.key, [FAIR_WEIGHT_FIELD]: tag.weight }

/** A claimed message as the fair read reports it: its key, the weight used, its start tag. */
export interface FairClaim {
  readonly key: string
  readonly weight: number
  readonly start: number
}

/** Keys a cursor remembers at most (the ones furthest ahead are kept). */
export const MAX_REMEMBERED_KEYS = 1_024

/**
 * A reader's memory of what it served on one queue, so that reads of one message at a time
 * still alternate between keys. Credits are relative to the reader's virtual time (0): a key
 * served ahead of the others starts its next message that much later. Mutable, owned by one
 * read loop.
 *
 * @category models
 */
export class FairCursor {
  private readonly credits = new Map<string, number>()

  /** The credits to send with a read: keys and how far ahead each is. */
  snapshot(): { readonly keys: ReadonlyArray<string>; readonly credits: ReadonlyArray<number> } {
    return { keys: [...this.credits.keys()], credits: [...this.credits.values()] }
  }

  /** The credit of one key (0 if none). */
  creditOf(key: string): number {
    return this.credits.get(key) ?? 0
  }

  /** Records a read: what it claimed, and whether it was short (nothing else was visible). */
  advance(claims: ReadonlyArray<FairClaim>, short: boolean): void {
    // an idle queue resets the memory: nobody is waiting behind anybody
    if (short) {
      this.credits.clear()
      return
    }
    let now = Number.NEGATIVE_INFINITY
    for (const c of claims) {
      if (c.start > now) now = c.start
      const finish = c.start + 1 / c.weight
      if (finish > (this.credits.get(c.key) ?? 0)) this.credits.set(c.key, finish)
    }
    if (now === Number.NEGATIVE_INFINITY) return
    // virtual time moves to the latest start served; credits stay relative to it
    for (const [key, finish] of this.credits) {
      const credit = finish - now
      if (credit <= 1e-9) this.credits.delete(key)
      else this.credits.set(key, credit)
    }
    if (this.credits.size > MAX_REMEMBERED_KEYS) {
      const kept = [...this.credits].sort((a, b) => b[1] - a[1]).slice(0, MAX_REMEMBERED_KEYS)
      this.credits.clear()
      for (const [key, credit] of kept) this.credits.set(key, credit)
    }
  }
}

/** A visible message as the fair read sees it. */
export interface FairCandidate {
  readonly msgId: bigint
  readonly key: string
  /** Its weight (only the key's oldest visible message's weight counts). */
  readonly weight: number
}

/**
 * The fair read's choice, in TypeScript: `candidates` are the visible messages oldest first
 * (`vt, msg_id`); returns the `limit` chosen, in claim order, with their start tags. The SQL
 * of `QueueSql.messageReadFair` computes the same (tested against it).
 */
export const fairOrder = (
  candidates: ReadonlyArray<FairCandidate>,
  limit: number,
  creditOf: (key: string) => number = () => 0
): ReadonlyArray<FairCandidate & FairClaim> => {
  const ranks = new Map<string, { weight: number; next: number }>()
  const tagged: Array<FairCandidate & FairClaim> = []
  for (const c of candidates) {
    let head = ranks.get(c.key)
    if (head === undefined) {
      head = { weight: c.weight, next: 0 }
      ranks.set(c.key, head)
    }
    tagged.push({ ...c, weight: head.weight, start: creditOf(c.key) + head.next / head.weight })
    head.next++
  }
  return tagged
    .sort((a, b) => (a.start !== b.start ? a.start - b.start : a.msgId < b.msgId ? -1 : a.msgId > b.msgId ? 1 : 0))
    .slice(0, limit)
}
