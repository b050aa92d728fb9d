/**
 * One leader per maintenance role. Every supervisor that runs a role campaigns for it with a
 * session advisory lock (`pg_try_advisory_lock`) on a connection of its own (a client of one
 * connection beside the pool: a connection reserved from the pool would hold the pool's shutdown
 * up for as long as the supervisor runs), checked every
 * `leaderCheckInterval`: the holder runs the role's work, the others stand by. PostgreSQL
 * releases the lock the moment the holder's session ends (process killed, connection lost), so
 * a standby takes over at its next check. A leader that cannot reach its connection stops its
 * work at once (it can no longer prove it holds the lock); the work is written to be safe if
 * two leaders overlap for a moment (guarded transitions, SKIP LOCKED, unique ledgers).
 *
 * The same campaign elects the single active consumer of a queue (role `consumer:<queue>`), and
 * holds the shared locks of this process's ranked consumers (consumer priority) and reads, from
 * `pg_locks`, whether a live session outranks them.
 *
 * @since 0.1.0
 */
import os from "node:os"
import { Cause, Deferred, Duration, Effect, type Scope } from "effect"
import { PgBusConfig } from "../Config.ts"
import { dedicatedClient, statementNow } from "../Database.ts"
import { type LeaderRow, makeProcessSql } from "./ProcessSql.ts"

/**
 * The roles that have one holder across the cluster: the maintenance roles, and the single
 * active consumer of a queue (`consumer:<queue>`).
 */
export type LeaderRole = "dispatcher" | "scheduler" | `consumer:${string}`

/** The maintenance roles' second lock key (the first is `hashtext(schema)`). */
export const LOCK_IDS: Readonly<Record<"dispatcher" | "scheduler", number>> = { dispatcher: 1, scheduler: 2 }

/** The role of the single active consumer of a queue. */
export const consumerRole = (queue: string): LeaderRole => `consumer:${queue}`

/** The queue of a consumer role, if it is one. */
export const queueOfRole = (role: LeaderRole): string | undefined =>
  role.startsWith("consumer:") ? role.slice("consumer:".length) : undefined

/** Consumer roles' lock ids start here (above the maintenance roles'). */
const CONSUMER_LOCK_BASE = 1000

/**
 * A role's second lock key: fixed for the maintenance roles, a 31-bit hash (FNV-1a) of the
 * queue for a consumer role (two queues that share one are served one at a time together).
 */
export const lockIdOf = (role: LeaderRole): number => {
  const queue = queueOfRole(role)
  if (queue === undefined) return LOCK_IDS[role as "dispatcher" | "scheduler"]
  let hash = 0x811c9dc5
  for (const byte of new TextEncoder().encode(queue)) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0
  return CONSUMER_LOCK_BASE + (hash % (2_147_483_647 - CONSUMER_LOCK_BASE))
}

/** A ranked consumer (consumer priority): a capsule of this process reads `queue` at `priority`. */
export interface Rank {
  readonly queue: string
  readonly priority: number
}

const rankKey = (rank: Rank) => `${rank.queue}\u0000${rank.priority}`

/** What a campaign tells the rest of the process. */
export interface Campaign {
  /** The roles this process leads now. */
  readonly leading: Effect.Effect<ReadonlySet<LeaderRole>>
  /** Resolves after the first round of checks (won, lost or failed). */
  readonly firstRound: Effect.Effect<void>
  /**
   * Runs `work` whenever this process leads `role`: started when it takes the lock, interrupted
   * when it loses it, started again when it takes it again. Never returns (unless `work` fails).
   */
  readonly whileLeading: <A, E, R>(role: LeaderRole, work: Effect.Effect<A, E, R>) => Effect.Effect<never, E, R>
  /** Whether this process holds the role now (synchronous: read on a worker's claim path). */
  readonly leadsNow: (role: LeaderRole) => boolean
  /**
   * Whether a live session holds a higher priority than the rank on its queue (synchronous).
   * True until the first check answers, and while this process cannot check.
   */
  readonly outranked: (rank: Rank) => boolean
}

