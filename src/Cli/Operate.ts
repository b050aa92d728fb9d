/**
 * `pgbus status`, `pgbus doctor` and `pgbus api`: the cluster at a glance (verdict, processes,
 * capsules), the preflight checks (exit 1 when one fails), and the JSON API with its docs page
 * on a port of its own. Every read command takes `--json`.
 *
 * @since 0.1.0
 */
import { Console, Effect, Layer, Option } from "effect"
import { Command, Flag } from "effect/cli"
import * as Dashboard from "../Dashboard/Dashboard.ts"
import * as Http from "../Http/Http.ts"
import * as Mcp from "../Mcp/Mcp.ts"
import * as Doctor from "../Operations/Doctor.ts"
import type { ProcessSummary, Verdict } from "../Operations/Model.ts"
import { Operations } from "../Operations/Operations.ts"
import { loadAccess } from "./App.ts"
import { DoctorFailed } from "./CliError.ts"
import type { WithBus } from "./Commands.ts"
import { age, fields, json, table } from "./Format.ts"

/** `--json`: print the answer as JSON instead of text. */
export const jsonFlag = Flag.Boolean("json").pipe(Flag.withDescription("Print JSON"), Flag.withDefault(false))

/** The verdict in a line, then its reasons. */
export const renderVerdict = (verdict: Verdict): string =>
  [`cluster: ${verdict.status}`, ...verdict.reasons.map((r) => `  - ${r}`)].join("\n")

/** Processes as a table, with their capsules below. */
export const renderProcesses = (processes: ReadonlyArray<ProcessSummary>): string => {
  if (processes.length === 0) return "no process is running"
  const rows = processes.map((p) => [
    p.id.slice(0, 8),
    `${p.host}:${p.pid}`,
    p.roles.join(","),
    p.leads.length === 0 ? "-" : p.leads.join(","),
    `${p.busy}/${p.capacity}`,
    p.jobsPerSecond.toFixed(1),
    age(p.lastBeatAgeMs),
    p.statusText
  ])
  const capsules = processes.flatMap((p) =>
    p.capsules.map(
      (c) =>
        `  ${p.id.slice(0, 8)} capsule ${c.name}: ${c.queues.join(", ")} × ${c.concurrency}${c.singleActiveConsumer === true ? " (single active consumer)" : ""}${c.consumerPriority === undefined ? "" : ` (consumer priority ${c.consumerPriority})`}`
    )
  )
  return [table(["PROCESS", "HOST", "ROLES", "LEADS", "BUSY", "JOBS/S", "BEAT", "STATUS"], rows), ...capsules].join(
    "\n"
  )
}

const MARK = { ok: "[ ok ]", warn: "[warn]", fail: "[FAIL]", skipped: "[skip]" } as const

/** The doctor's report as text. */
export const renderDoctor = (report: Doctor.DoctorReport): string =>
  [
    ...report.checks.map((c) => `${MARK[c.status]} ${c.name}: ${c.detail}`),
    "",
    "config:",
    fields(Object.entries(report.config), 2),
    "",
    report.ok ? "doctor: every check passed (warnings do not fail)" : "doctor: a check failed"
  ].join("\n")

