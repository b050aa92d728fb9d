/**
 * effect-pgbus on bench:signals: SIG_RUNS runs of a workflow whose one step waits for a signal
 * (`Workflow.step("got", body, { waitFor: "go" })`), parked by the supervisor running in this
 * process, then one `run.signal("go", { i })` per run from SIG_SENDERS senders (the handles
 * `SignalBench.start` gave). The step's body records `performance.now()` first thing; the driver
 * (`runSignals` in ../signals.ts) records it when `signal` returns.
 *   tsx packages/bench/src/peers/ours-signals.ts signals [--variant ra<N>] [--run N]
 * Variants: `default` (no readAhead given: the library decides), `ra<N>` = a fixed read-ahead;
 * `-nolocal` after either: local dispatch off; `-offprocess` after either: the senders are another
 * Node process (ours-signals-sender.ts, the library at its defaults and no worker), their times
 * brought to this process's clock through the machine's monotonic clock.
 * BENCH_OURS_STATEMENTS=1: counts the statements of the timed phase (statements / signal);
 * BENCH_OURS_PROFILE=1: also tallies every statement and span of the timed phase (count, time)
 * and prints it to stderr; BENCH_OURS_TRACE=1: prints where the latency goes (`traceReport`).
 * Each installs a tracer, which makes the library open the spans it skips without one: a
 * diagnostic run, not one to measure (the measured runs go without, statements / signal n/a).
 * BENCH_OURS_CPUPROF=<file>: a V8 CPU profile of the timed phase (the sends and woken steps).
 */
import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { Effect, type Exit, Option, Tracer } from "effect"
import { JobClient, PgBus, PgBusConfig, Registry, Workflow, WorkflowClient } from "../../../../src/index.ts"
import type { RunHandle } from "../../../../src/Workflow/Client.ts"
import {
  makeStartRecorder,
  park,
  runSignals,
  type SendTimes,
  SIG_POLL_MS,
  SIG_RUNS,
  SIG_SENDERS,
  SIG_SETTLE_MS
} from "../signals.ts"
import {
  CONCURRENCY,
  databaseName,
  emit,
  finishRun,
  guard,
  monitorClient,
  now,
  POOL_MAX,
  parseArgs,
  resetDatabase,
  sleep
} from "./common.ts"
import { cpuProfiler } from "./cpuProfile.ts"
import { makeOursRuntime, monotonicOffsetMs } from "./oursRuntime.ts"
import { SignalBenchRef } from "./signalBenchRef.ts"
import { makeSpanTally } from "./spanTally.ts"

const args = parseArgs()
guard()
const DB = databaseName("sig_ours")
const variantMatch = /^(?:ra(\d+)|default)(-nolocal|-offprocess)?$/.exec(args.variant)
// `default`: no readAhead given, the library decides (adaptive); an unknown variant: read-ahead 0
const readAhead: number | undefined =
  variantMatch?.[1] !== undefined ? Number(variantMatch[1]) : variantMatch ? undefined : 0
// `-nolocal`: local dispatch off, so every woken step goes through NOTIFY, read and claim, as
// when the signals come from a process that runs no worker of the step's queue
const localDispatch = variantMatch?.[2] !== "-nolocal"
// `-offprocess`: the signals come from another Node process (ours-signals-sender.ts) that runs no
// worker of the queue, with the library's defaults
const offProcess = variantMatch?.[2] === "-offprocess"
const variant = `${readAhead === undefined ? "default" : `ra${readAhead}`}${variantMatch?.[2] ?? ""}`

const recorder = makeStartRecorder()

const SignalBench = Workflow.implement(SignalBenchRef, {}, function* ({ payload }) {
  return yield* Workflow.step(
    "got",
    Effect.gen(function* () {
      const t = now()
      const ctx = yield* Workflow.context
      const signalled = (ctx.signal?.payload as { i?: number } | undefined)?.i
      recorder.record(payload.i, t, signalled)
      return signalled ?? -1
    }),
    { waitFor: "go" }
  )
})

