/**
 * effect-pgbus on W3 of the peer harness (a 3-step no-op workflow, 1,000 runs), driven by the
 * same code as the peers (`runW3` in ../workflows.ts): `Workflow.make` with three
 * `Workflow.step`s (each step its own row with its events, the library's default), started with
 * `ThreeSteps.start`, run by `Supervisor.runWith` with one capsule on the workflow queue. The
 * Effect programs run on a `ManagedRuntime` built once per process, so the Promise-based driver
 * calls them as it calls the peers' Promise APIs.
 *   tsx packages/bench/src/peers/ours-workflows.ts w3 [--variant default|ra<N>] [--run N]
 * (`default`: no readAhead given, the library's own choice)
 * Variants: `ra<N>` = the capsule's read-ahead (messages claimed beyond the free slots; 0 is the
 * default).
 */
import { Effect, Schema, Tracer } from "effect"
import { JobClient, PgBus, PgBusConfig, Registry, Workflow, WorkflowClient } from "../../../../src/index.ts"
import { runW3, W3_POLL_MS, W3_RUNS } from "../workflows.ts"
import {
  CONCURRENCY,
  databaseName,
  emit,
  finishRun,
  guard,
  monitorClient,
  POOL_MAX,
  parseArgs,
  resetDatabase,
  sleep
} from "./common.ts"
import { cpuProfiler } from "./cpuProfile.ts"
import { makeOpsCounter } from "./opsCount.ts"
import { makeOursRuntime } from "./oursRuntime.ts"
import { makeSpanTally } from "./spanTally.ts"

const args = parseArgs()
guard()
const DB = databaseName("wf_ours")
const variantMatch = /^ra(\d+)$/.exec(args.variant)
const readAhead: number | undefined = variantMatch ? Number(variantMatch[1]) : undefined
const variant = readAhead === undefined ? "default" : `ra${readAhead}`

const ThreeSteps = Workflow.make(
  "ThreeSteps",
  { payload: Schema.Struct({ n: Schema.Number }) },
  function* ({ payload }) {
    const a = yield* Workflow.step("one", Effect.succeed(payload.n + 1))
    const b = yield* Workflow.step("two", Effect.succeed(a + 1))
    return yield* Workflow.step("three", Effect.succeed(b + 1))
  }
)

// Statement counter, installed only for a diagnostic run (BENCH_OURS_STATEMENTS=1, _PROFILE or
// _OPS): a tracer other than the native one makes the library open the spans it skips without a
// tracing backend (queue reads, archives, sends), which costs Node CPU a user without tracing does
// not pay. It is the default tracer plus a count of the statement spans that end during the timed
// phase. BENCH_OURS_PROFILE=1 also tallies every span by name and statement text
// (count and time) and prints the tally to stderr: a diagnostic run, not to be measured.
const PROFILE = process.env.BENCH_OURS_PROFILE === "1"
// BENCH_OURS_CPUPROF=<file>: a V8 CPU profile of the timed phase only (no startup, no migration), written
// to <file> (.cpuprofile, for DevTools or a script): a diagnostic run, not to be measured.
const CPUPROF = process.env.BENCH_OURS_CPUPROF
const spans = makeSpanTally(PROFILE)
// BENCH_OURS_OPS=1: counts the Effect primitives every fiber evaluates during the timed phase (by
// primitive), through the tracer's per-primitive hook: a load-independent measure of the work per run.
// BENCH_OURS_OPS=native counts them with the hook set on Effect's own native tracer, installed
// explicitly: the library then sees no tracing backend (`tracer === Tracer.nativeTracer`) and skips
// the spans it skips for users without tracing, so the count is that of the default configuration;
// `1` counts them with a tracer installed (every span made).
const OPS_NATIVE = process.env.BENCH_OURS_OPS === "native"
const OPS = process.env.BENCH_OURS_OPS === "1" || OPS_NATIVE
// BENCH_OURS_OPS_DETAIL=<span name>|(none): the primitives evaluated inside that span, by the source of their function
const OPS_DETAIL = process.env.BENCH_OURS_OPS_DETAIL
const opsCounter = makeOpsCounter(() => spans.state.recording, OPS_DETAIL)
const countOps = OPS ? { context: opsCounter.context } : {}
const counting: Tracer.Tracer = OPS_NATIVE
  ? // the native tracer itself, with the hook (a diagnostic run: the process ends after it)
    Object.assign(Tracer.nativeTracer, countOps)
  : Tracer.make({ span: (options) => new spans.CountingSpan(options), ...countOps })
