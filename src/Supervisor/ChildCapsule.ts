/**
 * Child-process capsules: a capsule with `processes: N` runs in N child processes of the
 * supervisor, each supervised (restarted with backoff when it dies), recycled (drained, then
 * replaced) after `maxJobsPerProcess` jobs, past `maxMemoryMb` of RSS or after `maxLifetime`, and
 * drained with the parent on SIGTERM.
 *
 * How a child learns the app's jobs: it runs the parent's entry module again (`process.argv[1]`
 * with the same arguments and Node flags, `--import tsx` included), with `PGBUS_CHILD_CAPSULE`
 * naming the capsule it runs. Jobs and workflows are code, not data: only the app's own module can
 * build its registry, and re-running it builds the same one. The supervisor, seeing the variable,
 * runs that one capsule in-process with the workers role alone (no dispatcher, no scheduler, no
 * health server, no child processes of its own). `PGBUS_CHILD_PROCESS_ID` is the id of its row
 * in the processes table, chosen by the parent, so that the parent can release the claims of a
 * child that dies without draining at once, instead of after `staleProcessThreshold`.
 *
 * Node's `child_process.fork` rather than Effect's `ChildProcess`: the child and the parent talk
 * over the IPC channel (the child says why it recycles; a child whose parent died sees the
 * channel close and drains), and Effect 4.1's `ChildProcess` spawns without one.
 *
 * @since 0.1.0
 */
import { type ChildProcess, fork } from "node:child_process"
import { Config, Data, Deferred, Duration, Effect, Metric, Option, Schedule, Schema } from "effect"
import type { Message, Receipt } from "../Queue/Message.ts"
import { type Capsule, DEFAULT_MAX_BLOCKED } from "./Capsule.ts"

/** Names the capsule a child process runs (set by the parent; its presence makes a child). */
export const CHILD_CAPSULE_ENV = "PGBUS_CHILD_CAPSULE"
/** The child's id in the processes table (chosen by the parent). */
export const CHILD_PROCESS_ID_ENV = "PGBUS_CHILD_PROCESS_ID"
/** The child's slot among its capsule's `processes` (0-based), for its logs. */
export const CHILD_SLOT_ENV = "PGBUS_CHILD_SLOT"

/** What a child process runs, from the environment its parent set. */
export interface ChildRole {
  readonly capsule: string
  readonly processId: string
  readonly slot: number
}

/** This process's role as a child; None in a parent (or any process not started as a child). */
export const childRole: Effect.Effect<Option.Option<ChildRole>> = Effect.gen(function* () {
  const capsule = yield* Config.option(Config.String(CHILD_CAPSULE_ENV))
  if (Option.isNone(capsule)) return Option.none()
  const processId = yield* Config.String(CHILD_PROCESS_ID_ENV).pipe(Config.withDefault(crypto.randomUUID()))
  const slot = yield* Config.Int(CHILD_SLOT_ENV).pipe(Config.withDefault(0))
  return Option.some({ capsule: capsule.value, processId, slot })
}).pipe(Effect.orDie)

/** Why a child process was replaced: a recycling limit (after a drain), or it exited without one. */
export const RecycleReason = Schema.Literals(["max_jobs", "max_memory", "max_lifetime"])
export type RecycleReason = typeof RecycleReason.Type

/** What a child tells its parent over the IPC channel. */
const ChildMessage = Schema.Union([
  // before it drains to be replaced
  Schema.Struct({ pgbus: Schema.Literal("recycle"), reason: RecycleReason }),
  // its claims in flight: after each claim (before the claimed jobs run) and every ALIVE_EVERY
  Schema.Struct({
    pgbus: Schema.Literal("claims"),
    claims: Schema.Array(
      Schema.Struct({
        queue: Schema.String,
        msgId: Schema.String.check(Schema.isPattern(/^\d+$/)),
        readCt: Schema.Int
      })
    )
  })
])
const decodeChildMessage = Schema.decodeUnknownOption(ChildMessage)

/** A claim of a child, as its parent keeps it. */
export interface ChildClaim {
  readonly queue: string
  readonly receipt: Receipt
}

