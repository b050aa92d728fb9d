import { assert, describe, expect, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Registry } from "../src/Registry.ts"
import { speedrun } from "../src/Testing/Workflows.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

// Every start goes through one statement (`runStartMany`): shared by concurrent starts, alone
// for a start in a caller's transaction, a rerun (its own event) and a child (its parent's link).

const Payload = Schema.Struct({ id: Schema.String })

const Once = Workflow.make("StartOnce", { payload: Payload }, function* ({ payload }) {
  return yield* Workflow.step("only", Effect.succeed(payload.id))
})

const withRegistry = <A, E, R>(effect: Effect.Effect<A, E, R>) => effect.pipe(Effect.provide(Registry.layer([Once])))

layer(TestDatabase.layer({ pollingInterval: "50 millis" }), { excludeTestServices: true })("run start", (it) => {
  describe("one statement for every start", () => {
    it.effect("a rerun: its row names the run it reruns, its event is `rerun` with why", () =>
      Effect.gen(function* () {
        const client = yield* WorkflowClient
        const first = yield* Once.start({ id: "r" })
        assert.strictEqual(yield* speedrun(first.id).pipe(withRegistry), "finished")
        const again = yield* client.rerun(first.id, { actor: "alice", reason: "try again" })
        assert.notStrictEqual(again.id, first.id)
        assert.strictEqual(again.info.rerunOf, first.id)
        assert.strictEqual(again.info.status, "ready")
        const events = yield* client.events(again.id)
        assert.deepStrictEqual(
          events.map((e) => [e.type, e.actor, e.reason]),
          [["rerun", "alice", "try again"]]
        )
        expect(events[0]!.details).toMatchObject({ rerun_of: first.id })
        assert.strictEqual(yield* speedrun(again.id).pipe(withRegistry), "finished")
        assert.deepStrictEqual((yield* client.get(again.id)).info.output, "r")
      })
    )

    it.effect("a start in a caller's transaction: alone, `started`, rolled back with the transaction", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const client = yield* WorkflowClient
        const kept = yield* sql.withTransaction(Once.start({ id: "t" }, { subject: "tx-kept", reason: "in tx" }))
        const events = yield* client.events(kept.id)
        assert.deepStrictEqual(
          events.map((e) => [e.type, e.reason]),
          [["started", "in tx"]]
        )
        expect(events[0]!.details).toStrictEqual({ subject: "tx-kept" })
        assert.isUndefined(kept.info.rerunOf)
        const rolledBack = yield* sql
          .withTransaction(
            Effect.flatMap(Once.start({ id: "t" }, { subject: "tx-gone" }), (run) => Effect.fail(run.id))
          )
          .pipe(Effect.flip)
        assert.isString(rolledBack)
        const lost = yield* Effect.flip(client.get(String(rolledBack)))
        assert.strictEqual(lost._tag, "RunNotFound")
      })
    )
  })
})
