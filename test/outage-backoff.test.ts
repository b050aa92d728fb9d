/**
 * Backoff belongs to one outage: the worker's read loop and the notifier's LISTEN loop back off
 * over failures in a row, and a success starts the next outage at the first delay, however
 * many outages the process lived through before.
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Duration, Effect, Logger, Ref, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as OutageBackoff from "../src/internal/OutageBackoff.ts"
import * as Job from "../src/Job/Job.ts"
import { eventually, startSupervisor } from "./support/jobs.ts"
import { withServer } from "./support/server.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

const Payload = Schema.Struct({ n: Schema.Number })

/** Log lines written while `effect` runs (its layers' fibers included). */
const withCapturedLogs = <A, E, R>(lines: Array<string>, effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(Logger.CurrentLoggers, (current) => {
    const capture = Logger.make(({ message }) => {
      lines.push((Array.isArray(message) ? message : [message]).map(String).join(" "))
    })
    return Effect.provideService(effect, Logger.CurrentLoggers, new Set([...current, capture]))
  })

/** The pauses (ms) a loop's log lines announce. */
const pausesOf = (lines: ReadonlyArray<string>, pattern: RegExp) =>
  lines.flatMap((line) => {
    const m = pattern.exec(line)
    return m === null ? [] : [Number(m[1])]
  })

/**
 * An outage of about `length`: new connections to the database refused, every backend of it
 * terminated, then connections allowed again (run from the server's default database).
 */
const outage = (database: string, length: Duration.Input) =>
  Effect.gen(function* () {
    yield* withServer(
      Effect.flatMap(SqlClient.SqlClient, (sql) =>
        Effect.andThen(
          sql`ALTER DATABASE ${sql(database)} ALLOW_CONNECTIONS false`,
          sql`SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE datname = ${database}`
        )
      )
    )
    yield* Effect.sleep(length)
  }).pipe(
    Effect.ensuring(
      withServer(
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql`ALTER DATABASE ${sql(database)} ALLOW_CONNECTIONS true`)
      ).pipe(Effect.orDie)
    ),
    Effect.orDie
  )

describe("backoff over one outage", () => {
  it("doubles over failures in a row up to the cap; a success starts again at the first delay", () => {
    const backoff = OutageBackoff.make("100 millis", "5 seconds")
    const failures = (n: number) =>
      Effect.runSync(Effect.forEach(Array.from({ length: n }), () => Effect.map(backoff.failed, Duration.toMillis)))
    assert.deepStrictEqual(failures(8), [100, 200, 400, 800, 1600, 3200, 5000, 5000])
    backoff.succeeded()
    assert.deepStrictEqual(failures(2), [100, 200])
  })

  it.live(
    "every backend terminated (connections refused for 300 ms) every 3 s, ten times: each outage starts at the first backoff, work resumes each time",
    () => {
      const lines: Array<string> = []
      return withCapturedLogs(
        lines,
        TestDatabase.onFreshDatabase({ pollingInterval: "50 millis", workers: "outage: 2" }, (url) =>
          Effect.gen(function* () {
            const done = yield* Ref.make(0)
            const Work = Job.make("Work", { payload: Payload, queue: "outage" }, () => Ref.update(done, (n) => n + 1))
            yield* startSupervisor([Work])
            yield* Work.enqueue({ n: -1 })
            yield* eventually(
              "the supervisor runs a first job",
              Effect.map(Ref.get(done), (n) => n === 1)
            )
            const resumedAfter: Array<number> = []
            for (let round = 0; round < 10; round++) {
              const start = yield* Clock.currentTimeMillis
              yield* outage(new URL(url).pathname.slice(1), "300 millis")
              // work sent after the outage: the worker must come back to run it
              yield* Work.enqueue({ n: round }).pipe(
                Effect.retry({ times: 40, schedule: Schedule.spaced("50 millis") })
              )
              yield* eventually(
                `the job of round ${round} runs`,
                Effect.map(Ref.get(done), (n) => n === round + 2),
                "20 seconds"
              )
              const now = yield* Clock.currentTimeMillis
              resumedAfter.push(now - start)
              yield* Effect.sleep(`${Math.max(0, 3000 - (now - start))} millis`)
            }
            const reads = pausesOf(lines, /worker read failed, retrying in (\d+) ms/)
            const listens = pausesOf(lines, /LISTEN connection lost, .*reconnecting in (\d+) ms/)
            // each outage starts at the first delay (a count kept over the process's life gives
            // the first delay once), and a 300 ms outage is over within a few doublings
            // (that count reaches the 5 s cap by the seventh failure)
            assert.isAtLeast(reads.filter((ms) => ms === 100).length, 8, `read pauses: ${reads}`)
            assert.isAtMost(Math.max(...reads), 800, `read pauses: ${reads}`)
            // 50 ms doubling to 1 s, jittered over 80%..120%
            assert.isAtLeast(listens.filter((ms) => ms <= 60).length, 8, `LISTEN pauses: ${listens}`)
            assert.isAtMost(Math.max(...listens), 960, `LISTEN pauses: ${listens}`)
            assert.strictEqual(resumedAfter.length, 10, `resumed after (ms): ${resumedAfter}`)
          })
        )
      )
    },
    120_000
  )
})
