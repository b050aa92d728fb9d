/**
 * The client side of bench:streams, run in its own process: opens N SSE connections to one
 * URL, prints `ready` once every one has its `pgbus:connected`, then counts broadcast frames
 * until every connection has `expected` of them and prints one JSON line: the latency of each
 * frame (its arrival minus the `t` its payload carries, both epoch milliseconds on this machine),
 * when the last frame arrived, how often the server closed a connection (each then reconnects
 * with its last position, as a browser does), how many frames came twice (none should), and
 * how many connections lack some (an ephemeral frame is lost to a connection closed meanwhile).
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
let duplicates = 0
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
      closed,
      duplicates,
      incomplete: CONNECTIONS - complete
    })
  )
  process.exit(0)
}

// an ephemeral frame lost to a closed connection never comes back: stop after 10 s without a frame
setInterval(() => {
  if (lastAt > 0 && now() - lastAt > 10_000) {
    console.error(`streams-client: ${complete}/${CONNECTIONS} connections have every frame; no frame for 10 s`)
    finish()
  }
}, 1_000).unref()

/** One logical client: a connection that reconnects with its last position when the server closes it. */
const open = (i: number) =>
  new Promise<void>((resolve) => {
    const seen = new Set<number>()
    let lastEventId: string | undefined
    let done = false
    let counted = false
    const connect = () => {
      const headers: Record<string, string> = { accept: "text/event-stream" }
      if (lastEventId !== undefined) headers["last-event-id"] = lastEventId
      const request = http.get(url!, { agent: false, headers }, (res) => {
        if (res.statusCode !== 200) {
          console.error(`streams-client: connection ${i} got ${res.statusCode}`)
          process.exit(1)
        }
        res.setEncoding("utf8")
        let pending = ""
        res.on("data", (chunk: string) => {
          const arrived = now()
          pending += chunk
          const blocks = pending.split("\n\n")
          pending = blocks.pop() ?? ""
          for (const block of blocks) {
            const lines = block.split("\n")
            const id = lines.find((line) => line.startsWith("id: "))?.slice(4)
            if (block.includes("event: pgbus:connected")) {
              lastEventId = JSON.parse(lines.find((line) => line.startsWith("data: "))!.slice(6)).position
              if (!counted) {
                counted = true
                ready++
                if (ready === CONNECTIONS) console.log("ready")
              }
              resolve()
              continue
            }
            const data = lines.find((line) => line.startsWith("data: "))
            if (data === undefined || block.includes("event: pgbus:")) continue
            // an ephemeral frame has no id: the position stays
            if (id !== undefined) lastEventId = id
            const { t, i: index } = JSON.parse(data.slice(6)) as { t: number; i: number }
            if (seen.has(index)) {
              duplicates++
              continue
            }
            seen.add(index)
            latencies.push(arrived - t)
            lastAt = arrived
            if (seen.size === EXPECTED && !done) {
              done = true
              complete++
              if (complete === CONNECTIONS) finish()
            }
          }
        })
        res.on("close", () => {
          if (done) return
          closed++
          // closed by the server (it fell behind its write deadline): resume from the last position
          setTimeout(connect, 100)
        })
      })
      request.on("error", (error) => {
        console.error(`streams-client: connection ${i}: ${error.message}`)
        process.exit(1)
      })
    }
    connect()
  })

// open them 50 at a time (a burst of 1,000 connects would be a bench of its own)
for (let i = 0; i < CONNECTIONS; i += 50) {
  await Promise.all(Array.from({ length: Math.min(50, CONNECTIONS - i) }, (_, j) => open(i + j)))
}
