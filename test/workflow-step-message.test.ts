/** The step message's fast check (isStepMessage) accepts only what the Schema decodes to the same value. */
import { assert, describe, it } from "@effect/vitest"
import { Exit, Schema } from "effect"
import { isStepMessage, StepMessage } from "../src/Workflow/engine/Messages.ts"

const decode = Schema.decodeUnknownExit(StepMessage)

const samples: ReadonlyArray<unknown> = [
  { workflow: "W", run: "r", step: null },
  { workflow: "W", run: "r", step: "12" },
  { workflow: "W", run: "r", step: "12", deadline: "2026-12-04T00:00:00.000Z" },
  { workflow: "W", run: "r", step: null, input: { payload: { n: 1 }, subject: null, resource_id: null } },
  { workflow: "W", run: "r", step: null, input: { payload: null, subject: "s", resource_id: "x", parent_run_id: "p" } },
  { workflow: "W", run: "r", step: null, input: { payload: [1, "a"], subject: null, resource_id: null } },
  // refused by both, or left to the Schema
  { workflow: "W", run: "r" },
  { workflow: "W", run: 1, step: null },
  { workflow: "W", run: "r", step: 12 },
  { workflow: "W", run: "r", step: null, deadline: 5 },
  { workflow: "W", run: "r", step: null, input: null },
  { workflow: "W", run: "r", step: null, input: { subject: null, resource_id: null } },
  { workflow: "W", run: "r", step: null, input: { payload: 1, subject: 2, resource_id: null } },
  { workflow: "W", run: "r", step: null, input: { payload: 1, subject: null, resource_id: null, parent_run_id: null } },
  [],
  null,
  "text"
]

describe("isStepMessage", () => {
  it("accepts a message only when the Schema decodes it to an equal value", () => {
    let accepted = 0
    for (const sample of samples) {
      if (!isStepMessage(sample)) continue
      accepted++
      const decoded = decode(sample)
      assert.isTrue(Exit.isSuccess(decoded), JSON.stringify(sample))
      if (Exit.isSuccess(decoded)) assert.deepStrictEqual(decoded.value, sample)
    }
    // the messages the engine writes (a step's, a notice's, a start's with its input) take the fast path
    assert.strictEqual(accepted, 6)
  })

  it("refuses what the Schema refuses", () => {
    for (const sample of samples) {
      if (Exit.isFailure(decode(sample))) assert.isFalse(isStepMessage(sample), JSON.stringify(sample))
    }
  })
})
