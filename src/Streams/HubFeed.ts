/**
 * The hub's reading of the stream queue as a feed: from the tail at start, then after its
 * cursor, rereading the holes below it (ids handed out at insert, committed later or never)
 * until each appears or is given up, and handing each row to the fan-out.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Metric, Semaphore } from "effect"
import type { QueueStore } from "../Queue/QueueStore.ts"
import { readEnvelope, STREAM_FIELD } from "./Envelope.ts"
import type { HubFanOut } from "./HubFanOut.ts"
import { framesTotal, type HubState } from "./HubState.ts"
import type { StreamsConfigShape } from "./StreamsConfig.ts"

/** A hole older than this is given up even if some transaction of its time still runs. */
export const MAX_HOLE_AGE_MS = 5 * 60_000

/** Most holes the hub tracks (a larger gap keeps only its newest ids). */
export const MAX_HOLES = 1_000

/** How long after a hole is seen the transactions it waits for are taken (its inserter has its xid by then). */
const HOLE_SETTLE_MS = 50

const READ_LIMIT = 500
const MAX_ID = 9_223_372_036_854_775_807n
const TAIL_SPAN = 256
/** Above this many streams with connections, the feed brings every message rather than a list of keys. */
const MAX_KEYS = 500

/** Builds the feed's reads (`poll`, one at a time) and its start over the hub's state. */
export const makeHubFeed = (
  config: StreamsConfigShape,
  store: QueueStore["Service"],
  state: HubState,
  { liveRow, deliverRow, warnUnknownFilters, countCloses }: HubFanOut
) =>
  Effect.gen(function* () {
    const { byStream, holes } = state

    // Moves the cursor over one row of the feed (a late commit fills its hole).
    const advance = (msgId: bigint, now: number): boolean => {
      if (holes.delete(msgId)) return true
      if (msgId <= state.cursor) return false
      const gap = msgId - state.cursor - 1n
      const from = gap > BigInt(MAX_HOLES) ? msgId - BigInt(MAX_HOLES) : state.cursor + 1n
      for (let id = from; id < msgId; id++) holes.set(id, { seenAt: now, wait: undefined })
      state.cursor = msgId
      return true
    }

    // Which holes may be given up, judged before the read that could still find them.
    const settleHoles = (now: number) =>
      Effect.gen(function* () {
        if (holes.size === 0) return new Set<bigint>()
        const waiting = new Set<string>()
        for (const hole of holes.values()) for (const x of hole.wait ?? []) waiting.add(x)
        const { inProgress, running } = yield* store.feed.transactions([...waiting])
        const over = new Set<bigint>()
        for (const [id, hole] of holes) {
          if (now - hole.seenAt > MAX_HOLE_AGE_MS) over.add(id)
          else if (hole.wait !== undefined) {
            if (hole.wait.every((x) => !running.has(x))) over.add(id)
          } else if (now - hole.seenAt >= HOLE_SETTLE_MS) hole.wait = inProgress
        }
        return over
      })

    // one read of the feed at a time: the loop's, and a watermark's catch-up
    const reading = yield* Semaphore.make(1)
    const poll = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const over = yield* settleHoles(now)
      let more = true
      while (more) {
        const streams = [...byStream.keys()]
        const rows = yield* store.feed.readAfter(config.queue, {
          field: STREAM_FIELD,
          after: state.cursor,
          ids: [...holes.keys()],
          keys: streams.length > MAX_KEYS ? "all" : streams,
          limit: READ_LIMIT
        })
        const after = state.cursor
        more = rows.filter((r) => r.msgId > after).length >= READ_LIMIT
        // a stream that got its first connection while the read was in flight: its messages were not brought
        const unread = rows.filter((r) => r.message === undefined && r.key !== undefined && byStream.has(r.key))
        const fetched =
          unread.length === 0
            ? new Map<bigint, unknown>()
            : new Map(
                (yield* store.feed.readAfter(config.queue, {
                  field: STREAM_FIELD,
                  after: MAX_ID,
                  ids: unread.map((r) => r.msgId),
                  keys: "all",
                  limit: 1
                })).map((r) => [r.msgId, r.message])
              )
        let frames = 0
        for (const row of rows) {
          if (!advance(row.msgId, now) || row.key === undefined) continue
          const message = row.message ?? fetched.get(row.msgId)
          if (message === undefined) continue
          const envelope = readEnvelope(message)
          if (envelope._tag === "None") continue
          frames += deliverRow(liveRow(row.msgId, envelope.value), row.key, now)
        }
        if (frames > 0) yield* Metric.update(framesTotal, frames)
      }
      for (const id of over) holes.delete(id)
      yield* warnUnknownFilters
      yield* countCloses
    }).pipe(reading.withPermit)

    const ensureStarted = Effect.suspend(() => {
      if (state.started) return Effect.void
      return Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const tail = yield* store.feed.tail(config.queue, TAIL_SPAN)
        if (state.started) return
        state.started = true
        state.cursor = tail.last
        for (const id of tail.missing) holes.set(id, { seenAt: now, wait: undefined })
      })
    })

    return { poll, ensureStarted }
  })

/** The hub's feed. */
export type HubFeed = Effect.Success<ReturnType<typeof makeHubFeed>>
