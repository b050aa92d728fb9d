import { assert, describe, layer, it as plain } from "@effect/vitest"
import { DateTime, Duration, Effect, Exit, Fiber, Latch, Layer, Metric, Option, Redacted, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { broadcastCount } from "../src/Streams/Broadcaster.ts"
import * as Cursor from "../src/Streams/Cursor.ts"
import { connectionsGauge } from "../src/Streams/Hub.ts"
import * as StreamEvent from "../src/Streams/StreamEvent.ts"
import { StreamSigner, signWith } from "../src/Streams/StreamSigner.ts"
import * as Streams from "../src/Streams/Streams.ts"
import { resolve, StreamsConfig } from "../src/Streams/StreamsConfig.ts"
import * as StreamsTest from "./support/streams.ts"
import { connected, openSse, type Received, serve, streamUrl, waitFor } from "./support/streams.ts"

let n = 0
const fresh = (base: string) => `${base}:${n++}`

const rollback = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.withTransaction(Effect.andThen(effect, Effect.fail("rollback" as const)))
  ).pipe(Effect.catch(() => Effect.void))

const texts = (frames: ReadonlyArray<Received>) => frames.map((f) => (JSON.parse(f.data) as { text: string }).text)

const lastId = (frames: ReadonlyArray<Received>) => frames.findLast((f) => f.id !== undefined)!.id!

/** An authorize hook for tests: `x-user` names the user, `x-role` its role, `x-deny` refuses, `x-fail` fails. */
const authorize: Streams.RoutesOptions<never>["authorize"] = ({ request }) => {
  const h = request.headers
  if (h["x-fail"] !== undefined) return Effect.fail("the session store is down")
  if (h["x-deny"] !== undefined) return Effect.succeed(false)
  if (h["x-user"] === undefined) return Effect.succeed(true)
  return Effect.succeed({ context: { id: h["x-user"], role: h["x-role"] ?? "member" } })
}

const options = {
  filters: { admins: (context: unknown) => (context as { role?: string } | undefined)?.role === "admin" },
  retention: [[/^short:/, "200 millis"]] as const,
  ephemeral: [/^cursor:/]
}

