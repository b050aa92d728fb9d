/**
 * bench:queue: 20,000 messages sent in batches of 100, then read in batches of 100 and archived,
 * on one queue; the same lifecycle with hand-written SQL (same driver, same table shape) in
 * the same run. Rounds alternate between the two; medians are reported, with each side's commits
 * and WAL bytes per message (from the WAL: cost.ts, `phaseCost`).
 * Last line: {"bench":"queue","ours_msgs_per_s":N,"raw_sql_msgs_per_s":N,"ratio":N,
 *   "ours_commits_per_msg":N,"ours_wal_bytes_per_msg":N,"raw_sql_commits_per_msg":N,"raw_sql_wal_bytes_per_msg":N}
 */
import { NodeRuntime } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { PgBus, QueueStore } from "../../../src/index.ts"
import { benchConfig, benchDatabase, machine, median, rawClient, round } from "./common.ts"
import { type PhaseCost, perUnit, withPhaseCost } from "./cost.ts"

const TOTAL = Number(process.env.BENCH_QUEUE_MESSAGES ?? 20_000)
const BATCH = 100
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5)

const ours = (queue: string) =>
  Effect.gen(function* () {
    const store = yield* QueueStore
    yield* store.create(queue)
    const start = performance.now()
    for (let sent = 0; sent < TOTAL; sent += BATCH) {
      yield* store.sendBatch(
        queue,
        Array.from({ length: BATCH }, (_, i) => ({ message: { n: sent + i, kind: "bench" } }))
      )
    }
    let done = 0
    while (done < TOTAL) {
      const got = yield* store.read(queue, { limit: BATCH })
      if (got.length === 0) break
      done += yield* store.archive(queue, got)
    }
    if (done !== TOTAL) return yield* Effect.die(new Error(`ours archived ${done} of ${TOTAL}`))
    return (TOTAL / (performance.now() - start)) * 1000
  })

const raw = (table: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const q = sql(`raw.q_${table}`)
    const a = sql(`raw.a_${table}`)
    yield* sql`CREATE SCHEMA IF NOT EXISTS raw`
    yield* sql`CREATE TABLE ${q} (msg_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, read_ct int NOT NULL DEFAULT 0,
      enqueued_at timestamptz NOT NULL DEFAULT now(), vt timestamptz NOT NULL DEFAULT now(), message jsonb NOT NULL, headers jsonb)`
    yield* sql`CREATE INDEX ON ${q} (vt)`
    yield* sql`CREATE TABLE ${a} (msg_id bigint PRIMARY KEY, read_ct int NOT NULL, enqueued_at timestamptz NOT NULL,
      archived_at timestamptz NOT NULL DEFAULT now(), vt timestamptz NOT NULL, message jsonb NOT NULL, headers jsonb)`
    const start = performance.now()
    for (let sent = 0; sent < TOTAL; sent += BATCH) {
      const messages = Array.from({ length: BATCH }, (_, i) => JSON.stringify({ n: sent + i, kind: "bench" }))
      yield* sql`INSERT INTO ${q} (message) SELECT m::jsonb FROM unnest(${messages}::text[]) AS m`
    }
    let done = 0
    while (done < TOTAL) {
      const got = yield* sql<{ readonly msg_id: bigint }>`WITH c AS (SELECT msg_id FROM ${q} WHERE vt <= now()
          ORDER BY msg_id LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)
        UPDATE ${q} t SET vt = now() + interval '30 seconds', read_ct = t.read_ct + 1 FROM c WHERE t.msg_id = c.msg_id
        RETURNING t.msg_id, t.read_ct, t.message`
      if (got.length === 0) break
      const ids = got.map((r) => r.msg_id)
      const archived = yield* sql`WITH d AS (DELETE FROM ${q} WHERE msg_id = ANY(${ids}::int8[]) RETURNING *)
        INSERT INTO ${a} (msg_id, read_ct, enqueued_at, vt, message, headers)
        SELECT msg_id, read_ct, enqueued_at, vt, message, headers FROM d RETURNING msg_id`
      done += archived.length
    }
    if (done !== TOTAL) return yield* Effect.die(new Error(`raw archived ${done} of ${TOTAL}`))
    return (TOTAL / (performance.now() - start)) * 1000
  })

const program = Effect.gen(function* () {
  const database = yield* benchDatabase(`bench_queue_${process.pid}`)
  const pgbus = PgBus.layerFrom(benchConfig(database, { listenNotify: process.env.BENCH_NOTIFY !== "0" }))
  yield* PgBus.migrate.pipe(Effect.provide(pgbus))
  const oursRates: Array<number> = []
  const rawRates: Array<number> = []
  const oursCosts: Array<PhaseCost> = []
  const rawCosts: Array<PhaseCost> = []
  // warm-up round of each (JIT, prepared statements), not counted
  yield* ours("warm").pipe(Effect.provide(pgbus))
  yield* raw("warm").pipe(Effect.provide(rawClient(database)))
  for (let round_ = 0; round_ < ROUNDS; round_++) {
    const [oursRate, oursCost] = yield* withPhaseCost(database, ours(`r${round_}`).pipe(Effect.provide(pgbus)))
    oursRates.push(oursRate)
    oursCosts.push(oursCost)
    const [rawRate, rawCost] = yield* withPhaseCost(
      database,
      raw(`r${round_}`).pipe(Effect.provide(rawClient(database)))
    )
    rawRates.push(rawRate)
    rawCosts.push(rawCost)
  }
  const oursMedian = median(oursRates)
  const rawMedian = median(rawRates)
  // per message, the median round's (commits are null where pg_waldump could not read the WAL)
  const costOf = (costs: ReadonlyArray<PhaseCost>) => {
    const per = costs.map((c) => perUnit(c, TOTAL))
    const commits = per.flatMap((p) => (p.commits === null ? [] : [p.commits]))
    return {
      commits: commits.length === per.length ? median(commits) : null,
      walBytes: median(per.map((p) => p.walBytes))
    }
  }
  const oursCost = costOf(oursCosts)
  const rawCost = costOf(rawCosts)
  console.log(`bench:queue — ${TOTAL} messages, batches of ${BATCH}, ${ROUNDS} rounds; ${machine()}`)
  console.log(
    "| lifecycle (send batch → read batch → archive) | msgs/s (median) | rounds | commits / msg | WAL bytes / msg |"
  )
  console.log("| --- | --- | --- | --- | --- |")
  console.log(
    `| effect-pgbus QueueStore | ${round(oursMedian)} | ${oursRates.map((r) => round(r)).join(", ")} | ${oursCost.commits ?? "n/a"} | ${oursCost.walBytes} |`
  )
  console.log(
    `| hand-written SQL, same driver | ${round(rawMedian)} | ${rawRates.map((r) => round(r)).join(", ")} | ${rawCost.commits ?? "n/a"} | ${rawCost.walBytes} |`
  )
  console.log(
    JSON.stringify({
      bench: "queue",
      ours_msgs_per_s: round(oursMedian),
      raw_sql_msgs_per_s: round(rawMedian),
      ratio: round(oursMedian / rawMedian, 3),
      ours_commits_per_msg: oursCost.commits,
      ours_wal_bytes_per_msg: oursCost.walBytes,
      raw_sql_commits_per_msg: rawCost.commits,
      raw_sql_wal_bytes_per_msg: rawCost.walBytes
    })
  )
}).pipe(Effect.scoped)

void PgClient
program.pipe(NodeRuntime.runMain({ disableErrorReporting: false }))
