/**
 * bench:events: 10,000 events published to 3 subscribers (30,000 handler runs) on a fresh
 * database. Phase one publishes them one event per statement (the common case: one event in
 * the caller's transaction) from BENCH_PUBLISHERS fibers at once; phase two starts the
 * consumers and times the 30,000 handler runs. `publishMany` (100 events per statement) is
 * measured too and reported on its own line. Each phase reports its commits and WAL bytes per
 * event (from the WAL: cost.ts, `phaseCost`).
 * Last line: {"bench":"events","ours_publish_per_s":N,"ours_handled_per_s":N,
 *   "ours_publish_commits_per_event":N,"ours_publish_wal_bytes_per_event":N,...}
 */
import { NodeRuntime } from "@effect/platform-node"
import { Context, Effect, Fiber, Layer, References } from "effect"
import { consumerCapsules } from "../../../src/EventBus/Consumer.ts"
import * as EventBus from "../../../src/EventBus/EventBus.ts"
import * as EventBusLayer from "../../../src/EventBus/EventBusLayer.ts"
import { PgBus, QueueStore, Registry, Supervisor } from "../../../src/index.ts"
import { benchConfig, benchDatabase, exitOnWorkersFailure, machine, round } from "./common.ts"
import { costCells, perUnit, withPhaseCost } from "./cost.ts"

const EVENTS = Number(process.env.BENCH_EVENTS ?? 10_000)
const PUBLISHERS = Number(process.env.BENCH_PUBLISHERS ?? 16)
const CONCURRENCY = Number(process.env.BENCH_CONSUMER_CONCURRENCY ?? 20)
const KEY = "bench.orders.created"
// the supervisor asks a connection per job it may run at once, plus its own three
const POOL = Number(process.env.BENCH_POOL_MAX ?? 3 * CONCURRENCY + 3)

let handled = 0
const count = () =>
  Effect.sync(() => {
    handled++
  })

// three patterns that all match KEY: each event is three deliveries, three handler runs
const subscribers = [
  EventBus.subscribe("bench.orders.#", count, { name: "audit", concurrency: CONCURRENCY }),
  EventBus.subscribe("bench.orders.*", count, { name: "analytics", concurrency: CONCURRENCY }),
  EventBus.subscribe(KEY, count, { name: "inventory", concurrency: CONCURRENCY })
] as const

const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const start = performance.now()
    yield* effect
    return performance.now() - start
  })

const depth = Effect.gen(function* () {
  const store = yield* QueueStore
  let n = 0
  for (const s of subscribers) n += (yield* store.metrics(s.queue)).depth
  return n
})

const program = Effect.gen(function* () {
  const database = yield* benchDatabase(`bench_events_${process.pid}`)
  const pgbus = PgBus.layerFrom(benchConfig(database, { poolSize: POOL, pollingInterval: "50 millis" }))
  const services = EventBusLayer.layer.pipe(Layer.provideMerge(pgbus), Layer.orDie)
  yield* PgBus.migrate.pipe(Effect.provide(pgbus))

  yield* Effect.gen(function* () {
    const registryContext = yield* Layer.build(Registry.layer(subscribers))
    const registry = Context.get(registryContext, Registry)

    // warm-up (prepared statements, JIT), drained before measuring
    yield* Effect.forEach(Array.from({ length: 200 }), () => EventBus.publish(KEY, { warm: true }), {
      concurrency: PUBLISHERS,
      discard: true
    })

    const supervisor = yield* Supervisor.runWith({ capsules: consumerCapsules(registry) }).pipe(
      Effect.provide(registryContext),
      Effect.forkScoped
    )
    exitOnWorkersFailure(supervisor)
    while ((yield* depth) > 0 || handled < 600) yield* Effect.sleep("50 millis")
    yield* Fiber.interrupt(supervisor)
    handled = 0

    // phase one: publish, one event per statement, consumers stopped
    const [publishMs, publishCost] = yield* withPhaseCost(
      database,
      timed(
        Effect.forEach(
          Array.from({ length: EVENTS }, (_, i) => i),
          (i) => EventBus.publish(KEY, { orderId: i, total: 42 }),
          {
            concurrency: PUBLISHERS,
            discard: true
          }
        )
      )
    )
    const deliveries = yield* depth
    if (deliveries !== EVENTS * subscribers.length) {
      return yield* Effect.die(new Error(`expected ${EVENTS * subscribers.length} deliveries, found ${deliveries}`))
    }

    // phase two: consume everything
    const [handleMs, handleCost] = yield* withPhaseCost(
      database,
      timed(
        Effect.gen(function* () {
          const fiber = yield* Supervisor.runWith({ capsules: consumerCapsules(registry) }).pipe(
            Effect.provide(registryContext),
            Effect.forkScoped
          )
          exitOnWorkersFailure(fiber)
          while (handled < EVENTS * subscribers.length) yield* Effect.sleep("5 millis")
          yield* Fiber.interrupt(fiber)
        })
      )
    )
    if (handled !== EVENTS * subscribers.length) {
      return yield* Effect.die(new Error(`expected ${EVENTS * subscribers.length} handler runs, counted ${handled}`))
    }

    // publishMany, 100 events per statement (consumers stopped; the queues are emptied after)
    const [batchMs, batchCost] = yield* withPhaseCost(
      database,
      timed(
        Effect.forEach(
          Array.from({ length: EVENTS / 100 }, (_, b) => b),
          (b) =>
            EventBus.publishMany(
              Array.from({ length: 100 }, (_, i) => ({ routingKey: KEY, payload: { orderId: b * 100 + i } }))
            ),
          { concurrency: 4, discard: true }
        )
      )
    )
    const store = yield* QueueStore
    for (const s of subscribers) yield* store.purge(s.queue)

    const publishPerS = (EVENTS / publishMs) * 1000
    const handledPerS = ((EVENTS * subscribers.length) / handleMs) * 1000
    console.log(`bench:events — ${EVENTS} events × ${subscribers.length} subscribers; ${machine()}`)
    console.log(
      `publishers=${PUBLISHERS} consumer concurrency=${CONCURRENCY} per subscriber queue, pool=${POOL}, LISTEN/NOTIFY on`
    )
    console.log("| phase | rate | time | commits / event | WAL bytes / event |")
    console.log("| --- | --- | --- | --- | --- |")
    console.log(
      `| publish, one event per statement | ${round(publishPerS)} events/s | ${round(publishMs)} ms | ${costCells(publishCost, EVENTS)} |`
    )
    console.log(
      `| handle (3 subscriber queues) | ${round(handledPerS)} handler runs/s | ${round(handleMs)} ms | ${costCells(handleCost, EVENTS)} |`
    )
    console.log(
      `| publishMany, 100 per statement | ${round((EVENTS / batchMs) * 1000)} events/s | ${round(batchMs)} ms | ${costCells(batchCost, EVENTS)} |`
    )
    const publish = perUnit(publishCost, EVENTS)
    const handle = perUnit(handleCost, EVENTS)
    console.log(
      JSON.stringify({
        bench: "events",
        ours_publish_per_s: round(publishPerS),
        ours_handled_per_s: round(handledPerS),
        ours_publish_commits_per_event: publish.commits,
        ours_publish_wal_bytes_per_event: publish.walBytes,
        ours_handle_commits_per_event: handle.commits,
        ours_handle_wal_bytes_per_event: handle.walBytes
      })
    )
  }).pipe(Effect.provide(services), Effect.provideService(References.MinimumLogLevel, "Warn"))
}).pipe(Effect.scoped)

program.pipe(NodeRuntime.runMain({ disableErrorReporting: false }))
