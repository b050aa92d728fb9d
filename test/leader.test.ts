/** One leader per maintenance role across supervisor processes: election, SIGKILL, takeover. */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Logger, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Job from "../src/Job/Job.ts"
import { Processes } from "../src/Supervisor/Processes.ts"
import { bundledFixture, type Child, spawnSupervisor } from "./support/child.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { onFreshDatabase } from "./support/TestDatabase.ts"

/** The process ids that lead the dispatcher now, by pid, read from the processes list. */
const dispatcherLeaders = Effect.flatMap(Processes, (p) => p.list).pipe(
  Effect.map((rows) => rows.filter((r) => r.leads.includes("dispatcher"))),
  Effect.orDie
)

/** Log lines written while `effect` runs (its fibers included). */
const withCapturedLogs = <A, E, R>(lines: Array<string>, effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(Logger.CurrentLoggers, (current) => {
    const capture = Logger.make(({ message }) => {
      lines.push((Array.isArray(message) ? message : [message]).map(String).join(" "))
    })
    return Effect.provideService(effect, Logger.CurrentLoggers, new Set([...current, capture]))
  })

describe("maintenance leader", () => {
  it.live(
    "workers of capsules without a single active consumer or a priority claim while the campaign's first round hangs",
    () =>
      onFreshDatabase({}, () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const lines: Array<string> = []
          const ran = yield* Deferred.make<ReadonlyArray<string>>()
          const queue = "boot_claims"
          // the job notes the boot lines logged before it ran
          const job = Job.make("BootClaims", { payload: Schema.Struct({ i: Schema.Number }), queue }, () =>
            Deferred.succeed(ran, [...lines])
          )
          // the first round records the dispatcher's new leader on this row: locked here, it hangs
          yield* sql`INSERT INTO pgbus.maintenance_leaders (role, lock_id, process_id, host, pid, backend_pid, acquired_at)
            VALUES ('dispatcher', 1, 'gone', 'h', 1, 1, now())`
          const locked = yield* Deferred.make<void>()
          const release = yield* Deferred.make<void>()
          yield* sql
            .withTransaction(
              Effect.gen(function* () {
                yield* sql`SELECT 1 FROM pgbus.maintenance_leaders WHERE role = 'dispatcher' FOR UPDATE`
                yield* Deferred.succeed(locked, undefined)
                yield* Deferred.await(release)
              })
            )
            .pipe(Effect.forkScoped)
          yield* Deferred.await(locked)
          yield* job.enqueue({ i: 1 })
          yield* withCapturedLogs(
            lines,
            startSupervisor([job], { capsules: [{ name: "c", queues: [queue], concurrency: 1 }] })
          )
          // a boot that waited for the first round (5 s at most) logs who leads before its workers start
          const before = yield* Deferred.await(ran)
          // released before the assertions: a supervisor interrupted while its campaign's statement
          // waits on the lock would wait for it
          yield* Deferred.succeed(release, undefined)
          assert.isTrue(
            before.some((l) => l.includes("boot: roles=")),
            "the job ran after the boot banner"
          )
          assert.isFalse(
            before.some((l) => l.includes("boot: leaders")),
            "the job ran before the first round ended"
          )
          yield* eventually(
            "the first round ends: this process leads and says so",
            Effect.sync(() => lines.some((l) => l.includes("boot: leaders dispatcher=this process")))
          )
          assert.isTrue(lines.includes("[pgbus] ready"))
        })
      ),
    60_000
  )

  it.live(
    "three supervisors elect one dispatcher leader; SIGKILL it and a standby leads within 5 s; one survivor reaps it",
    () =>
      onFreshDatabase({}, (url) =>
        Effect.gen(function* () {
          const bundle = yield* bundledFixture("test/fixtures/supervisor-child.ts")
          const env = {
            DATABASE_URL: url,
            CHILD_QUEUE: "leader_q",
            PGBUS_PROCESS_HEARTBEAT_INTERVAL: "0.2",
            PGBUS_STALE_PROCESS_THRESHOLD: "1.5",
            PGBUS_LEADER_CHECK_INTERVAL: "0.5"
          }
          const children: Array<Child> = []
          for (let i = 0; i < 3; i++) children.push(yield* spawnSupervisor(env, bundle))
          const output = () => children.map((c, i) => `--- child ${i}\n${c.output()}`).join("\n")
          const processes = yield* Processes
          yield* eventually(
            "three processes registered and one leads",
            Effect.map(
              processes.list,
              (rows) => rows.length === 3 && rows.filter((r) => r.leads.length > 0).length === 1
            ),
            "30 seconds"
          ).pipe(Effect.tapError(() => Effect.logError(output())))
          const [leader] = yield* dispatcherLeaders
          assert.isDefined(leader)
          const leaderChild = children.find((c) => c.process.pid === leader!.pid)
          assert.isDefined(leaderChild, "the leader is one of the children")
          // every boot says who leads: the leader itself, or the leader's host:pid
          yield* eventually(
            "every child logged its leaders line",
            Effect.sync(() => children.every((c) => c.output().includes("boot: leaders dispatcher="))),
            "10 seconds"
          )
          assert.include(leaderChild!.output(), "[pgbus] leads dispatcher")
          for (const c of children) if (c !== leaderChild) assert.notInclude(c.output(), "[pgbus] leads dispatcher")

          const killedAt = Date.now()
          leaderChild!.process.kill("SIGKILL")
          yield* leaderChild!.exited
          yield* eventually(
            "a standby leads",
            Effect.map(dispatcherLeaders, (rows) => rows.length === 1 && rows[0]!.pid !== leader!.pid),
            "10 seconds"
          ).pipe(Effect.tapError(() => Effect.logError(output())))
          const tookOverIn = Date.now() - killedAt
          assert.isBelow(tookOverIn, 5000, `a standby led ${tookOverIn} ms after the kill`)
          const [next] = yield* dispatcherLeaders
          const nextChild = children.find((c) => c.process.pid === next!.pid)!
          yield* eventually(
            "the new leader logged it",
            Effect.sync(() => nextChild.output().includes("[pgbus] leads dispatcher"))
          )

          // the dead leader is reaped by the new leader alone (reaping is the leader's sweep)
          yield* eventually(
            "the dead process is reaped",
            Effect.map(processes.list, (rows) => rows.length === 2),
            "15 seconds"
          )
          const survivors = children.filter((c) => c !== leaderChild)
          // the row goes before the reaper's log line reaches this process
          yield* eventually(
            "the reaper logged it",
            Effect.sync(() => survivors.some((c) => c.output().includes("stopped beating")))
          )
          const reapers = survivors.filter((c) => c.output().includes("stopped beating"))
          assert.deepStrictEqual(reapers, [nextChild], "only the new leader reaped")
          assert.notInclude(
            survivors.filter((c) => c !== nextChild)[0]!.output(),
            "[pgbus] leads dispatcher",
            "the other standby never led"
          )
        })
      ),
    90_000
  )

  it.live(
    "a leader whose connection is killed stops leading; within 5 s one process leads again on a new session",
    () =>
      onFreshDatabase({ leaderCheckInterval: "300 millis" }, () =>
        Effect.gen(function* () {
          const processes = yield* Processes
          const sql = yield* SqlClient.SqlClient
          const live = Effect.map(processes.leaders, (rows) => rows.filter((r) => r.role === "dispatcher" && r.live))
          yield* startSupervisor([], { roles: ["dispatcher"] })
          yield* startSupervisor([], { roles: ["dispatcher"] })
          yield* eventually(
            "two processes, one leader",
            Effect.map(
              Effect.all([processes.list, live]),
              ([rows, leaders]) => rows.length === 2 && leaders.length === 1
            ),
            "20 seconds"
          )
          const [before] = yield* live
          const killedAt = Date.now()
          yield* sql`SELECT pg_terminate_backend(${before!.backend_pid})`
          yield* eventually(
            "a leader on another session",
            Effect.map(live, (rows) => rows.length === 1 && rows[0]!.backend_pid !== before!.backend_pid),
            "10 seconds"
          )
          assert.isBelow(Date.now() - killedAt, 5000)
          const rows = yield* processes.list
          assert.strictEqual(rows.filter((r) => r.leads.includes("dispatcher")).length, 1, "one leader")
        }).pipe(Effect.orDie, Effect.scoped)
      )
  )
})