layer(StreamsTest.layer(options), { excludeTestServices: true, timeout: "30 seconds" })("streams", (it) => {
  describe("delivery", () => {
    it.effect("a committed broadcast reaches a subscriber; a rolled-back one never does", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const { url } = yield* serve()
        const stream = fresh("room")
        const client = yield* openSse(yield* streamUrl(url, stream))
        assert.strictEqual(client.status, 200)
        assert.match(String(client.headers["content-type"]), /text\/event-stream/)
        yield* connected(client)

        const durable = broadcastCount.pipe(Metric.withAttributes({ mode: "durable" }))
        const sentBefore = (yield* Metric.value(durable)).count
        assert.isAtLeast((yield* Metric.value(connectionsGauge)).value, 1)
        yield* rollback(Streams.broadcast(stream, { text: "never" }))
        const committed = yield* sql.withTransaction(Streams.broadcast(stream, { text: "hello" }))
        yield* Streams.broadcast(stream, { text: "after" })
        yield* waitFor("two broadcasts", () => client.broadcasts().length >= 2)
        const frames = client.broadcasts()
        assert.deepStrictEqual(texts(frames), ["hello", "after"])
        // the rolled-back broadcast's id stays a hole in the position until it is known gone
        assert.strictEqual(Option.getOrThrow(Cursor.msgIdOf(frames[0]!.id!)), committed.msgId)
        assert.strictEqual(frames[0]!.event, "message")
        // a rolled-back broadcast is counted too: it was sent, its transaction decided
        assert.strictEqual(Number((yield* Metric.value(durable)).count) - Number(sentBefore), 3)
      })
    )

    it.effect("a broadcast in an open transaction is delivered at its commit, not before", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const { url } = yield* serve()
        const stream = fresh("room")
        const client = yield* openSse(yield* streamUrl(url, stream))
        yield* connected(client)
        const open = yield* Latch.make(false)
        const release = yield* Latch.make(false)
        const tx = yield* sql
          .withTransaction(
            Streams.broadcast(stream, { text: "in transaction" }).pipe(
              Effect.andThen(open.open),
              Effect.andThen(release.await)
            )
          )
          .pipe(Effect.forkChild)
        yield* open.await
        // committed by another connection meanwhile: delivered; the open one is not
        yield* Streams.broadcast(stream, { text: "outside" })
        yield* waitFor("the committed one", () => client.broadcasts().length === 1)
        assert.deepStrictEqual(texts(client.broadcasts()), ["outside"])
        yield* release.open
        yield* Fiber.join(tx)
        yield* waitFor("the late commit", () => client.broadcasts().length === 2)
        const frames = client.broadcasts()
        assert.deepStrictEqual(texts(frames), ["outside", "in transaction"])
        // the late commit carries its own (lower) id, and the position after it has no hole
        const [late, early] = [frames[1]!, frames[0]!]
        const lateId = Option.getOrThrow(Cursor.msgIdOf(late.id!))
        const earlyId = Option.getOrThrow(Cursor.msgIdOf(early.id!))
        assert.isBelow(Number(lateId), Number(earlyId))
        assert.isTrue(Cursor.has(Option.getOrThrow(Cursor.parse(late.id!)), lateId))
      })
    )

    it.effect("a typed event carries its name and its Schema-encoded payload", () =>
      Effect.gen(function* () {
        const Shipped = StreamEvent.make(
          "order-shipped",
          Schema.Struct({ orderId: Schema.String, at: Schema.DateTimeUtcFromString })
        )
        const { url } = yield* serve()
        const stream = fresh("orders")
        const client = yield* openSse(yield* streamUrl(url, stream))
        yield* connected(client)
        yield* Shipped.broadcast(stream, { orderId: "o1", at: DateTime.makeUnsafe("2026-12-03T10:00:00.000Z") })
        yield* waitFor("the event", () => client.broadcasts().length === 1)
        const [frame] = client.broadcasts()
        assert.strictEqual(frame!.event, "order-shipped")
        assert.deepStrictEqual(JSON.parse(frame!.data), { orderId: "o1", at: "2026-12-03T10:00:00.000Z" })
      })
    )

    it.effect("broadcasts to other streams do not reach a subscriber", () =>
      Effect.gen(function* () {
        const { url } = yield* serve()
        const [mine, other] = [fresh("room"), fresh("room")]
        const client = yield* openSse(yield* streamUrl(url, mine))
        yield* connected(client)
        yield* Streams.broadcast(other, { text: "other" })
        yield* Streams.broadcast(mine, { text: "mine" })
        yield* waitFor("mine", () => client.broadcasts().length === 1)
        assert.deepStrictEqual(texts(client.broadcasts()), ["mine"])
      })
    )

    it.effect("exclude skips the named connection; everyone else gets the broadcast", () =>
      Effect.gen(function* () {
        const { url } = yield* serve()
        const stream = fresh("room")
        const actor = yield* openSse(yield* streamUrl(url, stream))
        const other = yield* openSse(yield* streamUrl(url, stream))
        yield* Effect.all([connected(actor), connected(other)])
        const { connectionId } = JSON.parse(actor.events.find((e) => e.event === "pgbus:connected")!.data)
        yield* Streams.broadcast(stream, { text: "echo" }, { exclude: connectionId })
        yield* Streams.broadcast(stream, { text: "blank exclude" }, { exclude: " " })
        yield* waitFor("both at the other", () => other.broadcasts().length === 2)
        yield* waitFor("one at the actor", () => actor.broadcasts().length === 1)
        assert.deepStrictEqual(texts(actor.broadcasts()), ["blank exclude"])
      })
    )

    it.effect("visibleTo delivers only to connections whose context passes the filter", () =>
      Effect.gen(function* () {
        const { url } = yield* serve({ routes: { authorize } })
        const stream = fresh("board")
        const admin = yield* openSse(yield* streamUrl(url, stream), { "x-user": "1", "x-role": "admin" })
        const member = yield* openSse(yield* streamUrl(url, stream), { "x-user": "2" })
        const anonymous = yield* openSse(yield* streamUrl(url, stream))
        yield* Effect.all([connected(admin), connected(member), connected(anonymous)])
        yield* Streams.broadcast(stream, { text: "secret" }, { visibleTo: "admins" })
        yield* Streams.broadcast(stream, { text: "unknown filter" }, { visibleTo: "nobodyConfiguredThis" })
        yield* Streams.broadcast(stream, { text: "public" })
        yield* waitFor("public everywhere", () =>
          [admin, member, anonymous].every((c) => c.broadcasts().some((f) => f.data.includes("public")))
        )
        assert.deepStrictEqual(texts(admin.broadcasts()), ["secret", "public"])
        assert.deepStrictEqual(texts(member.broadcasts()), ["public"])
        assert.deepStrictEqual(texts(anonymous.broadcasts()), ["public"])
      })
    )

    it.effect("an ephemeral broadcast is delivered live without an id and never replayed", () =>
      Effect.gen(function* () {
        const { url } = yield* serve()
        const stream = fresh("cursor")
        const client = yield* openSse(yield* streamUrl(url, stream))
        yield* connected(client)
        const durable = yield* Streams.broadcast(stream, { text: "durable" }, { durable: true })
        const ephemeral = yield* Streams.broadcast(stream, { text: "ephemeral" })
        yield* rollback(Streams.broadcast(stream, { text: "rolled back" }))
        assert.strictEqual(durable.mode, "durable")
        assert.strictEqual(ephemeral.mode, "ephemeral")
        yield* waitFor("both", () => client.broadcasts().length === 2)
        const byText = new Map(client.broadcasts().map((f) => [JSON.parse(f.data).text as string, f]))
        assert.strictEqual(byText.get("ephemeral")!.id, undefined)
        assert.isDefined(byText.get("durable")!.id)

        const again = yield* openSse(yield* streamUrl(url, stream, { replay: "all" }))
        yield* connected(again)
        assert.deepStrictEqual(texts(again.broadcasts()), ["durable"])
      })
    )

    it.effect("coalesce sends only the last broadcast of a target per window; a rolled-back one never", () =>
      Effect.gen(function* () {
        const { url } = yield* serve()
        const stream = fresh("room")
        const client = yield* openSse(yield* streamUrl(url, stream))
        yield* connected(client)
        yield* rollback(Streams.broadcast(stream, { text: "rolled back" }, { coalesce: 100, target: "progress" }))
        for (let i = 0; i < 20; i++) {
          yield* Streams.broadcast(stream, { text: `p${i}` }, { coalesce: 100, target: "progress" })
        }
        yield* Streams.broadcast(stream, { text: "other target" }, { coalesce: true, target: "title" })
        yield* waitFor("the last progress", () => client.broadcasts().some((f) => f.data.includes("p19")))
        yield* waitFor("the other target", () => client.broadcasts().some((f) => f.data.includes("other")))
        const progress = texts(client.broadcasts()).filter((t) => t.startsWith("p"))
        assert.isAtMost(progress.length, 3, `coalesced: ${progress.join(",")}`)
        assert.strictEqual(progress.at(-1), "p19")
        assert.notInclude(texts(client.broadcasts()), "rolled back")
      })
    )
  })

  describe("replay", () => {
    it.effect("a client resuming with Last-Event-ID gets what it missed, in order, once", () =>
      Effect.gen(function* () {
        const { url } = yield* serve()
        const stream = fresh("room")
        const first = yield* openSse(yield* streamUrl(url, stream))
        yield* connected(first)
        for (const text of ["a", "b", "c"]) yield* Streams.broadcast(stream, { text })
        yield* waitFor("three", () => first.broadcasts().length === 3)
        first.close()
        for (const text of ["d", "e"]) yield* Streams.broadcast(stream, { text })
        const second = yield* openSse(yield* streamUrl(url, stream), { "last-event-id": lastId(first.broadcasts()) })
        yield* connected(second)
        yield* Streams.broadcast(stream, { text: "f" })
        yield* waitFor("three more", () => second.broadcasts().length === 3)
        assert.deepStrictEqual(texts(second.broadcasts()), ["d", "e", "f"])
      })
    )

    it.effect("a late commit missed before a reconnect is replayed to the resuming client", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const { url } = yield* serve()
        const stream = fresh("room")
        const first = yield* openSse(yield* streamUrl(url, stream))
        yield* connected(first)
        const open = yield* Latch.make(false)
        const release = yield* Latch.make(false)
        const tx = yield* sql
          .withTransaction(
            Streams.broadcast(stream, { text: "late" }).pipe(Effect.andThen(open.open), Effect.andThen(release.await))
          )
          .pipe(Effect.forkChild)
        yield* open.await
        yield* Streams.broadcast(stream, { text: "early" })
        yield* waitFor("early", () => first.broadcasts().length === 1)
        const position = first.broadcasts()[0]!.id!
        first.close()
        yield* release.open
        yield* Fiber.join(tx)
        const second = yield* openSse(yield* streamUrl(url, stream), { "last-event-id": position })
        yield* connected(second)
        yield* Streams.broadcast(stream, { text: "next" })
        yield* waitFor("two", () => second.broadcasts().length === 2)
        assert.deepStrictEqual(texts(second.broadcasts()), ["late", "next"])
      })
    )

    it.effect("replay=N gives the last N, replay=all everything retained, after= what followed the watermark", () =>
      Effect.gen(function* () {
        const { url } = yield* serve()
        const stream = fresh("chat")
        for (const text of ["1", "2", "3", "4"]) yield* Streams.broadcast(stream, { text })
        const watermark = yield* Streams.watermark
        yield* Streams.broadcast(stream, { text: "5" })
        const last2 = yield* openSse(yield* streamUrl(url, stream, { replay: "2" }))
        const all = yield* openSse(yield* streamUrl(url, stream, { replay: "all" }))
        const after = yield* openSse(yield* streamUrl(url, stream, { after: watermark }))
        const none = yield* openSse(yield* streamUrl(url, stream))
        yield* Effect.all([connected(last2), connected(all), connected(after), connected(none)])
        yield* Streams.broadcast(stream, { text: "marker" })
        yield* waitFor("the marker everywhere", () =>
          [last2, all, after, none].every((c) => c.broadcasts().some((f) => f.data.includes("marker")))
        )
        for (const c of [last2, all, after, none]) c.close()
        const without = (c: typeof all) => texts(c.broadcasts()).filter((t) => t !== "marker")
        assert.deepStrictEqual(without(last2), ["4", "5"])
        assert.deepStrictEqual(without(all), ["1", "2", "3", "4", "5"])
        assert.deepStrictEqual(without(after), ["5"])
        assert.deepStrictEqual(without(none), [])
        // the connected event carries the position to resume from
        const position = JSON.parse(all.events.find((e) => e.event === "pgbus:connected")!.data).position
        assert.isTrue(Option.isSome(Cursor.parse(position)))
      })
    )

    it.effect("a client resuming from before what retention deleted gets pgbus:gap", () =>
      Effect.gen(function* () {
        const { url } = yield* serve()
        const stream = fresh("short")
        const before = yield* Streams.watermark
        for (const text of ["x", "y"]) yield* Streams.broadcast(stream, { text })
        const retention = yield* Streams.StreamRetention
        // retention 200 ms: swept once the database's clock has passed it
        let deleted = 0
        yield* StreamsTest.eventually(
          "the sweep deletes them",
          Effect.map(retention.runOnce, (r) => {
            deleted += r.streams.find((s) => s.stream === stream)?.deleted ?? 0
            return deleted >= 2
          })
        )
        yield* Streams.broadcast(stream, { text: "z" })
        const client = yield* openSse(yield* streamUrl(url, stream, { after: before }))
        yield* connected(client)
        yield* waitFor("z", () => client.broadcasts().length === 1)
        const gap = client.events.find((e) => e.event === "pgbus:gap")
        assert.isDefined(gap)
        assert.strictEqual(JSON.parse(gap!.data).cursor, before)
        assert.strictEqual(client.events[0]!.event, "pgbus:gap", "the gap comes first")
        assert.deepStrictEqual(texts(client.broadcasts()), ["z"])

        const current = yield* openSse(yield* streamUrl(url, stream, { after: yield* Streams.watermark }))
        yield* connected(current)
        assert.isUndefined(current.events.find((e) => e.event === "pgbus:gap"))
      })
    )
  })

  describe("bad input", () => {
    it.effect("an invalid stream name fails with InvalidStreamName and sends nothing", () =>
      Effect.gen(function* () {
        for (const name of ["", "room 42", "line\nbreak", "x".repeat(201), "café"]) {
          const exit = yield* Effect.exit(Streams.broadcast(name, { text: "x" }))
          assert.isTrue(Exit.isFailure(exit))
          assert.strictEqual(
            Exit.isFailure(exit) && Option.getOrThrow(Exit.findErrorOption(exit))._tag,
            "InvalidStreamName"
          )
          const signed = yield* Effect.flip(Streams.signedName(name))
          assert.strictEqual(signed._tag, "InvalidStreamName")
        }
      })
    )

    it.effect("an oversized payload fails with BroadcastTooLarge, durable or ephemeral", () =>
      Effect.gen(function* () {
        const durable = yield* Effect.flip(Streams.broadcast(fresh("room"), { text: "x".repeat(140_000) }))
        assert.strictEqual(durable._tag, "BroadcastTooLarge")
        const ephemeral = yield* Effect.flip(
          Streams.broadcast(fresh("room"), { text: "x".repeat(8_000) }, { durable: false })
        )
        assert.strictEqual(ephemeral._tag, "BroadcastTooLarge")
        assert.strictEqual(ephemeral._tag === "BroadcastTooLarge" && ephemeral.limit, 7_900)
      })
    )

    it.effect("bad options and payloads fail with InvalidBroadcast", () =>
      Effect.gen(function* () {
        const stream = fresh("room")
        const cases: ReadonlyArray<[unknown, Streams.BroadcastOptions]> = [
          [{ n: 1n }, {}],
          [undefined, {}],
          // the input rules: a function, a NaN, a NUL, a lone surrogate (ephemeral ones too)
          [{ f: () => 1 }, {}],
          [{ n: Number.NaN }, {}],
          ["a\u0000b", {}],
          [{ s: "a\ud800" }, { durable: false }],
          [{ ok: 1 }, { event: "pgbus:connected" }],
          [{ ok: 1 }, { event: "has space" }],
          [{ ok: 1 }, { coalesce: true }],
          [{ ok: 1 }, { coalesce: -5, target: "t" }],
          [{ ok: 1 }, { exclude: "not an id!" }],
          [{ ok: 1 }, { visibleTo: "drop table" }]
        ]
        for (const [data, o] of cases) {
          const error = yield* Effect.flip(Streams.broadcast(stream, data, o))
          assert.strictEqual(error._tag, "InvalidBroadcast", JSON.stringify(o))
        }
        const Typed = StreamEvent.make("typed", Schema.Struct({ count: Schema.Int }))
        const encode = yield* Effect.flip(Typed.broadcast(stream, { count: 1.5 }))
        assert.strictEqual(encode._tag, "InvalidBroadcast")
        assert.throws(() => StreamEvent.make("pgbus:mine", Schema.String))
      })
    )

    it.effect("the endpoint refuses a forged, unsigned or retired signature with 403 and bad parameters with 400", () =>
      Effect.gen(function* () {
        const { url } = yield* serve({ routes: { authorize } })
        const hub = yield* Streams.StreamHub
        const stream = fresh("room")
        const good = yield* Streams.signedName(stream)
        const other = yield* Streams.signedName(fresh("room"))
        const [body, mac] = good.split(".") as [string, string]
        const forged = `${Buffer.from("admin:all").toString("base64url")}.${mac}`
        const spliced = `${body}.${other.split(".")[1]}`
        const retired = signWith(Redacted.make("an-old-secret-no-longer-listed"), stream)
        const before = yield* hub.count
        const status = (query: string, headers: Record<string, string> = {}) =>
          Effect.map(openSse(`${url}/pgbus/streams?${query}`, headers), (c) => c.status)
        assert.strictEqual(yield* status(`stream=${forged}`), 403)
        assert.strictEqual(yield* status(`stream=${spliced}`), 403)
        assert.strictEqual(yield* status(`stream=${retired}`), 403)
        assert.strictEqual(yield* status(`stream=${encodeURIComponent(stream)}`), 403)
        assert.strictEqual(yield* status(""), 400)
        assert.strictEqual(yield* status(`stream=${good}&replay=lots`), 400)
        assert.strictEqual(yield* status(`stream=${good}&replay=0`), 400)
        assert.strictEqual(yield* status(`stream=${good}&seat=${"s".repeat(100)}`), 400)
        assert.strictEqual(yield* status(`stream=${good}&after=abc`), 400)
        assert.strictEqual(yield* status(`stream=${good}`, { "last-event-id": "12~99" }), 400)
        assert.strictEqual(yield* status(`stream=${good}`, { "last-event-id": "drop table" }), 400)
        assert.strictEqual(yield* status(`stream=${good}`, { "x-deny": "1" }), 403)
        assert.strictEqual(yield* status(`stream=${good}`, { "x-fail": "1" }), 500)
        assert.strictEqual(yield* hub.count, before, "no refused request holds a connection")
        assert.strictEqual(yield* status(`stream=${good}`), 200)
      })
    )

    it.effect("a name signed with a rotated-out secret is accepted while the secret is still listed", () =>
      Effect.gen(function* () {
        const { verifyWith } = yield* Effect.promise(() => import("../src/Streams/StreamSigner.ts"))
        const old = Redacted.make("the-old-secret-0123456789")
        const current = Redacted.make(StreamsTest.SECRET)
        const signed = signWith(old, "room:7")
        assert.strictEqual(verifyWith([current, old], signed), "room:7")
        assert.isUndefined(verifyWith([current], signed))
        assert.strictEqual(verifyWith([current, old], signWith(current, "room:7")), "room:7")
      })
    )
  })
})

