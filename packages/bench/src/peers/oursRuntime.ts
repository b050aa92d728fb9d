/**
 * The effect-pgbus side of the workflow run processes (ours-workflows.ts, ours-signals.ts): one
 * `ManagedRuntime` per process with the library's layer (warnings and errors only, as the peers'
 * silent loggers), a Promise-based `runP` for the drivers, and the supervisor with one capsule
 * on the workflow queue. `tracer` is a diagnostic run's counting tracer (none when measuring).
 */
import { Effect, Fiber, Layer, ManagedRuntime, References, Tracer } from "effect"
import { PgBus, type Registry, Supervisor } from "../../../../src/index.ts"
import { benchConfig, exitOnWorkersFailure } from "../common.ts"
import { CONCURRENCY, POOL_MAX } from "./common.ts"

/** The runtime, `runP` and `startWorkers` of one run process. */
export const makeOursRuntime = <E>(opts: {
  readonly database: string
  readonly localDispatch?: boolean
  readonly tracer: Tracer.Tracer | undefined
  /** The registry of the process's workflows (`Registry.layer([...])`). */
  readonly registry: Layer.Layer<Registry, E, PgBus.PgBus>
  /** The capsule's read-ahead; undefined: the library's own (adaptive). */
  readonly readAhead: number | undefined
}) => {
  const { tracer } = opts
  const quiet = Layer.succeed(References.MinimumLogLevel, "Warn")
  const traced = tracer === undefined ? Layer.empty : Layer.succeed(Tracer.Tracer, tracer)
  const withTracer = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    tracer === undefined ? effect : Effect.provideService(effect, Tracer.Tracer, tracer)
  const config = benchConfig(opts.database, {
    poolSize: POOL_MAX,
    ...(opts.localDispatch === undefined ? {} : { localDispatch: opts.localDispatch })
  })
  const runtime = ManagedRuntime.make(
    Layer.mergeAll(quiet, traced, PgBus.layerFrom(config).pipe(Layer.provide([quiet, traced])))
  )
  const runP = <A, E>(effect: Effect.Effect<A, E, PgBus.PgBus>): Promise<A> =>
    runtime.runPromise(effect.pipe(Effect.provideService(References.MinimumLogLevel, "Warn"), withTracer))
  /** Starts the supervisor (one capsule on `queue`) in the background; the returned function drains it. */
  const startWorkers = (queue: string): (() => Promise<void>) => {
    const readAhead = opts.readAhead
    const fiber = runtime.runFork(
      Supervisor.runWith({
        capsules: [
          {
            name: "bench",
            queues: [queue],
            concurrency: CONCURRENCY,
            ...(readAhead === undefined ? {} : { readAhead })
          }
        ]
      }).pipe(Effect.provide(opts.registry), Effect.provideService(References.MinimumLogLevel, "Warn"), withTracer)
    )
    exitOnWorkersFailure(fiber)
    return () => runtime.runPromise(Fiber.interrupt(fiber))
  }
  return { runtime, runP, startWorkers }
}

/**
 * The machine's monotonic clock (`process.hrtime`, CLOCK_MONOTONIC on Linux, one for every
 * process) minus this process's `performance.now()`, ms: how two processes compare their times.
 */
export const monotonicOffsetMs = (): number => {
  let best = Number.POSITIVE_INFINITY
  let offset = 0
  // the pair read closest together wins
  for (let k = 0; k < 20; k++) {
    const a = performance.now()
    const h = Number(process.hrtime.bigint()) / 1e6
    const b = performance.now()
    if (b - a < best) {
      best = b - a
      offset = h - (a + b) / 2
    }
  }
  return offset
}
