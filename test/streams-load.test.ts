/**
 * 1,000 SSE connections on one process (the test's), from a Node client in the same process:
 * each broadcast reaches every connection; fan-out latency (broadcast call to frame parsed by
 * the client) is printed as p50/p99. One client stops reading from the start: the others are
 * not held up by it. `bench:streams` measures the same at more broadcasts per second.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as Streams from "../src/Streams/Streams.ts"
import * as StreamsTest from "./support/streams.ts"
import { eventually, openSse, serve, streamUrl, waitFor } from "./support/streams.ts"

const CONNECTIONS = Number(process.env.STREAMS_TEST_CONNECTIONS ?? 1_000)
const BROADCASTS = 20

const percentile = (xs: ReadonlyArray<number>, p: number): number => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!
}

layer(StreamsTest.layer({ maxConnections: CONNECTIONS + 10 }), { excludeTestServices: true, timeout: "60 seconds" })(
  "stream fan-out",
  (it) => {
    it.effect(`one broadcast reaches ${CONNECTIONS} connections; a client that stops reading holds up nobody`, () =>
      Effect.gen(function* () {
        const { url } = yield* serve()
        const hub = yield* Streams.StreamHub
        const stream = "load:fan-out"
        const target = yield* streamUrl(url, stream)
        const clients = yield* Effect.forEach(Array.from({ length: CONNECTIONS }), () => openSse(target), {
          concurrency: 50
        })
        yield* eventually(
          "all registered",
          Effect.map(hub.count, (count) => count === CONNECTIONS),
          "30 seconds"
        )
        yield* waitFor(
          "all connected",
          () => clients.every((c) => c.events.some((e) => e.event === "pgbus:connected")),
          "30 seconds"
        )
        const stalled = clients[0]!
        stalled.pause()
        const readers = clients.slice(1)

        const sentAt: Array<number> = []
        for (let i = 0; i < BROADCASTS; i++) {
          sentAt.push(performance.now())
          yield* Streams.broadcast(stream, { i, body: "x".repeat(1_000) })
          yield* waitFor(
            `broadcast ${i} everywhere`,
            () => readers.every((c) => c.broadcasts().length > i),
            "20 seconds"
          )
        }
        const latencies: Array<number> = []
        for (const c of readers) {
          const frames = c.broadcasts()
          assert.deepStrictEqual(
            frames.map((f) => (JSON.parse(f.data) as { i: number }).i),
            Array.from({ length: BROADCASTS }, (_, i) => i)
          )
          frames.forEach((f, i) => {
            latencies.push(f.at - sentAt[i]!)
          })
        }
        const p50 = percentile(latencies, 50)
        const p99 = percentile(latencies, 99)
        console.log(
          `streams fan-out: ${CONNECTIONS} connections (1 not reading), ${BROADCASTS} broadcasts, ` +
            `latency from the broadcast call p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms, max ${Math.max(...latencies).toFixed(1)} ms`
        )
        assert.isBelow(p99, 5_000)
      })
    )
  }
)
