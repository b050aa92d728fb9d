/**
 * Job uniqueness (seed 002 "Concurrency & uniqueness"): at most one job per (job, key).
 * `untilExecuted` takes the key at enqueue, in the caller's transaction, and holds it until the
 * job is archived or dead-lettered (or, with `for`, until the period ends); `whileExecuting`
 * takes it for each run only. The key rides in the message (`pgbus_unique_key`) so that the
 * worker knows which endings release one; the reaper releases keys whose message is gone.
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"
import { statementNow, toDatabaseError } from "../Database.ts"
import type { Message } from "../Queue/Message.ts"
import type { QueueError } from "../Queue/QueueError.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import { DuplicateJob, InvalidUniqueKey } from "./JobError.ts"
import { type JobRef, jobRef } from "./JobRef.ts"
import { makeUniqueKeySql, type UniqueKeyRow } from "./UniqueKeySql.ts"

/** The envelope field carrying a unique job's key. */
export const UNIQUE_KEY_FIELD = "pgbus_unique_key"

/** When a key is held: from enqueue until the job ends, or during each run only. */
export type UniqueStrategy = "untilExecuted" | "whileExecuting"

/** What a duplicate gets: a `DuplicateJob` error, the holder's ref, or the holder's ref and a warning. */
export type UniqueConflict = "reject" | "discard" | "log"

/**
 * The `unique` option of `Job.make`.
 *
 * @category models
 */
export interface UniqueOptions<P> {
  /** The key from the payload (an enqueue's `uniqueKey` wins). At most 255 characters. */
  readonly key?: ((payload: P) => string) | undefined
  /** Default `untilExecuted`. */
  readonly strategy?: UniqueStrategy | undefined
  /** Default `reject`. */
  readonly onConflict?: UniqueConflict | undefined
  /** The uniqueness period (`untilExecuted`): past it, a new job may take the key. Default: until the job ends. */
  readonly for?: Duration.Input | undefined
}

/** A job's uniqueness as checked at definition. */
export interface UniqueSpec {
  readonly key: ((payload: never) => string) | undefined
  readonly strategy: UniqueStrategy
  readonly onConflict: UniqueConflict
  readonly forMs: number | undefined
}

/** Checks the `unique` option; the reason when invalid. */
export const checkUnique = (options: UniqueOptions<never>): string | undefined => {
  if (typeof options !== "object" || options === null) return "unique must be an object"
  for (const k of Object.keys(options)) {
    if (!["key", "strategy", "onConflict", "for"].includes(k)) return `unknown unique option ${k}`
  }
  if (options.key !== undefined && typeof options.key !== "function") return "unique.key must be a function"
  if (options.strategy !== undefined && options.strategy !== "untilExecuted" && options.strategy !== "whileExecuting") {
    return "unique.strategy must be untilExecuted or whileExecuting"
  }
  if (
    options.onConflict !== undefined &&
    options.onConflict !== "reject" &&
    options.onConflict !== "discard" &&
    options.onConflict !== "log"
  ) {
    return "unique.onConflict must be reject, discard or log"
  }
  if (options.for !== undefined) {
    if (options.strategy === "whileExecuting") return "unique.for applies to untilExecuted only"
    const d = Duration.fromInput(options.for)
    if (d._tag === "None" || !Duration.isFinite(d.value) || !Duration.isPositive(d.value)) {
      return "unique.for must be a positive, finite duration"
    }
  }
  return undefined
}

/** The checked spec of a valid `unique` option. */
export const uniqueSpec = (options: UniqueOptions<never> | undefined): UniqueSpec | undefined =>
  options === undefined
    ? undefined
    : {
        key: options.key,
        strategy: options.strategy ?? "untilExecuted",
        onConflict: options.onConflict ?? "reject",
        forMs: options.for === undefined ? undefined : Duration.toMillis(Duration.fromInputUnsafe(options.for))
      }

/** The spec that applies to an enqueue: the job's, or the defaults when only the enqueue gives a key. */
export const specFor = (spec: UniqueSpec | undefined, given: string | undefined): UniqueSpec | undefined =>
  spec ??
  (given === undefined
    ? undefined
    : { key: undefined, strategy: "untilExecuted", onConflict: "reject", forMs: undefined })

