/**
 * `pgbus recurring list` (the tasks the scheduler's leader synced, with their last and next fire)
 * and `pgbus recurring run-now KEY` (enqueue a task's job now, recorded in the ledger).
 *
 * @since 0.1.0
 */
import { Console, Effect } from "effect"
import { Argument, Command } from "effect/cli"
import { RecurringScheduler } from "../Recurring/Scheduler.ts"
import type { WithBus } from "./Commands.ts"
import { json, table } from "./Format.ts"
import { jsonFlag } from "./Operate.ts"

const iso = (d: Date | null) => (d === null ? "-" : d.toISOString())

/** Builds the commands on the CLI's `withBus`. */
export const makeRecurringCommands = (withBus: WithBus) => {
  const list = Command.make("list", { json: jsonFlag }, ({ json: asJson }) =>
    withBus(
      Effect.gen(function* () {
        const tasks = yield* (yield* RecurringScheduler).list
        if (asJson) return yield* Console.log(json(tasks))
        if (tasks.length === 0) {
          return yield* Console.log(
            "no recurring task (a supervisor with tasks syncs them when it leads the scheduler)"
          )
        }
        yield* Console.log(
          table(
            ["TASK", "SCHEDULE", "ZONE", "JOB", "QUEUE", "CATCH-UP", "LAST RUN", "NEXT RUN", "FIRES"],
            tasks.map((t) => [
              t.key,
              t.schedule === t.cron ? t.cron : `${t.schedule} (${t.cron})`,
              t.timeZone,
              t.job,
              t.queue,
              t.catchUp,
              iso(t.lastRunAt),
              iso(t.nextRunAt),
              String(t.fires)
            ])
          )
        )
        for (const t of tasks) if (t.description !== null) yield* Console.log(`  ${t.key}: ${t.description}`)
      })
    )
  ).pipe(Command.withDescription("Recurring tasks: schedule, job, last and next fire"))

  const runNow = Command.make(
    "run-now",
    { key: Argument.String("task").pipe(Argument.withDescription("The task's key")) },
    ({ key }) =>
      withBus(
        Effect.gen(function* () {
          const fire = yield* (yield* RecurringScheduler).runNow(key)
          yield* Console.log(
            `enqueued ${key} now as ${fire.queue}:${fire.msgId} (recorded at ${fire.runAt.toISOString()})`
          )
        })
      )
  ).pipe(Command.withDescription("Enqueue a recurring task's job now (its schedule is unchanged)"))

  return Command.make("recurring").pipe(
    Command.withDescription("Inspect recurring tasks and run one now"),
    Command.withSubcommands([list, runNow])
  )
}
