/**
 * A run's last outcome, shared with other runs' (`execution/Outcome.ts`), is left in flight when
 * its execution returns: the worker frees the executor at once and acknowledges the step's message
 * only once the outcome has committed (`Job/Settling.ts`). What a user sees: the capsule's slot
 * runs other work while that outcome waits, a drain waits for it, and nothing runs twice or is lost.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Ref, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { PgBusConfigInput } from "../src/Config.ts"
import * as Job from "../src/Job/Job.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { onFreshDatabase } from "./support/TestDatabase.ts"

/** The run's status as stored. */
const runStatus = (runId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly status: string }>`SELECT status FROM pgbus.workflow_runs WHERE id = ${runId}::uuid`.pipe(
      Effect.map((rows) => rows[0]?.status)
    )
  )

/** Whether a backend of this database waits for a lock (the outcome statement, behind the test's lock). */
const someoneWaitsOnALock = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
    WHERE datname = current_database() AND wait_event_type = 'Lock'`.pipe(Effect.map((rows) => rows[0]!.n > 0))
)

/**
 * A one-step run whose step waits at `gate`, on a capsule of one slot; once the step has started,
 * the run's row is locked by a transaction of the test's until `unlock`, so that the run's last
 * outcome waits on that lock once the gate opens.
 */
const withOutcomeHeld = <A, E, R>(
  options: PgBusConfigInput,
  body: (t: {
    readonly runId: string
    readonly stepRuns: Ref.Ref<number>
    readonly otherRan: Deferred.Deferred<void>
    readonly Other: Job.Job<"SettleOther", { readonly n: number }, void, never, never>
    readonly supervisor: Fiber.Fiber<unknown, unknown>
    readonly unlock: Effect.Effect<void>
    readonly Settle: Workflow.Workflow<"Settle", Record<string, never>, void>
  }) => Effect.Effect<A, E, R>
) =>
  onFreshDatabase({ pollingInterval: "100 millis", ...options }, () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const gate = yield* Deferred.make<void>()
      const stepRuns = yield* Ref.make(0)
      const otherRan = yield* Deferred.make<void>()
      const Settle = Workflow.make("Settle", { payload: Schema.Struct({}) }, function* () {
        yield* Workflow.step(
          "only",
          Effect.andThen(
            Ref.update(stepRuns, (n) => n + 1),
            Deferred.await(gate)
          )
        )
      })
      const Other = Job.make("SettleOther", { payload: Schema.Struct({ n: Schema.Number }) }, () =>
        Effect.asVoid(Deferred.succeed(otherRan, undefined))
      )
      const supervisor = yield* startSupervisor([Settle, Other], {
        capsules: [{ name: "one", queues: ["default"], concurrency: 1 }]
      })
      const run = yield* Settle.start({})
      yield* eventually(
        "the step started",
        Effect.map(Ref.get(stepRuns), (n) => n === 1)
      )
      const locked = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const holder = yield* Effect.forkChild(
        sql.withTransaction(
          Effect.andThen(
            sql`SELECT 1 FROM pgbus.workflow_runs WHERE id = ${run.id}::uuid FOR UPDATE`,
            Effect.andThen(Deferred.succeed(locked, undefined), Deferred.await(release))
          )
        )
      )
      yield* Deferred.await(locked)
      yield* Deferred.succeed(gate, undefined)
      yield* eventually("the run's last outcome waits on the test's lock", someoneWaitsOnALock)
      const unlock = Effect.andThen(Deferred.succeed(release, undefined), Fiber.join(holder)).pipe(Effect.orDie)
      return yield* body({ runId: run.id, stepRuns, otherRan, Other, supervisor, unlock, Settle }).pipe(
        Effect.ensuring(unlock)
      )
    })
  )

describe("a run's last outcome left in flight", () => {
  it.live("frees its executor: a job handed to the capsule's only slot runs while the outcome waits", () =>
    withOutcomeHeld({}, ({ runId, Other, otherRan, stepRuns, unlock }) =>
      Effect.gen(function* () {
        yield* Other.enqueue({ n: 1 })
        const ran = yield* Deferred.await(otherRan).pipe(Effect.timeoutOption("5 seconds"))
        assert.isTrue(ran._tag === "Some", "the job ran while the run's last outcome was held")
        assert.strictEqual(yield* runStatus(runId), "performing", "the outcome had not committed yet")
        yield* unlock
        yield* eventually(
          "the run finished",
          Effect.map(runStatus(runId), (s) => s === "finished")
        )
        const store = yield* QueueStore
        yield* eventually(
          "the step's message was acknowledged once the outcome committed",
          Effect.map(store.metrics("default"), (m) => m.depth === 0)
        )
        assert.strictEqual(yield* Ref.get(stepRuns), 1, "the step ran once")
      })
    )
  )

  it.live("is waited for by a drain: the supervisor stops only once it has committed", () =>
    withOutcomeHeld({}, ({ runId, supervisor, stepRuns, unlock }) =>
      Effect.gen(function* () {
        const stopping = yield* Effect.forkChild(Fiber.interrupt(supervisor))
        yield* Effect.sleep("500 millis")
        assert.isUndefined(stopping.pollUnsafe(), "the drain still waits for the outcome")
        assert.strictEqual(yield* runStatus(runId), "performing")
        yield* unlock
        yield* Fiber.join(stopping)
        assert.strictEqual(yield* runStatus(runId), "finished", "the outcome committed before the supervisor stopped")
        const store = yield* QueueStore
        const metrics = yield* store.metrics("default")
        assert.strictEqual(metrics.depth, 0, "its message was acknowledged, not left for a redelivery")
        assert.strictEqual(yield* Ref.get(stepRuns), 1, "the step ran once")
      })
    )
  )

  it.live("sent again when its connection is lost while it waits: the run finishes, its step run once", () =>
    withOutcomeHeld({}, ({ runId, stepRuns, unlock }) =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        // the workers' session carries the shared outcome: end it while the outcome waits
        yield* sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'`
        yield* Effect.sleep("300 millis")
        yield* unlock
        yield* eventually(
          "the run finished",
          Effect.map(runStatus(runId), (s) => s === "finished"),
          "20 seconds"
        )
        const store = yield* QueueStore
        yield* eventually(
          "the step's message was acknowledged",
          Effect.map(store.metrics("default"), (m) => m.depth === 0),
          "20 seconds"
        )
        assert.strictEqual(yield* Ref.get(stepRuns), 1, "the step ran once")
      })
    )
  )

  it.live(
    "past the drain timeout, its message is given back: a later supervisor acknowledges it, the step not run again",
    () =>
      withOutcomeHeld({ drainTimeout: "300 millis" }, ({ runId, supervisor, stepRuns, unlock, Settle, Other }) =>
        Effect.gen(function* () {
          // the drain gives up on the outcome at its timeout; the give-back and the last flush go
          // over the workers' session, behind the held statement, so it ends once that one has
          const stopping = yield* Effect.forkChild(Fiber.interrupt(supervisor))
          yield* Effect.sleep("800 millis")
          yield* unlock
          yield* Fiber.join(stopping)
          yield* eventually(
            "the outcome sent before the drain timed out committed",
            Effect.map(runStatus(runId), (s) => s === "finished")
          )
          yield* startSupervisor([Settle, Other], { capsules: [{ name: "one", queues: ["default"], concurrency: 1 }] })
          const store = yield* QueueStore
          yield* eventually(
            "the given-back message was acknowledged by the next supervisor",
            Effect.map(store.metrics("default"), (m) => m.depth === 0),
            "20 seconds"
          )
          assert.strictEqual(yield* runStatus(runId), "finished")
          assert.strictEqual(yield* Ref.get(stepRuns), 1, "the step ran once")
        })
      )
  )
})
