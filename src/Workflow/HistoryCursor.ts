/**
 * The history cursor: walks a run's recorded steps against the steps its body yields, in order.
 * Pure (no database, no Effect): the engine replays a claimed run with it, and
 * `Testing/Replay.ts` replays a committed history with it, so both read a history the same way.
 *
 * @since 0.1.0
 */

/** A recorded step attempt, as the history holds it. */
export interface RecordedStep {
  readonly name: string
  readonly attempt: number
  readonly position: number
  readonly status: string
  readonly output: unknown
}

/** A cursor over a run's history. */
export interface HistoryCursor<S extends RecordedStep = RecordedStep> {
  /** The recorded step names by position (a `patch:` marker included); gaps are undefined. */
  readonly order: Array<string | undefined>
  /** Each recorded step's latest attempt, by name. */
  readonly latest: ReadonlyMap<string, S>
  /** The position of the next step the body reaches. */
  position: number
}

/** What the body found when it reached a step. */
export interface Reached<S extends RecordedStep> {
  /** The step's position in the run. */
  readonly position: number
  /** The name the history recorded at that position (undefined: past the recorded history). */
  readonly recorded: string | undefined
  /** The step's latest recorded attempt, if it has one. */
  readonly entry: S | undefined
  /** The history recorded another step at that position: the code no longer matches the run. */
  readonly diverged: boolean
  /** The step was recorded at this position (its latest attempt is `entry`). */
  readonly replayed: boolean
}

/** A cursor at the start of a history (attempts in any order; a step's position is its first attempt's). */
export const make = <S extends RecordedStep>(steps: ReadonlyArray<S>): HistoryCursor<S> => {
  const order: Array<string | undefined> = []
  const latest = new Map<string, S>()
  for (const s of steps) {
    if (!latest.has(s.name)) order[s.position] = s.name
    const prev = latest.get(s.name)
    if (!prev || prev.attempt < s.attempt) latest.set(s.name, s)
  }
  return { order, latest, position: 0 }
}

/** The body reaches step `name`: what the history holds there; the cursor moves past it. */
export const reach = <S extends RecordedStep>(cursor: HistoryCursor<S>, name: string): Reached<S> => {
  const position = cursor.position++
  const recorded = cursor.order[position]
  return {
    position,
    recorded,
    entry: cursor.latest.get(name),
    diverged: recorded !== undefined && recorded !== name,
    replayed: recorded === name
  }
}

/** What `patched(id)` finds at the cursor. */
export type Patch =
  /** The history took the patched path here (its marker is recorded): the cursor moves past it. */
  | "recorded"
  /** The history went on without the patch (another step is recorded here): the old path. */
  | "unpatched"
  /** Past the recorded history: the run takes the patched path new (the caller records the marker). */
  | "new"

/** The marker of a patch id. */
export const markerOf = (id: string): string => `patch:${id}`

/** The body asks `patched(id)` at the cursor. */
export const patch = <S extends RecordedStep>(cursor: HistoryCursor<S>, id: string): Patch => {
  const recorded = cursor.order[cursor.position]
  if (recorded === markerOf(id)) {
    cursor.position++
    return "recorded"
  }
  return recorded === undefined ? "new" : "unpatched"
}

/** Records a patch's marker at the cursor (the run took the patched path new) and moves past it. */
export const recordMarker = <S extends RecordedStep>(cursor: HistoryCursor<S>, id: string): void => {
  cursor.order[cursor.position] = markerOf(id)
  cursor.position++
}

/** The recorded steps the body has not reached (at its end: a divergence if any). */
export const unreached = <S extends RecordedStep>(cursor: HistoryCursor<S>): ReadonlyArray<string> =>
  cursor.order.slice(cursor.position).filter((n): n is string => n !== undefined)
