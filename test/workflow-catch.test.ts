import { assert, describe, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { Registry } from "../src/Registry.ts"
import { performNextStep, speedrun } from "../src/Testing/Workflows.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

// What the body's own error handling can do to the runner's ends: a step the runner parked or
// scheduled (its execution halted, the body unwound by a defect), and a control verb called
// inside a step. The recorded end wins; the body's code after a catch runs, its result does not.

const Payload = Schema.Struct({ id: Schema.String })

const stepRows = (id: string) =>
  Effect.flatMap(WorkflowClient, (c) =>
    Effect.map(c.steps(id), (ss) => ss.map((s) => `${s.name}#${s.attempt}:${s.status}`))
  )
const status = (id: string) => Effect.flatMap(WorkflowClient, (c) => Effect.map(c.get(id), (h) => h.info.status))
const eventTypes = (id: string) =>
  Effect.flatMap(WorkflowClient, (c) => Effect.map(c.events(id), (es) => es.map((e) => e.type)))

const withRegistry =
  <const W extends ReadonlyArray<Workflow.AnyWorkflow>>(workflows: W) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    effect.pipe(Effect.provide(Registry.layer(workflows)))

layer(TestDatabase.layer({ pollingInterval: "50 millis" }), { excludeTestServices: true })("workflow catch", (it) => {
  describe("a halted step caught by the body", () => {
    const seen: Array<string> = []
    // each way a body may try to turn the unwinding of a parked step into something else
    const recoveries = {
      value: <A>(wait: Effect.Effect<A, never, Workflow.WorkflowRuntime>) =>
        Effect.catchCause(wait, () => Effect.succeed("caught")),
      // the body returns at once on its catch: it ends without another verb
      escape: <A>(wait: Effect.Effect<A, never, Workflow.WorkflowRuntime>) =>
        Effect.catchCause(wait, () => Effect.succeed("escape")),
      defect: <A>(wait: Effect.Effect<A, never, Workflow.WorkflowRuntime>) =>
        Effect.catchDefect(wait, () => Effect.succeed("caught")),
      exit: <A>(wait: Effect.Effect<A, never, Workflow.WorkflowRuntime>) =>
        Effect.map(Effect.exit(wait), (exit) => (exit._tag === "Success" ? exit.value : "caught")),
      step: <A>(wait: Effect.Effect<A, never, Workflow.WorkflowRuntime>) =>
        Effect.catchCause(wait, () =>
          Workflow.step(
            "sneak",
            Effect.sync(() => seen.push("sneak ran"))
          )
        ),
      finish: <A>(wait: Effect.Effect<A, never, Workflow.WorkflowRuntime>) =>
        Effect.catchCause(wait, () => Workflow.finish()),
      cancel: <A>(wait: Effect.Effect<A, never, Workflow.WorkflowRuntime>) =>
        Effect.catchCause(wait, () => Workflow.cancel("the body caught its wait")),
      pause: <A>(wait: Effect.Effect<A, never, Workflow.WorkflowRuntime>) =>
        Effect.catchCause(wait, () => Workflow.pause("the body caught its wait")),
      fail: <A>(wait: Effect.Effect<A, never, Workflow.WorkflowRuntime>) =>
        Effect.catchCause(wait, () => Effect.die(new Error("the body's own failure")))
    } as const
    type Recovery = keyof typeof recoveries
    const names = Object.keys(recoveries) as Array<Recovery>
    // `lead`: a completed step before the wait (its outcome goes with the wait's park)
    const make = (recovery: Recovery, lead: boolean) =>
      Workflow.make(`CatchWait-${recovery}${lead ? "-lead" : ""}`, { payload: Payload }, function* () {
        if (lead) yield* Workflow.step("first", Effect.succeed(1))
        const got = yield* recoveries[recovery](Workflow.waitForSignal("go"))
        if (got === "escape") return "escaped"
        yield* Workflow.step(
          "after",
          Effect.sync(() => seen.push(`${recovery} after ${JSON.stringify(got)}`))
        )
        return "done"
      })
    const flows = names.flatMap((recovery) => [make(recovery, false), make(recovery, true)])
    const rowsOf = (name: string, rows: string) => `${name.endsWith("-lead") ? "first#1:completed," : ""}${rows}`

    it.effect("a parked wait stays parked whatever the catch does; the signal then goes on as usual", () =>
      Effect.gen(function* () {
        const runs: Record<string, string> = {}
        for (const wf of flows) {
          const run = yield* wf.start({ id: "c" })
          runs[wf.name] = run.id
          yield* performNextStep(run.id).pipe(withRegistry(flows))
        }
        const parked: Record<string, string> = {}
        for (const [name, id] of Object.entries(runs)) {
          parked[name] = `${yield* status(id)} ${(yield* stepRows(id)).join(",")}`
          const events = yield* eventTypes(id)
          for (const end of ["finished", "cancelled", "paused"]) {
            assert.notInclude(events, end, `${name}: the catch wrote no end of its own`)
          }
        }
        assert.deepStrictEqual(
          parked,
          Object.fromEntries(flows.map((wf) => [wf.name, `waiting ${rowsOf(wf.name, "wait:go#1:waiting")}`])),
          "each run is parked on its wait, with no other step"
        )
        assert.deepStrictEqual(seen, [], "no step of the body ran past the parked wait")

        const done: Record<string, string> = {}
        for (const [name, id] of Object.entries(runs)) {
          const run = yield* (yield* WorkflowClient).get(id)
          yield* run.signal("go", { n: 1 })
          done[name] = `${yield* speedrun(id).pipe(withRegistry(flows))} ${(yield* stepRows(id)).join(",")}`
        }
        assert.deepStrictEqual(
          done,
          Object.fromEntries(
            flows.map((wf) => [wf.name, `finished ${rowsOf(wf.name, "wait:go#1:completed,after#1:completed")}`])
          )
        )
        assert.sameMembers(
          seen,
          names.flatMap((r) => [`${r} after {"n":1}`, `${r} after {"n":1}`]),
          "woken, each body saw the signal, not its catch"
        )
      })
    )

    it.effect("a scheduled sleep caught by the body: the run waits for it and does not finish", () =>
      Effect.gen(function* () {
        const after: Array<string> = []
        const Sleeper = Workflow.make("CatchSleep", { payload: Payload }, function* () {
          yield* Effect.catchCause(Workflow.sleep("nap", "1 hour"), () => Effect.void)
          yield* Workflow.step(
            "after",
            Effect.sync(() => after.push("after"))
          )
          return "done"
        })
        const run = yield* Sleeper.start({ id: "s" })
        yield* performNextStep(run.id).pipe(withRegistry([Sleeper]))
        assert.strictEqual(yield* status(run.id), "ready")
        assert.deepStrictEqual(yield* stepRows(run.id), ["nap#1:scheduled"])
        assert.notInclude(yield* eventTypes(run.id), "finished")
        assert.deepStrictEqual(after, [])
      })
    )
  })

  describe("a control verb caught inside its step", () => {
    const verbs = {
      pause: () => Workflow.pause("caught pause"),
      finish: () => Workflow.finish(),
      skip: () => Workflow.skip(),
      cancel: () => Workflow.cancel("caught cancel")
    }
    type Verb = keyof typeof verbs
    const after: Array<string> = []
    // the step's code catches the verb's defect, and goes on with a value, or fails otherwise
    const make = (verb: Verb, then: "value" | "fail") =>
      Workflow.make(`CatchVerb-${verb}-${then}`, { payload: Payload }, function* () {
        yield* Workflow.step(
          "act",
          Effect.catchCause(verbs[verb](), () =>
            then === "value"
              ? Effect.sync(() => {
                  after.push(`${verb} caught`)
                  return "swallowed"
                })
              : Effect.fail(new Error("another failure"))
          )
        )
        yield* Workflow.step(
          "next",
          Effect.sync(() => after.push(`${verb} next`))
        )
      })
    const flows = (["pause", "finish", "skip", "cancel"] as const).flatMap((verb) => [
      make(verb, "value"),
      make(verb, "fail")
    ])

    it.effect("the verb's request stands: the step ends with it, not with the catch's value or failure", () =>
      Effect.gen(function* () {
        const results: Record<string, string> = {}
        for (const wf of flows) {
          const run = yield* wf.start({ id: "v" })
          results[wf.name] =
            `${yield* speedrun(run.id).pipe(withRegistry(flows))} ${(yield* stepRows(run.id)).join(",")}`
        }
        assert.deepStrictEqual(results, {
          "CatchVerb-pause-value": "paused act#1:completed",
          "CatchVerb-pause-fail": "paused act#1:completed",
          "CatchVerb-finish-value": "finished act#1:completed",
          "CatchVerb-finish-fail": "finished act#1:completed",
          "CatchVerb-skip-value": "finished act#1:skipped,next#1:completed",
          "CatchVerb-skip-fail": "finished act#1:skipped,next#1:completed",
          "CatchVerb-cancel-value": "cancelled act#1:cancelled",
          "CatchVerb-cancel-fail": "cancelled act#1:cancelled"
        })
        // the catch's own code ran (nothing stops code after a catch), its value was not the step's
        assert.sameMembers(after, [
          "pause caught",
          "finish caught",
          "skip caught",
          "cancel caught",
          "skip next",
          "skip next"
        ])
        const paused = (yield* (yield* WorkflowClient).list({ workflow: "CatchVerb-pause-value" })).runs[0]!
        const steps = yield* (yield* WorkflowClient).steps(paused.id)
        assert.isUndefined(steps[0]!.output, "the swallowed value was not stored as the step's output")
      })
    )
  })
})
