/**
 * The senders of bench:signals' off-process case: a Node process of its own with the library's
 * layer and no supervisor, so no worker of the workflow queue, as a web server sending signals
 * would be. Started by ours-signals.ts (variant `-offprocess`) over IPC:
 *   parent -> { type: "send", ids, order }   the run ids (index i = run i) and the order to send in
 *   child  -> { type: "ready" }               its pool warmed
 *   child  -> { type: "sent", ... }           `sendAll`'s times on the machine's monotonic clock
 *                                             (`monotonicOffsetMs`), its CPU and event-loop delay
 * Each send is `SignalBenchRef.signal(id, "go", { i })` (the workflow's ref, its payload checked
 * by the declared Schema), with the library's defaults; with BENCH_SIGNALS_BY_ID=1,
 * `WorkflowClient.signal(id, "go", { i })` (no definition).
 */
import { monitorEventLoopDelay } from "node:perf_hooks"
import { Registry, WorkflowClient } from "../../../../src/index.ts"
import { sendAll } from "../signals.ts"
import { cpuProfiler } from "./cpuProfile.ts"
import { makeOursRuntime, monotonicOffsetMs } from "./oursRuntime.ts"
import { SignalBenchRef } from "./signalBenchRef.ts"

interface SendMessage {
  readonly type: "send"
  readonly ids: ReadonlyArray<string>
  readonly order: ReadonlyArray<number>
}

const database = process.env.BENCH_SENDER_DATABASE
if (database === undefined || process.send === undefined) {
  console.error("ours-signals-sender: run by ours-signals.ts (BENCH_SENDER_DATABASE and an IPC channel)")
  process.exit(2)
}
const post = (message: unknown) => process.send?.(message)
// BENCH_SIGNALS_BY_ID=1: by run id through `WorkflowClient.signal`, which does not know the Schema
const BY_ID = process.env.BENCH_SIGNALS_BY_ID === "1"

const { runtime, runP } = makeOursRuntime({
  database,
  tracer: undefined,
  registry: Registry.layer([]),
  readAhead: undefined
})

const offset = monotonicOffsetMs()
const monotonic = (xs: Float64Array) => Array.from(xs, (t) => (Number.isNaN(t) ? null : t + offset))

process.on("message", (message: SendMessage) => {
  if (message.type !== "send") return
  const { ids } = message
  const cpu0 = process.cpuUsage()
  // BENCH_SENDER_CPUPROF=<file>: a V8 CPU profile of the sends
  const profiling = cpuProfiler(process.env.BENCH_SENDER_CPUPROF)
  // how late this process's callbacks run: a send's return lags its commit by about as much
  const loop = monitorEventLoopDelay({ resolution: 1 })
  loop.enable()
  profiling
    .then(() =>
      sendAll(
        BY_ID
          ? (i) => runP(WorkflowClient.use((client) => client.signal(ids[i]!, "go", { i })))
          : (i) => runP(SignalBenchRef.signal(ids[i]!, "go", { i })),
        message.order
      )
    )
    .then(async (times) => {
      await (await profiling)?.()
      const cpu = process.cpuUsage(cpu0)
      loop.disable()
      post({
        type: "sent",
        calledAt: monotonic(times.calledAt),
        sentAt: monotonic(times.sentAt),
        sendMs: times.sendMs,
        allSentMs: times.allSentMs,
        cpuS: (cpu.user + cpu.system) / 1e6,
        loopDelayMs: { p50: loop.percentile(50) / 1e6, p99: loop.percentile(99) / 1e6, max: loop.max / 1e6 }
      })
    })
    .catch((e: unknown) => {
      console.error("ours-signals-sender: a send failed", e)
      process.exit(1)
    })
})
process.on("disconnect", () => {
  void runtime.dispose().finally(() => process.exit(0))
})

// warm the pool as the in-process senders' is after parking: every sender's connection open
await Promise.all(
  Array.from({ length: 20 }, () =>
    runP(WorkflowClient.use((client) => client.counts({ workflow: SignalBenchRef.name })))
  )
)
post({ type: "ready" })
