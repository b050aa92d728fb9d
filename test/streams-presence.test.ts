import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as Streams from "../src/Streams/Streams.ts"
import type { PresenceChange } from "../src/Streams/StreamsConfig.ts"
import * as StreamsTest from "./support/streams.ts"
import { connected, eventually, openSse, type SseClient, serve, streamUrl, waitFor } from "./support/streams.ts"

let n = 0
const fresh = (base: string) => `${base}:${n++}`

const changes: Array<{ stream: string; change: PresenceChange }> = []

/** `x-user` names the connection's member; without it the connection is anonymous. */
const authorize: Streams.RoutesOptions<never>["authorize"] = ({ request }) => {
  const user = request.headers["x-user"]
  return Effect.succeed(user === undefined ? true : { context: { id: user, metadata: { name: `user ${user}` } } })
}

const presenceEvents = (client: SseClient) =>
  client.events.filter((e) => e.event === "pgbus:presence").map((e) => JSON.parse(e.data) as Record<string, unknown>)

layer(
  StreamsTest.layer({
    heartbeatInterval: "300 millis",
    presence: {
      patterns: [/^room:/, /^brief:/],
      ttl: "5 seconds",
      ttls: [[/^brief:/, "3 seconds"]],
      onChange: (stream, change) => Effect.sync(() => changes.push({ stream, change }))
    }
  }),
  { excludeTestServices: true, timeout: "30 seconds" }
)("presence", (it) => {
  describe("by hand", () => {
    it.effect("join, members, count and leave; each change is announced to the stream once", () =>
      Effect.gen(function* () {
        const { url } = yield* serve()
        const stream = fresh("lobby")
        const watcher = yield* openSse(yield* streamUrl(url, stream))
        yield* connected(watcher)
        const presence = Streams.presence(stream)
        yield* presence.join({ memberId: "7", metadata: { name: "Ada" } })
        yield* presence.join({ memberId: "7", metadata: { name: "Ada L." } })
        yield* presence.join({ memberId: "8" })
        const members = yield* presence.members
        assert.deepStrictEqual(
          members.map((m) => [m.memberId, m.metadata, m.connectionId]),
          [
            ["7", { name: "Ada L." }, undefined],
            ["8", {}, undefined]
          ]
        )
        assert.strictEqual(yield* presence.count, 2)
        assert.isTrue(yield* presence.leave("7"))
        assert.isFalse(yield* presence.leave("7"))
        assert.strictEqual(yield* presence.count, 1)
        yield* waitFor("three announcements", () => presenceEvents(watcher).length === 3)
        assert.deepStrictEqual(
          presenceEvents(watcher).map((e) => [e.type, e.memberId]),
          [
            ["join", "7"],
            ["join", "8"],
            ["leave", "7"]
          ]
        )
      })
    )

    it.effect("a member past its ttl is gone from members and its expiry is announced as a leave", () =>
      Effect.gen(function* () {
        const { url } = yield* serve()
        const stream = fresh("brief")
        const watcher = yield* openSse(yield* streamUrl(url, stream))
        yield* connected(watcher)
        const presence = yield* Streams.StreamPresence
        yield* presence.join(stream, { memberId: "gone", ttl: "300 millis" })
        yield* presence.join(stream, { memberId: "stays", ttl: "1 minute" })
        yield* eventually(
          "the short one expires",
          Effect.map(presence.members(stream), (m) => m.length === 1)
        )
        yield* eventually(
          "swept",
          Effect.map(presence.expire, () => true)
        )
        yield* waitFor("the expiry is announced", () => presenceEvents(watcher).some((e) => e.type === "leave"))
        const leave = presenceEvents(watcher).find((e) => e.type === "leave")!
        assert.strictEqual(leave.memberId, "gone")
        assert.strictEqual(leave.expired, true)
        assert.deepStrictEqual(
          (yield* presence.members(stream)).map((m) => m.memberId),
          ["stays"]
        )
      })
    )

    it.effect("bad input fails with a typed error and writes nothing", () =>
      Effect.gen(function* () {
        const presence = yield* Streams.StreamPresence
        const stream = fresh("lobby")
        const cases = [
          presence.join(stream, { memberId: "" }),
          presence.join(stream, { memberId: "x".repeat(300) }),
          presence.join(stream, { memberId: "7", metadata: [1, 2] as unknown as Record<string, unknown> }),
          presence.join(stream, { memberId: "7", ttl: "-1 seconds" }),
          presence.leave(stream, "")
        ]
        for (const call of cases) {
          const error = yield* Effect.flip(call)
          assert.strictEqual(error._tag, "InvalidPresence")
        }
        const badName = yield* Effect.flip(presence.join("no spaces allowed", { memberId: "7" }))
        assert.strictEqual(badName._tag, "InvalidStreamName")
        assert.strictEqual(yield* presence.count(stream), 0)
      })
    )
  })

  describe("connection-driven", () => {
    it.effect("two tabs join; one closes and the other sees it leave within a second", () =>
      Effect.gen(function* () {
        const { url } = yield* serve({ routes: { authorize } })
        const stream = fresh("room")
        changes.length = 0
        const tabA = yield* openSse(yield* streamUrl(url, stream, { seat: "seat-a" }), { "x-user": "alice" })
        yield* connected(tabA)
        const tabB = yield* openSse(yield* streamUrl(url, stream, { seat: "seat-b" }), { "x-user": "bob" })
        yield* connected(tabB)
        const members = yield* Streams.presence(stream).members
        assert.deepStrictEqual(members.map((m) => [m.memberId, m.seat, m.metadata]).sort(), [
          ["alice", "seat-a", { name: "user alice" }],
          ["bob", "seat-b", { name: "user bob" }]
        ])
        const aliceConnection = JSON.parse(tabA.events.find((e) => e.event === "pgbus:connected")!.data).connectionId
        assert.strictEqual(members.find((m) => m.memberId === "alice")!.connectionId, aliceConnection)

        tabA.close()
        const closedAt = performance.now()
        yield* waitFor("bob sees alice leave", () =>
          presenceEvents(tabB).some((e) => e.type === "leave" && e.memberId === "alice")
        )
        const leftAfter = performance.now() - closedAt
        assert.isBelow(leftAfter, 1_000, `left after ${Math.round(leftAfter)} ms`)
        assert.deepStrictEqual(
          (yield* Streams.presence(stream).members).map((m) => m.memberId),
          ["bob"]
        )
        const mine = changes.filter((c) => c.stream === stream).map((c) => [c.change.type, c.change.memberId])
        assert.deepStrictEqual(mine, [
          ["join", "alice"],
          ["join", "bob"],
          ["leave", "alice"]
        ])
      })
    )

    it.effect("two tabs of one member are two seats: closing one keeps the member present", () =>
      Effect.gen(function* () {
        const { url } = yield* serve({ routes: { authorize } })
        const stream = fresh("room")
        const one = yield* openSse(yield* streamUrl(url, stream, { seat: "one" }), { "x-user": "carol" })
        const two = yield* openSse(yield* streamUrl(url, stream, { seat: "two" }), { "x-user": "carol" })
        yield* Effect.all([connected(one), connected(two)])
        assert.strictEqual(yield* Streams.presence(stream).count, 2)
        one.close()
        yield* eventually(
          "one seat left",
          Effect.map(Streams.presence(stream).count, (count) => count === 1)
        )
        assert.deepStrictEqual(
          (yield* Streams.presence(stream).members).map((m) => [m.memberId, m.seat]),
          [["carol", "two"]]
        )
      })
    )

    it.effect("an anonymous connection, or a stream outside the patterns, takes no seat", () =>
      Effect.gen(function* () {
        const { url } = yield* serve({ routes: { authorize } })
        const room = fresh("room")
        const lobby = fresh("lobby")
        const anonymous = yield* openSse(yield* streamUrl(url, room))
        const outside = yield* openSse(yield* streamUrl(url, lobby), { "x-user": "dave" })
        assert.strictEqual(outside.status, 200)
        yield* Effect.all([connected(anonymous), connected(outside)])
        assert.strictEqual(yield* Streams.presence(room).count, 0)
        assert.strictEqual(yield* Streams.presence(lobby).count, 0)
      })
    )

    it.effect("a live seat is kept by heartbeats; a seat no process heartbeats (a dead one's) expires", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const { url } = yield* serve({ routes: { authorize } })
        // brief:* seats live 3 s past their last heartbeat (every 300 ms here)
        const stream = fresh("brief")
        const live = yield* openSse(yield* streamUrl(url, stream), { "x-user": "erin" })
        yield* connected(live)
        // a seat of another process that was killed: nobody heartbeats it
        yield* sql`INSERT INTO pgbus.stream_presence
            (stream, member_id, connection_id, seat, metadata, joined_at, last_seen_at, ttl_ms, expires_at)
          VALUES (${stream}, 'ghost', 'dead-process-connection', NULL, '{}', now(), now(), 1000, now() + interval '1 second')`
        assert.strictEqual(yield* Streams.presence(stream).count, 2)
        yield* waitFor("the ghost's expiry is announced", () =>
          presenceEvents(live).some((e) => e.type === "leave" && e.memberId === "ghost" && e.expired === true)
        )
        // the live seat outlives its ttl, heartbeat after heartbeat
        const until = performance.now() + 4_000
        while (performance.now() < until) {
          assert.deepStrictEqual(
            (yield* Streams.presence(stream).members).map((m) => m.memberId),
            ["erin"]
          )
          yield* Effect.sleep("100 millis")
        }
      })
    )
  })
})
