import { assert, describe, it } from "@effect/vitest"
import fc from "fast-check"
import { defaultQueueFor } from "../src/EventBus/Subscription.ts"
import * as Topic from "../src/EventBus/Topic.ts"

/** The matcher's specification, written as plainly as possible (exponential, fine for short keys). */
const reference = (pattern: ReadonlyArray<string>, key: ReadonlyArray<string>): boolean => {
  if (pattern.length === 0) return key.length === 0
  const [head, ...rest] = pattern
  if (head === "#") return reference(rest, key) || (key.length > 0 && reference(pattern, key.slice(1)))
  if (key.length === 0) return false
  return (head === "*" || head === key[0]) && reference(rest, key.slice(1))
}

// a small alphabet so that random patterns and keys actually meet
const word = fc.constantFrom("orders", "created", "line", "added", "payments", "a", "b")
const keySegments = fc.array(word, { minLength: 1, maxLength: 6 })
const patternSegments = fc.array(fc.oneof(word, fc.constant("*"), fc.constant("#")), { minLength: 1, maxLength: 6 })

describe("topic routing", () => {
  describe("the seed's pattern table", () => {
    const table: ReadonlyArray<{ pattern: string; matches: ReadonlyArray<string>; doesNot: ReadonlyArray<string> }> = [
      { pattern: "orders.created", matches: ["orders.created"], doesNot: ["orders.updated"] },
      { pattern: "orders.*", matches: ["orders.created", "orders.updated"], doesNot: ["orders.line.added"] },
      { pattern: "orders.#", matches: ["orders.created", "orders.line.added"], doesNot: ["payments.captured"] }
    ]
    for (const row of table) {
      it(`${row.pattern} matches ${row.matches.join(", ")} and not ${row.doesNot.join(", ")}`, () => {
        for (const key of row.matches) assert.isTrue(Topic.matches(row.pattern, key), `${row.pattern} ~ ${key}`)
        for (const key of row.doesNot) assert.isFalse(Topic.matches(row.pattern, key), `${row.pattern} !~ ${key}`)
      })
    }

    it("# matches zero segments: orders.# matches orders itself, * needs exactly one", () => {
      assert.isTrue(Topic.matches("orders.#", "orders"))
      assert.isFalse(Topic.matches("orders.*", "orders"))
      assert.isTrue(Topic.matches("#", "anything.at.all"))
      assert.isTrue(Topic.matches("#.added", "orders.line.added"))
      assert.isTrue(Topic.matches("orders.#.added", "orders.added"))
      assert.isFalse(Topic.matches("*.added", "orders.line.added"))
    })
  })

  describe("properties", () => {
    it("agrees with the reference definition on random patterns and keys", () =>
      fc.assert(
        fc.property(patternSegments, keySegments, (pattern, key) => {
          assert.strictEqual(Topic.matches(pattern.join("."), key.join(".")), reference(pattern, key))
        }),
        { numRuns: 3_000 }
      ))

    it("a key without wildcards, used as a pattern, matches exactly itself", () =>
      fc.assert(
        fc.property(keySegments, keySegments, (a, b) => {
          assert.strictEqual(Topic.matches(a.join("."), b.join(".")), a.join(".") === b.join("."))
        })
      ))

    it("replacing any segment of a key with * still matches it, and only keys of that length", () =>
      fc.assert(
        fc.property(keySegments, fc.nat(), keySegments, (key, i, other) => {
          const pattern = key.map((s, j) => (j === i % key.length ? "*" : s)).join(".")
          assert.isTrue(Topic.matches(pattern, key.join(".")))
          if (other.length !== key.length) assert.isFalse(Topic.matches(pattern, other.join(".")))
        })
      ))

    it("replacing any run of segments (even an empty one) with # still matches", () =>
      fc.assert(
        fc.property(keySegments, fc.nat(), fc.nat(), (key, a, b) => {
          const from = a % (key.length + 1)
          const to = from + (b % (key.length - from + 1))
          const pattern = [...key.slice(0, from), "#", ...key.slice(to)].join(".")
          assert.isTrue(Topic.matches(pattern, key.join(".")), `${pattern} ~ ${key.join(".")}`)
        })
      ))

    it("a pattern of n stars matches exactly the keys of n segments", () =>
      fc.assert(
        fc.property(fc.integer({ min: 1, max: 6 }), keySegments, (n, key) => {
          assert.strictEqual(Topic.matches(Array(n).fill("*").join("."), key.join(".")), key.length === n)
        })
      ))

    it("many # do not blow up (no backtracking)", () => {
      const pattern = Array(40).fill("#").concat("x").join(".")
      const key = Array(200).fill("a").join(".")
      assert.isFalse(Topic.matches(pattern, key))
    })
  })

  describe("validation", () => {
    it("a routing key has non-empty segments and no wildcard", () => {
      assert.isUndefined(Topic.routingKeyProblem("orders.created"))
      assert.isUndefined(Topic.routingKeyProblem("tenant-1:orders.v2_created"))
      for (const bad of [
        "",
        "orders.",
        ".orders",
        "orders..created",
        "orders.*",
        "orders.#",
        "has space",
        "x".repeat(256)
      ]) {
        assert.isDefined(Topic.routingKeyProblem(bad), JSON.stringify(bad))
      }
    })

    it("a pattern's segments are words, * or #, and a wildcard is a whole segment", () => {
      for (const good of ["orders.*", "#", "*.created", "orders.#.added"])
        assert.isUndefined(Topic.patternProblem(good))
      for (const bad of ["", "orders.cre*", "orders.#x", "a..b", "orders."]) {
        assert.isDefined(Topic.patternProblem(bad), JSON.stringify(bad))
      }
    })

    it("derived queue names are valid, stable and short", () =>
      fc.assert(
        fc.property(fc.string({ minLength: 1, maxLength: 128 }), (name) => {
          const queue = defaultQueueFor(name)
          assert.match(queue, /^[a-z][a-z0-9_]*$/)
          assert.isAtMost(queue.length, 24)
          assert.strictEqual(defaultQueueFor(name), queue)
        })
      ))

    it("derived queue names read like the pattern", () => {
      assert.strictEqual(defaultQueueFor("orders.#"), "ev_orders_all")
      assert.strictEqual(defaultQueueFor("orders.*"), "ev_orders_any")
      assert.strictEqual(defaultQueueFor("orders.created"), "ev_orders_created")
      assert.match(defaultQueueFor("inventory.warehouse.reservations.#"), /^ev_inventory_war_[0-9a-f]{6}$/)
    })
  })
})