// Statement counter (as in ours-workflows.ts), installed only for a diagnostic run
// (BENCH_OURS_STATEMENTS=1, _PROFILE or _TRACE): a tracer other than the native one makes the
// library open the spans it skips without a tracing backend (queue reads, archives, sends), a
// cost a user without tracing does not pay. It is the default tracer plus a count of the
// statement spans that end during the timed phase; BENCH_OURS_PROFILE=1 tallies them by text.
const PROFILE = process.env.BENCH_OURS_PROFILE === "1"
const spans = makeSpanTally(PROFILE)
// BENCH_OURS_TRACE=1: where the latency goes. Every span of the timed phase is stamped with
// performance.now() (the driver's clock) when it starts and ends; spans are tied to a run by the
// the run id of the span (pgbus.workflow.signal, pgbus.workflow.run, pgbus.step.run) or of their run ancestor.
const TRACE = process.env.BENCH_OURS_TRACE === "1"
interface Stamp {
  readonly name: string
  readonly text: string | undefined
  readonly start: number
  readonly end: number
}
const stamps = new Map<string, Array<Stamp>>()
const reads: Array<Stamp> = []
const runOf = (span: Tracer.AnySpan | undefined): string | undefined => {
  for (let s = span; s !== undefined; s = s._tag === "Span" ? Option.getOrUndefined(s.parent) : undefined) {
    if (s._tag === "Span" && (s.name.startsWith("pgbus.workflow.") || s.name.startsWith("pgbus.step."))) {
      const id = s.attributes.get("workflow_id") ?? s.attributes.get("workflow.run_id")
      if (typeof id === "string") return id
    }
  }
  return undefined
}
class TracingSpan extends spans.CountingSpan {
  readonly startedAt = now()
  override end(endTime: bigint, exit: Exit.Exit<unknown, unknown>): void {
    if (spans.state.recording && this.status._tag === "Started") {
      const text = this._attributes?.get("db.query.text")
      const stamp: Stamp = {
        name: this.name,
        text: typeof text === "string" ? text.replace(/\s+/g, " ").slice(0, 60) : undefined,
        start: this.startedAt,
        end: now()
      }
      if (this.name === "QueueStore.read" || this.name === "QueueStore.archiveAndRead") reads.push(stamp)
      const id = runOf(this)
      if (id !== undefined) {
        const list = stamps.get(id) ?? []
        list.push(stamp)
        stamps.set(id, list)
      }
    }
    super.end(endTime, exit)
  }
}
const counting = Tracer.make({
  span: (options) => (TRACE ? new TracingSpan(options) : new spans.CountingSpan(options))
})
const COUNT = PROFILE || TRACE || process.env.BENCH_OURS_STATEMENTS === "1"

await resetDatabase(DB)
const { runtime, runP, startWorkers } = makeOursRuntime({
  database: DB,
  localDispatch,
  tracer: COUNT ? counting : undefined,
  registry: Registry.layer([SignalBench]),
  readAhead
})