const COUNT = PROFILE || OPS || process.env.BENCH_OURS_STATEMENTS === "1"

await resetDatabase(DB)
const { runtime, runP, startWorkers } = makeOursRuntime({
  database: DB,
  tracer: COUNT ? counting : undefined,
  registry: Registry.layer([ThreeSteps]),
  readAhead
})

const finished = async () =>
  (await runP(WorkflowClient.use((client) => client.counts({ workflow: "ThreeSteps" })))).finished

const base = { library: "effect-pgbus", version: "workspace", workload: args.workload, variant }

try {
  await runP(PgBus.migrate)
  if (args.workload === "w3") {
    const config = await runP(PgBusConfig.use(Effect.succeed))
    const queue = config.workflowQueue
    // created before the timed phase, as the peers create theirs when they start
    await runP(JobClient.use((client) => client.ensureQueue(queue)))
    const stop = startWorkers(queue)
    await sleep(500)
    const stopProfile = await cpuProfiler(CPUPROF)
    spans.state.recording = true
    const r = await runW3({ start: (i) => runP(ThreeSteps.start({ n: i })), finished, pollMs: W3_POLL_MS })
    spans.state.recording = false
    await stopProfile?.()
    await stop()
    if (PROFILE) spans.print(`ours-workflows profile (timed phase, ${r.completed} runs)`, "run", r.completed)
    if (OPS) {
      console.error(
        `ours-workflows Effect primitives (timed phase): ${(opsCounter.total() / Math.max(1, r.completed)).toFixed(1)} per run`
      )
      for (const [id, n] of opsCounter.by().slice(0, OPS_DETAIL !== undefined ? 120 : 40)) {
        console.error(`  ${(n / Math.max(1, r.completed)).toFixed(1).padStart(8)}  ${id}`)
      }
    }
    // every run finished with n + 3, with one completed row per step
    const mon = await monitorClient(DB)
    const check = await mon.query<{ ok: number; steps: number; events: number }>(
      `SELECT (SELECT count(*)::int FROM ${config.schema}.workflow_runs
                WHERE status = 'finished' AND output = to_jsonb((payload->>'n')::int + 3)) AS ok,
              (SELECT count(*)::int FROM ${config.schema}.workflow_steps WHERE status = 'completed') AS steps,
              (SELECT count(*)::int FROM ${config.schema}.workflow_events) AS events`
    )
    await mon.end()
    emit({
      ...base,
      config: {
        capsule: { queues: [queue], concurrency: CONCURRENCY, readAhead: readAhead ?? "default" },
        starters: CONCURRENCY,
        poolMax: POOL_MAX,
        listenNotify: true,
        completion: `WorkflowClient.counts every ${W3_POLL_MS} ms after the starts`
      },
      result: {
        ...r,
        // statements of the timed phase, less the completion polls (one WorkflowClient.counts each)
        // (the native counting mode has no statement counter)
        ...(COUNT && !OPS_NATIVE
          ? {
              statementsPerRun: Math.round(((spans.state.statements - r.polls) / Math.max(1, r.completed)) * 100) / 100
            }
          : {}),
        runsCorrect: check.rows[0]?.ok,
        stepRows: check.rows[0]?.steps,
        eventRows: check.rows[0]?.events,
        expectedRuns: W3_RUNS
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
