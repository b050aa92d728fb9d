/**
 * The transition table, row by row: from every legal state an outside verb reaches its target
 * (with the step states the table names); from every other state it fails with a typed error
 * and changes nothing.
 */

import { readFileSync } from "node:fs"
import { assert, describe, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type * as PgBus from "../src/PgBus.ts"
import { Registry } from "../src/Registry.ts"
import { performNextStep } from "../src/Testing/Workflows.ts"
import { type RunInfo, WorkflowClient } from "../src/Workflow/Client.ts"
import * as States from "../src/Workflow/States.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ id: Schema.String })

/** Two steps; the first waits an hour, so a fresh run sits ready on a scheduled step. */
const Subject = Workflow.make("TableSubject", { payload: Payload }, function* () {
  yield* Workflow.step("first", Effect.void, { wait: "1 hour" })
  yield* Workflow.step("second", Effect.void)
})

/** A step that holds until released, to have a run performing. */
const makeHolding = Effect.gen(function* () {
  const started = yield* Deferred.make<void>()
  const release = yield* Deferred.make<void>()
  const Holding = Workflow.make("TableHolding", { payload: Payload }, function* () {
    yield* Workflow.step("held", Deferred.succeed(started, undefined).pipe(Effect.andThen(Deferred.await(release))))
  })
  return { Holding, started, release }
})

type Fixture = {
  readonly run: RunInfo
  /** Lets a performing run's step finish. */
  readonly cleanup: Effect.Effect<void, unknown, unknown>
}

const ready = Effect.gen(function* () {
  const handle = yield* Subject.start({ id: "ready" })
  yield* performNextStep(handle.id).pipe(Effect.provide(Registry.layer([Subject])))
  return { run: (yield* handle.refresh).info, cleanup: Effect.void } satisfies Fixture
})

const fixtures: Record<States.RunStatus, Effect.Effect<Fixture, unknown, unknown>> = {
  ready,
  performing: Effect.gen(function* () {
    const { Holding, started, release } = yield* makeHolding
    const handle = yield* Holding.start({ id: "performing" })
    const fiber = yield* performNextStep(handle.id).pipe(Effect.provide(Registry.layer([Holding])), Effect.forkDetach)
    yield* Deferred.await(started)
    return {
      run: (yield* handle.refresh).info,
      cleanup: Deferred.succeed(release, undefined).pipe(Effect.andThen(Fiber.await(fiber)))
    } satisfies Fixture
  }),
  paused: Effect.gen(function* () {
    const { run } = yield* ready
    const client = yield* WorkflowClient
    return { run: yield* client.pause(run.id), cleanup: Effect.void } satisfies Fixture
  }),
  finished: Effect.gen(function* () {
    const { run } = yield* ready
    const client = yield* WorkflowClient
    yield* client.runNow(run.id)
    yield* performNextStep(run.id).pipe(Effect.provide(Registry.layer([Subject])))
    return { run: (yield* client.get(run.id)).info, cleanup: Effect.void } satisfies Fixture
  }),
  cancelled: Effect.gen(function* () {
    const { run } = yield* ready
    const client = yield* WorkflowClient
    return { run: yield* client.cancel(run.id), cleanup: Effect.void } satisfies Fixture
  }),
  // a waiting step needs signals or timers (their own issue): the state is set directly
  waiting: Effect.gen(function* () {
    const { run } = yield* ready
    const sql = yield* SqlClient.SqlClient
    yield* sql`UPDATE pgbus.workflow_steps SET status = 'waiting' WHERE run_id = ${run.id}::uuid`
    yield* sql`UPDATE pgbus.workflow_runs SET status = 'waiting' WHERE id = ${run.id}::uuid`
    const client = yield* WorkflowClient
    return { run: (yield* client.get(run.id)).info, cleanup: Effect.void } satisfies Fixture
  })
}

const apply = (verb: States.OutsideVerb, run: RunInfo) =>
  Effect.gen(function* () {
    const client = yield* WorkflowClient
    const options = { actor: "tester", reason: `table: ${verb}` }
    switch (verb) {
      case "pause":
        return (yield* client.pause(run.id, options)).status
      case "resume":
        return (yield* client.resume(run.id, options)).status
      case "resume_at":
        return (yield* client.resumeAt(run.id, run.currentStep ?? "first", options)).status
      case "cancel":
        return (yield* client.cancel(run.id, options)).status
      case "run_now":
        return (yield* client.runNow(run.id, options)).status
      case "reschedule":
        return (yield* client.reschedule(run.id, new Date(Date.now() + 60_000), options)).status
      case "rerun":
        return (yield* client.rerun(run.id, options)).info.status
      default:
        return yield* Effect.die(new Error(`${verb} belongs to signals and waits`))
    }
  })

/** Verbs of this issue; `signal` and `skip` come with waiting steps. */
const verbs = States.OutsideVerbs.filter((v) => v !== "signal" && v !== "skip")

layer(TestDatabase.layer(), { excludeTestServices: true })("the transition table", (it) => {
  for (const verb of verbs) {
    const row = States.transitionOf(verb)
    describe(`${verb}: ${row.from.join(", ")} → ${row.to}`, () => {
      for (const from of States.RunStatuses) {
        const legal = row.from.includes(from)
        it.effect(
          legal
            ? `from ${from} it reaches ${States.targetOf(verb, from)}`
            : `from ${from} it is refused and changes nothing`,
          () =>
            Effect.gen(function* () {
              const client = yield* WorkflowClient
              const fixture = yield* fixtures[from]
              assert.strictEqual(fixture.run.status, from, "fixture state")
              const eventsBefore = (yield* client.events(fixture.run.id)).length
              const result = yield* Effect.result(apply(verb, fixture.run))
              if (legal) {
                assert.strictEqual(result._tag, "Success", JSON.stringify(result))
                const expected =
                  verb === "resume" && from === "paused" ? ["ready", "performing"] : [States.targetOf(verb, from)]
                const reached = result._tag === "Success" ? result.success : undefined
                assert.include(expected, reached)
                assert.deepStrictEqual(
                  (yield* client.get(fixture.run.id)).info.availableActions,
                  States.availableActions(verb === "rerun" ? from : (reached as States.RunStatus))
                )
                const events = yield* client.events(fixture.run.id)
                if (verb !== "rerun") {
                  assert.isAbove(events.length, eventsBefore, "the verb wrote its event")
                  assert.isTrue(events.some((e) => e.actor === "tester" && e.reason === `table: ${verb}`))
                }
                if (verb === "cancel") {
                  const steps = yield* client.steps(fixture.run.id)
                  assert.isTrue(steps.every((s) => !["scheduled", "in_progress", "waiting"].includes(s.status)))
                }
              } else {
                assert.strictEqual(result._tag, "Failure")
                if (result._tag === "Failure") {
                  const error = result.failure as { _tag: string; current?: string }
                  const expectedTag =
                    States.isTerminal(from) && verb !== "rerun"
                      ? "NotOngoing"
                      : verb === "resume" || verb === "resume_at"
                        ? "NotPaused"
                        : "InvalidTransition"
                  assert.strictEqual(error._tag, expectedTag)
                  assert.strictEqual(error.current, from, "the error names the current status")
                }
                const after = (yield* client.get(fixture.run.id)).info
                assert.strictEqual(after.status, from)
                assert.strictEqual(after.updatedAt.getTime(), fixture.run.updatedAt.getTime())
                assert.strictEqual((yield* client.events(fixture.run.id)).length, eventsBefore)
              }
              yield* fixture.cleanup
            }) as Effect.Effect<void, unknown, PgBus.PgBus>
        )
      }
    })
  }

  it.effect("docs/workflows.md shows the table generated from States.ts", () =>
    Effect.sync(() => {
      const doc = readFileSync("docs/workflows.md", "utf8")
      assert.include(doc, States.toMarkdown())
    })
  )
})
