/**
 * A worker's visibility heartbeat: it keeps the claim of every message in flight from lapsing,
 * one statement per queue and claim lease.
 *
 * @since 0.1.0
 */
import { Duration, Effect, Schedule } from "effect"
import { type Message, type Receipt, receiptOf } from "../../Queue/Message.ts"
import { claimLeaseMs, heartbeatIntervalMs, leaseFloorMs } from "../../Queue/SlotLease.ts"
import type { WorkerContext } from "./Context.ts"

/**
 * The receipts of `messages` by queue and by claim lease (a limited job's `limit.duration`, or
 * the visibility timeout): one heartbeat statement per group, usually one per queue.
 */
const groupByQueueAndLease = (
  messages: Iterable<Message>,
  visibilityMs: number,
  floorMs: number
): Array<{ readonly queue: string; readonly leaseMs: number; readonly receipts: Array<Receipt> }> => {
  const out = new Map<string, { readonly queue: string; readonly leaseMs: number; readonly receipts: Array<Receipt> }>()
  for (const m of messages) {
    const leaseMs = claimLeaseMs(m, visibilityMs, floorMs)
    const key = `${m.queue}\u0000${leaseMs}`
    const group = out.get(key)
    if (group === undefined) out.set(key, { queue: m.queue, leaseMs, receipts: [receiptOf(m)] })
    else group.receipts.push(receiptOf(m))
  }
  return [...out.values()]
}

/** Extends the visibility of every message in flight, every heartbeat interval, forever. */
export const makeHeartbeat = (ctx: WorkerContext): Effect.Effect<never> => {
  const { config, store, inFlight, visibilityMs } = ctx
  const heartbeatEvery = Duration.millis(heartbeatIntervalMs(config))
  // a limited job's own slot lease (`limit.duration`) is renewed as such, raised to two beats
  const leaseFloor = leaseFloorMs(config)
  // under the flush lock: a message archived while its visibility is being extended is not lost
  return ctx.flushLock
    .withPermit(
      Effect.gen(function* () {
        if (inFlight.size === 0) return
        for (const { queue, leaseMs, receipts } of groupByQueueAndLease(inFlight, visibilityMs, leaseFloor)) {
          const extended = yield* store
            .setVisibility(queue, receipts, Duration.millis(leaseMs))
            .pipe(
              Effect.catch((error) => Effect.as(Effect.logWarning("pgbus: heartbeat failed", error), receipts.length))
            )
          if (extended < receipts.length) {
            yield* Effect.logWarning(`pgbus: ${receipts.length - extended} message(s) on ${queue} lost their claim`)
          }
        }
      })
    )
    .pipe(Effect.repeat(Schedule.spaced(heartbeatEvery)), Effect.forever)
}
