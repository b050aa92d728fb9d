/**
 * What a workflow run writes, beyond its own rows and audit trail: no copy of its messages (a
 * worker deletes them when they succeed; a job's are still archived), and a trail stored under
 * one index.
 */
import { assert, describe, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../src/Config.ts"
import * as Job from "../src/Job/Job.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { WorkflowClient } from "../src/Workflow/Client.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const ThreeSteps = Workflow.make(
  "WritesThreeSteps",
  { payload: Schema.Struct({ n: Schema.Number }) },
  function* ({ payload }) {
    const a = yield* Workflow.step("one", Effect.succeed(payload.n + 1))
    const b = yield* Workflow.step("two", Effect.succeed(a + 1))
    return yield* Workflow.step("three", Effect.succeed(b + 1))
  }
)

// a job on the workflows' queue: its messages share the worker's archives with the runs'
const Plain = Job.make(
  "WritesPlain",
  { payload: Schema.Struct({ i: Schema.Number }), queue: "default" },
  () => Effect.void
)

const TRAIL = [
  "started",
  ...["one", "two", "three"].flatMap((s) => [`step_scheduled:${s}`, `step_started:${s}`, `step_completed:${s}`]),
  "finished"
]

/** The workflow queue's message table and archive (`q`, `a`). */
const tables = Effect.map(PgBusConfig, (config) => ({
  schema: config.schema,
  q: `${config.schema}.q_${config.queuePrefix}_${config.workflowQueue}`,
  a: `${config.schema}.a_${config.queuePrefix}_${config.workflowQueue}`
}))

layer(TestDatabase.layer({ pollingInterval: "50 millis" }), { excludeTestServices: true })("workflow writes", (it) => {
  describe("a run's messages", () => {
    it.effect(
      "are deleted when they succeed, not archived: the runs keep their rows and trail; the jobs beside them are archived",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const client = yield* WorkflowClient
          const { q, a } = yield* tables
          yield* startSupervisor([ThreeSteps, Plain], {
            capsules: [{ name: "c", queues: ["default"], concurrency: 4 }]
          })
          // several at once: the successes are acknowledged by the flusher and by the next claims
          const runs = yield* Effect.forEach([1, 2, 3, 4, 5, 6, 7, 8], (n) => ThreeSteps.start({ n }))
          const jobs = yield* Effect.forEach([1, 2, 3, 4], (i) => Plain.enqueue({ i }))
          for (const run of runs) {
            yield* eventually(
              "finished",
              Effect.map(client.get(run.id), (h) => h.info.status === "finished")
            )
          }
          for (const [i, run] of runs.entries()) {
            assert.strictEqual((yield* run.refresh).info.output, i + 4)
            assert.deepStrictEqual(
              (yield* run.steps).map((s) => `${s.name}:${s.status}`),
              ["one:completed", "two:completed", "three:completed"]
            )
            assert.deepStrictEqual(
              (yield* run.events).map((e) => (e.step == null ? e.type : `${e.type}:${e.step}`)),
              TRAIL
            )
          }
          const ids = runs.map((r) => r.id)
          const messagesOf = (table: string) =>
            Effect.map(
              sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM ${sql(table)}
                WHERE message->'payload'->>'run' = ANY(${ids}::text[])`,
              (rows) => rows[0]!.n
            )
          yield* eventually(
            "every message acknowledged",
            Effect.map(messagesOf(q), (n) => n === 0)
          )
          assert.strictEqual(yield* messagesOf(a), 0, "no run's message is archived")
          const store = yield* QueueStore
          for (const job of jobs) {
            yield* eventually("the job archived", store.isArchived("default", job.msgId))
          }
        }).pipe(Effect.scoped)
    )

    it.effect(
      "archiveAndRead deletes the receipts it is told to and archives the others (plain and ordered claims)",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const store = yield* QueueStore
          const config = yield* PgBusConfig
          for (const ordered of [false, true]) {
            const queue = ordered ? "writes_ordered" : "writes_plain"
            yield* store.create(queue, ordered ? { orderIndex: true } : {})
            yield* Effect.forEach([1, 2, 3, 4], (i) => store.send(queue, { i }))
            const got = yield* store.read(queue, { limit: 3 })
            assert.strictEqual(got.length, 3)
            const next = yield* store.archiveAndRead(queue, [got[0]!], {
              limit: 5,
              deleted: [got[1]!, got[2]!],
              ...(ordered ? { ordered } : {})
            })
            assert.strictEqual(next.archived, 3, "three acknowledged")
            assert.deepStrictEqual(
              next.messages.map((m) => m.message),
              [{ i: 4 }]
            )
            const physical = `${config.queuePrefix}_${queue}`
            const archived = yield* sql<{ readonly i: number }>`SELECT (message->>'i')::int AS i
            FROM ${sql(`${config.schema}.a_${physical}`)} ORDER BY msg_id`
            assert.deepStrictEqual(
              archived.map((r) => r.i),
              [1],
              `${queue}: only the archived receipt`
            )
            const left = yield* sql<{ readonly i: number }>`SELECT (message->>'i')::int AS i
            FROM ${sql(`${config.schema}.q_${physical}`)} ORDER BY msg_id`
            assert.deepStrictEqual(
              left.map((r) => r.i),
              [4],
              `${queue}: the deleted ones are gone`
            )
          }
        })
    )
  })

  describe("the audit trail", () => {
    it.effect("is stored under one index, its primary key (run_id, id)", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const { schema } = yield* tables
        const indexes = yield* sql<{ readonly name: string; readonly primary: boolean; readonly def: string }>`
          SELECT c.relname AS name, i.indisprimary AS primary, pg_get_indexdef(i.indexrelid) AS def
          FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
          WHERE i.indrelid = ${`${schema}.workflow_events`}::regclass`
        assert.strictEqual(indexes.length, 1, indexes.map((i) => i.def).join("; "))
        assert.isTrue(indexes[0]!.primary)
        assert.match(indexes[0]!.def, /\(run_id, id\)$/)
      })
    )
  })
})
