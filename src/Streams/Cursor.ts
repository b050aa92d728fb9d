/**
 * Where a client is in a stream. Broadcast ids come from the queue's identity column, handed
 * out at insert and not at commit, so a transaction can commit id 10 after another committed 11.
 * A position is therefore a cursor plus the ids below it that were missing when it was taken
 * (holes, which may still commit): "I have every id up to `cursor` except `holes`". Positions
 * merge (the union of what each has), so a client resuming from any process's position gets
 * exactly what it lacks, once.
 *
 * On the wire (the SSE `id:` of a frame) a position is `<msgId>` when it is exactly "up to this
 * frame, no holes", else `<msgId>/<cursor>~<hole>.<hole>`; a bare `<cursor>[~holes]` is accepted
 * too (a page's watermark).
 *
 * @since 0.1.0
 */
import { Option } from "effect"

/** Most holes a position carries on the wire (the oldest are dropped past it). */
export const MAX_HOLES_ON_WIRE = 64

const MAX_ID = 9_223_372_036_854_775_807n

/**
 * A position: every id up to `cursor` except `holes` (ascending, all below `cursor`).
 *
 * @category models
 */
export interface Position {
  readonly cursor: bigint
  readonly holes: ReadonlyArray<bigint>
}

/** The position before any broadcast. */
export const start: Position = { cursor: 0n, holes: [] }

/** Whether a position includes an id. */
export const has = (p: Position, id: bigint): boolean => id <= p.cursor && !p.holes.includes(id)

/** The union of two positions: every id either has. */
export const merge = (a: Position, b: Position): Position => {
  const holes = new Set<bigint>()
  for (const h of a.holes) if (!has(b, h)) holes.add(h)
  for (const h of b.holes) if (!has(a, h)) holes.add(h)
  // biome-ignore lint/complexity/useMathMinMax: bigints (Math.max takes numbers)
  return { cursor: a.cursor > b.cursor ? a.cursor : b.cursor, holes: [...holes].sort(compare) }
}

/** Whether two positions hold the same ids. */
export const equals = (a: Position, b: Position): boolean =>
  a.cursor === b.cursor && a.holes.length === b.holes.length && a.holes.every((h, i) => h === b.holes[i])

/** Ascending order of ids. */
export const compare = (a: bigint, b: bigint): number => (a < b ? -1 : a > b ? 1 : 0)

const positionText = (p: Position): string => {
  const holes = p.holes.length > MAX_HOLES_ON_WIRE ? p.holes.slice(-MAX_HOLES_ON_WIRE) : p.holes
  return holes.length === 0 ? `${p.cursor}` : `${p.cursor}~${holes.join(".")}`
}

/** The SSE id of a frame carrying broadcast `msgId`, after which the client is at `p`. */
export const frameId = (msgId: bigint, p: Position): string =>
  p.cursor === msgId && p.holes.length === 0 ? `${msgId}` : `${msgId}/${positionText(p)}`

/** A position as a watermark (a page embeds it; the client sends it back as `after`). */
export const format = (p: Position): string => positionText(p)

const WIRE = /^(\d{1,19})(?:\/(\d{1,19}))?(?:~(\d{1,19}(?:\.\d{1,19}){0,63}))?$/

/** Reads a frame id or a watermark; none when malformed (a client's input: never trusted). */
export const parse = (text: string): Option.Option<Position> => {
  const match = WIRE.exec(text)
  if (match === null) return Option.none()
  const cursor = BigInt(match[2] ?? match[1]!)
  if (cursor > MAX_ID) return Option.none()
  const holes = match[3] === undefined ? [] : match[3].split(".").map(BigInt)
  if (holes.some((h) => h >= cursor)) return Option.none()
  return Option.some({ cursor, holes: [...new Set(holes)].sort(compare) })
}

/** The msg id a frame id names (its first part). */
export const msgIdOf = (text: string): Option.Option<bigint> => {
  const match = WIRE.exec(text)
  return match === null ? Option.none() : Option.some(BigInt(match[1]!))
}