/** Checks a key. */
const checkKey = (job: string, key: unknown): Effect.Effect<string, InvalidUniqueKey> =>
  typeof key === "string" && key.length > 0 && key.length <= 255
    ? Effect.succeed(key)
    : Effect.fail(new InvalidUniqueKey({ job, reason: "a key must be a non-empty string of at most 255 characters" }))

/** The key of one payload: the enqueue's, else the job's key function's (which may throw). */
export const keyOf = (
  job: string,
  spec: UniqueSpec,
  payload: unknown,
  given: string | undefined
): Effect.Effect<string, InvalidUniqueKey> => {
  if (given !== undefined) return checkKey(job, given)
  const fn = spec.key as ((payload: unknown) => unknown) | undefined
  if (fn === undefined) {
    return Effect.fail(new InvalidUniqueKey({ job, reason: "no key: give unique.key or the enqueue's uniqueKey" }))
  }
  return Effect.try({
    try: () => fn(payload),
    catch: (error) =>
      new InvalidUniqueKey({
        job,
        reason: `the key function threw: ${error instanceof Error ? error.message : String(error)}`
      })
  }).pipe(Effect.flatMap((key) => checkKey(job, key)))
}

/** The key a stored message carries, if any. */
export const keyOfMessage = (m: Pick<Message, "message">): string | undefined => {
  const envelope = m.message
  if (typeof envelope !== "object" || envelope === null) return undefined
  const key = (envelope as Record<string, unknown>)[UNIQUE_KEY_FIELD]
  return typeof key === "string" ? key : undefined
}

/** One position of a unique send: sent (a new job) or kept out by a holder. */
export type UniqueSendResult =
  | { readonly _tag: "Sent"; readonly ref: JobRef }
  | { readonly _tag: "Duplicate"; readonly key: string; readonly holder: JobRef | undefined }

/** What `reap` did: keys whose message was gone, released. */
export interface ReapReport {
  readonly released: number
}

/**
 * The uniqueness keys of one schema: the enqueue, the run-time lock, the releases and the reaper.
 *
 * @category models
 */
export interface UniqueKeys {
  /**
   * Takes the keys (distinct) and sends the messages whose key was free, in one statement in the
   * caller's transaction; by position, the ref sent or the holder.
   */
  readonly send: (args: {
    readonly job: string
    readonly queue: string
    readonly physical: string
    readonly keys: ReadonlyArray<string>
    readonly messages: ReadonlyArray<string>
    readonly headers: string | null
    readonly delayMs: number
    readonly at: Date | null
    readonly forMs: number | undefined
  }) => Effect.Effect<ReadonlyArray<UniqueSendResult>, QueueError>
  /** Takes a `whileExecuting` key for a run; false when another message holds it. */
  readonly acquireRun: (job: string, key: string, m: Message, holder: string) => Effect.Effect<boolean, QueueError>
  /**
   * Releases the keys held by messages that ended: a run over (`whileExecuting`), or, with
   * `ifGone`, a job archived or dead-lettered, and then only the keys whose message is no longer
   * in its queue (an archive that found the message delivered again must not free its key).
   */
  readonly release: (
    messages: ReadonlyArray<Message>,
    options?: { readonly ifGone?: boolean }
  ) => Effect.Effect<number, QueueError>
  /** Fast recovery: releases the `whileExecuting` keys of runs of dead processes. */
  readonly releaseHeldBy: (processIds: ReadonlyArray<string>) => Effect.Effect<number, QueueError>
  /** Releases keys whose message is gone (a crash between an archive and its release, a purge, a dropped queue). */
  readonly reap: Effect.Effect<ReapReport, QueueError>
}

const REAP_PAGE = 1_000

