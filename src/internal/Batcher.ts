import { Effect, Exit } from "effect"

/** How a batcher sends its items (see `makeBatcher`). */
export interface BatcherOptions<I, O, E> {
  /** Sends a batch in one go: one output per item, in order. */
  readonly many: (items: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<O>, E>
  /** Sends one item alone: used for each item of a batch whose `many` failed. */
  readonly one: (item: I) => Effect.Effect<O, E>
  /**
   * Batches out at once (default 1). A batch beyond the first leaves only once three items, and
   * a quarter of the items lately in play (out or waiting), wait: the items then go in cohorts
   * that take turns, the database applying one's statement while the process runs the others'
   * next steps, and no statement leaves for a straggler or two.
   */
  readonly maxOut?: number | undefined
  /** Most items in one batch (default 64). */
  readonly maxBatch?: number | undefined
  /** Items with one key never share a batch, nor are out at once (the later one waits for the next). */
  readonly key?: ((item: I) => string) | undefined
  /**
   * Batchers of one group share the group's `maxOut` (this batcher's own is then ignored): while
   * a batch of one is out, the items of all pile up, and when it returns each batcher, in turn,
   * sends what waits while the limit allows.
   */
  readonly group?: BatchGroup | undefined
}

/** Batchers sharing one limit of batches out (see `BatcherOptions.group`). */
export interface BatchGroup {
  readonly maxOut: number
  out: number
  readonly pumps: Array<Effect.Effect<void>>
}

/** A group of batchers with at most `maxOut` batches out between them (default 1). */
export const makeBatchGroup = (maxOut = 1): BatchGroup => ({ maxOut, out: 0, pumps: [] })

/**
 * Opportunistic batching: an item sent while fewer than `maxOut` batches are out leaves at once
 * (alone, if nothing else waits); otherwise it waits for a batch to return and leaves with
 * everything that piled up meanwhile. Under load many items share one statement (one round trip,
 * one commit); idle, nothing waits. If a batch fails, each of its items is sent alone and fails
 * (or not) alone. An item interrupted while it waits is dropped; once sent, it is applied.
 */
export const makeBatcher = <I, O, E>(options: BatcherOptions<I, O, E>): ((item: I) => Effect.Effect<O, E>) => {
  // An item's outcome goes straight to its waiting fiber (no Deferred: its await, its
  // interruption handler and its completion were a fifth of a workflow step's Effect work).
  interface Queued {
    readonly item: I
    /** Its outcome, when it came before its fiber waited. */
    exit: Exit.Exit<O, E> | undefined
    /** Resumes its waiting fiber (unset once resumed or interrupted). */
    resume: ((exit: Exit.Exit<O, E>) => void) | undefined
  }
  const group: BatchGroup = options.group ?? makeBatchGroup(options.maxOut ?? 1)
  const maxBatch = options.maxBatch ?? 64
  const waiting: Array<Queued> = []
  // items sent and not yet returned; the most items in play (out or waiting) lately, which
  // falls by one at each batch taken unless the items in play keep it up
  let itemsOut = 0
  let peak = 0
  // the keys of the items out (a key is out once at most: its next item waits for it)
  const keysOut = new Set<string>()

  /** Hands an item its outcome. */
  const complete = (q: Queued, exit: Exit.Exit<O, E>): void => {
    const resume = q.resume
    if (resume === undefined) q.exit = exit
    else {
      q.resume = undefined
      resume(exit)
    }
  }

  /** The batch's items are back: no longer out. */
  const returned = (batch: ReadonlyArray<Queued>, keys: ReadonlyArray<string>) =>
    Effect.sync(() => {
      itemsOut -= batch.length
      for (const key of keys) keysOut.delete(key)
    })

  const send = (batch: ReadonlyArray<Queued>): Effect.Effect<void> =>
    options.many(batch.map((q) => q.item)).pipe(
      Effect.flatMap((outputs) =>
        outputs.length === batch.length
          ? Effect.sync(() => {
              for (let i = 0; i < batch.length; i++) complete(batch[i]!, Exit.succeed(outputs[i]!))
            })
          : Effect.die(new Error(`a batch of ${batch.length} gave ${outputs.length} outputs`))
      ),
      Effect.catchCause(() =>
        Effect.forEach(batch, (q) => Effect.map(Effect.exit(options.one(q.item)), (exit) => complete(q, exit)), {
          discard: true
        })
      )
    )

  /** A batch returned: the next ones of the group leave. */
  const release = (): Effect.Effect<void> => {
    group.out--
    // the other batchers of the group first, this one last: none waits behind another forever
    const at = group.pumps.indexOf(pump)
    const order = [...group.pumps.slice(at + 1), ...group.pumps.slice(0, at + 1)]
    return Effect.forEach(order, (p) => p, { discard: true })
  }

  /**
   * Takes the next batch if the limit allows: the Effect that sends it (forked), or undefined when
   * nothing leaves. Synchronous, so an item's own call makes no Effect when it only waits.
   */
  const takeBatch = (): Effect.Effect<void> | undefined => {
    if (group.out >= group.maxOut || waiting.length === 0) return undefined
    const inPlay = itemsOut + waiting.length
    peak = Math.max(inPlay, peak - 1)
    // beyond the first batch out, only a cohort: three or more, and a quarter of those lately in
    // play; stragglers wait for a batch to return. In W3 (10 executors), half made two even
    // cohorts with less overlap (731 runs/s against 798, medians of 4 alternated runs); any one
    // at once, a statement for each straggler, was slower than one batch out. Fewer than three
    // made the tail of off-process signals longer (their worker's reads share the session)
    if (group.out > 0 && (waiting.length < 3 || waiting.length * 4 < peak)) return undefined
    const batch: Array<Queued> = []
    const keys = new Set<string>()
    for (let i = 0; i < waiting.length && batch.length < maxBatch; ) {
      const q = waiting[i]!
      const key = options.key?.(q.item)
      if (key !== undefined && (keys.has(key) || keysOut.has(key))) i++
      else {
        if (key !== undefined) keys.add(key)
        batch.push(q)
        waiting.splice(i, 1)
      }
    }
    if (batch.length === 0) return undefined
    group.out++
    itemsOut += batch.length
    const batchKeys = [...keys]
    for (const key of batchKeys) keysOut.add(key)
    // detached: a batch is applied whatever happens to the fibers waiting on it
    return Effect.asVoid(
      Effect.forkDetach(
        Effect.uninterruptible(Effect.ensuring(send(batch), returned(batch, batchKeys))).pipe(
          // the batch stays out for one turn of the scheduler after it returns: the fibers it
          // woke run on to their next item (a run's next outcome) and leave with what piled up,
          // instead of the first of them leaving alone (W3: 0.82 -> 0.62 statements per run)
          Effect.ensuring(Effect.andThen(Effect.yieldNow, Effect.suspend(release)))
        )
      )
    )
  }
  const pump: Effect.Effect<void> = Effect.suspend(() => takeBatch() ?? Effect.void)

  group.pumps.push(pump)
  // per item: no generator and no Effect to pump the batcher (a workflow step sends one or two
  // items): the item's batch, if it leaves now, is taken at once; then its fiber waits for it
  return (item) =>
    Effect.suspend(() => {
      const queued: Queued = { item, exit: undefined, resume: undefined }
      waiting.push(queued)
      const sent = takeBatch()
      const awaited = Effect.callback<O, E>((resume) => {
        if (queued.exit !== undefined) return resume(queued.exit)
        queued.resume = resume
        // interrupted while it waits: dropped if not sent yet (once sent, it is applied)
        return Effect.sync(() => {
          queued.resume = undefined
          const at = waiting.indexOf(queued)
          if (at >= 0) waiting.splice(at, 1)
        })
      })
      return sent === undefined ? awaited : Effect.andThen(sent, awaited)
    })
}
