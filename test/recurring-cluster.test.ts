/**
 * Recurring tasks across supervisor processes: a task every second on three supervisors fires
 * exactly once per slot, also across a SIGKILL of the scheduler's leader; after the whole
 * cluster stopped, a task with catch-up "one" fires once for the missed slots.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { QueueStore } from "../src/Queue/QueueStore.ts"
import { RECURRING_HEADER } from "../src/Recurring/Scheduler.ts"
import { Processes } from "../src/Supervisor/Processes.ts"
import { bundledFixture, type Child, spawnSupervisor } from "./support/child.ts"
import { eventually } from "./support/jobs.ts"
import { onFreshDatabase } from "./support/TestDatabase.ts"

/** The ledger's scheduled slots of task "tick", oldest first, in epoch seconds. */
const ledgerSeconds = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) =>
    sql<{
      readonly run_at: Date
    }>`SELECT run_at FROM pgbus.recurring_executions WHERE task_key = 'tick' AND NOT manual ORDER BY run_at`
).pipe(
  Effect.map((rows) => rows.map((r) => r.run_at.getTime() / 1000)),
  Effect.orDie
)

/** The slots the messages on queue "ticks" carry, in epoch seconds, sorted. */
const messageSeconds = Effect.flatMap(QueueStore, (store) => store.browse("ticks", { limit: 10_000 })).pipe(
  Effect.map((messages) =>
    messages
      .map((m) => new Date((m.headers[RECURRING_HEADER] as { readonly run_at: string }).run_at).getTime() / 1000)
      .sort((a, b) => a - b)
  ),
  Effect.orDie
)

/** The pid of the process that leads the scheduler now, if any. */
const schedulerLeader = Effect.flatMap(Processes, (p) => p.leaders).pipe(
  Effect.map((rows) => rows.find((r) => r.role === "scheduler" && r.live)?.pid ?? undefined),
  Effect.orDie
)

const gaps = (seconds: ReadonlyArray<number>) =>
  seconds.flatMap((s, i) => (i > 0 && s - seconds[i - 1]! !== 1 ? [`${seconds[i - 1]} -> ${s}`] : []))

const env = (url: string, extra: Record<string, string> = {}) => ({
  DATABASE_URL: url,
  PGBUS_PROCESS_HEARTBEAT_INTERVAL: "0.2",
  PGBUS_STALE_PROCESS_THRESHOLD: "1.5",
  PGBUS_LEADER_CHECK_INTERVAL: "0.5",
  PGBUS_RECURRING_SCHEDULE_INTERVAL: "0.25",
  ...extra
})

describe("recurring tasks on a cluster", () => {
  it.live(
    "every second on three supervisors for ~20 s: each slot once (ledger and messages), across a SIGKILL of the leader; after the cluster stopped, catch-up one fires once",
    () =>
      onFreshDatabase({}, (url) =>
        Effect.gen(function* () {
          const bundle = yield* bundledFixture("test/fixtures/recurring-child.ts")
          const children: Array<Child> = []
          for (let i = 0; i < 3; i++) children.push(yield* spawnSupervisor(env(url), bundle))
          const output = () => children.map((c, i) => `--- child ${i}\n${c.output()}`).join("\n")

          yield* eventually(
            "ten slots fired",
            Effect.map(ledgerSeconds, (s) => s.length >= 10),
            "40 seconds"
          ).pipe(Effect.tapError(() => Effect.logError(output())))
          const leaderPid = yield* schedulerLeader
          const leader = children.find((c) => c.process.pid === leaderPid)
          assert.isDefined(leader, "a child leads the scheduler")
          assert.include(leader!.output(), "[pgbus] leads scheduler")

          // the leader dies; a standby takes over and fires the slots it missed (catch-up all)
          const killedAt = Date.now()
          leader!.process.kill("SIGKILL")
          yield* leader!.exited
          yield* eventually(
            "a standby leads the scheduler",
            Effect.map(schedulerLeader, (pid) => pid !== undefined && pid !== leaderPid),
            "10 seconds"
          ).pipe(Effect.tapError(() => Effect.logError(output())))
          assert.isBelow(Date.now() - killedAt, 5000, "the standby led within 5 s")
          yield* eventually(
            "slots ten seconds past the kill",
            Effect.map(ledgerSeconds, (s) => s.length > 0 && s[s.length - 1]! * 1000 > killedAt + 10_000),
            "30 seconds"
          ).pipe(Effect.tapError(() => Effect.logError(output())))

          const survivors = children.filter((c) => c !== leader)
          for (const c of survivors) c.process.kill("SIGKILL")
          for (const c of survivors) yield* c.exited
          const slots = yield* ledgerSeconds
          assert.deepStrictEqual(gaps(slots), [], "no slot skipped")
          assert.strictEqual(new Set(slots).size, slots.length, "no slot twice")
          assert.isAtLeast(slots.length, 18)
          assert.deepStrictEqual(yield* messageSeconds, slots, "one job per slot, no more")

          // the whole cluster is down for 4 s; one supervisor with catch-up "one" comes back
          yield* Effect.sleep("4 seconds")
          const lastBefore = slots[slots.length - 1]!
          const back = yield* spawnSupervisor(env(url, { CHILD_CATCH_UP: "one" }), bundle)
          yield* eventually(
            "three fires after the restart",
            Effect.map(ledgerSeconds, (s) => s.filter((x) => x > lastBefore).length >= 3),
            "30 seconds"
          ).pipe(Effect.tapError(() => Effect.logError(back.output())))
          back.process.kill("SIGKILL")
          yield* back.exited
          const after = (yield* ledgerSeconds).filter((x) => x > lastBefore)
          // the cluster was down at least 4 s past slot lastBefore: slots lastBefore+1 to +3 were
          // missed and, with catch-up "one", only the newest missed slot (+4 or later) fires
          assert.isAtLeast(after[0]! - lastBefore, 4, "the missed slots before the restart's newest did not fire")
          assert.deepStrictEqual(gaps(after), [], "then on time, every second")
          assert.deepStrictEqual(yield* messageSeconds, yield* ledgerSeconds)
        })
      ),
    120_000
  )
})