/** Child processes replaced, by capsule and reason. */
export const childReplacements = Metric.counter("pgbus_child_replacements_total", {
  description:
    "child processes of a capsule replaced, by reason: max_jobs, max_memory, max_lifetime (drained, then replaced), exited (died without a drain, restarted with backoff) or blocked (killed: its loop was blocked past maxBlocked)"
})

/** A child process that exited without being asked to (a crash, a kill, an exit of its own). */
export class ChildExited extends Data.TaggedError("ChildExited")<{
  readonly capsule: string
  readonly slot: number
  readonly code: number | null
  readonly signal: string | null
}> {}

// ---- the child's side

/** How often a child reads its RSS against `maxMemoryMb`. */
const MEMORY_CHECK_EVERY = Duration.seconds(1)

/**
 * Waits until this child should stop: its job budget spent (`budgetSpent`), its RSS past
 * `maxMemoryMb`, its lifetime past `maxLifetime` (each a recycle reason), or its parent gone (the
 * IPC channel closed: `undefined`, nobody to replace it).
 */
export const awaitRecycle = (
  capsule: Capsule,
  budgetSpent: Deferred.Deferred<void>
): Effect.Effect<RecycleReason | undefined> => {
  const waits: Array<Effect.Effect<RecycleReason | undefined>> = [
    Effect.as(Deferred.await(budgetSpent), "max_jobs" as const),
    Effect.callback<undefined>((resume) => {
      const gone = () => resume(Effect.succeed(undefined))
      if (process.send === undefined || !process.connected) {
        // started by hand with the variable set, no parent: nothing to wait for
        return
      }
      process.once("disconnect", gone)
      return Effect.sync(() => process.off("disconnect", gone))
    })
  ]
  const maxMemoryMb = capsule.maxMemoryMb
  if (maxMemoryMb !== undefined) {
    waits.push(
      Effect.sync(() => process.memoryUsage.rss() / (1024 * 1024)).pipe(
        Effect.repeat({ until: (mb) => mb > maxMemoryMb, schedule: Schedule.spaced(MEMORY_CHECK_EVERY) }),
        Effect.as("max_memory" as const)
      )
    )
  }
  if (capsule.maxLifetime !== undefined) {
    waits.push(Effect.as(Effect.sleep(capsule.maxLifetime), "max_lifetime" as const))
  }
  return Effect.raceAll(waits)
}

/**
 * Sends the parent a message, if it is there. A parent that died (SIGKILL) breaks the pipe while
 * `connected` still says true: the failure goes to the callback, not to an unhandled 'error'
 * event that would kill this child before its drain (the channel's close starts the drain).
 */
const toParent = (message: unknown): void => {
  const send = process.send?.bind(process)
  if (send === undefined || !process.connected) return
  try {
    send(message, undefined, undefined, () => {})
  } catch {
    // the channel closed between the check and the send: its close event drains this child
  }
}

/** Tells the parent why this child stops, before its drain: the parent replaces it once it exits. */
export const tellParent = (reason: RecycleReason): Effect.Effect<void> =>
  Effect.sync(() => toParent({ pgbus: "recycle", reason }))

/** How often a child tells its parent its claims (and so that it is alive: its event loop runs). */
const ALIVE_EVERY = Duration.millis(250)

/** Sends the parent the claims in flight; nothing without a parent. */
export const reportClaims = (inFlight: ReadonlySet<Message>): void => {
  if (process.send === undefined || !process.connected) return
  const claims = [...inFlight].map((m) => ({ queue: m.queue, msgId: String(m.msgId), readCt: m.readCt }))
  toParent({ pgbus: "claims", claims })
}

/**
 * Tells the parent the claims in flight every 250 ms, until interrupted: its silence is how the
 * parent knows that this child's event loop is blocked. Fork it before the workers, so that it
 * stops after their drain.
 */
export const tellClaimsWhileAlive = (inFlight: () => ReadonlySet<Message>): Effect.Effect<void> =>
  Effect.sync(() => reportClaims(inFlight())).pipe(Effect.repeat(Schedule.spaced(ALIVE_EVERY)), Effect.asVoid)

/** Closes the IPC channel at the very end, so that a drained child's event loop can empty and it exits. */
export const disconnectFromParent: Effect.Effect<void> = Effect.sync(() => {
  const disconnect = process.disconnect?.bind(process)
  if (disconnect !== undefined && process.connected) disconnect()
})