/** Makes the uniqueness keys of the configured schema. */
export const makeUniqueKeys = (
  sql: SqlClient.SqlClient,
  schema: string,
  store: Pick<QueueStore["Service"], "messageCtesWithIds" | "nextMsgId" | "present">
): UniqueKeys => {
  const statements = makeUniqueKeySql(sql, schema, store)
  const fail = (what: string) => toDatabaseError(what)

  const send: UniqueKeys["send"] = (args) =>
    Effect.gen(function* () {
      const now = yield* statementNow
      const send = { ...args, forMs: args.forMs ?? null }
      const sent: ReadonlyArray<bigint | null> =
        args.keys.length === 1
          ? (yield* statements
              .uniqueKeySendOne(send, now)
              .pipe(Effect.mapError(fail(`send a unique job to ${args.queue}`)))).map((r) => r.sent)
          : (yield* statements
              .uniqueKeySend(send, now)
              .pipe(Effect.mapError(fail(`send unique jobs to ${args.queue}`)))).map((r) => r.sent)
      // the holders of the keys that were taken, in a statement of its own (a key committed after
      // the send's snapshot is seen); only when there are duplicates
      const taken = args.keys.filter((_, i) => sent[i] === null)
      const holders =
        taken.length === 0
          ? new Map<string, JobRef>()
          : new Map(
              (yield* statements
                .uniqueKeyHolders(args.job, taken)
                .pipe(Effect.mapError(fail(`find the holders of keys of ${args.job}`)))).map((r) => [
                r.key,
                jobRef(r.queue, r.msg_id)
              ])
            )
      return args.keys.map(
        (key, i): UniqueSendResult =>
          sent[i] !== null && sent[i] !== undefined
            ? { _tag: "Sent", ref: jobRef(args.queue, sent[i]) }
            : { _tag: "Duplicate", key, holder: holders.get(key) }
      )
    })

  const acquireRun: UniqueKeys["acquireRun"] = (job, key, m, holder) =>
    Effect.flatMap(statementNow, (now) => statements.uniqueKeyAcquireRun(job, key, m.queue, m.msgId, holder, now)).pipe(
      Effect.map((rows) => rows.length > 0),
      Effect.mapError(fail(`take the key of a run of ${job}`))
    )

  const release: UniqueKeys["release"] = (messages, options) =>
    Effect.gen(function* () {
      const byQueue = new Map<string, Array<bigint>>()
      for (const m of messages) {
        if (keyOfMessage(m) === undefined) continue
        const ids = byQueue.get(m.queue)
        if (ids) ids.push(m.msgId)
        else byQueue.set(m.queue, [m.msgId])
      }
      let n = 0
      for (const [queue, all] of byQueue) {
        const present = options?.ifGone === true ? yield* store.present(queue, all) : new Set<bigint>()
        const ids = all.filter((id) => !present.has(id))
        if (ids.length === 0) continue
        n += (yield* statements
          .uniqueKeyReleaseMessages(queue, ids)
          .pipe(Effect.mapError(fail(`release uniqueness keys of ${queue}`)))).length
      }
      return n
    })

  const releaseHeldBy: UniqueKeys["releaseHeldBy"] = (processIds) =>
    processIds.length === 0
      ? Effect.succeed(0)
      : statements.uniqueKeyReleaseHeldBy(processIds).pipe(
          Effect.map((rows) => rows.length),
          Effect.mapError(fail("release the uniqueness keys of dead processes"))
        )

  const reap: UniqueKeys["reap"] = Effect.gen(function* () {
    let released = 0
    let after: { job: string; key: string } | null = null
    while (true) {
      const page: ReadonlyArray<UniqueKeyRow> = yield* statements
        .uniqueKeyPage(after, REAP_PAGE)
        .pipe(Effect.mapError(fail("list uniqueness keys")))
      if (page.length === 0) break
      const byQueue = new Map<string, Array<UniqueKeyRow>>()
      for (const row of page) {
        const list = byQueue.get(row.queue)
        if (list) list.push(row)
        else byQueue.set(row.queue, [row])
      }
      const gone: Array<UniqueKeyRow> = []
      for (const [queue, rows] of byQueue) {
        const present = yield* store
          .present(
            queue,
            rows.map((r) => r.msg_id)
          )
          .pipe(
            // a queue that no longer exists holds no message
            Effect.catchTag("QueueNotFound", () => Effect.succeed(new Set<bigint>() as ReadonlySet<bigint>))
          )
        for (const r of rows) if (!present.has(r.msg_id)) gone.push(r)
      }
      if (gone.length > 0) {
        released += (yield* statements
          .uniqueKeyDeleteHeld(gone)
          .pipe(Effect.mapError(fail("release orphaned uniqueness keys")))).length
      }
      if (page.length < REAP_PAGE) break
      const last: UniqueKeyRow = page[page.length - 1]!
      after = { job: last.job, key: last.key }
    }
    return { released }
  })

  return { send, acquireRun, release, releaseHeldBy, reap }
}

/** The error of a rejected duplicate: the holder's id, empty when it ended before the look-up. */
export const duplicateError = (job: string, key: string, holder: JobRef | undefined) =>
  new DuplicateJob({ job, key, holder: holder?.id ?? "" })
