import { Deferred, Effect } from "effect"

/** How a batcher sends its items (see `makeBatcher`). */
export interface BatcherOptions<I, O, E> {
  /** Sends a batch in one go: one output per item, in order. */
  readonly many: (items: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<O>, E>
  /** Sends one item alone: used for each item of a batch whose `many` failed. */
  readonly one: (item: I) => Effect.Effect<O, E>
  /** Batches out at once (default 1). */
  readonly maxOut?: number | undefined
  /** Most items in one batch (default 64). */
  readonly maxBatch?: number | undefined
  /** Items with one key never share a batch (the later one waits for the next). */
  readonly key?: ((item: I) => string) | undefined
}

/**
 * Opportunistic batching: an item sent while fewer than `maxOut` batches are out leaves at once
 * (alone, if nothing else waits); otherwise it waits for a batch to return and leaves with
 * everything that piled up meanwhile. Under load many items share one statement (one round trip,
 * one commit); idle, nothing waits. If a batch fails, each of its items is sent alone and fails
 * (or not) alone. An item interrupted while it waits is dropped; once sent, it is applied.
 */
export const makeBatcher = <I, O, E>(options: BatcherOptions<I, O, E>): ((item: I) => Effect.Effect<O, E>) => {
  interface Queued {
    readonly item: I
    readonly done: Deferred.Deferred<O, E>
  }
  const maxOut = options.maxOut ?? 1
  const maxBatch = options.maxBatch ?? 64
  const waiting: Array<Queued> = []
  let out = 0

  const send = (batch: ReadonlyArray<Queued>): Effect.Effect<void> =>
    options.many(batch.map((q) => q.item)).pipe(
      Effect.flatMap((outputs) =>
        outputs.length === batch.length
          ? Effect.forEach(batch, (q, i) => Deferred.succeed(q.done, outputs[i]!), { discard: true })
          : Effect.die(new Error(`a batch of ${batch.length} gave ${outputs.length} outputs`))
      ),
      Effect.catchCause(() =>
        Effect.forEach(
          batch,
          (q) => Effect.flatMap(Effect.exit(options.one(q.item)), (exit) => Deferred.done(q.done, exit)),
          {
            discard: true
          }
        )
      )
    )

  const pump: Effect.Effect<void> = Effect.suspend(() => {
    if (out >= maxOut || waiting.length === 0) return Effect.void
    const batch: Array<Queued> = []
    const keys = new Set<string>()
    for (let i = 0; i < waiting.length && batch.length < maxBatch; ) {
      const q = waiting[i]!
      const key = options.key?.(q.item)
      if (key !== undefined && keys.has(key)) i++
      else {
        if (key !== undefined) keys.add(key)
        batch.push(q)
        waiting.splice(i, 1)
      }
    }
    out++
    // detached: a batch is applied whatever happens to the fibers waiting on it
    return Effect.asVoid(
      Effect.forkDetach(
        Effect.uninterruptible(send(batch)).pipe(
          Effect.ensuring(
            Effect.suspend(() => {
              out--
              return pump
            })
          )
        )
      )
    )
  })

  return (item) =>
    Effect.gen(function* () {
      const queued: Queued = { item, done: yield* Deferred.make<O, E>() }
      waiting.push(queued)
      yield* pump
      return yield* Deferred.await(queued.done).pipe(
        Effect.onInterrupt(() =>
          Effect.sync(() => {
            const at = waiting.indexOf(queued)
            if (at >= 0) waiting.splice(at, 1)
          })
        )
      )
    })
}
