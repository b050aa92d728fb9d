/**
 * `pgbus queues` (list; `pause`, `resume`, `purge`), `pgbus events`, `pgbus outbox` and
 * `pgbus batches`, through the operations service. Writes are recorded as `cli:<user>`.
 *
 * @since 0.1.0
 */
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { Operations } from "../Operations/Operations.ts"
import { InvalidRequest } from "../Operations/OperationsError.ts"
import { ConfirmationRequired } from "./CliError.ts"
import type { WithBus } from "./Commands.ts"
import { age, json, table } from "./Format.ts"
import { jsonFlag } from "./Operate.ts"
import { cliActor } from "./WorkflowCommands.ts"

const nameArgument = Argument.String("queue").pipe(Argument.withDescription("The queue (its priority sub-queues too)"))
const reasonFlag = Flag.String("reason").pipe(Flag.withDescription("Why (logged with who)"), Flag.optional)
const limitFlag = Flag.Int("limit").pipe(Flag.withDescription("Rows, 1 to 500"), Flag.withDefault(50))

/** Builds the commands on the CLI's `withBus`. */
export const makeBusCommands = (withBus: WithBus) => {
  const withOps = <A, E, R>(effect: Effect.Effect<A, E, R>) => withBus(Effect.provide(effect, Operations.layer))

  const pause = Command.make(
    "pause",
    {
      queue: nameArgument,
      reason: reasonFlag,
      until: Flag.String("until").pipe(Flag.withDescription("Resume by itself at (ISO 8601)"), Flag.optional)
    },
    ({ queue, reason, until }) =>
      withOps(
        Effect.gen(function* () {
          const end = Option.getOrUndefined(until)
          const at = end === undefined ? undefined : new Date(end)
          if (at !== undefined && Number.isNaN(at.getTime())) {
            return yield* new InvalidRequest({ reason: `--until must be an ISO 8601 time (got ${end})` })
          }
          const q = yield* (yield* Operations).pauseQueue(queue, {
            actor: cliActor(),
            reason: Option.getOrUndefined(reason),
            until: at
          })
          yield* Console.log(`paused ${q.name}: no worker claims from it within a second (${q.depth} message(s) wait)`)
        })
      )
  ).pipe(Command.withDescription("Stop every worker from claiming from a queue (within a second)"))

  const resume = Command.make("resume", { queue: nameArgument, reason: reasonFlag }, ({ queue, reason }) =>
    withOps(
      Effect.gen(function* () {
        const q = yield* (yield* Operations).resumeQueue(queue, {
          actor: cliActor(),
          reason: Option.getOrUndefined(reason)
        })
        yield* Console.log(`resumed ${q.name}: ${q.ready} ready message(s)`)
      })
    )
  ).pipe(Command.withDescription("Let workers claim from a paused queue again"))

  const purge = Command.make(
    "purge",
    {
      queue: nameArgument,
      reason: reasonFlag,
      yes: Flag.Boolean("yes").pipe(Flag.withDescription("Confirm"), Flag.withDefault(false))
    },
    ({ queue, reason, yes }) =>
      withOps(
        Effect.gen(function* () {
          const ops = yield* Operations
          if (!yes) {
            const q = yield* ops.queue(queue)
            return yield* new ConfirmationRequired({ action: `purge ${q.depth} message(s) of ${q.name}` })
          }
          const result = yield* ops.purgeQueue(queue, { actor: cliActor(), reason: Option.getOrUndefined(reason) })
          yield* Console.log(`purged ${result.purged} message(s) of ${result.queue}`)
        })
      )
  ).pipe(Command.withDescription("Delete every message of a queue (not its archive or dead letters); needs --yes"))

  const queues = Command.make("queues", { json: jsonFlag }, ({ json: asJson }) =>
    withOps(
      Effect.gen(function* () {
        const list = yield* (yield* Operations).queues
        if (asJson) return yield* Console.log(json(list))
        if (list.length === 0) return yield* Console.log("no queues")
        yield* Console.log(
          table(
            ["QUEUE", "DEPTH", "VISIBLE", "OLDEST", "LATENCY", "DEAD", "ARCHIVED", "PAUSED"],
            list.map((q) => [
              q.name,
              String(q.depth),
              String(q.ready),
              age(q.oldestAgeMs ?? undefined),
              age(q.claimableLatencyMs),
              String(q.deadLetters),
              String(q.archived),
              q.pause === null ? "-" : `by ${q.pause.actor}${q.pause.reason ? `: ${q.pause.reason}` : ""}`
            ])
          )
        )
      })
    )
  ).pipe(
    Command.withDescription(
      "List queues with depth, visible messages, oldest age, claimable latency, dead letters, archived, paused; pause, resume or purge one"
    ),
    Command.withSubcommands([pause, resume, purge])
  )

  const events = Command.make(
    "events",
    {
      handler: Flag.String("handler").pipe(Flag.withDescription("Only this subscriber"), Flag.optional),
      limit: limitFlag,
      json: jsonFlag
    },
    ({ handler, limit, json: asJson }) =>
      withOps(
        Effect.gen(function* () {
          const view = yield* (yield* Operations).events({ handler: Option.getOrUndefined(handler), limit })
          if (asJson) return yield* Console.log(json(view))
          if (view.subscriptions.length === 0) return yield* Console.log("no subscribers")
          yield* Console.log(
            table(
              ["HANDLER", "PATTERN", "QUEUE", "PENDING", "RETRYING", "DEAD", "DONE", "HANDLING", "SILENT", "CONSUMED"],
              view.subscriptions.map((s) => [
                s.handler,
                s.pattern,
                s.queue,
                String(s.pending),
                String(s.retrying),
                String(s.deadLetters),
                String(s.completed),
                String(s.handling),
                String(s.silent),
                s.consumed ? "yes" : "no live consumer"
              ])
            )
          )
          if (view.pending.length > 0) {
            yield* Console.log("")
            yield* Console.log(
              table(
                ["QUEUE", "ID", "ROUTING KEY", "STATE", "ATTEMPTS", "ENQUEUED", "ERROR"],
                view.pending.map((e) => [
                  e.queue,
                  e.id,
                  e.routingKey ?? "-",
                  e.state,
                  String(e.attempts),
                  e.enqueuedAt,
                  e.lastError?.class ?? "-"
                ])
              )
            )
          }
        })
      )
  ).pipe(Command.withDescription("Subscribers, their queues and handlers' records, and the events waiting"))

  const outbox = Command.make(
    "outbox",
    {
      state: Flag.Literals("state", ["pending", "failing", "published"] as const).pipe(
        Flag.withDescription("Only entries in this state"),
        Flag.optional
      ),
      limit: limitFlag,
      json: jsonFlag
    },
    ({ state, limit, json: asJson }) =>
      withOps(
        Effect.gen(function* () {
          const page = yield* (yield* Operations).outbox({ state: Option.getOrUndefined(state), limit })
          if (asJson) return yield* Console.log(json(page))
          const c = page.counts
          yield* Console.log(
            `outbox: ${c.pending} pending, ${c.failing} failing, ${c.published} published${c.oldestPendingAgeMs === null ? "" : `; the oldest unpublished waits ${age(c.oldestPendingAgeMs)}`}`
          )
          if (page.entries.length > 0) {
            yield* Console.log(
              table(
                ["ID", "KIND", "TARGET", "STATE", "ATTEMPTS", "CREATED", "ERROR"],
                page.entries.map((e) => [
                  e.id,
                  e.kind,
                  e.target,
                  e.state,
                  String(e.attempts),
                  e.createdAt,
                  e.lastError ?? "-"
                ])
              )
            )
          }
        })
      )
  ).pipe(Command.withDescription("Outbox entries by state, and the counts"))

  const batches = Command.make(
    "batches",
    {
      status: Flag.Literals("status", ["pending", "finished"] as const).pipe(
        Flag.withDescription("Only batches in this status"),
        Flag.optional
      ),
      limit: limitFlag,
      json: jsonFlag
    },
    ({ status, limit, json: asJson }) =>
      withOps(
        Effect.gen(function* () {
          const page = yield* (yield* Operations).batches({ status: Option.getOrUndefined(status), limit })
          if (asJson) return yield* Console.log(json(page))
          const c = page.counts
          yield* Console.log(`batches: ${c.pending} pending (${c.stalled} stalled), ${c.finished} finished`)
          if (page.batches.length > 0) {
            yield* Console.log(
              table(
                ["ID", "STATUS", "DONE", "FAILED", "TOTAL", "CREATED", "DESCRIPTION"],
                page.batches.map((b) => [
                  b.id,
                  b.stalled ? "stalled" : b.status,
                  String(b.completed),
                  String(b.failed),
                  String(b.total),
                  b.createdAt,
                  b.description ?? "-"
                ])
              )
            )
          }
        })
      )
  ).pipe(Command.withDescription("Batches newest first, with their counters"))

  return { queues, events, outbox, batches }
}
