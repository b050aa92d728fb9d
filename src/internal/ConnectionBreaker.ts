/**
 * The connection breaker (seed 002, "Client-level circuit breaker"): a process-local latch per
 * database target (`host:port`), fed by the sockets effect-pgbus opens (see `PoolCensus`). It
 * opens after `TRIP_AFTER` connection attempts in a row fail (refused, reset, or ended before the
 * server was ready) and closes at the first that succeeds. While it is open, reads fail fast
 * without taking a connection (`QueueStore`), and a half-open probe tests the database after a
 * backoff that starts at 1 s and doubles with each re-open, to 60 s. It needs no database to
 * work: the database is what is down. Enqueues are never short-circuited: their callers must see
 * their failures.
 *
 * @since 0.1.0
 */
import { Latch } from "effect"

/** Connection attempts in a row that must fail before the breaker opens. */
export const TRIP_AFTER = 5

/** The first probe's delay after the breaker opens; doubled at each re-open. */
export const FIRST_PROBE_MS = 1_000

/** The longest delay between probes. */
export const MAX_PROBE_MS = 60_000

/** A change the supervisor logs (one line each). */
export type BreakerChange =
  | { readonly _tag: "Opened"; readonly at: number; readonly failures: number; readonly nextProbeMs: number }
  | { readonly _tag: "Closed"; readonly at: number; readonly openForMs: number }

/** The breaker of one target. */
export interface Breaker {
  readonly target: string
  /** Whether reads may go to the database now. */
  readonly isOpen: () => boolean
  /** When it opened (epoch ms), while open. */
  readonly openedAt: () => number | undefined
  /** Epoch ms of the next probe, while open. */
  readonly nextProbeAt: () => number | undefined
  /** Takes the changes not yet taken. */
  readonly takeChanges: () => ReadonlyArray<BreakerChange>
  /** Opened at each change (for a watcher to wait on); close it before reading the changes. */
  readonly changed: Latch.Latch
  /** A connection attempt failed. */
  readonly failed: () => void
  /** A connection attempt succeeded. */
  readonly succeeded: () => void
  /** A probe is due and was not taken yet: takes it (the caller probes), else false. */
  readonly takeProbe: () => boolean
}

const breakers = new Map<string, Breaker>()

// Fed from socket callbacks outside any fiber and shared by every layer of the process, so its
// times are the wall clock's (`Date.now`): no Effect `Clock` is in reach there.
const makeBreaker = (target: string): Breaker => {
  let failures = 0
  let opened: number | undefined
  let reopenings = 0
  let probeAt: number | undefined
  let changes: Array<BreakerChange> = []
  const changed = Latch.makeUnsafe(false)
  const delay = () => Math.min(FIRST_PROBE_MS * 2 ** Math.min(reopenings, 16), MAX_PROBE_MS)
  return {
    target,
    isOpen: () => opened !== undefined,
    openedAt: () => opened,
    nextProbeAt: () => probeAt,
    takeChanges: () => {
      const taken = changes
      changes = []
      return taken
    },
    changed,
    failed: () => {
      failures++
      const now = Date.now()
      if (opened === undefined) {
        if (failures < TRIP_AFTER) return
        opened = now
        reopenings = 0
        probeAt = now + delay()
        changes.push({ _tag: "Opened", at: now, failures, nextProbeMs: delay() })
        changed.openUnsafe()
      } else if (probeAt === undefined) {
        // the probe (or any attempt after the probe was due) failed: open again, twice as long
        reopenings++
        probeAt = now + delay()
      }
    },
    succeeded: () => {
      failures = 0
      if (opened === undefined) return
      const now = Date.now()
      changes.push({ _tag: "Closed", at: now, openForMs: now - opened })
      opened = undefined
      probeAt = undefined
      reopenings = 0
      changed.openUnsafe()
    },
    takeProbe: () => {
      if (opened === undefined || probeAt === undefined || Date.now() < probeAt) return false
      probeAt = undefined
      return true
    }
  }
}

/** The breaker of a target (`host:port`, or a socket directory and port), made on first use. */
export const breakerFor = (target: string): Breaker => {
  let breaker = breakers.get(target)
  if (breaker === undefined) {
    breaker = makeBreaker(target)
    breakers.set(target, breaker)
  }
  return breaker
}
