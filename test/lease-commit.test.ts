/**
 * A worker's claim commits without waiting for the WAL flush (issue 24, item 2: the fsync was on
 * the path of every message sent from a process without a worker of its queue). A claim is a
 * lease, so only its own commit may skip the flush: the setting must not outlive the claim's
 * transaction on the pooled connection (a later send would lose its durability), and a claim run
 * inside a caller's transaction must leave that transaction's commit durable.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Job from "../src/Job/Job.ts"
import type { Message } from "../src/Queue/Message.ts"
import { makeQueueSql } from "../src/Queue/QueueSql.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { Registry } from "../src/Registry.ts"
import { archiveIsLease } from "../src/Supervisor/worker/Claim.ts"
import * as Workflow from "../src/Workflow/Workflow.ts"
import { STEP_JOB } from "../src/Workflow/WorkflowSql.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ n: Schema.Number })
const Lease = Job.make("LeaseWork", { payload: Payload, queue: "lease" }, () => Effect.void)
const Pinged = Workflow.make("LeasePinged", { payload: Payload }, function* () {
  return yield* Workflow.step("ping", Effect.succeed(1))
})

const setting = (sql: SqlClient.SqlClient) =>
  Effect.map(
    sql<{ readonly synchronous_commit: string }>`SHOW synchronous_commit`,
    (rows) => rows[0]?.synchronous_commit
  )

describe("claims commit as leases", () => {
  it.live("the claim statement turns synchronous_commit off for its own transaction only", () =>
    TestDatabase.onFreshDatabase({ poolSize: 1 }, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* Lease.enqueueMany([{ n: 1 }, { n: 2 }])
        const statements = makeQueueSql(sql, "pgbus", "")
        // inside a transaction: the statement's setting holds until its commit
        const inside = yield* sql.withTransaction(
          Effect.gen(function* () {
            const rows = yield* statements.messageRead("pgbus_lease", 1, 30_000, "test#1", null, 0n, true)
            return { claimed: rows.length, setting: yield* setting(sql) }
          })
        )
        assert.deepStrictEqual(inside, { claimed: 1, setting: "off" })
        // the one pooled connection is back to the server's setting once that transaction ended
        assert.strictEqual(yield* setting(sql), "on")
      })
    )
  )

  it.live("a worker's claim leaves the session durable; inside a caller's transaction it is durable too", () =>
    TestDatabase.onFreshDatabase({ poolSize: 1 }, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const store = yield* QueueStore
        yield* Lease.enqueueMany([{ n: 1 }, { n: 2 }, { n: 3 }])
        // on its own (as the worker claims): claimed, and the pooled connection still durable
        const alone = yield* store.archiveAndRead("lease", [], { limit: 1, claimedBy: "test#1" })
        assert.strictEqual(alone.messages.length, 1)
        assert.strictEqual(yield* setting(sql), "on")
        // in a caller's transaction: the claim does not take the caller's commit's durability
        const inside = yield* sql.withTransaction(
          Effect.gen(function* () {
            const claimed = yield* store.archiveAndRead("lease", [], { limit: 1, claimedBy: "test#2" })
            return { claimed: claimed.messages.length, setting: yield* setting(sql) }
          })
        )
        assert.deepStrictEqual(inside, { claimed: 1, setting: "on" })
        // every message claimed once, by the claim that took it
        const rows = yield* sql<{ readonly claimed_by: string | null }>`
          SELECT claimed_by FROM pgbus.q_pgbus_lease ORDER BY msg_id`
        assert.deepStrictEqual(
          rows.map((r) => r.claimed_by),
          ["test#1", "test#2", null]
        )
      })
    )
  )

  it.live(
    "an archive-and-read is a lease only when asked (workflow steps' archives), and never in a caller's transaction",
    () =>
      TestDatabase.onFreshDatabase({ poolSize: 1 }, () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const store = yield* QueueStore
          yield* Lease.enqueueMany([{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }, { n: 5 }])
          const statements = makeQueueSql(sql, "pgbus", "")
          const [first] = yield* statements.messageRead("pgbus_lease", 1, 30_000, "test#1", null)
          const receipt = { ids: [first!.msg_id], readCounts: [first!.read_ct] }
          // a job's archive is its completion: by default the statement's commit stays durable
          const durable = yield* sql.withTransaction(
            Effect.gen(function* () {
              const rows = yield* statements.messageArchiveAndRead("pgbus_lease", receipt, 1, 30_000, "test#2", null)
              return { archived: rows.find((r) => r.archived !== null)?.archived, setting: yield* setting(sql) }
            })
          )
          assert.deepStrictEqual(durable, { archived: 1n, setting: "on" })
          const [second] = yield* sql<{ readonly msg_id: bigint; readonly read_ct: number }>`
          SELECT msg_id, read_ct FROM pgbus.q_pgbus_lease WHERE claimed_by = 'test#2'`
          // asked for (the archived messages' outcome is elsewhere): off for that transaction only
          const leased = yield* sql.withTransaction(
            Effect.gen(function* () {
              const rows = yield* statements.messageArchiveAndRead(
                "pgbus_lease",
                { ids: [second!.msg_id], readCounts: [second!.read_ct] },
                1,
                30_000,
                "test#3",
                null,
                0n,
                true
              )
              return { archived: rows.find((r) => r.archived !== null)?.archived, setting: yield* setting(sql) }
            })
          )
          assert.deepStrictEqual(leased, { archived: 1n, setting: "off" })
          assert.strictEqual(yield* setting(sql), "on")
          // through the store: on its own the session stays durable; in a caller's transaction the
          // option is ignored (the caller's commit keeps its durability)
          const [third] = yield* sql<{ readonly msg_id: bigint; readonly read_ct: number }>`
          SELECT msg_id, read_ct FROM pgbus.q_pgbus_lease WHERE claimed_by = 'test#3'`
          const inside = yield* sql.withTransaction(
            Effect.gen(function* () {
              const got = yield* store.archiveAndRead("lease", [{ msgId: third!.msg_id, readCt: third!.read_ct }], {
                limit: 1,
                claimedBy: "test#4",
                archiveIsLease: true
              })
              return { archived: got.archived, claimed: got.messages.length, setting: yield* setting(sql) }
            })
          )
          assert.deepStrictEqual(inside, { archived: 1, claimed: 1, setting: "on" })
          const [fourth] = yield* sql<{ readonly msg_id: bigint; readonly read_ct: number }>`
          SELECT msg_id, read_ct FROM pgbus.q_pgbus_lease WHERE claimed_by = 'test#4'`
          const alone = yield* store.archiveAndRead("lease", [{ msgId: fourth!.msg_id, readCt: fourth!.read_ct }], {
            limit: 1,
            claimedBy: "test#5",
            archiveIsLease: true
          })
          assert.deepStrictEqual(
            { archived: alone.archived, claimed: alone.messages.length },
            { archived: 1, claimed: 1 }
          )
          assert.strictEqual(yield* setting(sql), "on")
          const left = yield* sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pgbus.q_pgbus_lease`
          assert.strictEqual(left[0]!.n, 1, "four archived, the fifth claimed")
        })
      )
  )

  it.live(
    "a worker's archive is a lease for workflow steps' messages only, never with a job's success among them",
    () =>
      TestDatabase.onFreshDatabase({}, () =>
        Effect.gen(function* () {
          const registry = yield* Registry
          const message = (job: string, msgId: bigint): Message => ({
            queue: "default",
            msgId,
            readCt: 1,
            enqueuedAt: new Date(0),
            vt: new Date(0),
            message: { job, payload: {} },
            headers: {},
            lastError: undefined
          })
          const step = message(STEP_JOB, 1n)
          const job = message(Lease.name, 2n)
          assert.isTrue(archiveIsLease(registry, [step, message(STEP_JOB, 3n)]))
          assert.isFalse(archiveIsLease(registry, [step, job]), "a job's archive is its completion")
          assert.isFalse(archiveIsLease(registry, [job]))
          assert.isFalse(archiveIsLease(registry, []))
        }).pipe(Effect.provide(Registry.layer([Lease, Pinged])))
      )
  )
})
