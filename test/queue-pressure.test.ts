/**
 * The queue under MVCC pressure (issue 24): while a REPEATABLE READ reader holds its snapshot,
 * vacuum cannot remove the rows finished jobs leave, so a worker's claims start near its last
 * claim rather than at the start of the queue (ClaimCursor). What lies below that floor and comes
 * due later (a delayed job, a retry) must still run.
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Data, Deferred, Effect, Fiber, Ref, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { MIGRATION_FILES } from "../src/internal/MigrationFiles.ts"
import { splitStatements } from "../src/internal/splitStatements.ts"
import * as Job from "../src/Job/Job.ts"
import { makeQueueSql } from "../src/Queue/QueueSql.ts"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { buffersInBothModes, plansInBothModes } from "./support/plans.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ n: Schema.Number })

/** A transaction's result, carried out by the failure that rolls it back. */
class RolledBack<A> extends Data.TaggedError("RolledBack")<{ readonly value: A }> {}

describe("claims under a held snapshot", () => {
  it.live("jobs below the claim floor that come due later (delayed, retried) run; every job runs once", () =>
    TestDatabase.onFreshDatabase({ pollingInterval: "100 millis", workers: "pressure: 5" }, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const store = yield* QueueStore
        const ran = yield* Ref.make<ReadonlyArray<number>>([])
        const failedOnce = yield* Ref.make(false)
        const Work = Job.make(
          "PressureWork",
          { payload: Payload, queue: "pressure", retry: { maxRetries: 3, backoff: "1 second", jitter: 0 } },
          ({ n }) =>
            Effect.gen(function* () {
              // job 1 fails its first attempt: its retry comes due 1 s later, far below the floor
              if (n === 1 && !(yield* Ref.getAndSet(failedOnce, true))) return yield* Effect.fail("first attempt")
              yield* Ref.update(ran, (all) => [...all, n])
            })
        )
        const opened = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const reader = yield* sql
          .withTransaction(
            Effect.gen(function* () {
              yield* sql`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`
              yield* sql`SELECT count(*) FROM pgbus.queues`
              yield* Deferred.succeed(opened, undefined)
              yield* Deferred.await(release)
            })
          )
          .pipe(Effect.forkChild)
        yield* Deferred.await(opened)
        // the lowest ids: a job due in 1.5 s, and job 1 (fails once); then far more than the
        // floor's lag, so that later claims start well past both
        yield* Work.enqueue({ n: 0 }, { delay: "1500 millis" })
        yield* Work.enqueue({ n: 1 })
        const total = 2000
        yield* Work.enqueueMany(Array.from({ length: total - 2 }, (_, i) => ({ n: i + 2 })))
        yield* startSupervisor([Work])
        yield* eventually(
          "every job ran",
          Effect.map(Ref.get(ran), (all) => all.length >= total),
          "60 seconds"
        )
        const all = yield* Ref.get(ran)
        assert.strictEqual(new Set(all).size, total, "each job once")
        assert.includeMembers([...all], [0, 1])
        yield* eventually(
          "the queue is empty",
          Effect.map(store.metrics("pressure"), (m) => m.depth === 0),
          "20 seconds"
        )
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(reader)
      })
    )
  )

  it.live("queue tables are created without vacuum truncation; migration 0022 sets it on queues made before", () =>
    TestDatabase.onFreshDatabase({}, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const store = yield* QueueStore
        yield* store.create("fresh_q")
        yield* store.create("old_q")
        const options = (table: string) =>
          Effect.map(
            sql<{ readonly o: ReadonlyArray<string> | null }>`SELECT c.reloptions AS o FROM pg_class c
              JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pgbus' AND c.relname = ${table}`,
            (rows) => rows[0]?.o ?? []
          )
        assert.include(yield* options("q_pgbus_fresh_q"), "vacuum_truncate=false")
        // a queue as created before 0022: no options at all
        yield* sql`ALTER TABLE pgbus.q_pgbus_old_q RESET (vacuum_truncate, autovacuum_vacuum_scale_factor,
          autovacuum_vacuum_cost_delay, autovacuum_analyze_scale_factor)`
        assert.notInclude(yield* options("q_pgbus_old_q"), "vacuum_truncate=false")
        const migration = MIGRATION_FILES.find((f) => f.file.startsWith("0022_"))!
        for (const statement of splitStatements(migration.text.replaceAll("{{schema}}", '"pgbus"')))
          yield* sql.unsafe(statement)
        assert.includeMembers(
          [...(yield* options("q_pgbus_old_q"))],
          ["vacuum_truncate=false", "autovacuum_vacuum_scale_factor=0.01", "autovacuum_vacuum_cost_delay=0"]
        )
      })
    )
  )
})

