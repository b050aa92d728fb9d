/** The dispatcher's maintenance tasks share a process's permits: no burst, and no sweep held up by a retention. */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Duration, Effect } from "effect"
import { forkDispatcherLoops, MAINTENANCE_PERMITS, repeatMaintenance } from "../src/Supervisor/Dispatcher.ts"
import { eventually } from "./support/jobs.ts"

/** Tasks that count how many of them run at once (all, and the walks among them). */
const makeCounter = () => {
  const figures = { running: 0, most: 0, walking: 0, mostWalking: 0, sweeps: 0, reaps: 0 }
  const task = <A>(value: A, walks: boolean, hold: Effect.Effect<void> = Effect.sleep("15 millis")) =>
    Effect.acquireUseRelease(
      Effect.sync(() => {
        figures.running++
        figures.most = Math.max(figures.most, figures.running)
        if (walks) {
          figures.walking++
          figures.mostWalking = Math.max(figures.mostWalking, figures.walking)
        }
      }),
      () => Effect.as(hold, value),
      () =>
        Effect.sync(() => {
          figures.running--
          if (walks) figures.walking--
        })
    )
  return { figures, task }
}

describe("dispatcher maintenance permits", () => {
  it.live(
    "its tasks' first rounds, all due at once, run at most two at a time, one walk at most; a long archive retention does not hold the workflow sweep or reaping up",
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
          batchSweep: { runOnce: task(batchReport, true) },
          reapStale: Effect.tap(task(undefined, false), () =>
            Effect.sync(() => {
              figures.reaps++
            })
          ),
          uniqueKeys: { reap: task({ released: 0 }, true) },
          processedEvents: { purge: task(0, true) },
          jobStatsSql: { jobStatsDeleteOld: () => task(0, true) },
          store: {
            cleanupArchive: () =>
              task([], true, Effect.andThen(Deferred.succeed(archiveStarted, undefined), Deferred.await(archiveHeld)))
          },
          outbox: { pollerRole: Effect.void },
          afterWorkersRamp: (loop) => Effect.andThen(loop, Effect.never),
          maintain: (name, t, every) => repeatMaintenance(name, t, every)
        })
        // the archive retention (forked last) holds its permit until the test ends it
        yield* Deferred.await(archiveStarted)
        const before = { ...figures }
        yield* eventually(
          "the workflow sweep and reaping go on beside it",
          Effect.sync(() => figures.sweeps >= before.sweeps + 5 && figures.reaps >= before.reaps + 5)
        )
        yield* Deferred.succeed(archiveHeld, undefined)
        assert.strictEqual(MAINTENANCE_PERMITS, 2)
        assert.isAtMost(figures.most, MAINTENANCE_PERMITS, "maintenance tasks at once")
        assert.strictEqual(figures.mostWalking, 1, "walks at once")
      }).pipe(Effect.scoped)
  )
})
