/**
 * The dashboard's pages over 100,000 workflow runs and 1,000,000 archived jobs (made with
 * generate_series): every statement the Overview, Queues, Jobs and Workflows pages run reads an
 * index, never a sequential scan of the big tables (EXPLAIN, not a timing: the machine is shared).
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../src/Config.ts"
import { Operations } from "../src/Operations/Operations.ts"
import { makeQueueQuerySql } from "../src/Queue/QueueQuerySql.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { makeWorkflowQuerySql } from "../src/Workflow/QuerySql.ts"
import { OngoingStatuses } from "../src/Workflow/States.ts"
import { headerAccess, serveDashboard } from "./support/dashboard.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const RUNS = 100_000
const ARCHIVED = 1_000_000

interface PlanNode {
  readonly "Node Type": string
  readonly "Relation Name"?: string
  readonly "Index Name"?: string
  readonly "Actual Loops"?: number
  readonly Plans?: ReadonlyArray<PlanNode>
}

const nodesOf = (node: PlanNode): ReadonlyArray<PlanNode> => [node, ...(node.Plans ?? []).flatMap(nodesOf)]

layer(Operations.layer.pipe(Layer.provideMerge(TestDatabase.layer())), {
  excludeTestServices: true,
  timeout: "240 seconds"
})("dashboard at scale", (it) => {
  it.effect("over 100,000 runs and 1,000,000 archived jobs the pages' statements read indexes; the pages render", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const { schema } = yield* PgBusConfig
      const store = yield* QueueStore
      yield* store.create("bulk")
      const archive = sql(`${schema}.a_pgbus_bulk`)
      const runs = sql(`${schema}.workflow_runs`)
      yield* sql`INSERT INTO ${archive} (msg_id, read_ct, enqueued_at, archived_at, vt, message, headers)
          SELECT g, 1, now() - g * interval '1 second', now() - g * interval '1 second', now(),
            jsonb_build_object('job', 'Bulk', 'payload', jsonb_build_object('n', g)), '{}'::jsonb
          FROM generate_series(1, ${ARCHIVED}) g`
      // 1 in 100 runs is ongoing (the rest finished or cancelled), as in a system that has run a while
      yield* sql`INSERT INTO ${runs} (id, workflow, payload, status, current_step, engine_version, created_at,
            updated_at, finished_at, paused_at, paused_reason)
          SELECT gen_random_uuid(), 'Flow' || (g % 20), '{}'::jsonb,
            CASE WHEN g % 100 = 0 THEN 'paused' WHEN g % 100 = 1 THEN 'waiting' WHEN g % 7 = 0 THEN 'cancelled' ELSE 'finished' END,
            'step' || (g % 5), 1, now() - g * interval '1 minute', now() - g * interval '1 minute',
            CASE WHEN g % 100 IN (0, 1) THEN NULL ELSE now() - g * interval '1 minute' + interval '5 seconds' END,
            CASE WHEN g % 100 = 0 THEN now() - g * interval '1 minute' END,
            CASE WHEN g % 100 = 0 THEN 'manual' END
          FROM generate_series(1, ${RUNS}) g`
      yield* sql`ANALYZE ${archive}`
      yield* sql`ANALYZE ${runs}`

      const explain = (statement: { compile: () => readonly [string, ReadonlyArray<unknown>] }, analyze = false) =>
        Effect.gen(function* () {
          const [text, params] = statement.compile()
          const [row] = yield* sql.unsafe<{ readonly "QUERY PLAN": ReadonlyArray<{ readonly Plan: PlanNode }> }>(
            `EXPLAIN (${analyze ? "ANALYZE, " : ""}FORMAT JSON) ${text}`,
            params as Array<unknown>
          )
          return nodesOf(row!["QUERY PLAN"][0]!.Plan)
        })
      const assertIndexed = (name: string, nodes: ReadonlyArray<PlanNode>, relation: string) => {
        const scans = nodes.filter((n) => n["Relation Name"] === relation)
        assert.isAbove(scans.length, 0, `${name} reads ${relation}`)
        for (const scan of scans) {
          assert.notStrictEqual(scan["Node Type"], "Seq Scan", `${name}: no sequential scan of ${relation}`)
        }
      }

      const queueSql = makeQueueQuerySql(sql, schema)
      const workflowSql = makeWorkflowQuerySql(sql, schema)
      const clock = { now: null, stallMs: 300_000, waitingMs: 86_400_000 }

      // Jobs page, archived state: the first page and a later one, by the archive's key
      assertIndexed(
        "archived jobs",
        yield* explain(queueSql.jobsList("pgbus_bulk", "archived", null, null, 51, null)),
        "a_pgbus_bulk"
      )
      assertIndexed(
        "archived jobs, next page",
        yield* explain(queueSql.jobsList("pgbus_bulk", "archived", null, 500_000n, 51, null)),
        "a_pgbus_bulk"
      )
      // Queues and Overview: the archive is counted by the planner's estimate past 100,000 rows
      const figures = yield* explain(queueSql.queueFigures("pgbus_bulk", null), true)
      const archiveScans = figures.filter((n) => n["Relation Name"] === "a_pgbus_bulk")
      assert.isTrue(
        archiveScans.every((n) => n["Actual Loops"] === 0),
        "the queue's figures never run their count of the archive (EXPLAIN ANALYZE: never executed)"
      )
      // Workflows page: the list (ongoing by default, one status, every status) and its counts
      for (const [name, statuses] of [
        ["ongoing runs", OngoingStatuses],
        ["paused runs", ["paused"] as const],
        ["every run", undefined]
      ] as const) {
        assertIndexed(
          `${name} list`,
          yield* explain(workflowSql.runListFiltered({ statuses, limit: 51 }, clock)),
          "workflow_runs"
        )
      }
      assertIndexed(
        "ongoing counts",
        yield* explain(workflowSql.runCountsByStatus(null, null, OngoingStatuses)),
        "workflow_runs"
      )
      assertIndexed("stuck counts", yield* explain(workflowSql.runCountsStuck(clock, null, null)), "workflow_runs")
      assertIndexed(
        "needs attention",
        yield* explain(workflowSql.runAttentionGroups(clock, null, null, 200)),
        "workflow_runs"
      )

      // and the pages render over it, with the numbers the seed made
      const base = yield* serveDashboard(headerAccess)
      const get = (path: string) =>
        Effect.promise(async () => {
          const r = await fetch(`${base}${path}`, { headers: { "x-role": "read" } })
          return { status: r.status, text: await r.text() }
        })
      const overview = yield* get("/")
      assert.strictEqual(overview.status, 200)
      assert.include(overview.text, "1,000 paused")
      const archived = yield* get("/queues/bulk/jobs?state=archived")
      assert.strictEqual(archived.status, 200)
      assert.include(archived.text, 'href="/pgbus/queues/bulk/jobs/1"')
      const queues = yield* get("/queues")
      assert.match(queues.text, /[0-9]{3},[0-9]{3}/, "the archive's size, estimated")
      const list = yield* get("/workflows?status=paused")
      assert.strictEqual(list.status, 200)
      assert.include(list.text, "paused 1,000")
    })
  )
})
