/**
 * bench:streams: broadcasts into one stream with 100 and 1,000 SSE connections on one process.
 * This process runs effect-pgbus (PgBus, Streams, the HTTP server); the connections come from a
 * second process (`streams-client.ts`), so that reading them does not share this event loop.
 * Per connection count:
 *   - latency: BENCH_LATENCY_BROADCASTS broadcasts paced every BENCH_LATENCY_SPACING_MS (default:
 *     connections / 20 ms, at least 10: 2,000 frames a second per 100 connections, which the
 *     process keeps up with; a faster pace measures queueing, not fan-out); each
 *     carries the epoch time taken just before its broadcast call; the client subtracts it from
 *     the frame's arrival: fan-out latency p50/p99 over every (broadcast, connection);
 *   - throughput: BENCH_BROADCASTS broadcasts from BENCH_SENDERS concurrent senders, one per
 *     transaction, durable, then the same ephemeral (NOTIFY only): broadcasts/s committed, and
 *     delivered (until every connection had every frame), and each one's commits and WAL bytes
 *     (from the WAL: cost.ts, `phaseCost`).
 * Last line: {"bench":"streams", ...}
 */
import { type ChildProcess, spawn } from "node:child_process"
import { createServer } from "node:http"
import { NodeHttpServer, NodeRuntime } from "@effect/platform-node"
import { Context, Effect, Fiber, Layer, References } from "effect"
import { HttpRouter, HttpServer } from "effect/http"
import { PgBus, QueueStore, Streams } from "../../../src/index.ts"
import { benchConfig, benchDatabase, machine, round } from "./common.ts"
import { costCells, type PhaseCost, perUnit, withPhaseCost } from "./cost.ts"

const COUNTS = (process.env.BENCH_CONNECTIONS ?? "100,1000").split(",").map(Number)
const LATENCY_BROADCASTS = Number(process.env.BENCH_LATENCY_BROADCASTS ?? 200)
const latencySpacingMs = (connections: number) =>
  Number(process.env.BENCH_LATENCY_SPACING_MS ?? Math.max(10, connections / 20))
const BROADCASTS = Number(process.env.BENCH_BROADCASTS ?? 5_000)
const SENDERS = Number(process.env.BENCH_SENDERS ?? 8)
const PAD = "x".repeat(Number(process.env.BENCH_PAYLOAD_BYTES ?? 200))

const epoch = () => performance.timeOrigin + performance.now()

interface ClientResult {
  readonly frames: number
  readonly p50: number
  readonly p99: number
  readonly max: number
  readonly lastAt: number
  readonly closed: number
  readonly duplicates: number
  readonly incomplete: number
}

/** The client process for one phase: resolves `ready` once connected, `result` when done. */
const startClient = (url: string, connections: number, expected: number) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const child: ChildProcess = spawn(
        process.execPath,
        [
          "--import",
          "tsx",
          new URL("./streams-client.ts", import.meta.url).pathname,
          url,
          String(connections),
          String(expected)
        ],
        { stdio: ["ignore", "pipe", "inherit"] }
      )
      let out = ""
      let onReady: () => void = () => {}
      let onResult: (r: ClientResult) => void = () => {}
      child.stdout?.setEncoding("utf8")
      child.stdout?.on("data", (chunk: string) => {
        out += chunk
        const lines = out.split("\n")
        out = lines.pop() ?? ""
        for (const line of lines) {
          if (line === "ready") onReady()
          else if (line.startsWith("{")) onResult(JSON.parse(line) as ClientResult)
        }
      })
      return {
        child,
        ready: Effect.callback<void>((resume) => {
          onReady = () => resume(Effect.void)
        }),
        result: Effect.callback<ClientResult>((resume) => {
          onResult = (r) => resume(Effect.succeed(r))
        })
      }
    }),
    ({ child }) => Effect.sync(() => child.exitCode === null && child.kill("SIGKILL"))
  )