describe("configuration", () => {
  plain.effect("defaults are the seed's; the environment overrides them, code overrides both", () =>
    Effect.gen(function* () {
      const defaults = yield* resolve({})
      assert.strictEqual(defaults.queue, "streams")
      assert.strictEqual(Duration.toMillis(defaults.defaultRetention), 300_000)
      assert.strictEqual(Duration.toMillis(defaults.heartbeatInterval), 15_000)
      assert.strictEqual(Duration.toMillis(defaults.idleTimeout), 3_600_000)
      assert.strictEqual(Duration.toMillis(defaults.writeDeadline), 250)
      assert.strictEqual(Duration.toMillis(defaults.presenceTtl), 60_000)
      assert.strictEqual(defaults.maxConnections, 2000)
      const env = yield* resolve(
        { maxConnections: 10 },
        {
          heartbeatInterval: "5",
          writeDeadline: "500 millis",
          maxConnections: "99",
          secrets: "newest-secret-0123456789, older-secret-0123456789"
        }
      )
      assert.strictEqual(Duration.toMillis(env.heartbeatInterval), 5_000)
      assert.strictEqual(Duration.toMillis(env.writeDeadline), 500)
      assert.strictEqual(env.maxConnections, 10)
      assert.deepStrictEqual(env.secrets.map(Redacted.value), ["newest-secret-0123456789", "older-secret-0123456789"])
    })
  )

  plain.effect("a bad value fails with a ConfigurationError naming the key", () =>
    Effect.gen(function* () {
      const cases: ReadonlyArray<[Streams.StreamsOptions, string]> = [
        [{ maxConnections: 0 }, "streams.maxConnections"],
        [{ queue: "Bad-Name" }, "streams.queue"],
        [{ secrets: ["short"] }, "streams.secrets"],
        [{ heartbeatInterval: "0 millis" }, "streams.heartbeatInterval"],
        [{ retention: [[/^chat:/, "-1 seconds"]] }, "streams.retention"],
        [{ filters: { admins: "yes" as unknown as () => boolean } }, "streams.filters.admins"],
        [{ presence: { member: 7 as unknown as () => undefined } }, "streams.presence.member"]
      ]
      for (const [options, key] of cases) {
        const error = yield* Effect.flip(resolve(options))
        assert.strictEqual(error._tag, "ConfigurationError")
        assert.strictEqual(error.key, key, JSON.stringify(options))
      }
      const unsigned = yield* Effect.flip(
        Layer.build(StreamSigner.layer.pipe(Layer.provide(StreamsConfig.layerWithoutEnvironment({})))).pipe(
          Effect.scoped
        )
      )
      assert.strictEqual(unsigned.key, "streams.secrets")
    })
  )
})