// ---- the parent's side

/** The module a child runs, with its arguments and Node flags (default: this process's own). */
export interface ChildEntry {
  readonly module: string
  readonly args: ReadonlyArray<string>
  readonly execArgv: ReadonlyArray<string>
}

/** This process's entry: its main module, arguments and Node flags. */
export const ownEntry = (): ChildEntry => ({
  module: process.argv[1] ?? "",
  args: process.argv.slice(2),
  execArgv: process.execArgv
})

/** What the parent needs to run a capsule's children. */
export interface ChildDeps {
  readonly entry: ChildEntry
  /** How long a child may drain after SIGTERM (the config's `drainTimeout`); then a margin, then SIGKILL. */
  readonly drainTimeout: Duration.Duration
  /** Releases the claims of a child that died without draining, and deletes its row. */
  readonly releaseDead: (processId: string) => Effect.Effect<number>
  /**
   * Keeps a silent child's claims: beats its process row and extends the visibility of the
   * claims it last reported (never fails: a failure is logged).
   */
  readonly keepClaims: (processId: string, claims: ReadonlyArray<ChildClaim>) => Effect.Effect<void>
  /** How often a silent child's claims are kept (the workers' visibility heartbeat). */
  readonly keepEvery: Duration.Duration
  /** Where readiness finds the children (none: not counted). */
  readonly slots?: ChildSlots | undefined
}

/** Margin over `drainTimeout` before a draining child is killed: its boot and its own finalizers. */
const STOP_MARGIN = Duration.seconds(10)

/** Restart backoff of a child that dies: 1 s, doubling, at most a minute. */
const RESTART_BACKOFF = Schedule.min([Schedule.exponential("1 second", 2), Schedule.spaced("1 minute")])

/** A child that ran this long before dying is restarted at once (the backoff is for crash loops). */
const HEALTHY_RUN = Duration.minutes(1)

interface Running {
  readonly child: ChildProcess
  readonly exited: Deferred.Deferred<{ readonly code: number | null; readonly signal: string | null }>
  readonly reason: () => RecycleReason | undefined
  /** When the child last spoke (performance.now()); undefined before its workers started. */
  readonly lastHeard: () => number | undefined
  readonly claims: () => ReadonlyArray<ChildClaim>
  /** Kills the child for a loop blocked past `maxBlocked` (SIGKILL), remembered for its replacement's reason. */
  readonly killBlocked: () => void
  readonly killedBlocked: () => boolean
}

/** Starts one child; closing the scope stops it (SIGTERM, its drain, then SIGKILL). */
const spawnChild = (capsule: Capsule, slot: number, processId: string, deps: ChildDeps) =>
  Effect.acquireRelease(
    Effect.sync((): Running => {
      let reason: RecycleReason | undefined
      let lastHeard: number | undefined
      let claims: ReadonlyArray<ChildClaim> = []
      let killedBlocked = false
      const exited = Deferred.makeUnsafe<{ readonly code: number | null; readonly signal: string | null }>()
      const child = fork(deps.entry.module, [...deps.entry.args], {
        execArgv: [...deps.entry.execArgv],
        env: {
          ...process.env,
          [CHILD_CAPSULE_ENV]: capsule.name,
          [CHILD_PROCESS_ID_ENV]: processId,
          [CHILD_SLOT_ENV]: String(slot)
        },
        // a process group of its own: a terminal's Ctrl-C reaches the parent alone, which drains
        // its children (a second signal would make a child exit at once, without its drain)
        detached: true,
        stdio: ["ignore", "inherit", "inherit", "ipc"]
      })
      child.on("message", (message) => {
        const decoded = decodeChildMessage(message)
        if (Option.isNone(decoded)) return
        lastHeard = performance.now()
        const said = decoded.value
        if (said.pgbus === "recycle") reason = said.reason
        else {
          claims = said.claims.map((c) => ({ queue: c.queue, receipt: { msgId: BigInt(c.msgId), readCt: c.readCt } }))
        }
      })
      child.once("exit", (code, signal) => Deferred.doneUnsafe(exited, Effect.succeed({ code, signal })))
      child.once("error", () => Deferred.doneUnsafe(exited, Effect.succeed({ code: null, signal: null })))
      return {
        child,
        exited,
        reason: () => reason,
        lastHeard: () => lastHeard,
        claims: () => claims,
        killBlocked: () => {
          killedBlocked = true
          child.kill("SIGKILL")
        },
        killedBlocked: () => killedBlocked
      }
    }),
    (running) =>
      Effect.gen(function* () {
        if (running.child.exitCode !== null || running.child.signalCode !== null) return
        running.child.kill("SIGTERM")
        const done = yield* Effect.timeoutOption(
          Deferred.await(running.exited),
          Duration.sum(deps.drainTimeout, STOP_MARGIN)
        )
        if (Option.isSome(done)) return
        yield* Effect.logWarning(
          `[pgbus] capsule ${capsule.name}: child ${slot} (pid ${running.child.pid}) did not drain in time; killing it`
        )
        running.child.kill("SIGKILL")
        yield* Deferred.await(running.exited)
        yield* deps.releaseDead(processId)
      })
  )

