/**
 * `pgbus locks` (uniqueness keys, concurrency keys, rate buckets; `release` a uniqueness key)
 * and `pgbus rates` (jobs' rates; `set` and `reset` one at run time), through the operations
 * service. Writes are recorded as `cli:<user>`.
 *
 * @since 0.1.0
 */
import { Console, type Duration, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { Operations } from "../Operations/Operations.ts"
import type { WithBus } from "./Commands.ts"
import { age, json, table } from "./Format.ts"
import { jsonFlag } from "./Operate.ts"
import { cliActor } from "./WorkflowCommands.ts"

const reasonFlag = Flag.String("reason").pipe(Flag.withDescription("Why (logged with who)"), Flag.optional)
const jobArgument = Argument.String("job").pipe(Argument.withDescription("The job's name"))

/** Builds the commands on the CLI's `withBus`. */
export const makeLockCommands = (withBus: WithBus) => {
  const withOps = <A, E, R>(effect: Effect.Effect<A, E, R>) => withBus(Effect.provide(effect, Operations.layer))

  const release = Command.make(
    "release",
    { job: jobArgument, key: Argument.String("key").pipe(Argument.withDescription("The key")), reason: reasonFlag },
    ({ job, key, reason }) =>
      withOps(
        Effect.gen(function* () {
          const r = yield* (yield* Operations).releaseUniqueKey(job, key, {
            actor: cliActor(),
            reason: Option.getOrUndefined(reason)
          })
          yield* Console.log(`released key ${r.key} of ${r.job} (held by ${r.holder})`)
        })
      )
  ).pipe(Command.withDescription("Release a uniqueness key by hand (its holder's message is gone or must not hold it)"))

  const locks = Command.make("locks", { json: jsonFlag }, ({ json: asJson }) =>
    withOps(
      Effect.gen(function* () {
        const l = yield* (yield* Operations).locks
        if (asJson) return yield* Console.log(json(l))
        const c = l.concurrency
        yield* Console.log(
          `uniqueness: ${l.unique.total} key(s) held; concurrency: ${c.slotsHeld} slot(s) held, ${c.keysAtLimit} key(s) at their limit, ${c.parked} parked job(s), oldest ${age(c.oldestParkedMs)}`
        )
        if (l.unique.keys.length > 0) {
          yield* Console.log(
            table(
              ["JOB", "KEY", "STRATEGY", "HELD BY", "SINCE", "UNTIL"],
              l.unique.keys.map((k) => [
                k.job,
                k.key,
                k.strategy,
                k.runningOn === undefined ? k.holder : `${k.holder} on ${k.runningOn}`,
                k.acquiredAt.toISOString(),
                k.expiresAt?.toISOString() ?? "-"
              ])
            )
          )
        }
        if (c.keys.length > 0) {
          yield* Console.log(
            table(
              ["QUEUE", "CONCURRENCY KEY", "RUNNING", "WAITING", "OLDEST WAIT"],
              c.keys.map((k) => [k.queue, k.key, `${k.running}/${k.limit}`, String(k.waiting), age(k.oldestWaitMs)])
            )
          )
        }
        if (l.rates.length > 0) {
          yield* Console.log(
            table(
              ["QUEUE", "RATE KEY", "TOKENS", "AT"],
              l.rates.map((r) => [r.queue, r.key, r.tokens.toFixed(1), r.refilledAt.toISOString()])
            )
          )
        }
      })
    )
  ).pipe(
    Command.withDescription(
      "Uniqueness keys (holder, since, until), concurrency keys (running/limit, waiting, oldest wait) and rate buckets; release a key"
    ),
    Command.withSubcommands([release])
  )

  const set = Command.make(
    "set",
    {
      job: jobArgument,
      limit: Argument.Int("limit").pipe(Argument.withDescription("Jobs per period")),
      period: Argument.String("period").pipe(Argument.withDescription('The period, e.g. "1 minute"')),
      reason: reasonFlag
    },
    ({ job, limit, period, reason }) =>
      withOps(
        Effect.gen(function* () {
          const r = yield* (yield* Operations).setJobRate(
            job,
            { limit, period: period as Duration.Input },
            { actor: cliActor(), reason: Option.getOrUndefined(reason) }
          )
          yield* Console.log(
            `rate of ${job}: ${r?.effective?.limit ?? limit} per ${r?.effective?.periodMs ?? "?"} ms, from every process's next claim`
          )
        })
      )
  ).pipe(Command.withDescription("Set a job's rate at run time (every process, from its next claim)"))

  const reset = Command.make("reset", { job: jobArgument, reason: reasonFlag }, ({ job, reason }) =>
    withOps(
      Effect.gen(function* () {
        yield* (yield* Operations).setJobRate(job, undefined, {
          actor: cliActor(),
          reason: Option.getOrUndefined(reason)
        })
        yield* Console.log(`rate of ${job}: back to its definition's`)
      })
    )
  ).pipe(Command.withDescription("Drop a job's run-time rate: its definition's applies again"))

  const rates = Command.make("rates", { json: jsonFlag }, ({ json: asJson }) =>
    withOps(
      Effect.gen(function* () {
        const list = yield* (yield* Operations).jobRates
        if (asJson) return yield* Console.log(json(list))
        if (list.length === 0) return yield* Console.log("no rates")
        const show = (r: { readonly limit: number; readonly periodMs: number } | undefined) =>
          r === undefined ? "-" : `${r.limit}/${r.periodMs} ms`
        yield* Console.log(
          table(
            ["JOB", "DEFINED", "SET AT RUN TIME", "IN FORCE"],
            list.map((r) => [
              r.job,
              show(r.defined),
              r.override === undefined ? "-" : `${show(r.override)} by ${r.override.actor}`,
              show(r.effective)
            ])
          )
        )
      })
    )
  ).pipe(
    Command.withDescription("Jobs' rates: defined, set at run time, in force; set or reset one"),
    Command.withSubcommands([set, reset])
  )

  return { locks, rates }
}
