/** The dispatcher's maintenance tasks share a process's permits: no burst, and no sweep held up by a retention. */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Duration, Effect } from "effect"
import { forkDispatcherLoops, MAINTENANCE_PERMITS, repeatMaintenance } from "../src/Supervisor/Dispatcher.ts"
import { eventually } from "./support/jobs.ts"

/** Tasks that count how many of them run at once (all, and the retentions among them). */
const makeCounter = () => {
  const figures = { running: 0, most: 0, retaining: 0, mostRetaining: 0, sweeps: 0 }
  const task = <A>(value: A, retention: boolean, hold: Effect.Effect<void> = Effect.sleep("15 millis")) =>
    Effect.acquireUseRelease(
      Effect.sync(() => {
        figures.running++
        figures.most = Math.max(figures.most, figures.running)
        if (retention) {
          figures.retaining++
          figures.mostRetaining = Math.max(figures.mostRetaining, figures.retaining)
        }
      }),
      () => Effect.as(hold, value),
      () =>
        Effect.sync(() => {
          figures.running--
          if (retention) figures.retaining--
        })
    )
  return { figures, task }
}

describe("dispatcher maintenance permits", () => {
  it.live(
    "its tasks' first rounds, all due at once, run at most two at a time, one retention at most; a long retention does not hold the workflow sweep up",
    () =>
      Effect.gen(function* () {
        const { figures, task } = makeCounter()
        const archiveHeld = yield* Deferred.make<void>()
        const archiveStarted = yield* Deferred.make<void>()
        const sweepReport = { stalled: 0, resent: 0, timedOut: 0, deleted: 0 }
        const batchReport = { recovered: 0, uncounted: 0, unstuck: 0, finished: 0, callbacksSent: 0, deleted: 0 }
        yield* forkDispatcherLoops({
          config: {
            workflowSweepInterval: Duration.millis(5),
            batchSweepInterval: Duration.millis(5),
            dispatchInterval: Duration.millis(5)
          },
          sweep: {
            runOnce: Effect.tap(task(sweepReport, false), () =>
              Effect.sync(() => {
                figures.sweeps++
              })
            )
          },
          batchSweep: { runOnce: task(batchReport, false) },
          reapStale: task(undefined, false),
          uniqueKeys: { reap: task({ released: 0 }, false) },
          processedEvents: { purge: task(0, true) },
          jobStatsSql: { jobStatsDeleteOld: () => task(0, true) },
          store: {
            cleanupArchive: () =>
              task([], true, Effect.andThen(Deferred.succeed(archiveStarted, undefined), Deferred.await(archiveHeld)))
          },
          outbox: { pollerRole: Effect.void },
          afterFirstClaims: (loop) => Effect.andThen(loop, Effect.never),
          maintain: (name, t, every) => repeatMaintenance(name, t, every)
        })
        // the archive retention (forked last) holds its permit until the test ends it
        yield* Deferred.await(archiveStarted)
        const sweepsBefore = figures.sweeps
        yield* eventually(
          "the workflow sweep goes on beside it",
          Effect.sync(() => figures.sweeps >= sweepsBefore + 5)
        )
        yield* Deferred.succeed(archiveHeld, undefined)
        assert.strictEqual(MAINTENANCE_PERMITS, 2)
        assert.isAtMost(figures.most, MAINTENANCE_PERMITS, "maintenance tasks at once")
        assert.strictEqual(figures.mostRetaining, 1, "retentions at once")
      }).pipe(Effect.scoped)
  )
})