const phase = <A>(url: string, connections: number, expected: number, send: Effect.Effect<A, unknown>) =>
  Effect.scoped(
    Effect.gen(function* () {
      const client = yield* startClient(url, connections, expected)
      // the callbacks are registered before the child can answer: it has connections to open first
      const readyFiber = yield* Effect.forkChild(client.ready, { startImmediately: true })
      const resultFiber = yield* Effect.forkChild(client.result, { startImmediately: true })
      yield* Fiber.join(readyFiber)
      const start = epoch()
      const sent = yield* send
      const sentAt = epoch()
      const result = yield* Fiber.join(resultFiber)
      return { start, sentAt, sent, result }
    })
  )

const program = Effect.gen(function* () {
  const database = yield* benchDatabase(`bench_streams_${process.pid}`)
  const pgbus = PgBus.layerFrom(benchConfig(database, { poolSize: 20 }))
  yield* PgBus.migrate.pipe(Effect.provide(pgbus))
  const services = Streams.layer({
    secrets: ["bench-secret-0123456789abcdef"],
    maxConnections: Math.max(...COUNTS) + 100,
    closeOnSignal: true
  }).pipe(Layer.provideMerge(pgbus), Layer.orDie)

  yield* Effect.gen(function* () {
    const context = yield* Layer.build(services)
    const server = yield* Layer.build(
      HttpRouter.serve(Streams.routes(), { disableLogger: true, disableListenLog: true }).pipe(
        Layer.provide(Layer.succeedContext(context)),
        Layer.provideMerge(NodeHttpServer.layer(createServer, { port: 0, host: "127.0.0.1" }))
      )
    )
    const address = Context.get(server, HttpServer.HttpServer).address
    if (address._tag === "UnixPathAddress") return yield* Effect.die(new Error("expected a TCP address"))
    const run = <A, E>(effect: Effect.Effect<A, E, Streams.Streams | QueueStore>) =>
      effect.pipe(Effect.provide(context))
    const rows: Array<Record<string, number>> = []
    const costs: Array<{ readonly durable: PhaseCost; readonly ephemeral: PhaseCost }> = []

    // the in-run reference: the same messages sent with the queue store alone (no stream, no hub work)
    const store = Context.get(context, QueueStore)
    yield* store.create("bench_plain")
    const sendPlain = Effect.forEach(
      Array.from({ length: BROADCASTS }, (_, i) => i),
      (i) => store.send("bench_plain", { t: epoch(), i, pad: PAD }),
      { concurrency: SENDERS, discard: true }
    )
    yield* sendPlain
    const plainStart = epoch()
    yield* sendPlain
    const plainPerS = (BROADCASTS / (epoch() - plainStart)) * 1000
    yield* store.purge("bench_plain")

    for (const connections of COUNTS) {
      const stream = `bench:${connections}`
      const signed = yield* run(Streams.signedName(stream))
      const url = `http://127.0.0.1:${address.port}/pgbus/streams?stream=${signed}`
      process.stderr.write(`bench:streams ${connections} connections: latency phase\n`)
      const latency = yield* phase(
        url,
        connections,
        LATENCY_BROADCASTS,
        run(
          Effect.forEach(
            Array.from({ length: LATENCY_BROADCASTS }, (_, i) => i),
            (i) =>
              Effect.andThen(
                Streams.broadcast(stream, { t: epoch(), i, pad: PAD }),
                Effect.sleep(`${latencySpacingMs(connections)} millis`)
              ),
            { discard: true }
          )
        )
      )
      const throughput = (durable: boolean) =>
        phase(
          url,
          connections,
          BROADCASTS,
          run(
            Effect.forEach(
              Array.from({ length: BROADCASTS }, (_, i) => i),
              (i) => Streams.broadcast(stream, { t: epoch(), i, pad: PAD }, { durable }),
              { concurrency: SENDERS, discard: true }
            )
          )
        )
      process.stderr.write(`bench:streams ${connections} connections: durable throughput phase\n`)
      const [durable, durableCost] = yield* withPhaseCost(database, throughput(true))
      process.stderr.write(`bench:streams ${connections} connections: ephemeral throughput phase\n`)
      const [ephemeral, ephemeralCost] = yield* withPhaseCost(database, throughput(false))
      const rate = (r: typeof durable) => ({
        committed: (BROADCASTS / (r.sentAt - r.start)) * 1000,
        delivered: (BROADCASTS / (r.result.lastAt - r.start)) * 1000
      })
      rows.push({
        connections,
        latency_p50_ms: latency.result.p50,
        latency_p99_ms: latency.result.p99,
        latency_max_ms: latency.result.max,
        durable_committed_per_s: rate(durable).committed,
        durable_delivered_per_s: rate(durable).delivered,
        durable_p50_ms: durable.result.p50,
        durable_p99_ms: durable.result.p99,
        ephemeral_committed_per_s: rate(ephemeral).committed,
        ephemeral_delivered_per_s: rate(ephemeral).delivered,
        ephemeral_p50_ms: ephemeral.result.p50,
        ephemeral_p99_ms: ephemeral.result.p99,
        closed: latency.result.closed + durable.result.closed + ephemeral.result.closed,
        duplicates: latency.result.duplicates + durable.result.duplicates + ephemeral.result.duplicates,
        durable_incomplete: durable.result.incomplete + latency.result.incomplete,
        ephemeral_incomplete: ephemeral.result.incomplete
      })
      costs.push({ durable: durableCost, ephemeral: ephemeralCost })
    }

    console.log(`bench:streams — one stream, SSE connections from a second process; ${machine()}`)
    console.log(
      `latency: ${LATENCY_BROADCASTS} broadcasts every ${COUNTS.map((c) => `${latencySpacingMs(c)} ms (${c})`).join(", ")}; throughput: ${BROADCASTS} broadcasts from ${SENDERS} senders, one per transaction; payload ${PAD.length + 30} bytes; pool 20`
    )
    console.log(
      `reference in this run: QueueStore.send of the same ${BROADCASTS} messages (no stream, warmed up): ${round(plainPerS)} messages/s committed`
    )
    console.log(
      "| connections | fan-out p50 / p99 / max (paced) | durable: committed/s, delivered/s, p50 / p99 | ephemeral: committed/s, delivered/s, p50 / p99 | closed by the server (reconnected) | frames twice | connections missing frames: durable, ephemeral | durable: commits / WAL bytes per broadcast | ephemeral: commits / WAL bytes per broadcast |"
    )
    console.log("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rows.forEach((r, i) => {
      const cost = costs[i]!
      console.log(
        `| ${r.connections} | ${round(r.latency_p50_ms!, 1)} / ${round(r.latency_p99_ms!, 1)} / ${round(r.latency_max_ms!, 1)} ms | ${round(r.durable_committed_per_s!)}, ${round(r.durable_delivered_per_s!)}, ${round(r.durable_p50_ms!, 1)} / ${round(r.durable_p99_ms!, 1)} ms | ${round(r.ephemeral_committed_per_s!)}, ${round(r.ephemeral_delivered_per_s!)}, ${round(r.ephemeral_p50_ms!, 1)} / ${round(r.ephemeral_p99_ms!, 1)} ms | ${r.closed} | ${r.duplicates} | ${r.durable_incomplete}, ${r.ephemeral_incomplete} | ${costCells(cost.durable, BROADCASTS).replace(" | ", " / ")} | ${costCells(cost.ephemeral, BROADCASTS).replace(" | ", " / ")} |`
      )
    })
    const json: Record<string, unknown> = { bench: "streams", plain_send_per_s: round(plainPerS) }
    rows.forEach((r, i) => {
      const durable = perUnit(costs[i]!.durable, BROADCASTS)
      const ephemeral = perUnit(costs[i]!.ephemeral, BROADCASTS)
      json[`c${r.connections}_durable_commits_per_broadcast`] = durable.commits
      json[`c${r.connections}_durable_wal_bytes_per_broadcast`] = durable.walBytes
      json[`c${r.connections}_ephemeral_commits_per_broadcast`] = ephemeral.commits
      json[`c${r.connections}_ephemeral_wal_bytes_per_broadcast`] = ephemeral.walBytes
      json[`c${r.connections}_p50_ms`] = round(r.latency_p50_ms!, 1)
      json[`c${r.connections}_p99_ms`] = round(r.latency_p99_ms!, 1)
      json[`c${r.connections}_broadcasts_per_s`] = round(r.durable_delivered_per_s!)
    })
    console.log(JSON.stringify(json))
  }).pipe(Effect.scoped)
}).pipe(Effect.scoped, Effect.provideService(References.MinimumLogLevel, "Warn"))

program.pipe(NodeRuntime.runMain({ disableErrorReporting: false }))