/** How a campaign runs beside its roles. */
export interface CampaignOptions {
  /** Interval between checks (default: the config's `leaderCheckInterval`). */
  readonly every?: Duration.Duration | undefined
  /** Ranked consumers of this process: each holds its rank's shared lock, and learns whether it is outranked. */
  readonly ranks?: ReadonlyArray<Rank> | undefined
}

const messageOf = (u: unknown): string => (u instanceof Error ? u.message : String(u))

/** A lock check that takes longer than this counts as a lost connection. */
const checkTimeout = (every: Duration.Duration) => Duration.max(Duration.seconds(5), Duration.times(every, 3))

/** Whether this process leads a role, and a signal for the next change. */
interface RoleState {
  readonly leading: boolean
  readonly changed: Deferred.Deferred<void>
}

/**
 * Campaigns for `roles` until the scope closes, on one dedicated connection (none for no role).
 * `whileLeading` runs a role's work only while this process holds the role's lock.
 */
export const campaign = (
  processId: string,
  roles: ReadonlyArray<LeaderRole>,
  options: CampaignOptions = {}
): Effect.Effect<Campaign, never, PgBusConfig | Scope.Scope> =>
  Effect.gen(function* () {
    const config = yield* PgBusConfig
    const every = options.every ?? config.leaderCheckInterval
    const ranks = options.ranks ?? []
    // a ranked consumer is outranked until a check says otherwise (it claims nothing meanwhile);
    // no entry yet: its first answer is logged either way
    const outranked = new Map<string, boolean>()
    const setOutranked = (rank: Rank, by: number | null) =>
      Effect.suspend(() => {
        const now = by !== null && by > rank.priority
        const was = outranked.get(rankKey(rank))
        if (was === now) return Effect.void
        outranked.set(rankKey(rank), now)
        return now
          ? Effect.logInfo(
              `[pgbus] consumer of ${rank.queue} at priority ${rank.priority} backs off: a consumer at priority ${String(by)} is active`
            )
          : Effect.logInfo(`[pgbus] consumer of ${rank.queue} at priority ${rank.priority} is active`)
      })
    const states = new Map<LeaderRole, RoleState>()
    for (const role of roles) states.set(role, { leading: false, changed: yield* Deferred.make<void>() })
    // the backend (session) each led role was taken on
    const led = new Map<LeaderRole, number>()
    const firstRound = yield* Deferred.make<void>()

    const setLeading = (role: LeaderRole, leading: boolean) =>
      Effect.gen(function* () {
        const state = states.get(role)
        if (state === undefined || state.leading === leading) return
        states.set(role, { leading, changed: yield* Deferred.make<void>() })
        yield* Deferred.succeed(state.changed, undefined)
      })

    const awaitLeading = (role: LeaderRole, leading: boolean): Effect.Effect<void> =>
      Effect.suspend(() => {
        const state = states.get(role)
        if (state === undefined) return Effect.never
        return state.leading === leading
          ? Effect.void
          : Effect.andThen(Deferred.await(state.changed), awaitLeading(role, leading))
      })

    const whileLeading = <A, E, R>(role: LeaderRole, work: Effect.Effect<A, E, R>): Effect.Effect<never, E, R> =>
      Effect.andThen(
        awaitLeading(role, true),
        Effect.raceFirst(Effect.andThen(work, Effect.never), awaitLeading(role, false))
      ).pipe(Effect.forever)

    const stop = (role: LeaderRole, why: string) =>
      Effect.gen(function* () {
        if (!led.delete(role)) return
        yield* setLeading(role, false)
        yield* Effect.logWarning(`[pgbus] no longer leads ${role}: ${why}`)
      })

    const session = Effect.gen(function* () {
      // a dead connection is replaced by the client on a new session: the backend pid tells
      const client = yield* dedicatedClient("effect-pgbus leader")
      const statements = makeProcessSql(client, config.schema)
      const round = Effect.forEach(
        roles,
        (role) =>
          Effect.gen(function* () {
            const lockId = lockIdOf(role)
            const [row] = yield* statements.leaderTryLock(lockId)
            const held = led.get(role)
            if (row === undefined || !row.locked) {
              if (held !== undefined) yield* stop(role, "its lock is held by another session")
              return
            }
            if (held === row.backend_pid) return
            // the same process on a new session: another may have led in between
            if (held !== undefined) yield* stop(role, "its session was replaced")
            yield* statements.leaderRecord(
              { role, lockId, processId },
              { host: os.hostname(), pid: process.pid, backendPid: row.backend_pid },
              yield* statementNow
            )
            led.set(role, row.backend_pid)
            yield* setLeading(role, true)
            yield* Effect.logInfo(`[pgbus] leads ${role}`)
          }),
        { discard: true }
      ).pipe(
        Effect.andThen(
          Effect.forEach(
            ranks,
            (rank) =>
              Effect.gen(function* () {
                yield* statements.rankLock(rank.queue, rank.priority)
                const [top] = yield* statements.rankTop(rank.queue)
                yield* setOutranked(rank, top?.top ?? null)
              }),
            { discard: true }
          )
        ),
        Effect.timeoutOrElse({
          duration: checkTimeout(every),
          orElse: () => Effect.fail(new Error("the leader's lock check did not answer"))
        }),
        Effect.ensuring(Deferred.succeed(firstRound, undefined))
      )
      return yield* Effect.andThen(round, Effect.sleep(every)).pipe(Effect.forever)
    }).pipe(Effect.scoped)

    if (roles.length === 0 && ranks.length === 0) yield* Deferred.succeed(firstRound, undefined)
    else {
      // A failed session ends every leadership of this process (its locks go with the
      // session), then a new one campaigns again after a pause.
      yield* session.pipe(
        Effect.catchCause((cause) =>
          Effect.gen(function* () {
            yield* Deferred.succeed(firstRound, undefined)
            const why = `its connection failed (${messageOf(Cause.squash(cause))})`
            for (const role of [...led.keys()]) yield* stop(role, why)
            // its shared locks went with the session: it cannot tell who is active
            for (const key of outranked.keys()) outranked.set(key, true)
            if (ranks.length > 0) yield* Effect.logWarning(`[pgbus] ranked consumers back off: ${why}`)
            yield* Effect.logDebug(`pgbus: leader campaign: ${Cause.pretty(cause)}`)
            yield* Effect.sleep(every)
          })
        ),
        Effect.forever,
        Effect.forkScoped
      )
    }
    return {
      leading: Effect.sync(() => new Set([...states].flatMap(([role, state]) => (state.leading ? [role] : [])))),
      firstRound: Deferred.await(firstRound),
      whileLeading,
      leadsNow: (role) => states.get(role)?.leading === true,
      outranked: (rank) => outranked.get(rankKey(rank)) !== false
    } satisfies Campaign
  })

/**
 * The boot line's words for who leads each role: `this process`, `host:pid`, or `none yet`;
 * no read when this process leads them all (`leading`: the campaign's roles held now).
 */
export const describeLeaders = (
  leaders: Effect.Effect<ReadonlyArray<LeaderRow>, unknown>,
  processId: string,
  roles: ReadonlyArray<LeaderRole>,
  leading: ReadonlySet<LeaderRole> = new Set()
): Effect.Effect<string> =>
  roles.every((role) => leading.has(role))
    ? Effect.succeed(roles.map((role) => `${role}=this process`).join(" "))
    : leaders.pipe(
        Effect.map((rows) =>
          roles
            .map((role) => {
              const row = rows.find((r) => r.role === role && r.live)
              const who =
                row === undefined
                  ? "none yet"
                  : row.process_id === processId
                    ? "this process"
                    : `${row.host}:${row.pid}`
              return `${role}=${who}`
            })
            .join(" ")
        ),
        Effect.catch(() => Effect.succeed("(could not be read)"))
      )