/** Builds the commands on the CLI's `withBus`. */
export const makeOperateCommands = (withBus: WithBus) => {
  const withOps = <A, E, R>(effect: Effect.Effect<A, E, R>) => withBus(Effect.provide(effect, Operations.layer))

  const status = Command.make("status", { json: jsonFlag }, ({ json: asJson }) =>
    withOps(
      Effect.gen(function* () {
        const ops = yield* Operations
        const verdict = yield* ops.health
        const processes = verdict.status === "ERROR" ? [] : yield* ops.processes
        if (asJson) return yield* Console.log(json({ verdict, processes }))
        yield* Console.log(renderVerdict(verdict))
        yield* Console.log("")
        yield* Console.log(renderProcesses(processes))
      })
    )
  ).pipe(Command.withDescription("The cluster verdict (OK, DEGRADED, STALLED, ERROR), processes and capsules"))

  /** The report of a database effect-pgbus cannot even connect to. */
  const unreachable = (error: { readonly message: string }): Doctor.DoctorReport => ({
    ok: false,
    checks: [
      { name: "database", status: "fail", detail: error.message },
      ...["schema version", "queues", "LISTEN/NOTIFY", "process liveness", "autovacuum"].map((name) => ({
        name,
        status: "skipped" as const,
        detail: "the database is unreachable"
      }))
    ],
    config: {}
  })

  /** Runs the doctor and prints its report; `DoctorFailed` when a check failed. */
  const runDoctor = (asJson: boolean, liveness: boolean, longTransactionSeconds?: number) =>
    withOps(Doctor.run({ liveness, longTransactionSeconds })).pipe(
      Effect.catchTags({
        DatabaseError: (e) => Effect.succeed(unreachable(e)),
        ConfigurationError: (e) =>
          Effect.succeed({
            ok: false,
            checks: [{ name: "configuration", status: "fail" as const, detail: e.message }],
            config: {}
          } satisfies Doctor.DoctorReport)
      }),
      Effect.tap((report) => Console.log(asJson ? json(report) : renderDoctor(report))),
      Effect.flatMap((report) =>
        report.ok
          ? Effect.void
          : Effect.fail(
              new DoctorFailed({ failed: report.checks.filter((c) => c.status === "fail").map((c) => c.name) })
            )
      )
    )

  const doctor = Command.make(
    "doctor",
    {
      json: jsonFlag,
      longTransaction: Flag.Int("long-transaction").pipe(
        Flag.withDescription("Warn about transactions holding back vacuum for longer than this many seconds"),
        Flag.withDefault(Doctor.LONG_TRANSACTION_SECONDS)
      )
    },
    ({ json: asJson, longTransaction }) => runDoctor(asJson, true, longTransaction)
  ).pipe(
    Command.withDescription(
      "Preflight checks: config, database, schema version, queues, LISTEN/NOTIFY, process liveness, autovacuum, long transactions; exit 1 on a failure"
    )
  )

  const api = Command.make(
    "api",
    {
      port: Flag.Int("port").pipe(Flag.withDescription("Port to listen on"), Flag.withDefault(8080)),
      host: Flag.String("host").pipe(Flag.withDescription("Address to bind"), Flag.withDefault("127.0.0.1")),
      path: Flag.String("path").pipe(Flag.withDescription("Mount path (default /pgbus/api)"), Flag.optional)
    },
    ({ port, host, path }) =>
      withBus(
        Effect.gen(function* () {
          const mount = Option.getOrElse(path, () => "/pgbus/api")
          if (!mount.startsWith("/")) return yield* Console.error("pgbus: --path must start with /")
          yield* Layer.launch(
            Http.serve({ port, host, path: mount as `/${string}` }).pipe(
              Layer.tap(() =>
                Console.log(
                  `pgbus api on http://${host}:${port}${mount} (docs: ${mount}/docs, OpenAPI: ${mount}/openapi.json); read-only: write routes need an app's authorize hook`
                )
              )
            )
          )
        })
      )
  ).pipe(Command.withDescription("Serve the JSON API and its docs page until SIGTERM (read-only: no authorize hook)"))

  const dashboard = Command.make(
    "dashboard",
    {
      port: Flag.Int("port").pipe(Flag.withDescription("Port to listen on"), Flag.withDefault(3777)),
      host: Flag.String("host").pipe(
        Flag.withDescription("Address to bind (beyond 127.0.0.1 only with --auth)"),
        Flag.withDefault("127.0.0.1")
      ),
      path: Flag.String("path").pipe(Flag.withDescription("Mount path (default /pgbus)"), Flag.optional),
      auth: Flag.String("auth").pipe(
        Flag.withDescription("A module whose default export is { authorize, resolveContext } (the API's hooks)"),
        Flag.optional
      )
    },
    ({ port, host, path, auth }) =>
      Effect.gen(function* () {
        const mount = Option.getOrElse(path, () => "/pgbus")
        if (!mount.startsWith("/")) return yield* Console.error("pgbus: --path must start with /")
        const access = Option.isSome(auth) ? yield* loadAccess(auth.value) : {}
        if (!Dashboard.isLoopback(host) && access.authorize === undefined) {
          return yield* new Dashboard.UnprotectedDashboard({ host })
        }
        yield* withBus(
          Layer.launch(
            Dashboard.serve({ ...access, port, host, path: mount as `/${string}` }).pipe(
              Layer.tap(() =>
                Console.log(
                  `pgbus dashboard on http://${host}:${port}${mount}${access.authorize === undefined ? " (read-only: writes need an authorize hook, --auth)" : ""}`
                )
              )
            )
          )
        )
      })
  ).pipe(Command.withDescription("Serve the dashboard until SIGTERM (127.0.0.1 by default; read-only without --auth)"))

  const mcp = Command.make("mcp", {}, () =>
    withBus(Layer.launch(Mcp.layerStdio)).pipe(Effect.provide(Mcp.logToStderr))
  ).pipe(
    Command.withDescription(
      "Run the MCP server over stdio (read tools; write tools with PGBUS_MCP_WRITE_TOOLS=true); logs go to stderr"
    )
  )

  return { status, doctor, api, dashboard, mcp, runDoctor }
}
