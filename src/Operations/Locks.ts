/**
 * Flow controls on the operations surface: uniqueness keys (who holds them, since when, until
 * when), concurrency keys (running against their limit, waiting, the oldest wait) and rate
 * buckets (tokens as the last claim left them); releasing a uniqueness key by hand.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { statementNow, toDatabaseError } from "../Database.ts"
import { makeUniqueKeySql } from "../Job/UniqueKeySql.ts"
import type { Change, Deps } from "./Deps.ts"
import type { LocksView } from "./Model.ts"
import { InvalidRequest, NotFound, type OperationsError } from "./OperationsError.ts"
import { fromQueueError } from "./Queues.ts"

/** Rows shown per section. */
const SHOWN = 100

/** What `locks` reports. */
export interface Locks {
  readonly unique: {
    /** Keys held in all. */
    readonly total: number
    /** The oldest `SHOWN`. */
    readonly keys: ReadonlyArray<{
      readonly job: string
      readonly key: string
      readonly strategy: "untilExecuted" | "whileExecuting"
      readonly holder: string
      readonly runningOn: string | undefined
      readonly acquiredAt: Date
      readonly expiresAt: Date | undefined
    }>
  }
  readonly concurrency: {
    /** Jobs waiting behind a key at its limit. */
    readonly parked: number
    /** The longest wait of a parked job, in milliseconds. */
    readonly oldestParkedMs: number | undefined
    /** Slots held (running limited jobs). */
    readonly slotsHeld: number
    readonly keysAtLimit: number
    /** The busiest `SHOWN` keys. */
    readonly keys: ReadonlyArray<{
      readonly queue: string
      readonly key: string
      readonly running: number
      readonly limit: number
      readonly waiting: number
      readonly oldestWaitMs: number | undefined
    }>
  }
  readonly rates: ReadonlyArray<{
    readonly queue: string
    readonly key: string
    readonly tokens: number
    readonly refilledAt: Date
  }>
}

/** The locks as the JSON API and MCP answer them (times ISO 8601, absent values null). */
export const locksView = (l: Locks): LocksView => ({
  unique: {
    total: l.unique.total,
    keys: l.unique.keys.map((k) => ({
      ...k,
      runningOn: k.runningOn ?? null,
      acquiredAt: k.acquiredAt.toISOString(),
      expiresAt: k.expiresAt?.toISOString() ?? null
    }))
  },
  concurrency: {
    ...l.concurrency,
    oldestParkedMs: l.concurrency.oldestParkedMs ?? null,
    keys: l.concurrency.keys.map((k) => ({ ...k, oldestWaitMs: k.oldestWaitMs ?? null }))
  },
  rates: l.rates.map((r) => ({ ...r, refilledAt: r.refilledAt.toISOString() }))
})

/** Builds the locks operations. */
export const makeLocks = (deps: Deps) => {
  const { sql, config, store, queueSql } = deps
  // read-only here but for the release: the key table's own statements
  const uniqueSql = makeUniqueKeySql(sql, config.schema, store)
  const fromSql = toDatabaseError

  /** Every flow-control lock in one snapshot per section. */
  const locks: Effect.Effect<Locks, OperationsError> = Effect.gen(function* () {
    const [count] = yield* uniqueSql.uniqueKeyCount().pipe(Effect.mapError(fromSql("count uniqueness keys")))
    const page = yield* uniqueSql.uniqueKeyPage(null, 10_000).pipe(Effect.mapError(fromSql("list uniqueness keys")))
    const oldest = [...page].sort((a, b) => a.acquired_at.getTime() - b.acquired_at.getTime()).slice(0, SHOWN)
    const queues = yield* store.list.pipe(Effect.mapError(fromQueueError("*")))
    const now = yield* statementNow
    const keys: Array<Locks["concurrency"]["keys"][number]> = []
    for (const q of queues) {
      if (q.deadLetterOf !== undefined) continue
      const rows = yield* queueSql
        .queueLimitKeys(q.physical, now)
        .pipe(Effect.mapError(fromSql(`read concurrency keys of ${q.name}`)))
      for (const r of rows) {
        keys.push({
          queue: q.name,
          key: r.key,
          running: Number(r.running),
          limit: Number(r.limit_to),
          waiting: Number(r.waiting),
          oldestWaitMs: r.oldest_wait_ms ?? undefined
        })
      }
    }
    const atLimit = keys.filter((k) => k.running >= k.limit)
    const parkedWaits = atLimit.flatMap((k) => (k.waiting > 0 && k.oldestWaitMs !== undefined ? [k.oldestWaitMs] : []))
    const buckets = yield* queueSql.rateBucketList().pipe(Effect.mapError(fromSql("list rate buckets")))
    return {
      unique: {
        total: Number(count?.n ?? 0n),
        keys: oldest.map((r) => ({
          job: r.job,
          key: r.key,
          strategy: r.strategy === "until_executed" ? "untilExecuted" : "whileExecuting",
          holder: `${r.queue}:${r.msg_id}`,
          runningOn: r.holder ?? undefined,
          acquiredAt: r.acquired_at,
          expiresAt: r.expires_at ?? undefined
        }))
      },
      concurrency: {
        parked: atLimit.reduce((n, k) => n + k.waiting, 0),
        oldestParkedMs: parkedWaits.length === 0 ? undefined : Math.max(...parkedWaits),
        slotsHeld: keys.reduce((n, k) => n + Math.min(k.running, k.limit), 0),
        keysAtLimit: atLimit.length,
        keys: [...keys].sort((a, b) => b.running + b.waiting - (a.running + a.waiting)).slice(0, SHOWN)
      },
      rates: buckets.map((b) => ({ queue: b.queue, key: b.key, tokens: b.tokens, refilledAt: b.refilled_at }))
    } satisfies Locks
  })

  /**
   * Releases a uniqueness key by hand, whoever holds it (a holder that will never end: its
   * message is gone, the reaper has not run yet). Its job, if still queued, runs on without it.
   */
  const releaseUniqueKey = (job: string, key: string, change: Change) =>
    Effect.gen(function* () {
      if (job === "" || key === "") return yield* new InvalidRequest({ reason: "a job and a key are required" })
      const [row] = yield* uniqueSql
        .uniqueKeyDelete(job, key)
        .pipe(Effect.mapError(fromSql("release a uniqueness key")))
      if (row === undefined) return yield* new NotFound({ kind: "uniqueness key", id: `${job}/${key}` })
      yield* Effect.logWarning(
        `pgbus: uniqueness key ${key} of job ${job} (held by ${row.queue}:${row.msg_id}) released by ${change.actor}${change.reason ? ` (${change.reason})` : ""}`
      )
      return { job, key, holder: `${row.queue}:${row.msg_id}` }
    })

  return { locks, releaseUniqueKey }
}
