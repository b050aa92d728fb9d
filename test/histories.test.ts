/** Recorded histories of the example workflows replay against the current code (no database). */

import { readdirSync, readFileSync } from "node:fs"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { Onboarding } from "../packages/example/src/app.ts"
import { JobClient } from "../src/Job/JobClient.ts"
import { History, replayHistory } from "../src/Testing/Replay.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"

const directory = new URL("./histories/", import.meta.url)
const files = readdirSync(directory).filter((f) => f.endsWith(".json"))
const load = (file: string) =>
  Schema.decodeUnknownSync(History)(JSON.parse(readFileSync(new URL(file, directory), "utf8")))

describe("recorded histories", () => {
  it("there are histories to replay", () => {
    assert.isAtLeast(files.length, 2)
  })

  for (const file of files) {
    it.effect(`${file} replays against the current code`, () =>
      Effect.gen(function* () {
        const history = load(file)
        assert.strictEqual(history.workflow, Onboarding.name)
        // steps never run in a replay: their services can be stubs
        const report = yield* replayHistory(Onboarding, history).pipe(Effect.provide(Layer.mock(JobClient, {})))
        assert.strictEqual(report._tag, "Replayed", JSON.stringify(report))
      })
    )
  }

  it.effect("a change that moves a recorded step is reported as a divergence", () =>
    Effect.gen(function* () {
      const Reordered = Workflow.make(
        "Onboarding",
        { payload: Schema.Struct({ userId: Schema.String }) },
        function* () {
          yield* Workflow.step("create-invoice", Effect.succeed({ invoice: 1 }))
          yield* Workflow.step("welcome", Effect.succeed("x"))
        }
      )
      const report = yield* replayHistory(Reordered, load("onboarding-finished.json"))
      assert.deepStrictEqual(report, { _tag: "Diverged", position: 0, expected: "welcome", found: "create-invoice" })
    })
  )

  it.effect("a change that drops a recorded step is reported as a divergence", () =>
    Effect.gen(function* () {
      const Shorter = Workflow.make("Onboarding", { payload: Schema.Struct({ userId: Schema.String }) }, function* () {
        yield* Workflow.step("welcome", Effect.succeed("x"))
      })
      const report = yield* replayHistory(Shorter, load("onboarding-finished.json"))
      assert.strictEqual(report._tag, "Diverged")
    })
  )
})