describe("the claim's plan whatever the statistics", () => {
  // Issue 24 (the steady run's collapse): statistics taken when a bloated queue table was nearly
  // empty, its few live rows claimed (vt in the future), then a backlog arrives before the next
  // analyze. Planned with those statistics, the claim read every visible row through the vt
  // index (or the whole table) and sorted them: O(backlog) per claim. It must walk the primary
  // key in id order, in the custom plan (the values known) and the generic one.
  it.live("bloated, analyzed nearly empty, then a backlog: every claim scans the primary key", () =>
    TestDatabase.onFreshDatabase({}, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const store = yield* QueueStore
        yield* store.create("stale")
        const physical = "pgbus_stale"
        const q = sql(`pgbus.q_${physical}`)
        yield* sql`ALTER TABLE ${q} SET (autovacuum_enabled = false)`
        yield* sql`INSERT INTO ${q} (message) SELECT '{}'::jsonb FROM generate_series(1, 60000)`
        yield* sql`DELETE FROM ${q} WHERE msg_id <= 59800`
        yield* sql`UPDATE ${q} SET vt = now() + interval '30 seconds' WHERE msg_id <= 59950`
        yield* sql.unsafe(`VACUUM (ANALYZE) pgbus.q_${physical}`).unprepared
        yield* sql`INSERT INTO ${q} (message) SELECT '{}'::jsonb FROM generate_series(1, 30000)`
        const statements = makeQueueSql(sql, "pgbus", "")
        const held = Array.from({ length: 300 }, (_, i) => BigInt(59801 + i))
        const r = { ids: held, readCounts: held.map(() => 0) }
        const checked = [
          statements.messageRead(physical, 650, 30_000, null, null, 0n),
          statements.messageRead(physical, 650, 30_000, null, null, 59_000n),
          statements.messageArchiveAndRead(physical, r, 650, 30_000, null, null, 0n),
          statements.messageArchiveAndRead(physical, r, 650, 30_000, null, null, 60_001n),
          statements.messageReadLimited(physical, 650, 30_000, 1000, null, null, r, { from: 60_001n }),
          statements.messageReadLimited(physical, 650, 30_000, 1000, null, null, r, { from: 0n })
        ]
        for (const { mode, text, lines } of yield* plansInBothModes(sql, checked)) {
          const where = `${mode}: ${text.slice(0, 60)}\n${lines}`
          // the vt index only in a full claim's min(vt) (claimScan): its first entry, never a
          // scan of the due rows that the claim sorts
          const vtLines = lines.split("\n").filter((line) => line.includes(`q_${physical}_vt_idx`))
          if (text.includes("min(vt)")) assert.isAbove(vtLines.length, 0, where)
          else assert.strictEqual(vtLines.length, 0, where)
          for (const line of vtLines) assert.match(line, /Index (Only )?Scan (Backward )?using q_\w+_vt_idx/, where)
          // the claim's scan (under its row locks): the primary key in id order, no sort
          const rows = lines.split("\n")
          const locks = rows.flatMap((line, i) => (line.includes("LockRows") ? [rows[i + 1] ?? ""] : []))
          assert.isAbove(locks.length, 0, where)
          for (const scan of locks) assert.include(scan, `Index Scan using q_${physical}_pkey`, where)
        }
      })
    )
  )
})