/** A child silent this long has a blocked event loop (it speaks every 250 ms). */
const SILENT_AFTER_MS = 1_000

/** How often the parent looks for a silent child. */
const KEEPER_TICK = Duration.millis(250)

/**
 * Keeps the claims of a child whose event loop is blocked (a CPU-bound job): while it is
 * silent, its process row is beaten (no process reaps it) and the claims it last reported are
 * extended every `keepEvery`, by the parent, whose loop is free. One line when it falls silent,
 * one when it speaks again. A child silent past the capsule's `maxBlocked` is taken for hung (an
 * endless loop): it is killed, so that its claims go back (when it exits) and its slot restarts.
 */
const keepWhileSilent = (capsule: Capsule, slot: number, processId: string, running: Running, deps: ChildDeps) =>
  Effect.gen(function* () {
    const maxBlockedMs = Duration.toMillis(Duration.fromInputUnsafe(capsule.maxBlocked ?? DEFAULT_MAX_BLOCKED))
    let silentSince: number | undefined
    let keptAt = 0
    while (true) {
      yield* Effect.sleep(KEEPER_TICK)
      const heard = running.lastHeard()
      const now = performance.now()
      if (heard === undefined) continue
      if (now - heard < SILENT_AFTER_MS) {
        if (silentSince !== undefined) {
          yield* Effect.logInfo(
            `[pgbus] capsule ${capsule.name}: child ${slot} (pid ${running.child.pid}) answers again after ${Math.round(now - silentSince)} ms`
          )
          silentSince = undefined
        }
        continue
      }
      if (silentSince === undefined) {
        silentSince = heard
        keptAt = 0
        yield* Effect.logWarning(
          `[pgbus] capsule ${capsule.name}: child ${slot} (pid ${running.child.pid}) silent for ${Math.round(now - heard)} ms (its event loop is blocked): the parent keeps its ${running.claims().length} claim(s) and its process row`
        )
      }
      if (now - heard >= maxBlockedMs) {
        yield* Effect.logError(
          `[pgbus] capsule ${capsule.name}: child ${slot} (pid ${running.child.pid}) silent for ${Math.round(now - heard)} ms, past maxBlocked (${Duration.format(Duration.millis(maxBlockedMs))}): killing it (SIGKILL); its ${running.claims().length} claim(s) go back`
        )
        running.killBlocked()
        return
      }
      if (now - keptAt >= Duration.toMillis(deps.keepEvery)) {
        keptAt = now
        yield* deps.keepClaims(processId, running.claims())
      }
    }
  })

/**
 * The children of a parent as its readiness counts them: every slot of a `processes` capsule is
 * expected; one is live while its child runs, has booted (it spoke) and is not silent (a blocked
 * loop). Probed when `/readyz` is asked, not kept up to date.
 */
export interface ChildLiveness {
  readonly expected: () => number
  readonly live: () => number
}

/** What readiness reads of a running child. */
export interface ChildProbe {
  readonly child: ChildProcess
  /** When the child last spoke (performance.now()); undefined before its workers started. */
  readonly lastHeard: () => number | undefined
}

