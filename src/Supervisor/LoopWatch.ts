/**
 * The event-loop watchdog: a tick every 100 ms measures how late it fires. A tick late by
 * `eventLoopBlockThreshold` or more means the loop was blocked (a CPU-bound handler, a huge
 * JSON parse): every heartbeat, claim and timer of the process waited that long. It is logged
 * once per block, naming the deliveries that ran during it (`RunningJobs`), counted
 * (`pgbus_event_loop_blocks_total`), and readiness says DEGRADED for 30 s after. The
 * watchdog runs on the blocked loop itself, so it reports when the block ends: a handler that
 * must burn CPU belongs in a process of its own.
 *
 * @since 0.1.0
 */
import { Clock, Duration, Effect, Metric } from "effect"
import * as RunningJobs from "../Job/RunningJobs.ts"

/** The tick of the watchdog. */
const TICK_MS = 100

/** How long readiness says DEGRADED after a block. */
export const DEGRADED_FOR_MS = 30_000

/** Blocks of the event loop past the threshold. */
export const loopBlocks = Metric.counter("pgbus_event_loop_blocks_total", {
  description: "times the event loop was blocked for eventLoopBlockThreshold or more"
})

/** The last block seen, for readiness. */
export interface LoopBlock {
  /** When it was seen (epoch ms, the program's clock). */
  readonly at: number
  readonly blockedMs: number
  readonly jobs: ReadonlyArray<string>
}

/** Watches the loop until interrupted; `onBlock` hears of each block (after its line is logged). */
export const watchEventLoop = (threshold: Duration.Duration, onBlock: (block: LoopBlock) => void) =>
  Effect.gen(function* () {
    const thresholdMs = Duration.toMillis(threshold)
    while (true) {
      // the loop's own lateness is real time, whatever clock the program runs on (a TestClock
      // advanced by days is no block): performance.now(), as RunningJobs records
      const before = performance.now()
      yield* Effect.sleep(Duration.millis(TICK_MS))
      const after = performance.now()
      const blockedMs = Math.round(after - before - TICK_MS)
      if (blockedMs < thresholdMs) continue
      const jobs = RunningJobs.during(after - blockedMs, after).map((j) => `${j.job} #${j.msgId} on ${j.queue}`)
      yield* Effect.logWarning(
        `[pgbus] event loop blocked for ${blockedMs} ms${jobs.length > 0 ? ` while running ${jobs.join(", ")}` : ""}: heartbeats and claims of this process waited as long; move CPU-bound work to a process of its own`
      ).pipe(Effect.annotateLogs({ blocked_ms: blockedMs }))
      yield* Metric.update(loopBlocks, 1)
      onBlock({ at: yield* Clock.currentTimeMillis, blockedMs, jobs })
    }
  })
