import { assert, describe, layer } from "@effect/vitest"
import { Effect, Metric } from "effect"
import { evictionsTotal } from "../src/Streams/Hub.ts"
import * as Streams from "../src/Streams/Streams.ts"
import * as StreamsTest from "./support/streams.ts"
import { connected, eventually, openSse, serve, streamUrl, waitFor } from "./support/streams.ts"

let n = 0
const fresh = (base: string) => `${base}:${n++}`

const evictions = (reason: string) =>
  Effect.map(Metric.value(evictionsTotal.pipe(Metric.withAttributes({ reason }))), (state) => Number(state.count))

layer(
  StreamsTest.layer({
    maxConnections: 8,
    heartbeatInterval: "200 millis",
    idleTimeout: "2 seconds",
    // generous for readers in the same (loaded) process; the stalled client passes them anyway
    writeDeadline: "5 seconds",
    maxBufferedBytes: 2 * 1024 * 1024
  }),
  { excludeTestServices: true, timeout: "30 seconds" }
)("stream limits", (it) => {
  describe("connections", () => {
    it.effect("past maxConnections a connect gets 503 with Retry-After; a freed slot is usable again", () =>
      Effect.gen(function* () {
        const { url } = yield* serve()
        const hub = yield* Streams.StreamHub
        const target = yield* streamUrl(url, fresh("room"))
        const open = []
        while ((yield* hub.count) < 8) open.push(yield* openSse(target))
        const refused = yield* openSse(target)
        assert.strictEqual(refused.status, 503)
        assert.strictEqual(refused.headers["retry-after"], "5")
        open[0]!.close()
        yield* eventually(
          "a slot frees",
          Effect.map(hub.count, (count) => count < 8)
        )
        const again = yield* openSse(target)
        assert.strictEqual(again.status, 200)
        for (const c of [...open, again]) c.close()
        yield* eventually(
          "all closed",
          Effect.map(hub.count, (count) => count === 0)
        )
      })
    )

    it.effect("an idle connection gets heartbeats, then is closed after the idle timeout", () =>
      Effect.gen(function* () {
        const { url } = yield* serve()
        const client = yield* openSse(yield* streamUrl(url, fresh("quiet")))
        yield* connected(client)
        yield* waitFor("two heartbeats", () => client.comments() >= 2, "5 seconds")
        const idleBefore = yield* evictions("idle")
        yield* waitFor("closed when idle", () => client.ended(), "10 seconds")
        assert.isAbove(yield* evictions("idle"), idleBefore)
      })
    )
  })

  describe("write deadline", () => {
    it.effect("a client that stops reading is closed; the others keep receiving every broadcast", () =>
      Effect.gen(function* () {
        const { url } = yield* serve()
        const hub = yield* Streams.StreamHub
        const stream = fresh("feed")
        const target = yield* streamUrl(url, stream)
        const readers = yield* Effect.forEach(Array.from({ length: 5 }), () => openSse(target))
        const stalled = yield* openSse(target)
        yield* Effect.forEach([...readers, stalled], connected, { discard: true })
        stalled.pause()
        const before = (yield* evictions("deadline")) + (yield* evictions("buffer"))
        const payload = "x".repeat(64_000)
        const sentAt: Array<number> = []
        for (let i = 0; i < 200; i++) {
          sentAt.push(performance.now())
          yield* Streams.broadcast(stream, { i, payload })
        }
        yield* waitFor(
          () => `every reader has all 200 (they have ${readers.map((r) => r.broadcasts().length).join(", ")})`,
          () => readers.every((r) => r.broadcasts().length === 200),
          "60 seconds"
        )
        const closed = Effect.map(
          Effect.all([evictions("deadline"), evictions("buffer")]),
          ([deadline, buffer]) => deadline + buffer > before
        )
        yield* eventually("the stalled connection is closed", closed)
        yield* eventually(
          "its request ended",
          Effect.map(hub.count, (count) => count === 5)
        )
        assert.strictEqual(yield* hub.count, 5, "only the readers remain")
        // the readers were not held up: the last broadcast reached each soon after it was sent
        const lags = readers.map((r) => r.broadcasts()[199]!.at - sentAt[199]!)
        assert.isBelow(Math.max(...lags), 10_000, `lags ${lags.map(Math.round).join(", ")} ms`)
        for (const r of readers) {
          const indexes = r.broadcasts().map((f) => (JSON.parse(f.data) as { i: number }).i)
          assert.deepStrictEqual(
            indexes,
            Array.from({ length: 200 }, (_, i) => i)
          )
        }
      })
    )
  })
})