/** The parent's registry of its children's slots: readiness reads it, `superviseChildren` writes it. */
export interface ChildSlots extends ChildLiveness {
  /** Records what runs in a slot (undefined: nothing, between a child's exit and its replacement). */
  readonly set: (capsule: Capsule, slot: number, running: ChildProbe | undefined) => void
}

/** A registry of children's slots for one parent. */
export const makeChildSlots = (): ChildSlots => {
  const slots = new Map<string, ChildProbe | undefined>()
  const key = (capsule: Capsule, slot: number) => `${capsule.name}/${slot}`
  return {
    expected: () => slots.size,
    live: () => {
      const now = performance.now()
      let n = 0
      for (const running of slots.values()) {
        const heard = running?.lastHeard()
        if (
          running !== undefined &&
          running.child.exitCode === null &&
          heard !== undefined &&
          now - heard < SILENT_AFTER_MS
        )
          n++
      }
      return n
    },
    set: (capsule, slot, running) => {
      slots.set(key(capsule, slot), running)
    }
  }
}

/** Runs one child until it exits: its recycle reason, or `ChildExited` when it died without one. */
const runChildOnce = (capsule: Capsule, slot: number, deps: ChildDeps) =>
  Effect.gen(function* () {
    const processId = crypto.randomUUID()
    const startedAt = performance.now()
    const { ended, pid, reason, blocked } = yield* Effect.scoped(
      Effect.gen(function* () {
        const running = yield* spawnChild(capsule, slot, processId, deps)
        deps.slots?.set(capsule, slot, running)
        yield* Effect.addFinalizer(() => Effect.sync(() => deps.slots?.set(capsule, slot, undefined)))
        // interrupted before the child is stopped: a draining child is not kept
        yield* Effect.forkScoped(keepWhileSilent(capsule, slot, processId, running, deps))
        const ended = yield* Deferred.await(running.exited)
        return { ended, pid: running.child.pid, reason: running.reason(), blocked: running.killedBlocked() }
      })
    )
    if (reason !== undefined) {
      yield* Metric.update(childReplacements.pipe(Metric.withAttributes({ capsule: capsule.name, reason })), 1)
      yield* Effect.logInfo(
        `[pgbus] capsule ${capsule.name}: child ${slot} (pid ${pid}) recycled (${reason}); starting its replacement`
      )
      return
    }
    yield* Metric.update(
      childReplacements.pipe(Metric.withAttributes({ capsule: capsule.name, reason: blocked ? "blocked" : "exited" })),
      1
    )
    // it drained nothing: what it had claimed goes back now, not after the stale threshold
    const released = yield* deps.releaseDead(processId)
    yield* Effect.logError(
      `[pgbus] capsule ${capsule.name}: child ${slot} (pid ${pid}) ${ended.code === 0 ? "exited on its own (code 0)" : `exited without a drain (${ended.signal ?? `code ${ended.code}`})`}; released ${released} claimed message(s); restarting`
    )
    if (performance.now() - startedAt >= Duration.toMillis(HEALTHY_RUN)) return
    return yield* new ChildExited({ capsule: capsule.name, slot, code: ended.code, signal: ended.signal })
  })

/**
 * Runs the children of a capsule until interrupted: each slot restarted with backoff when its
 * child dies, replaced at once when it recycles; interruption drains them all.
 */
export const superviseChildren = (capsule: Capsule, deps: ChildDeps): Effect.Effect<void> =>
  Effect.sync(() => {
    for (let slot = 0; slot < (capsule.processes ?? 0); slot++) deps.slots?.set(capsule, slot, undefined)
  }).pipe(Effect.andThen(superviseSlots(capsule, deps)))

const superviseSlots = (capsule: Capsule, deps: ChildDeps): Effect.Effect<void> =>
  Effect.forEach(
    Array.from({ length: capsule.processes ?? 0 }, (_, slot) => slot),
    (slot) =>
      runChildOnce(capsule, slot, deps).pipe(
        // the backoff never ends: a child is restarted for as long as the parent runs
        Effect.retry(RESTART_BACKOFF),
        Effect.orDie,
        Effect.forever,
        Effect.asVoid
      ),
    { concurrency: "unbounded", discard: true }
  )