/** BENCH_OURS_TRACE=1: splits signal commit -> body start into its parts, per run; prints to stderr. */
const traceReport = (
  handles: ReadonlyArray<RunHandle>,
  sentAt: Float64Array,
  notified: ReadonlyArray<number>,
  wallMs: number
) => {
  const parts: Record<string, Array<number>> = {}
  const add = (k: string, v: number | undefined) => {
    if (v === undefined || !Number.isFinite(v)) return
    const list = parts[k] ?? []
    list.push(v)
    parts[k] = list
  }
  const readStarts = reads.map((r) => r.start).sort((a, b) => a - b)
  const firstAfter = (xs: ReadonlyArray<number>, t: number) => {
    let lo = 0
    let hi = xs.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (xs[mid]! < t) lo = mid + 1
      else hi = mid
    }
    return xs[lo]
  }
  let execBusy = 0
  /** Runs whose step started with no claim statement of its own (claimed by the signal, or in the read). */
  let handedOver = 0
  for (let i = 0; i < handles.length; i++) {
    const list = stamps.get(handles[i]!.id) ?? []
    const signal = list.find((x) => x.name === "pgbus.workflow.signal")
    const exec = list.find((x) => x.name === "pgbus.workflow.run")
    const step = list.find((x) => x.name === "pgbus.step.run")
    const body = recorder.startedAt[i]!
    if (exec === undefined || (signal === undefined && !offProcess)) continue
    // signals sent from the sender process: no span here, the send's return stands for its commit
    const committed = signal?.end ?? sentAt[i]!
    execBusy += exec.end - exec.start
    const sql = list.filter((x) => x.text !== undefined && x.start >= exec.start && x.end <= (step?.start ?? body))
    const claim = sql[0]
    if (claim === undefined) handedOver++
    if (signal !== undefined) {
      add("signal: span (call -> commit)", signal.end - signal.start)
      add("signal: span end -> signal() returned to the sender", sentAt[i]! - signal.end)
    }
    add("commit -> first NOTIFY seen by a monitor LISTEN", (firstAfter(notified, committed) ?? Number.NaN) - committed)
    add("commit -> next worker read starts", (firstAfter(readStarts, committed) ?? Number.NaN) - committed)
    add("commit -> executor takes the message (execute span start)", exec.start - committed)
    // sent the usual way (not handed over): the read that delivered it, the last ending before
    // the execute span starts
    // (a step claimed in the read has no claim statement either: only local dispatch hands over)
    const delivering =
      claim === undefined && localDispatch && !offProcess
        ? undefined
        : reads
            .filter((r) => r.end <= exec.start + 0.001)
            .reduce<Stamp | undefined>((a, r) => (a === undefined || r.end > a.end ? r : a), undefined)
    if (delivering !== undefined) {
      add("  commit -> delivering read starts", delivering.start - committed)
      add("  delivering read duration", delivering.end - delivering.start)
      add("  delivering read end -> execute start", exec.start - delivering.end)
      // reads that started after the commit and ended before the delivering read: they missed it
      add(
        "  reads started after the commit that missed it (count)",
        reads.filter((r) => r.start >= committed && r.end <= delivering.start).length
      )
    }
    add("claim statement (execute start -> claim end)", claim === undefined ? undefined : claim.end - exec.start)
    add(
      "claim end -> step span start (gate: guards, held signal)",
      claim === undefined || step === undefined ? undefined : step.start - claim.end
    )
    if (claim !== undefined) {
      add(
        `  gate statements (${sql.length - 1} per run incl. BEGIN/COMMIT)`,
        sql.slice(1).reduce((n, x) => n + x.end - x.start, 0)
      )
    }
    add("step span start -> body start", step === undefined ? undefined : body - step.start)
    add("TOTAL signal() returned -> body start", body - sentAt[i]!)
  }
  const q = (xs: Array<number>, p: number) => {
    const s = [...xs].sort((a, b) => a - b)
    return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? Number.NaN
  }
  const sortedReads = [...reads].sort((a, b) => a.start - b.start)
  for (let k = 0; k < sortedReads.length; k++) {
    const r = sortedReads[k]!
    add("read: duration", r.end - r.start)
    const next = sortedReads[k + 1]
    if (next !== undefined) add("read: end -> next read start", next.start - r.end)
  }
  console.error(`ours-signals trace: ms, over ${handles.length} runs (p50 / p90 / mean)`)
  for (const [k, xs] of Object.entries(parts)) {
    const mean = xs.reduce((a, b) => a + b, 0) / xs.length
    console.error(
      `  ${q(xs, 50).toFixed(2).padStart(8)} ${q(xs, 90).toFixed(2).padStart(8)} ${mean.toFixed(2).padStart(8)}  ${k}`
    )
  }
  console.error(
    `  claimed before their execution (handed over, or in the read): ${handedOver}; reads: ${reads.length}; notifications: ${notified.length}; executor busy ${(execBusy / wallMs / CONCURRENCY).toFixed(2)} of ${CONCURRENCY} x wall`
  )
}