describe("a worker's receipts whatever the statistics", () => {
  // Issue 24 (the steady pressure run's stall): a drained queue table, vacuumed and analyzed with
  // one live row left (the planner then takes the index scan of the receipts' ids for one row),
  // and thousands of claimed messages since. Matched through a join with an unnest of the
  // receipts, the generic plan read the unnest again for every row (5,000 receipts: 25 M rows
  // removed by the join's filter, 29 s), so a worker that fell behind archived ever larger
  // batches past the statement timeout and stopped. Every statement that takes receipts must
  // do what it says within a statement timeout, as the driver runs it (a prepared statement,
  // with its generic plan and with a custom one), and look at each named row about once.
  it.live("8,000 receipts: archived, deleted or moved within 10 s in both plan modes, each row examined once", () =>
    TestDatabase.onFreshDatabase({}, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* (yield* QueueStore).create("stale")
        const physical = "pgbus_stale"
        const q = sql(`pgbus.q_${physical}`)
        yield* sql`ALTER TABLE ${q} SET (autovacuum_enabled = false)`
        yield* sql`INSERT INTO ${q} (message) SELECT '{}'::jsonb FROM generate_series(1, 60000)`
        yield* sql`DELETE FROM ${q} WHERE msg_id < 60000`
        yield* sql.unsafe(`VACUUM (ANALYZE) pgbus.q_${physical}`).unprepared
        // 8,000 claimed (read once), 1,000 visible behind them
        const n = 8000
        yield* sql`INSERT INTO ${q} (message, read_ct, vt)
          SELECT '{}'::jsonb, CASE WHEN g <= ${n} THEN 1 ELSE 0 END,
            CASE WHEN g <= ${n} THEN now() + interval '5 minutes' ELSE now() END
          FROM generate_series(1, ${n + 1000}) g`
        const ids = Array.from({ length: n }, (_, i) => BigInt(60001 + i))
        // one receipt is stale (the message was delivered again since): left alone by all
        const r = { ids, readCounts: ids.map((id) => (id === 60001n ? 0 : 1)) }
        const statements = makeQueueSql(sql, "pgbus", "")
        const checked = {
          archive: statements.messageArchiveReceipts(physical, r, null),
          archiveAndRead: statements.messageArchiveAndRead(physical, r, 100, 30_000, null, null, 60_001n),
          delete: statements.messageDeleteReceipts(physical, r),
          setVisibility: statements.messageSetVisibilityReceipts(physical, r, 1000, null),
          release: statements.messageReleaseReceipts(physical, r, null),
          limited: statements.messageReadLimited(physical, 100, 30_000, 1000, null, null, r, { from: 60_001n })
        }
        // the receipts' rows archived, deleted or made visible (the stale one stays claimed)
        const changed = sql<{ readonly n: number }>`SELECT
          (SELECT count(*) FROM ${q} WHERE msg_id BETWEEN 60002 AND ${60000 + n} AND vt < now() + interval '4 minutes')::int4
          + ${n} - (SELECT count(*) FROM ${q} WHERE msg_id BETWEEN 60001 AND ${60000 + n})::int4 AS n`
        // in a transaction rolled back at the end
        const rolledBack = <A, E>(effect: Effect.Effect<A, E>) =>
          sql.withTransaction(Effect.flatMap(effect, (a) => Effect.fail(new RolledBack({ value: a })))).pipe(
            Effect.catchIf(
              (e): e is RolledBack<A> => e instanceof RolledBack,
              (e) => Effect.succeed(e.value)
            )
          )
        for (const mode of ["force_generic_plan", "force_custom_plan"]) {
          for (const [name, statement] of Object.entries(checked)) {
            const ran = yield* rolledBack(
              Effect.gen(function* () {
                yield* sql.unsafe(`SET LOCAL plan_cache_mode = ${mode}`)
                yield* sql.unsafe(`SET LOCAL statement_timeout = '10s'`)
                yield* statement
                return (yield* changed)[0]!.n
              })
            ).pipe(Effect.result)
            assert.isTrue(
              ran._tag === "Success",
              `${mode} ${name}: ${ran._tag === "Failure" ? String(ran.failure) : ""}`
            )
            if (name !== "limited" && ran._tag === "Success") assert.strictEqual(ran.success, n - 1, `${mode} ${name}`)
          }
        }
        // each row examined about once (custom plans, under EXPLAIN ANALYZE)
        for (const [name, statement] of Object.entries(checked)) {
          const [text, params] = statement.compile()
          const plan = yield* rolledBack(
            sql.unsafe<{ readonly "QUERY PLAN": string }>(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) ${text}`, params)
          )
          const lines = plan.map((row) => row["QUERY PLAN"]).join("\n")
          const removed = [...lines.matchAll(/Rows Removed by Join Filter: (\d+)/g)].map((m) => Number(m[1]))
          assert.isAtMost(Math.max(0, ...removed), n, `${name}:\n${lines}`)
          const loops = [...lines.matchAll(/loops=(\d+)/g)].map((m) => Number(m[1]))
          assert.isAtMost(Math.max(...loops), n, `${name}:\n${lines}`)
        }
      })
    )
  )
})

describe("rows this process makes due below the claim floor (issue 24)", () => {
  // A claim starts a little below the lowest id its last claim took; rows further down are found
  // by a full claim, at most once a second and rarer when full claims are slow (behind many
  // delayed rows). A retry, a snooze or a give-back of this process is noted with its due time,
  // and the first claim after it starts there: it runs when due, not at the next full claim.
  it.effect("a retry, a snooze and a give-back far below the floor are claimed by the next claim once due", () =>
    TestDatabase.onFreshDatabase({}, () =>
      Effect.gen(function* () {
        const store = yield* QueueStore
        yield* store.create("floor")
        yield* store.sendBatch(
          "floor",
          Array.from({ length: 900 }, (_, n) => ({ message: { n } }))
        )
        const claim = (limit: number) =>
          Effect.map(store.archiveAndRead("floor", [], { limit, claimedBy: "test#1" }), (r) => r.messages)
        // full claims (no floor yet, then one below the lag): the floor ends at the third batch
        const first = yield* claim(300)
        yield* claim(300)
        const third = yield* claim(300)
        assert.strictEqual(third[0]!.msgId, first[0]!.msgId + 600n)
        const [retried, snoozed, givenBack] = [first[10]!, first[20]!, first[30]!]
        const failure = { errorClass: "Boom", message: "first attempt", stack: "", attempt: 1 }
        assert.isTrue(yield* store.recordFailure("floor", retried, failure, "0 millis"))
        assert.isTrue(yield* store.outcomes.snooze("floor", snoozed, 0))
        assert.strictEqual(yield* store.release("floor", [givenBack]), 1)
        // the next claim comes within the second after the last full claim: a bounded one,
        // which started 256 ids below the floor (600 ids above these) before
        const again = yield* claim(10)
        assert.deepStrictEqual(
          again.map((m) => m.msgId),
          [retried.msgId, snoozed.msgId, givenBack.msgId]
        )
      })
    )
  )
})

describe("delayed messages (issue 24: the claim scans the primary key)", () => {
  // A full claim (from id 0: an idle worker's every claim, and one a second under load) walked
  // the primary key from 0 through every message scheduled for later: 100k delayed messages,
  // 100k rows per claim, ten claims a second from an idle worker. With nothing due (the vt
  // index's first entry in the future) it reads nothing. The delayed job and the retry below
  // the claim floor still run on time.
  it.live("a full claim beside 100k delayed messages reads a few buffers; delayed jobs and retries run on time", () =>
    TestDatabase.onFreshDatabase({ pollingInterval: "100 millis", workers: "later: 5" }, () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const store = yield* QueueStore
        yield* store.create("later")
        const physical = "pgbus_later"
        const q = sql(`pgbus.q_${physical}`)
        yield* sql`INSERT INTO ${q} (vt, message) SELECT now() + interval '1 day', '{}'::jsonb FROM generate_series(1, 100000)`
        yield* sql.unsafe(`VACUUM (ANALYZE) pgbus.q_${physical}`).unprepared
        const statements = makeQueueSql(sql, "pgbus", "")
        const r = { ids: [1n], readCounts: [0] }
        const fullClaims = [
          statements.messageRead(physical, 100, 30_000, null, null, 0n),
          statements.messageArchiveAndRead(physical, r, 100, 30_000, null, null, 0n),
          // rates only: mode `limits` counts the running messages with a scan of `vt > now`, which
          // reads every delayed row (limit_running, migration 0024; not the claim's scan)
          statements.messageReadLimited(physical, 100, 30_000, 1000, null, null, r, { from: 0n, mode: "rates" })
        ]
        // nothing due: the probe finds none and the scan reads nothing (it read 100k rows)
        for (const { mode, text, buffers } of yield* buffersInBothModes(sql, fullClaims)) {
          assert.isBelow(buffers, 40, `${mode}: ${text.slice(0, 80)}`)
        }

        const ran = yield* Ref.make<ReadonlyArray<{ readonly n: number; readonly at: number }>>([])
        const failedAt = yield* Ref.make<number | undefined>(undefined)
        const Work = Job.make(
          "LaterWork",
          { payload: Payload, queue: "later", retry: { maxRetries: 3, backoff: "1 second", jitter: 0 } },
          ({ n }) =>
            Effect.gen(function* () {
              const at = yield* Clock.currentTimeMillis
              // job 1 fails its first attempt: its retry comes due 1 s later, below the claim floor
              if (n === 1 && (yield* Ref.modify(failedAt, (was) => [was === undefined, was ?? at] as const)))
                return yield* Effect.fail("first attempt")
              yield* Ref.update(ran, (all) => [...all, { n, at }])
            })
        )
        const sentAt = yield* Clock.currentTimeMillis
        yield* Work.enqueue({ n: 0 }, { delay: "1500 millis" })
        yield* Work.enqueue({ n: 1 })
        // more than the floor's lag after them, so that the claims start past both
        const total = 600
        yield* Work.enqueueMany(Array.from({ length: total - 2 }, (_, i) => ({ n: i + 2 })))
        yield* startSupervisor([Work])
        yield* eventually(
          "every job ran",
          Effect.map(Ref.get(ran), (all) => all.length >= total),
          "30 seconds"
        )
        const all = yield* Ref.get(ran)
        const delayed = all.find((x) => x.n === 0)!.at - sentAt
        assert.isAtLeast(delayed, 1400, "the delayed job not before its time")
        assert.isAtMost(delayed, 4500, "the delayed job on time")
        const retried = all.find((x) => x.n === 1)!.at - (yield* Ref.get(failedAt))!
        assert.isAtLeast(retried, 900, "the retry not before its backoff")
        assert.isAtMost(retried, 4000, "the retry on time")
        // the delayed messages were never claimed
        const [left] = yield* sql<{ readonly n: number; readonly claimed: number }>`SELECT count(*)::int4 AS n,
            (count(*) FILTER (WHERE read_ct > 0))::int4 AS claimed FROM ${q} WHERE message = '{}'::jsonb`
        assert.deepStrictEqual(left, { n: 100_000, claimed: 0 })
      })
    )
  )
})
