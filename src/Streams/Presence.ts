/**
 * Presence: who is on a stream. A member joins by hand (`join`, one row per member) or, on a
 * stream matching `presence.patterns`, with each SSE connection whose context names a member
 * (one row per connection: a seat, so two tabs of one user are two rows). Every row lives a ttl
 * past its last heartbeat: this process touches its seats on each heartbeat, so the seats of a
 * process that died expire on their own. Each join and leave (an expiry too) is announced to
 * the stream as an ephemeral `pgbus:presence` event and passed to `presence.onChange`.
 *
 * @since 0.1.0
 */
import { Context, Duration, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../Config.ts"
import { statementNow, toDatabaseError } from "../Database.ts"
import { StreamBroadcaster } from "./Broadcaster.ts"
import * as StreamName from "./StreamName.ts"
import { type PresenceChange, type PresenceMemberInput, presenceTtlOf, StreamsConfig } from "./StreamsConfig.ts"
import { InvalidPresence, type PresenceError } from "./StreamsError.ts"
import { makeStreamsSql, type PresenceRow } from "./StreamsSql.ts"

/** The event presence changes are announced with. */
export const PRESENCE_EVENT = "pgbus:presence"

/**
 * A member present on a stream.
 *
 * @category models
 */
export interface PresenceMember {
  readonly memberId: string
  /** The SSE connection of a seat; undefined for a member joined by hand. */
  readonly connectionId: string | undefined
  readonly seat: string | undefined
  readonly metadata: Readonly<Record<string, unknown>>
  readonly joinedAt: Date
  readonly lastSeenAt: Date
}

const MemberId = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(200))
const Metadata = Schema.Record(Schema.String, Schema.Unknown)
const JoinInput = Schema.Struct({
  memberId: MemberId,
  metadata: Schema.optionalKey(Schema.UndefinedOr(Metadata)),
  ttl: Schema.optionalKey(Schema.UndefinedOr(Schema.Unknown))
})
const decodeJoin = Schema.decodeUnknownEffect(JoinInput)
const decodeMemberId = Schema.decodeUnknownEffect(MemberId)

const isRecord = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

const toMember = (row: PresenceRow): PresenceMember => ({
  memberId: row.member_id,
  connectionId: row.connection_id === "" ? undefined : row.connection_id,
  seat: row.seat ?? undefined,
  metadata: isRecord(row.metadata) ? row.metadata : {},
  joinedAt: row.joined_at,
  lastSeenAt: row.last_seen_at
})

const changeOf = (type: "join" | "leave", member: PresenceMember, expired: boolean): PresenceChange => ({
  type,
  memberId: member.memberId,
  connectionId: member.connectionId,
  seat: member.seat,
  metadata: member.metadata,
  expired
})

/**
 * The presence service.
 *
 * @category services
 */
export class StreamPresence extends Context.Service<
  StreamPresence,
  {
    /** Joins (or refreshes) a member by hand; it lives `ttl` (default the stream's) unless joined again. */
    readonly join: (
      stream: string,
      member: {
        readonly memberId: string
        readonly metadata?: Readonly<Record<string, unknown>> | undefined
        readonly ttl?: Duration.Input | undefined
      }
    ) => Effect.Effect<void, PresenceError>
    /** Removes a member joined by hand; false if it was not there. */
    readonly leave: (stream: string, memberId: string) => Effect.Effect<boolean, PresenceError>
    /** The members present now: one per member joined by hand, one per seat. */
    readonly members: (stream: string) => Effect.Effect<ReadonlyArray<PresenceMember>, PresenceError>
    /** How many `members` returns. */
    readonly count: (stream: string) => Effect.Effect<number, PresenceError>
    /** Seats a connection (connection-driven presence); this process heartbeats it until `unseat`. */
    readonly seat: (
      stream: string,
      member: PresenceMemberInput,
      connectionId: string,
      seat: string | undefined
    ) => Effect.Effect<void, PresenceError>
    /** Removes a connection's seat. */
    readonly unseat: (connectionId: string) => Effect.Effect<void, PresenceError>
    /** Deletes expired members (announcing each leave); returns how many. */
    readonly expire: Effect.Effect<number, PresenceError>
    /** Heartbeats this process's seats now (tests; done every heartbeat interval). */
    readonly touch: Effect.Effect<void, PresenceError>
  }
