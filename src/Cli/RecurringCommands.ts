/**
 * `pgbus recurring list` (the tasks the scheduler's leader synced, with their last and next fire)
 * and `pgbus recurring run-now KEY [--reason TEXT]` (enqueue a task's job now, recorded in the
 * ledger with the OS user as `cli:<user>` and the reason; a workflow's schedule starts its run
 * from the app's definition, `--app MODULE`).
 *
 * @since 0.1.0
 */
import { Config, Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import type { RecurringTask } from "../Recurring/Recurring.ts"
import { type Fire, RecurringScheduler } from "../Recurring/Scheduler.ts"
import { Registry } from "../Registry.ts"
import { loadRegistry } from "./App.ts"
import type { WithBus } from "./Commands.ts"
import { json, table } from "./Format.ts"
import { jsonFlag } from "./Operate.ts"
import { cliActor } from "./WorkflowCommands.ts"

const iso = (d: Date | null) => (d === null ? "-" : d.toISOString())

/** What a manual fire did, in words. */
const describeFire = (key: string, fire: Fire): string => {
  const at = `(recorded at ${fire.runAt.toISOString()})`
  if (fire.skippedFor !== undefined) {
    return `skipped ${key}: run ${fire.skippedFor} holds its singleton workflow's slot ${at}`
  }
  if (fire.runId !== undefined) return `started ${key} now as run ${fire.runId} on ${fire.queue} ${at}`
  return `enqueued ${key} now as ${fire.queue}:${fire.msgId} ${at}`
}

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
        for (const t of tasks) {
          const m = t.lastManual
          if (m === null) continue
          yield* Console.log(
            `  ${t.key}: last run now at ${m.runAt.toISOString()} by ${m.actor ?? "(not recorded)"}${m.reason === null ? "" : `: ${m.reason}`}`
          )
        }
      })
    )
  ).pipe(Command.withDescription("Recurring tasks: schedule, job, last and next fire"))

  const runNow = Command.make(
    "run-now",
    {
      key: Argument.String("task").pipe(Argument.withDescription("The task's key")),
      app: Flag.String("app").pipe(
        Flag.withDescription(
          "Module whose default export (or `registry`) is the app's Registry layer; a workflow's schedule (workflow:<name>) needs it; env PGBUS_APP"
        ),
        Flag.optional
      ),
      reason: Flag.String("reason").pipe(
        Flag.withDescription("Why (recorded in the ledger with who: cli:<OS user>)"),
        Flag.optional
      )
    },
    ({ key, app, reason }) =>
      Effect.gen(function* () {
        const fromEnv = yield* Config.option(Config.String("PGBUS_APP")).pipe(Effect.orElseSucceed(() => Option.none()))
        const module = Option.orElse(app, () => fromEnv)
        const registry = Option.isSome(module) ? Option.some(yield* loadRegistry(module.value)) : Option.none()
        const fireOf = (tasks: ReadonlyArray<RecurringTask> | undefined) =>
          Effect.gen(function* () {
            return yield* (yield* RecurringScheduler).runNow(key, {
              tasks,
              actor: cliActor(),
              reason: Option.getOrUndefined(reason)
            })
          })
        const fire: Fire = yield* withBus(
          Option.match(registry, {
            onNone: () => fireOf(undefined),
            onSome: (layer) =>
              Effect.provide(
                Effect.gen(function* () {
                  return yield* fireOf((yield* Registry).recurring)
                }),
                layer
              )
          })
        )
        yield* Console.log(describeFire(key, fire))
      })
  ).pipe(
    Command.withDescription(
      "Fire a recurring task now (its schedule is unchanged): enqueue its job, or start its workflow's run (--app)"
    )
  )

  return Command.make("recurring").pipe(
    Command.withDescription("Inspect recurring tasks and run one now"),
    Command.withSubcommands([list, runNow])
  )
}
