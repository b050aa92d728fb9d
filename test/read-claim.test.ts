/**
 * A woken step claimed by the worker's read that delivers its message (issue 24): the read and
 * the step's claim are one statement (`stepClaimInRead`). The step runs once with the audit trail
 * a claim by `stepClaim` leaves; a step claimed in a read whose worker died is recovered exactly
 * as one `stepClaim` claimed (its message's lease lapses, the redelivery applies the stall
 * action); a read whose reply was lost, or whose message a drain gives back, releases what it
 * claimed first.
 */
import { assert, layer } from "@effect/vitest"
import { Deferred, type Duration, Effect, Fiber, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../src/Config.ts"
import * as Job from "../src/Job/Job.ts"
import { receiptOf } from "../src/Queue/Message.ts"
import { makeQueueSql } from "../src/Queue/QueueSql.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import { type StepMessage, WorkflowRunner } from "../src/Workflow/Engine.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { makeWorkflowSql, STEP_JOB } from "../src/Workflow/WorkflowSql.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { plansInBothModes } from "./support/plans.ts"
import { eventTypes, info, stepRows, WOKEN_TRAIL } from "./support/runs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Go = Schema.Struct({ v: Schema.Number })
let ran = 0
/** When set, the step's body waits for it (the test reads the step's message meanwhile). */
let hold: Deferred.Deferred<void> | undefined
const Woken = Workflow.make(
  "ReadClaimed",
  { payload: Schema.Struct({ id: Schema.String }), signals: { go: Go } },
  function* () {
    return yield* Workflow.step(
      "got",
      Effect.gen(function* () {
        ran++
        if (hold !== undefined) yield* Deferred.await(hold)
        return ((yield* Workflow.context).signal?.payload as { v: number } | undefined)?.v ?? -1
      }),
      { waitFor: "go" }
    )
  }
)

/** Its first attempt hangs (a worker that dies in it records nothing more). */
const Dies = Workflow.make(
  "ReadClaimedDies",
  { payload: Schema.Struct({ id: Schema.String }), signals: { go: Go } },
  function* () {
    return yield* Workflow.step(
      "got",
      Effect.gen(function* () {
        const ctx = yield* Workflow.context
        if (ctx.attempt === 1) return yield* Effect.never
        return (ctx.signal?.payload as { v: number } | undefined)?.v ?? -1
      }),
      { waitFor: "go" }
    )
  }
)

const capsules = [{ name: "c", queues: ["default"], concurrency: 2, readAhead: 0 }]

/** Runs of a step woken behind a busy executor: how many times each workflow's body ran. */
const bufferedRan: Record<string, number> = {}
/** A workflow whose one step waits for `go` (with `timeout`, if given) and counts its runs. */
const bufferedWorkflow = (name: string, timeout?: Duration.Input) =>
  Workflow.make(name, { payload: Schema.Struct({ id: Schema.String }), signals: { go: Go } }, function* () {
    return yield* Workflow.step(
      "got",
      Effect.gen(function* () {
        bufferedRan[name] = (bufferedRan[name] ?? 0) + 1
        return ((yield* Workflow.context).signal?.payload as { v: number } | undefined)?.v ?? -1
      }),
      { waitFor: "go", ...(timeout === undefined ? {} : { timeout }) }
    )
  })

/** Waits for the run to finish with the signal's value (9) as its output. */
const finishedWithSignal = (runId: string) =>
  Effect.gen(function* () {
    yield* eventually(
      "finished",
      Effect.map(info(runId), (i) => i.status === "finished")
    )
    assert.strictEqual((yield* info(runId)).output, 9)
  })

/**
 * A run of `workflow` parked (its park is a short job: the worker knows its jobs' time), then
 * the one executor busy with a job until `gate` opens, then the signal: the woken step's message
 * is read into the buffer (read-ahead 1) behind the busy executor. Returns the run and the step
 * row's status once its message was read.
 */
const wokenBehindBusy = (workflow: ReturnType<typeof bufferedWorkflow>, id: string, gate: Deferred.Deferred<void>) =>
  Effect.gen(function* () {
    const config = yield* PgBusConfig
    const sql = yield* SqlClient.SqlClient
    const busy = yield* Deferred.make<void>()
    const Blocker = Job.make(`${workflow.name}Blocker`, { payload: Schema.Struct({}) }, () =>
      Effect.andThen(Deferred.succeed(busy, undefined), Deferred.await(gate))
    )
    yield* startSupervisor([workflow, Blocker], {
      capsules: [{ name: "c", queues: ["default"], concurrency: 1, readAhead: 1 }]
    })
    const run = yield* workflow.start({ id })
    yield* eventually(
      "waiting",
      Effect.map(info(run.id), (i) => i.status === "waiting")
    )
    yield* Blocker.enqueue({})
    yield* Deferred.await(busy)
    yield* run.signal("go", { v: 9 })
    const q = sql(`${config.schema}.q_${config.queuePrefix}_${config.workflowQueue}`)
    const read = sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM ${q}
      WHERE message->'payload'->>'run' = ${run.id} AND message->'payload'->>'step' IS NOT NULL AND read_ct = 1`
    yield* eventually(
      "the woken step's message read into the buffer",
      Effect.map(read, (rows) => rows[0]!.n === 1)
    )
    return { run, steps: yield* stepRows(run.id) }
  })

/** A run of `workflow` parked on its signal by a supervisor that then stopped. */
const parked = (workflow: typeof Woken | typeof Dies, id: string) =>
  Effect.scoped(
    Effect.gen(function* () {
      yield* startSupervisor([Woken, Dies], { capsules })
      const run = yield* workflow.start({ id })
      yield* eventually(
        "waiting",
        Effect.map(info(run.id), (i) => i.status === "waiting")
      )
      return run
    })
  )

/** A supervisor runs until the run finished. */
const finishes = (id: string) =>
  Effect.scoped(
    Effect.andThen(
      startSupervisor([Woken, Dies], { capsules }),
      eventually(
        "finished",
        Effect.map(info(id), (i) => i.status === "finished")
      )
    )
  )

/** The claim a worker's read of the workflow queue makes, as the registry gives it to the worker. */
const readClaim = Effect.gen(function* () {
  const config = yield* PgBusConfig
  const registry = yield* Registry.pipe(Effect.provide(Registry.layer([Woken, Dies])))
  const claim = registry.jobs.get(STEP_JOB)?.readClaim?.(config.workflowQueue)
  assert.isDefined(claim, "the step job's messages are claimed in the read")
  return { claim: claim!, queue: config.workflowQueue, workflows: registry.workflows }
})

layer(
  TestDatabase.layer({
    pollingInterval: "50 millis",
    // the woken step goes through NOTIFY and the worker's read, as from a process with no worker
    localDispatch: false,
    workflowStallAction: "reattempt",
    // no heartbeat moves a message's visibility while the test reads it
    visibilityTimeout: "10 minutes",
    visibilityHeartbeatInterval: "5 minutes"
  }),
  { excludeTestServices: true }
)("a woken step claimed in the worker's read", (it) => {
  it.effect("read and claimed in one statement: it runs once, with the audit trail of a stepClaim", () =>
    Effect.gen(function* () {
      ran = 0
      const config = yield* PgBusConfig
      const sql = yield* SqlClient.SqlClient
      yield* startSupervisor([Woken], { capsules })
      const run = yield* Woken.start({ id: "once" })
      yield* eventually(
        "waiting",
        Effect.map(info(run.id), (i) => i.status === "waiting")
      )
      hold = yield* Deferred.make<void>()
      yield* run.signal("go", { v: 7 })
      // claimed by the read: the step started at the read's now() (its message's visibility
      // timeout counts from it), under the delivery's mark; its message was delivered once
      const q = sql(`${config.schema}.q_${config.queuePrefix}_${config.workflowQueue}`)
      const held = sql<{
        readonly read_at: boolean
        readonly mark_ok: boolean
        readonly read_ct: number
      }>`SELECT st.started_at = m.vt - ${"10 minutes"}::interval AS read_at,
          st.claimed_by = ${config.workflowQueue} || ':' || m.msg_id || ':1' AS mark_ok, m.read_ct
        FROM ${sql(`${config.schema}.workflow_steps`)} st
        JOIN ${q} m ON m.message->'payload'->>'step' = st.id::text
        WHERE st.run_id = ${run.id}::uuid AND st.status = 'in_progress'`
      yield* eventually(
        "the step running",
        Effect.map(held, (rows) => rows.length === 1)
      )
      const [row] = yield* held
      yield* Deferred.succeed(hold, undefined)
      hold = undefined
      assert.isTrue(row!.read_at, "the step started in the read's statement")
      assert.isTrue(row!.mark_ok, "under the delivery's mark")
      assert.strictEqual(row!.read_ct, 1)
      yield* eventually(
        "finished",
        Effect.map(info(run.id), (i) => i.status === "finished")
      )
      assert.strictEqual((yield* info(run.id)).output, 7)
      assert.strictEqual(ran, 1, "the step's body ran once")
      assert.deepStrictEqual(yield* stepRows(run.id), ["got#1:completed"])
      // the trail as main writes it for a step woken through the queue and claimed by stepClaim
      assert.deepStrictEqual(yield* eventTypes(run.id), WOKEN_TRAIL)
      // its message, acknowledged, is deleted: the run's rows and trail record what it did
      const messagesOfRun = (table: string) =>
        Effect.map(
          sql<{
            readonly n: number
          }>`SELECT count(*)::int AS n FROM ${sql(`${config.schema}.${table}_${config.queuePrefix}_${config.workflowQueue}`)}
            WHERE message->'payload'->>'run' = ${run.id}`,
          (rows) => rows[0]!.n
        )
      yield* eventually(
        "acknowledged",
        Effect.map(messagesOfRun("q"), (n) => n === 0)
      )
      assert.strictEqual(yield* messagesOfRun("a"), 0, "not archived")
    }).pipe(Effect.scoped)
  )

  it.effect(
    "claimed in a read whose worker died: its lease lapses and the redelivery recovers it exactly as a step stepClaim claimed",
    () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const runner = yield* WorkflowRunner
        const { claim, queue, workflows } = yield* readClaim
        // a worker's read claims the woken step with its message, then its process dies
        const inRead = yield* parked(Dies, "in-read")
        yield* inRead.signal("go", { v: 1 })
        const got = yield* store.archiveAndRead(queue, [], {
          limit: 10,
          visibilityTimeout: "300 millis",
          claimedBy: "dead#1",
          readClaim: { claim, limit: 10 }
        })
        assert.strictEqual(got.messages.length, 1)
        assert.deepStrictEqual(yield* stepRows(inRead.id), ["got#1:in_progress"])
        yield* finishes(inRead.id)
        // the same with the step claimed by stepClaim, in the dead worker's execution
        const byStepClaim = yield* parked(Dies, "by-step-claim")
        yield* byStepClaim.signal("go", { v: 1 })
        const [m] = yield* store.read(queue, { limit: 10, visibilityTimeout: "300 millis", claimedBy: "dead#2" })
        const dead = yield* runner
          .execute(workflows, (m!.message as { readonly payload: StepMessage }).payload, {
            attempt: m!.readCt,
            msgId: m!.msgId,
            queue: m!.queue
          })
          .pipe(Effect.forkChild)
        yield* eventually(
          "claimed",
          Effect.map(stepRows(byStepClaim.id), (rows) => rows[0] === "got#1:in_progress")
        )
        yield* finishes(byStepClaim.id)
        yield* Fiber.interrupt(dead)
        for (const id of [inRead.id, byStepClaim.id]) {
          assert.deepStrictEqual(yield* stepRows(id), ["got#1:failed", "got#2:completed"])
          assert.strictEqual((yield* info(id)).output, 1)
        }
        const trail = yield* eventTypes(inRead.id)
        assert.include(trail, "stall_detected")
        assert.deepStrictEqual(trail, yield* eventTypes(byStepClaim.id))
      })
  )

  it.effect("a read whose reply was lost: its claims are released by its messages, and the run goes on unstalled", () =>
    Effect.gen(function* () {
      const store = yield* QueueStore
      const { claim, queue } = yield* readClaim
      const run = yield* parked(Dies, "lost-reply")
      yield* run.signal("go", { v: 2 })
      yield* store.archiveAndRead(queue, [], {
        limit: 10,
        claimedBy: "live#3",
        readClaim: { claim, limit: 10 }
      })
      assert.deepStrictEqual(yield* stepRows(run.id), ["got#1:in_progress"])
      // what the worker does when the read fails with its connection (Claim.ts releaseLostClaim)
      yield* claim.release(yield* store.claimedBy(queue, "live#3"), false)
      yield* store.releaseClaim(queue, "live#3")
      yield* finishes(run.id)
      assert.strictEqual((yield* info(run.id)).output, 2)
      assert.deepStrictEqual(yield* stepRows(run.id), ["got#1:failed", "got#2:completed"])
      const trail = yield* eventTypes(run.id)
      assert.include(trail, "step_interrupted")
      assert.notInclude(trail, "stall_detected")
    })
  )

  it.effect("a drain gives back a message whose step its read claimed: released first, the run goes on unstalled", () =>
    Effect.gen(function* () {
      const store = yield* QueueStore
      const { claim, queue } = yield* readClaim
      const run = yield* parked(Dies, "drained")
      yield* run.signal("go", { v: 3 })
      const got = yield* store.archiveAndRead(queue, [], {
        limit: 10,
        claimedBy: "live#4",
        readClaim: { claim, limit: 10 }
      })
      assert.deepStrictEqual(yield* stepRows(run.id), ["got#1:in_progress"])
      // what Drain.ts does with buffered messages: their claims first (only those the read took), then the messages
      yield* claim.release(got.messages, true)
      yield* claim.release(got.messages, true)
      assert.strictEqual(yield* store.giveBackUnread(queue, got.messages.map(receiptOf), "live"), 1)
      yield* finishes(run.id)
      assert.strictEqual((yield* info(run.id)).output, 3)
      assert.deepStrictEqual(yield* stepRows(run.id), ["got#1:failed", "got#2:completed"])
      const trail = yield* eventTypes(run.id)
      assert.strictEqual(trail.filter((t) => t === "step_interrupted").length, 1)
      assert.notInclude(trail, "stall_detected")
    })
  )

  it.effect(
    "a drain whose release of a read's step claim failed: the message's next delivery, unread, runs the step as its own",
    () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        const { claim, queue } = yield* readClaim
        const run = yield* parked(Woken, "drained-unreleased")
        const before = ran
        yield* run.signal("go", { v: 4 })
        const got = yield* store.archiveAndRead(queue, [], {
          limit: 10,
          claimedBy: "live#5",
          readClaim: { claim, limit: 10 }
        })
        assert.deepStrictEqual(yield* stepRows(run.id), ["got#1:in_progress"])
        // Drain.ts: the claims first, but this release fails (its step's attempt cannot end)
        const sql = yield* SqlClient.SqlClient
        const { schema } = yield* PgBusConfig
        yield* sql.unsafe(`CREATE FUNCTION ${schema}.test_refuse_release() RETURNS trigger LANGUAGE plpgsql AS
          $$ BEGIN RAISE EXCEPTION 'release refused by the test'; END $$`)
        yield* sql.unsafe(`CREATE TRIGGER test_refuse_release BEFORE UPDATE ON ${schema}.workflow_steps
          FOR EACH ROW WHEN (OLD.status = 'in_progress' AND NEW.status = 'failed')
          EXECUTE FUNCTION ${schema}.test_refuse_release()`)
        yield* claim.release(got.messages, true)
        yield* sql.unsafe(`DROP TRIGGER test_refuse_release ON ${schema}.workflow_steps`)
        assert.deepStrictEqual(yield* stepRows(run.id), ["got#1:in_progress"], "still claimed by the read")
        // the message goes back unread: its next delivery has the read count, hence the claim's
        // mark, of the one whose read claimed the step: the step is its own, and runs
        assert.strictEqual(yield* store.giveBackUnread(queue, got.messages.map(receiptOf), "live"), 1)
        yield* finishes(run.id)
        assert.strictEqual((yield* info(run.id)).output, 4)
        assert.deepStrictEqual(yield* stepRows(run.id), ["got#1:completed"])
        assert.strictEqual(ran - before, 1, "the step ran once")
        const trail = yield* eventTypes(run.id)
        assert.notInclude(trail, "stall_detected")
        assert.notInclude(trail, "step_interrupted")
      })
  )

  it.effect(
    "a woken step read behind a busy executor is claimed in the read while it waits in the buffer: it runs once, with a stepClaim's trail",
    () =>
      Effect.gen(function* () {
        const Behind = bufferedWorkflow("ReadClaimedBehind")
        const gate = yield* Deferred.make<void>()
        const { run, steps } = yield* wokenBehindBusy(Behind, "behind", gate)
        assert.deepStrictEqual(steps, ["got#1:in_progress"], "claimed by the read, its body not yet run")
        assert.strictEqual(bufferedRan[Behind.name] ?? 0, 0)
        yield* Deferred.succeed(gate, undefined)
        yield* finishedWithSignal(run.id)
        assert.strictEqual(bufferedRan[Behind.name], 1)
        assert.deepStrictEqual(yield* stepRows(run.id), ["got#1:completed"])
        assert.deepStrictEqual(yield* eventTypes(run.id), WOKEN_TRAIL)
      }).pipe(Effect.scoped)
  )

  it.effect(
    "a woken step whose timeout is shorter than a lease is not claimed while it waits in the buffer (its stall clock would run there)",
    () =>
      Effect.gen(function* () {
        const Timed = bufferedWorkflow("ReadClaimedTimed", "5 seconds")
        const gate = yield* Deferred.make<void>()
        const { run, steps } = yield* wokenBehindBusy(Timed, "timed", gate)
        assert.deepStrictEqual(steps, ["got#1:scheduled"], "left to the executor's own claim")
        yield* Deferred.succeed(gate, undefined)
        yield* finishedWithSignal(run.id)
        assert.strictEqual(bufferedRan[Timed.name], 1)
        assert.deepStrictEqual(yield* stepRows(run.id), ["got#1:completed"])
      }).pipe(Effect.scoped)
  )

  it.effect(
    "a drain gives back a woken step the read claimed in the buffer: released first, the next worker runs it once, unstalled",
    () =>
      Effect.gen(function* () {
        const Drained = bufferedWorkflow("ReadClaimedBufferDrained")
        const gate = yield* Deferred.make<void>()
        const run = yield* Effect.scoped(
          Effect.gen(function* () {
            const { run, steps } = yield* wokenBehindBusy(Drained, "buffer-drained", gate)
            assert.deepStrictEqual(steps, ["got#1:in_progress"])
            // the drain gives the buffer back at once, then waits for the busy job, which ends soon
            yield* Effect.forkDetach(Effect.andThen(Effect.sleep("300 millis"), Deferred.succeed(gate, undefined)))
            return run
          })
        )
        assert.strictEqual(bufferedRan[Drained.name] ?? 0, 0, "the drained worker never ran it")
        assert.deepStrictEqual(yield* stepRows(run.id), ["got#1:failed", "got#2:scheduled"])
        yield* Effect.scoped(
          Effect.andThen(
            startSupervisor([Drained], { capsules }),
            eventually(
              "finished",
              Effect.map(info(run.id), (i) => i.status === "finished")
            )
          )
        )
        assert.strictEqual((yield* info(run.id)).output, 9)
        assert.strictEqual(bufferedRan[Drained.name], 1)
        const trail = yield* eventTypes(run.id)
        assert.strictEqual(trail.filter((t) => t === "step_interrupted").length, 1)
        assert.notInclude(trail, "stall_detected")
        assert.notInclude(trail, "paused")
      })
  )

  // last: the rows it writes would be read by the supervisors of the tests above
  it.effect(
    "the read with the claims reaches every row by index, never by a scan (20,000 runs, custom and generic plans)",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const config = yield* PgBusConfig
        const store = yield* QueueStore
        yield* store.create("plans")
        const { physical } = yield* store.validateName("plans")
        const s = config.schema
        yield* sql.unsafe(`INSERT INTO ${s}.workflow_runs (id, workflow, payload, status, engine_version, created_at, updated_at)
          SELECT gen_random_uuid(), 'Plans', '{}'::jsonb, 'ready', 1, now(), now() FROM generate_series(1, 20000)`)
        yield* sql.unsafe(`INSERT INTO ${s}.workflow_steps (run_id, name, attempt, position, status, queue, scheduled_at, due_at)
          SELECT id, 'got', 1, 0, 'scheduled', 'plans', now(), now() FROM ${s}.workflow_runs WHERE workflow = 'Plans'`)
        yield* sql.unsafe(`INSERT INTO ${s}.q_${physical} (message, vt, enqueued_at)
          SELECT jsonb_build_object('job', '${STEP_JOB}', 'payload',
            jsonb_build_object('workflow', 'Plans', 'run', st.run_id::text, 'step', st.id::text)), now(), now()
          FROM ${s}.workflow_steps st WHERE st.queue = 'plans'`)
        for (const table of ["workflow_runs", "workflow_steps", `q_${physical}`])
          yield* sql.unsafe(`ANALYZE ${s}.${table}`)
        const queue = makeQueueSql(sql, s, "")
        const workflow = makeWorkflowSql(sql, s, () => {
          throw new Error("no message is sent")
        })
        const claims = workflow.stepClaimInRead({
          queue: "plans",
          workflows: ["Plans"],
          limit: 10,
          worker: "w",
          appRevision: null,
          now: null
        })
        // with messages that wait in the buffer too (their steps' timeouts checked)
        const soonClaims = workflow.stepClaimInRead({
          queue: "plans",
          workflows: ["Plans"],
          limit: 2,
          soon: 8,
          soonMinTimeoutMs: 30_000,
          worker: "w",
          appRevision: null,
          now: null
        })
        const checked = [
          queue.messageRead(physical, 10, 30_000, "x#1", null, 0n, true, claims),
          queue.messageArchiveAndRead(
            physical,
            { ids: [1n, 2n], readCounts: [1, 1] },
            10,
            30_000,
            "x#1",
            null,
            0n,
            true,
            soonClaims
          )
        ]
        for (const { mode, text, lines } of yield* plansInBothModes(sql, checked)) {
          assert.notMatch(lines, /Seq Scan on (workflow_|q_)/, `${mode}: ${text}\n${lines}`)
        }
      })
  )
})

layer(
  TestDatabase.layer({
    pollingInterval: "50 millis",
    localDispatch: false,
    visibilityTimeout: "10 minutes",
    visibilityHeartbeatInterval: "5 minutes",
    // the sweep would call a step stalled before a buffered message's lease could lapse
    workflowStallThreshold: "1 minute"
  }),
  { excludeTestServices: true }
)("a woken step claimed in the worker's read, under a stall threshold shorter than a lease", (it) => {
  it.effect("is not claimed while its message waits in the buffer: the executor claims it when it takes it", () =>
    Effect.gen(function* () {
      const Short = bufferedWorkflow("ReadClaimedShortThreshold")
      const gate = yield* Deferred.make<void>()
      const { run, steps } = yield* wokenBehindBusy(Short, "short-threshold", gate)
      assert.deepStrictEqual(steps, ["got#1:scheduled"], "left to the executor's own claim")
      yield* Deferred.succeed(gate, undefined)
      yield* finishedWithSignal(run.id)
      assert.strictEqual(bufferedRan[Short.name], 1)
    }).pipe(Effect.scoped)
  )
})
