/**
 * DBOS Transact on bench:signals, configured as the team's peer harness configures DBOS
 * (shared/bench/peers/src/dbos.ts: systemDatabasePoolSize 20, log level error; LISTEN/NOTIFY on,
 * its default). Public API only: DBOS.setConfig, registerWorkflow, launch, startWorkflow, recv,
 * send, shutdown.
 *   tsx packages/bench/src/peers/dbos-signals.ts signals [--variant recv] [--run N]
 * Variant `recv`: SIG_RUNS workflows started with `DBOS.startWorkflow(wf)(i)` (they run in this
 * process), each blocked in `DBOS.recv("go", { timeoutSeconds: 600 })` (the default timeout, 60 s,
 * could fire during a slow run); then one `DBOS.send(workflowID, { i }, "go")` per run from the
 * SIG_SENDERS senders. The first code after `recv` returns records `performance.now()` (DBOS
 * resumes the blocked workflow in memory: no re-execution, no queue).
 * Parked = the durable timeout of every recv recorded (recv writes it before it registers its
 * wake-up and checks for a message), then SIG_SETTLE_MS of quiet.
 */
import { makeStartRecorder, park, runSignals, SIG_POLL_MS, SIG_RUNS, SIG_SENDERS, SIG_SETTLE_MS } from "../signals.ts"
import {
  databaseName,
  emit,
  finishRun,
  guard,
  load,
  monitorClient,
  now,
  POOL_MAX,
  parseArgs,
  pkgVersion,
  resetDatabase,
  urlFor
} from "./common.ts"

interface Handle {
  readonly workflowID: string
}

interface Dbos {
  setConfig(config: Record<string, unknown>): void
  registerWorkflow<Args extends Array<unknown>, R>(
    f: (...args: Args) => Promise<R>,
    config: { name: string }
  ): (...args: Args) => Promise<R>
  startWorkflow<Args extends Array<unknown>, R>(f: (...args: Args) => Promise<R>): (...args: Args) => Promise<Handle>
  recv<T>(topic: string, options: { timeoutSeconds: number }): Promise<T | null>
  send(destinationID: string, message: unknown, topic: string): Promise<void>
  launch(): Promise<void>
  shutdown(): Promise<void>
}

const { DBOS } = await load<{ DBOS: Dbos }>("@dbos-inc/dbos-sdk")

const args = parseArgs()
guard()
const DB = databaseName("sig_dbos")
const variant = args.variant === "default" ? "recv" : args.variant
const RECV_TIMEOUT_S = 600

const recorder = makeStartRecorder()

await resetDatabase(DB)
DBOS.setConfig({ name: "bench", systemDatabaseUrl: urlFor(DB), systemDatabasePoolSize: POOL_MAX, logLevel: "error" })

const waiter = DBOS.registerWorkflow(
  async (i: number) => {
    const message = await DBOS.recv<{ i: number }>("go", { timeoutSeconds: RECV_TIMEOUT_S })
    recorder.record(i, now(), message?.i)
    return message?.i ?? -1
  },
  { name: "sigwait" }
)

await DBOS.launch()
const mon = await monitorClient(DB)

const base = { library: "dbos", version: pkgVersion("@dbos-inc/dbos-sdk"), workload: args.workload, variant }
const count = async (sql: string): Promise<number> => (await mon.query<{ n: number }>(sql)).rows[0]?.n ?? 0

try {
  if (args.workload === "signals" && variant === "recv") {
    const ids: Array<string> = new Array(SIG_RUNS)
    const parking = await park({
      start: async (i) => {
        ids[i] = (await DBOS.startWorkflow(waiter)(i)).workflowID
      },
      parked: () => count("SELECT count(*)::int AS n FROM dbos.operation_outputs WHERE function_name = 'DBOS.sleep'")
    })
    const pending = await count("SELECT count(*)::int AS n FROM dbos.workflow_status WHERE status = 'PENDING'")
    if (!parking.ok || pending !== SIG_RUNS || recorder.started > 0) {
      throw new Error(`parking incomplete: ${JSON.stringify({ ...parking, pending, woken: recorder.started })}`)
    }
    const r = await runSignals({
      send: (i) => DBOS.send(ids[i]!, { i }, "go"),
      finished: () => count("SELECT count(*)::int AS n FROM dbos.workflow_status WHERE status = 'SUCCESS'"),
      recorder
    })
    // every run woken once, by the message sent to it (checked where it is received)
    const correct = r.woken - r.wrongPayload
    emit({
      ...base,
      config: {
        start: "DBOS.startWorkflow(wf)(i) (runs in this process)",
        recv: `DBOS.recv("go", { timeoutSeconds: ${RECV_TIMEOUT_S} }) (LISTEN/NOTIFY, 10 s re-check)`,
        send: 'DBOS.send(workflowID, { i }, "go") from outside any workflow',
        senders: SIG_SENDERS,
        systemDatabasePoolSize: POOL_MAX,
        settleMs: SIG_SETTLE_MS,
        completion: `count of workflow_status SUCCESS every ${SIG_POLL_MS} ms after the sends`
      },
      result: { ...r, parkedAfterMs: parking.parkMs, runsCorrect: correct, expectedRuns: SIG_RUNS }
    })
  } else {
    console.error(`unknown workload/variant ${args.workload} ${variant}`)
    process.exitCode = 2
  }
} finally {
  await mon.end()
  await DBOS.shutdown()
  await finishRun(DB)
}
process.exit(process.exitCode ?? 0)
