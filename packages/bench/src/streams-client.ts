/**
 * The client side of bench:streams, run in its own process: opens N SSE connections to one
 * URL, prints `ready` once every one has its `pgbus:connected`, then counts broadcast frames
 * until every connection has `expected` of them and prints one JSON line: the latency of each
 * frame (its arrival minus the `t` its payload carries, both epoch milliseconds on this machine),
 * when the last frame arrived, and the connections that were closed on it.
 *
 * usage: streams-client.ts <url> <connections> <expected frames>
 */
import * as http from "node:http"

const [url, connectionsArg, expectedArg] = process.argv.slice(2)
const CONNECTIONS = Number(connectionsArg)
const EXPECTED = Number(expectedArg)
const now = () => performance.timeOrigin + performance.now()

const latencies: Array<number> = []
let ready = 0
let complete = 0
let closed = 0
let lastAt = 0

const finish = () => {
  const sorted = latencies.sort((a, b) => a - b)
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]
  console.log(
    JSON.stringify({
      frames: sorted.length,
      p50: at(50),
      p99: at(99),
      max: sorted.at(-1),
      lastAt,
      closed
    })
  )
  process.exit(0)
}

setTimeout(() => {
  console.error(`streams-client: timed out with ${complete}/${CONNECTIONS} connections complete`)
  finish()
}, 180_000).unref()

const open = (i: number) =>
  new Promise<void>((resolve) => {
    const request = http.get(url!, { agent: false, headers: { accept: "text/event-stream" } }, (res) => {
      if (res.statusCode !== 200) {
        console.error(`streams-client: connection ${i} got ${res.statusCode}`)
        process.exit(1)
      }
      res.setEncoding("utf8")
      let pending = ""
      let frames = 0
      res.on("data", (chunk: string) => {
        const arrived = now()
        pending += chunk
        const blocks = pending.split("\n\n")
        pending = blocks.pop() ?? ""
        for (const block of blocks) {
          if (block.includes("event: pgbus:connected")) {
            ready++
            if (ready === CONNECTIONS) console.log("ready")
            resolve()
            continue
          }
          const data = block.split("\n").find((line) => line.startsWith("data: "))
          if (data === undefined || block.includes("event: pgbus:")) continue
          const { t } = JSON.parse(data.slice(6)) as { t: number }
          latencies.push(arrived - t)
          lastAt = arrived
          frames++
          if (frames === EXPECTED) {
            complete++
            if (complete === CONNECTIONS) finish()
          }
        }
      })
      res.on("close", () => {
        closed++
      })
    })
    request.on("error", (error) => {
      console.error(`streams-client: connection ${i}: ${error.message}`)
      process.exit(1)
    })
  })

// open them 50 at a time (a burst of 1,000 connects would be a bench of its own)
for (let i = 0; i < CONNECTIONS; i += 50) {
  await Promise.all(Array.from({ length: Math.min(50, CONNECTIONS - i) }, (_, j) => open(i + j)))
}