/** A payload of the sender process (ours-signals-sender.ts): its times on the monotonic clock. */
interface SentMessage {
  readonly type: "sent"
  readonly calledAt: ReadonlyArray<number | null>
  readonly sentAt: ReadonlyArray<number | null>
  readonly sendMs: Array<number>
  readonly allSentMs: number
  readonly cpuS: number
  readonly loopDelayMs: { readonly p50: number; readonly p99: number; readonly max: number }
}

/**
 * Starts the sender process and resolves once its pool is warm. `senders` hands it the run ids
 * and gives back its times in this process's clock (through the machine's monotonic clock, which
 * both processes read: `performance.timeOrigin` was found off by up to 18 ms between them).
 */
const startSenderProcess = async (handles: () => ReadonlyArray<RunHandle>) => {
  const child = spawn(
    process.execPath,
    [...process.execArgv, fileURLToPath(new URL("./ours-signals-sender.ts", import.meta.url))],
    {
      env: { ...process.env, BENCH_SENDER_DATABASE: DB },
      stdio: ["ignore", "inherit", "inherit", "ipc"]
    }
  )
  child.on("exit", (code) => {
    if (code !== 0 && code !== null) console.error(`ours-signals: the sender process exited with ${code}`)
  })
  const next = <M>(type: string) =>
    new Promise<M>((done, fail) => {
      const onMessage = (m: { type?: string }) => {
        if (m.type !== type) return
        child.off("message", onMessage)
        done(m as M)
      }
      child.on("message", onMessage)
      child.once("exit", (code) => fail(new Error(`the sender process exited (${code}) before "${type}"`)))
    })
  await next("ready")
  let stats: Pick<SentMessage, "cpuS" | "loopDelayMs"> | undefined
  const offset = monotonicOffsetMs()
  const local = (xs: ReadonlyArray<number | null>) =>
    Float64Array.from(xs, (t) => (t === null ? Number.NaN : t - offset))
  const senders = async (order: ReadonlyArray<number>): Promise<SendTimes> => {
    const sent = next<SentMessage>("sent")
    child.send({ type: "send", ids: handles().map((h) => h.id), order })
    const m = await sent
    stats = { cpuS: m.cpuS, loopDelayMs: m.loopDelayMs }
    return { calledAt: local(m.calledAt), sentAt: local(m.sentAt), sendMs: m.sendMs, allSentMs: m.allSentMs }
  }
  return {
    senders,
    /** The sender process's CPU over its sends (s) and its event-loop delay (ms). */
    stats: () => stats,
    close: () => {
      if (child.connected) child.disconnect()
    }
  }
}

const counts = () => runP(WorkflowClient.use((client) => client.counts({ workflow: "SignalBench" })))

const base = { library: "effect-pgbus", version: "workspace", workload: args.workload, variant }