>()("effect-pgbus/StreamPresence") {
  /** Presence, with this process's heartbeat and expiry loop. */
  static readonly layer: Layer.Layer<
    StreamPresence,
    never,
    StreamsConfig | PgBusConfig | SqlClient.SqlClient | StreamBroadcaster
  > = Layer.effect(
    StreamPresence,
    Effect.gen(function* () {
      const config = yield* StreamsConfig
      const pgbus = yield* PgBusConfig
      const sql = yield* SqlClient.SqlClient
      const broadcaster = yield* StreamBroadcaster
      const statements = makeStreamsSql(sql, pgbus.schema)
      const seats = new Set<string>()

      const announce = (stream: string, change: PresenceChange) =>
        Effect.gen(function* () {
          yield* broadcaster
            .announce(stream, PRESENCE_EVENT, {
              type: change.type,
              memberId: change.memberId,
              connectionId: change.connectionId ?? null,
              seat: change.seat ?? null,
              metadata: change.metadata,
              expired: change.expired
            })
            .pipe(Effect.catchCause((cause) => Effect.logWarning("pgbus streams: announcing presence failed", cause)))
          const onChange = config.presenceOnChange
          if (onChange !== undefined) {
            yield* Effect.suspend(() => onChange(stream, change)).pipe(
              Effect.catchCause((cause) => Effect.logWarning("pgbus streams: presence onChange failed", cause))
            )
          }
        })

      const ttlMs = (stream: string, input: unknown) => {
        if (input === undefined) return Effect.succeed(Duration.toMillis(presenceTtlOf(config, stream)))
        const d = Duration.fromInput(input as Duration.Input)
        return d._tag === "Some" && Duration.isPositive(d.value) && Duration.isFinite(d.value)
          ? Effect.succeed(Duration.toMillis(d.value))
          : Effect.fail(new InvalidPresence({ stream, reason: "ttl must be a positive, finite duration" }))
      }

      const upsert = (
        stream: string,
        member: { readonly memberId: string; readonly metadata: Readonly<Record<string, unknown>> },
        connectionId: string,
        seat: string | undefined,
        ttl: number
      ) =>
        Effect.gen(function* () {
          const metadata = JSON.stringify(member.metadata)
          const now = yield* statementNow
          const [row] = yield* statements
            .presenceUpsert(
              { stream, memberId: member.memberId, connectionId, seat: seat ?? null, metadata, ttlMs: ttl },
              now
            )
            .pipe(Effect.mapError(toDatabaseError(`join presence of ${stream}`)))
          if (row?.inserted === true) {
            yield* announce(stream, {
              type: "join",
              memberId: member.memberId,
              connectionId: connectionId === "" ? undefined : connectionId,
              seat,
              metadata: member.metadata,
              expired: false
            })
          }
        })

      const join = (
        stream: string,
        member: {
          readonly memberId: string
          readonly metadata?: Readonly<Record<string, unknown>> | undefined
          readonly ttl?: Duration.Input | undefined
        }
      ) =>
        Effect.gen(function* () {
          const name = yield* StreamName.validate(stream)
          const input = yield* decodeJoin(member).pipe(
            Effect.mapError((e) => new InvalidPresence({ stream: name, reason: e.message }))
          )
          const ttl = yield* ttlMs(name, input.ttl)
          yield* upsert(name, { memberId: input.memberId, metadata: input.metadata ?? {} }, "", undefined, ttl)
        })

      const leave = (stream: string, memberId: string) =>
        Effect.gen(function* () {
          const name = yield* StreamName.validate(stream)
          const id = yield* decodeMemberId(memberId).pipe(
            Effect.mapError((e) => new InvalidPresence({ stream: name, reason: `memberId ${e.message}` }))
          )
          const rows = yield* statements
            .presenceDelete(name, id, "")
            .pipe(Effect.mapError(toDatabaseError(`leave presence of ${name}`)))
          for (const row of rows) yield* announce(name, changeOf("leave", toMember(row), false))
          return rows.length > 0
        })

      const members = (stream: string) =>
        Effect.gen(function* () {
          const name = yield* StreamName.validate(stream)
          const now = yield* statementNow
          const rows = yield* statements
            .presenceList(name, now)
            .pipe(Effect.mapError(toDatabaseError(`list presence of ${name}`)))
          return rows.map(toMember)
        })

      const count = (stream: string) =>
        Effect.gen(function* () {
          const name = yield* StreamName.validate(stream)
          const now = yield* statementNow
          const [row] = yield* statements
            .presenceCount(name, now)
            .pipe(Effect.mapError(toDatabaseError(`count presence of ${name}`)))
          return row?.n ?? 0
        })

      const seat = (stream: string, member: PresenceMemberInput, connectionId: string, seatId: string | undefined) =>
        Effect.gen(function* () {
          const id = yield* decodeMemberId(member.id).pipe(
            Effect.mapError((e) => new InvalidPresence({ stream, reason: `member id ${e.message}` }))
          )
          const metadata = member.metadata ?? {}
          if (!isRecord(metadata)) return yield* new InvalidPresence({ stream, reason: "metadata must be an object" })
          seats.add(connectionId)
          yield* upsert(stream, { memberId: id, metadata }, connectionId, seatId, yield* ttlMs(stream, undefined))
        })

      const unseat = (connectionId: string) =>
        Effect.gen(function* () {
          if (!seats.delete(connectionId)) return
          const rows = yield* statements
            .presenceDeleteConnections([connectionId])
            .pipe(Effect.mapError(toDatabaseError("leave presence")))
          for (const row of rows) yield* announce(row.stream, changeOf("leave", toMember(row), false))
        })

      const expire = Effect.gen(function* () {
        const now = yield* statementNow
        const rows = yield* statements
          .presenceDeleteExpired(1_000, now)
          .pipe(Effect.mapError(toDatabaseError("expire presence")))
        for (const row of rows) yield* announce(row.stream, changeOf("leave", toMember(row), true))
        return rows.length
      })

      const touch = Effect.suspend(() => {
        if (seats.size === 0) return Effect.void
        return Effect.flatMap(statementNow, (now) =>
          statements.presenceTouch([...seats], now).pipe(Effect.mapError(toDatabaseError("touch presence")))
        ).pipe(Effect.asVoid)
      })

      yield* Effect.gen(function* () {
        while (true) {
          yield* Effect.sleep(config.heartbeatInterval)
          yield* Effect.all([touch, expire], { discard: true }).pipe(
            Effect.catchCause((cause) => Effect.logWarning("pgbus streams: presence heartbeat failed", cause))
          )
        }
      }).pipe(Effect.forkScoped)

      // a process that stops takes its seats with it (a killed one leaves them to expire)
      yield* Effect.addFinalizer(() =>
        Effect.suspend(() => {
          const ids = [...seats]
          seats.clear()
          if (ids.length === 0) return Effect.void
          return statements.presenceDeleteConnections(ids).pipe(
            Effect.flatMap((rows) =>
              Effect.forEach(rows, (row) => announce(row.stream, changeOf("leave", toMember(row), false)), {
                discard: true
              })
            ),
            Effect.ignore
          )
        })
      )

      return StreamPresence.of({ join, leave, members, count, seat, unseat, expire, touch })
    })
  )
}
