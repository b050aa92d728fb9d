/** Positions and connections without a database: what a client has, and what it is sent. */
import { assert, describe, it } from "@effect/vitest"
import { Option } from "effect"
import * as fc from "fast-check"
import { Connection, type LiveRow } from "../src/Streams/Connection.ts"
import * as Cursor from "../src/Streams/Cursor.ts"
import { frame } from "../src/Streams/Envelope.ts"

const position = (cursor: number, holes: ReadonlyArray<number> = []): Cursor.Position => ({
  cursor: BigInt(cursor),
  holes: holes.map(BigInt)
})

const arbitraryPosition = fc
  .tuple(fc.integer({ min: 0, max: 60 }), fc.uniqueArray(fc.integer({ min: 1, max: 60 }), { maxLength: 8 }))
  .map(([cursor, holes]) =>
    position(
      cursor,
      holes.filter((h) => h < cursor).sort((a, b) => a - b)
    )
  )

const decoder = new TextDecoder()

/** A connection whose written frames (and abort) the test can see. */
const connection = (
  start: { position: Cursor.Position; synced: boolean },
  limits = { writeDeadlineMs: 250, maxBufferedBytes: 1_000_000 }
) => {
  const aborted = { value: false }
  const c = new Connection(
    "c1",
    "s",
    undefined,
    start,
    limits,
    () => {
      aborted.value = true
    },
    0
  )
  const written = () =>
    // biome-ignore lint/complexity/useLiteralKeys: the test reads the private queue
    (c["chunks"] as Array<Uint8Array>).map((b) => decoder.decode(b))
  return { c, written, aborted }
}

const row = (msgId: number, hub: Cursor.Position): LiveRow => ({
  msgId: BigInt(msgId),
  event: "message",
  data: `{"n":${msgId}}`,
  exclude: undefined,
  visibleTo: undefined,
  position: hub,
  frame: frame("message", `{"n":${msgId}}`, Cursor.frameId(BigInt(msgId), hub))
})

describe("positions", () => {
  it("merge holds exactly the ids either position holds", () =>
    fc.assert(
      fc.property(arbitraryPosition, arbitraryPosition, (a, b) => {
        const m = Cursor.merge(a, b)
        for (let id = 1n; id <= 61n; id++) {
          assert.strictEqual(Cursor.has(m, id), Cursor.has(a, id) || Cursor.has(b, id), `id ${id}`)
        }
      })
    ))

  it("a frame id reads back as the position it was written with", () =>
    fc.assert(
      fc.property(arbitraryPosition, fc.integer({ min: 1, max: 60 }), (p, msgId) => {
        const read = Option.getOrThrow(Cursor.parse(Cursor.frameId(BigInt(msgId), p)))
        assert.isTrue(Cursor.equals(read, p))
        assert.strictEqual(Option.getOrThrow(Cursor.msgIdOf(Cursor.frameId(BigInt(msgId), p))), BigInt(msgId))
      })
    ))

  it("a malformed position is refused", () => {
    for (const text of ["", "abc", "-1", "12~12", "12~13", "12~", "1/2/3", `${"9".repeat(20)}`, "5~1.x", " 5"]) {
      assert.isTrue(Option.isNone(Cursor.parse(text)), text)
    }
    const many = Array.from({ length: 65 }, (_, i) => i + 1).join(".")
    assert.isTrue(Option.isNone(Cursor.parse(`100~${many}`)))
    assert.deepStrictEqual(Option.getOrThrow(Cursor.parse("7/9~3.5")), position(9, [3, 5]))
  })
})

describe("a connection", () => {
  it("in step with the hub gets the hub's frame; ahead of it, only what it does not have", () => {
    // the client resumed with "20" at a process whose hub was at 18
    const { c, written } = connection({ position: position(0), synced: false })
    c.finishReplay(position(20), position(18), 0)
    assert.isFalse(c.synced)
    c.offer(row(19, position(19)), 1)
    c.offer(row(20, position(20)), 2)
    assert.deepStrictEqual(written(), [], "19 and 20 it has")
    c.offer(row(21, position(21)), 3)
    assert.isTrue(c.synced)
    c.offer(row(22, position(22)), 4)
    assert.deepStrictEqual(
      written().map((w) => w.split("\n")[0]),
      ["id: 21", "id: 22"]
    )
  })

  it("holds live rows during its replay and sends them after it, each once", () => {
    const { c, written } = connection({ position: position(0), synced: false })
    c.offer(row(11, position(11)), 1)
    c.offer(row(12, position(12)), 1)
    assert.deepStrictEqual(written(), [])
    // the replay reached 11 (the hub had registered it at 10 and read 11 meanwhile)
    c.finishReplay(position(11), position(12), 2)
    assert.deepStrictEqual(
      written().map((w) => w.split("\n")[0]),
      ["id: 12"]
    )
  })

  it("is closed at once when its oldest unwritten frame passes the write deadline or it holds too much", () => {
    const late = connection({ position: position(0), synced: true })
    late.c.finishReplay(position(0), position(0), 0)
    late.c.offer(row(1, position(1)), 0)
    late.c.offer(row(2, position(2)), 100)
    assert.isFalse(late.aborted.value)
    late.c.offer(row(3, position(3)), 300)
    assert.isTrue(late.aborted.value)
    assert.strictEqual(late.c.closed, "deadline")

    const full = connection({ position: position(0), synced: true }, { writeDeadlineMs: 10_000, maxBufferedBytes: 40 })
    full.c.finishReplay(position(0), position(0), 0)
    full.c.offer(row(1, position(1)), 0)
    full.c.offer(row(2, position(2)), 0)
    full.c.offer(row(3, position(3)), 0)
    assert.strictEqual(full.c.closed, "buffer")
    assert.isTrue(full.aborted.value)
  })
})