try {
  await runP(PgBus.migrate)
  if (args.workload === "signals") {
    const config = await runP(PgBusConfig.use(Effect.succeed))
    const queue = config.workflowQueue
    await runP(JobClient.use((client) => client.ensureQueue(queue)))
    const stop = startWorkers(queue)
    await sleep(500)
    const handles: Array<RunHandle> = new Array(SIG_RUNS)
    const sender = offProcess ? await startSenderProcess(() => handles) : undefined
    const parking = await park({
      start: async (i) => {
        handles[i] = await runP(SignalBench.start({ i }))
      },
      parked: async () => (await counts()).waiting
    })
    const mon = await monitorClient(DB)
    // parked = the run waiting AND its step row waiting, with no signal yet
    const parkedCheck = await mon.query<{ runs: number; steps: number; signals: number }>(
      `SELECT (SELECT count(*)::int FROM ${config.schema}.workflow_runs WHERE status = 'waiting') AS runs,
              (SELECT count(*)::int FROM ${config.schema}.workflow_steps WHERE status = 'waiting') AS steps,
              (SELECT count(*)::int FROM ${config.schema}.workflow_signals) AS signals`
    )
    const parked = parkedCheck.rows[0]
    if (!parking.ok || parked?.runs !== SIG_RUNS || parked.steps !== SIG_RUNS || parked.signals !== 0) {
      throw new Error(`parking incomplete: ${JSON.stringify({ ...parking, ...parked })}`)
    }
    const notified: Array<number> = []
    if (TRACE) {
      await mon.query(`LISTEN ${config.schema}_wakeup`)
      ;(mon as unknown as { on(e: "notification", f: () => void): void }).on("notification", () => notified.push(now()))
    }
    const sentAt = new Float64Array(SIG_RUNS)
    spans.state.recording = true
    const stopProfile = await cpuProfiler(process.env.BENCH_OURS_CPUPROF)
    const r = await runSignals({
      ...(sender === undefined
        ? { send: (i: number) => runP(handles[i]!.signal("go", { i })) }
        : { senders: sender.senders }),
      finished: async () => (await counts()).finished,
      recorder,
      onSent: (i, t) => {
        sentAt[i] = t
      }
    })
    await stopProfile?.()
    spans.state.recording = false
    await stop()
    sender?.close()
    if (TRACE) traceReport(handles, sentAt, notified, r.wallMs)
    if (PROFILE) spans.print(`ours-signals profile (timed phase, ${r.completed} runs)`, "signal", r.completed)
    // every run finished with the index its signal carried; every signal consumed
    const check = await mon.query<{ ok: number; steps: number; consumed: number }>(
      `SELECT (SELECT count(*)::int FROM ${config.schema}.workflow_runs
                WHERE status = 'finished' AND output = to_jsonb((payload->>'i')::int)) AS ok,
              (SELECT count(*)::int FROM ${config.schema}.workflow_steps WHERE status = 'completed') AS steps,
              (SELECT count(*)::int FROM ${config.schema}.workflow_signals WHERE status = 'consumed') AS consumed`
    )
    await mon.end()
    emit({
      ...base,
      config: {
        capsule: { queues: [queue], concurrency: CONCURRENCY, readAhead: readAhead ?? "default" },
        senders: SIG_SENDERS,
        senderProcess: offProcess,
        poolMax: POOL_MAX,
        listenNotify: true,
        settleMs: SIG_SETTLE_MS,
        completion: `WorkflowClient.counts every ${SIG_POLL_MS} ms after the sends`
      },
      result: {
        ...r,
        // Node CPU: both processes when the senders are one of their own
        ...(sender === undefined
          ? {}
          : { nodeCpuS: Math.round((r.nodeCpuS + (sender.stats()?.cpuS ?? 0)) * 100) / 100, sender: sender.stats() }),
        parkedAfterMs: parking.parkMs,
        // statements of the timed phase, less the completion polls (one WorkflowClient.counts each)
        ...(COUNT
          ? {
              statementsPerSignal:
                Math.round(((spans.state.statements - r.polls) / Math.max(1, r.completed)) * 100) / 100
            }
          : {}),
        runsCorrect: check.rows[0]?.ok,
        stepRows: check.rows[0]?.steps,
        signalsConsumed: check.rows[0]?.consumed,
        expectedRuns: SIG_RUNS
      }
    })
  } else {
    console.error(`unknown workload ${args.workload}`)
    process.exitCode = 2
  }
} finally {
  await runtime.dispose()
  await finishRun(DB)
}
process.exit(process.exitCode ?? 0)
