/**
 * A parent run with a live child, for the operations surfaces' tests: `FamilyParent` starts
 * `FamilyKid` at its step `kid` and waits for it; the kid waits for a `go` signal. Nothing runs
 * them but `performNextStep`, so the child stays ready (live) until a test moves it.
 */
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Registry } from "../../src/Registry.ts"
import { performNextStep } from "../../src/Testing/Workflows.ts"
import * as Workflow from "../../src/Workflow/Workflow.ts"

const Payload = Schema.Struct({ id: Schema.Number })

/** The child: waits for `go`. */
export const FamilyKid = Workflow.make(
  "FamilyKid",
  { payload: Payload, signals: { go: Schema.Struct({}) } },
  function* ({ waitForSignal }) {
    yield* waitForSignal("go")
  }
)

/** The parent: its step `kid` starts the child and waits for its end. */
export const FamilyParent = Workflow.make("FamilyParent", { payload: Payload, priority: 2 }, function* ({ payload }) {
  yield* Workflow.child("kid", FamilyKid, payload)
})

/** Both definitions, for a registry. */
export const familyRegistry = Registry.layer([FamilyParent, FamilyKid])

/** Starts a parent (a singleton slot when asked) and runs its step `kid`: the parent waits on its ready child. */
export const family = (options: { readonly singleton?: boolean; readonly resourceId?: string } = {}) =>
  Effect.gen(function* () {
    const parent = yield* FamilyParent.start({ id: 1 }, options)
    yield* performNextStep(parent.id).pipe(Effect.provide(familyRegistry))
    const sql = yield* SqlClient.SqlClient
    const [child] = yield* sql<{ readonly id: string }>`SELECT id::text AS id FROM pgbus.workflow_runs
      WHERE parent_run_id = ${parent.id}::uuid`
    if (child === undefined) return yield* Effect.die(new Error("the parent started no child"))
    return { parentId: parent.id, childId: child.id }
  })
