/**
 * `pgbus workflows ...`: list runs with the Workflows page's filters, show one with its attempts,
 * signals and audit trail, counts, the needs-attention groups, and the outside verbs (pause,
 * resume, cancel, signal) through the operations service, recorded as `cli:<user>`.
 *
 * @since 0.1.0
 */
import os from "node:os"
import { Console, Effect, Option, Schema } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import type { RunDetail, RunSummary } from "../Operations/Model.ts"
import { type ActVerb, Operations } from "../Operations/Operations.ts"
import { InvalidRequest } from "../Operations/OperationsError.ts"
import { StuckReasons } from "../Workflow/QuerySql.ts"
import { type RunStatus, RunStatuses } from "../Workflow/States.ts"
import type { WithBus } from "./Commands.ts"
import { fields, json, table } from "./Format.ts"
import { jsonFlag } from "./Operate.ts"

/** Who a command line action is recorded as. */
export const cliActor = (): string => {
  try {
    return `cli:${os.userInfo().username}`
  } catch {
    return "cli"
  }
}

const optionalString = (name: string, description: string) =>
  Flag.String(name).pipe(Flag.withDescription(description), Flag.optional)

const reasonFlag = optionalString("reason", "Why (recorded on the audit trail)")
const idArgument = Argument.String("id").pipe(Argument.withDescription("The run's id"))

const statusesOf = (text: Option.Option<string>) =>
  Option.match(text, {
    onNone: () => Effect.succeed(undefined),
    onSome: (t) => {
      const parts = t
        .split(",")
        .map((s) => s.trim())
        .filter((s) => s !== "")
      const bad = parts.filter((s) => !(RunStatuses as ReadonlyArray<string>).includes(s))
      return bad.length > 0
        ? Effect.fail(
            new InvalidRequest({ reason: `unknown status ${bad.join(", ")} (one of ${RunStatuses.join(", ")})` })
          )
        : Effect.succeed(parts as ReadonlyArray<RunStatus>)
    }
  })

const timeOf = (name: string, text: Option.Option<string>) =>
  Option.match(text, {
    onNone: () => Effect.succeed(undefined),
    onSome: (t) => {
      const date = new Date(t)
      return Number.isNaN(date.getTime())
        ? Effect.fail(new InvalidRequest({ reason: `--${name} must be an ISO 8601 time (got ${t})` }))
        : Effect.succeed(date)
    }
  })

/** A child run's parent as `<run id>:<step>`, else `-`. */
const parentOf = (r: RunSummary): string => (r.parentRunId === null ? "-" : `${r.parentRunId}:${r.parentStep ?? "?"}`)

/** Runs as a table. */
export const renderRuns = (runs: ReadonlyArray<RunSummary>): string =>
  runs.length === 0
    ? "no runs"
    : table(
        ["ID", "WORKFLOW", "STATUS", "PRIORITY", "PARENT", "SUBJECT", "CREATED", "WHAT"],
        runs.map((r) => [
          r.id,
          r.workflow,
          r.status,
          r.priority === null ? "-" : String(r.priority),
          parentOf(r),
          r.subject ?? "-",
          r.createdAt,
          r.description
        ])
      )

/** One run with its trail. */
export const renderRun = (detail: RunDetail): string => {
  const r = detail.run
  return [
    fields([
      ["id", r.id],
      ["workflow", r.workflow],
      ["status", r.status],
      ["what", r.description],
      ["subject", r.subject ?? "-"],
      ["resource", r.resourceId ?? "-"],
      ["current step", r.currentStep ?? "-"],
      ["priority", r.priority === null ? "- (the config's default)" : String(r.priority)],
      ["singleton", r.singleton ? "yes" : "no"],
      ["slot", r.scheduledFor === null ? "-" : `${r.scheduledFor} (its schedule)`],
      ["parent", r.parentRunId === null ? "-" : `${r.parentRunId} (step ${r.parentStep ?? "?"})`],
      ["error", r.error ? `${r.error.class}: ${r.error.message}` : "-"],
      ["actions", r.availableActions.join(", ") || "-"],
      ["created", r.createdAt],
      ["finished", r.finishedAt ?? "-"]
    ]),
    `payload:\n${json(r.payload, 2)}`,
    detail.steps.length === 0
      ? "steps: none yet"
      : `steps:\n${table(
          ["STEP", "ATTEMPT", "STATUS", "DUE", "TOOK"],
          detail.steps.map((s) => [
            s.name,
            String(s.attempt),
            s.status,
            s.dueAt,
            s.durationMs === null ? "-" : `${s.durationMs}ms`
          ])
        )}`,
    detail.children.length === 0
      ? "children: none"
      : `children:\n${table(
          ["ID", "WORKFLOW", "STEP", "STATUS"],
          detail.children.map((c) => [c.id, c.workflow, c.step, c.status])
        )}`,
    detail.signals.length === 0
      ? "signals: none"
      : `signals:\n${detail.signals.map((s) => `  ${s.name} (${s.status})`).join("\n")}`,
    `audit trail:\n${detail.events
      .map((e) => `  ${e.at} ${e.type}${e.step ? ` ${e.step}` : ""} by ${e.actor}${e.reason ? `: ${e.reason}` : ""}`)
      .join("\n")}`
  ].join("\n\n")
}

/** Builds `pgbus workflows` on the CLI's `withBus`. */
export const makeWorkflowCommands = (withBus: WithBus) => {
  const withOps = <A, E, R>(effect: Effect.Effect<A, E, R>) => withBus(Effect.provide(effect, Operations.layer))

  const list = Command.make(
    "list",
    {
      workflow: optionalString("workflow", "Only this workflow class"),
      status: optionalString("status", `Comma-separated statuses (${RunStatuses.join(", ")})`),
      step: optionalString("step", "Only runs at this step"),
      errorClass: optionalString("error-class", "Only runs whose error has this class"),
      subject: optionalString("subject", "Only this subject's runs"),
      stuckReason: Flag.Literals("stuck-reason", StuckReasons).pipe(
        Flag.withDescription("Only runs stuck for this reason"),
        Flag.optional
      ),
      createdFrom: optionalString("created-from", "Created at or after (ISO 8601)"),
      createdTo: optionalString("created-to", "Created before (ISO 8601)"),
      cursor: optionalString("cursor", "The `next` of the previous page"),
      limit: Flag.Int("limit").pipe(Flag.withDescription("Runs per page, 1 to 500"), Flag.withDefault(50)),
      json: jsonFlag
    },
    (flags) =>
      withOps(
        Effect.gen(function* () {
          const ops = yield* Operations
          const page = yield* ops.workflows({
            workflow: Option.getOrUndefined(flags.workflow),
            status: yield* statusesOf(flags.status),
            step: Option.getOrUndefined(flags.step),
            errorClass: Option.getOrUndefined(flags.errorClass),
            subject: Option.getOrUndefined(flags.subject),
            stuckReason: Option.getOrUndefined(flags.stuckReason),
            createdFrom: yield* timeOf("created-from", flags.createdFrom),
            createdTo: yield* timeOf("created-to", flags.createdTo),
            cursor: Option.getOrUndefined(flags.cursor),
            limit: flags.limit
          })
          if (flags.json) return yield* Console.log(json(page))
          yield* Console.log(renderRuns(page.runs))
          if (page.next !== null) yield* Console.log(`next page: --cursor ${page.next}`)
        })
      )
  ).pipe(Command.withDescription("List runs, newest first (filters combine)"))

  const show = Command.make(
    "show",
    {
      id: idArgument,
      json: jsonFlag,
      payloads: Flag.Boolean("payloads").pipe(
        Flag.withDescription("Show payloads, outputs and error text (sensitive keys stay filtered)"),
        Flag.withDefault(false)
      )
    },
    ({ id, json: asJson, payloads }) =>
      withOps(
        Effect.gen(function* () {
          const detail = yield* (yield* Operations).workflow(id, { payloads })
          yield* Console.log(asJson ? json(detail) : renderRun(detail))
        })
      )
  ).pipe(Command.withDescription("Show one run: what it does, its steps, signals and audit trail"))

  const counts = Command.make(
    "counts",
    { workflow: optionalString("workflow", "Only this workflow class"), json: jsonFlag },
    ({ workflow, json: asJson }) =>
      withOps(
        Effect.gen(function* () {
          const c = yield* (yield* Operations).workflowCounts({ workflow: Option.getOrUndefined(workflow) })
          if (asJson) return yield* Console.log(json(c))
          yield* Console.log(
            table(
              ["WORKFLOW", ...RunStatuses.map((s) => s.toUpperCase()), "STUCK"],
              c.byWorkflow.map((w) => [
                w.workflow,
                ...RunStatuses.map((s) => String(w.byStatus[s] ?? 0)),
                String(Object.values(w.stuck).reduce((n, x) => n + x, 0))
              ])
            )
          )
        })
      )
  ).pipe(Command.withDescription("Runs by workflow class and status, and how many are stuck"))

  const attention = Command.make(
    "attention",
    { workflow: optionalString("workflow", "Only this workflow class"), json: jsonFlag },
    ({ workflow, json: asJson }) =>
      withOps(
        Effect.gen(function* () {
          const groups = yield* (yield* Operations).needsAttention({ workflow: Option.getOrUndefined(workflow) })
          if (asJson) return yield* Console.log(json(groups))
          yield* Console.log(
            groups.length === 0
              ? "no run needs attention"
              : table(
                  ["WORKFLOW", "STEP", "REASON", "ERROR", "RUNS", "LAST SEEN"],
                  groups.map((g) => [
                    g.workflow,
                    g.step ?? "-",
                    g.stuckReason,
                    g.errorClass ?? "-",
                    String(g.count),
                    g.lastSeen
                  ])
                )
          )
        })
      )
  ).pipe(Command.withDescription("Stuck runs grouped by class, step, stuck reason and error class"))

  const actFlags = {
    id: idArgument,
    reason: reasonFlag,
    expectedStatus: Flag.Literals("expected-status", RunStatuses).pipe(
      Flag.withDescription("Act only if the run is in this status"),
      Flag.optional
    )
  }
  const act = (
    verbName: ActVerb,
    flags: { id: string; reason: Option.Option<string>; expectedStatus: Option.Option<RunStatus> },
    cancelChildren: boolean
  ) =>
    withOps(
      Effect.gen(function* () {
        const result = yield* (yield* Operations).act(flags.id, verbName, {
          actor: cliActor(),
          reason: Option.getOrUndefined(flags.reason),
          expectedStatus: Option.getOrUndefined(flags.expectedStatus),
          cancelChildren: cancelChildren || undefined
        })
        yield* Console.log(result.summary)
      })
    )

  const verb = (name: "pause" | "resume", verbName: ActVerb, description: string) =>
    Command.make(name, actFlags, (flags) => act(verbName, flags, false)).pipe(Command.withDescription(description))

  const cancel = Command.make(
    "cancel",
    {
      ...actFlags,
      cancelChildren: Flag.Boolean("cancel-children").pipe(
        Flag.withDescription("Also cancel the run's child runs that have not ended (and theirs)"),
        Flag.withDefault(false)
      )
    },
    (flags) => act("cancel", flags, flags.cancelChildren)
  ).pipe(Command.withDescription("Cancel a run"))

  const signal = Command.make(
    "signal",
    {
      id: idArgument,
      name: Argument.String("name").pipe(Argument.withDescription("The signal's name")),
      payload: Flag.String("payload").pipe(
        Flag.withDescription("The payload, JSON (default {})"),
        Flag.withDefault("{}")
      ),
      idempotencyKey: optionalString("idempotency-key", "A retried call with the same key stores one signal"),
      reason: reasonFlag
    },
    ({ id, name, payload, idempotencyKey, reason }) =>
      withOps(
        Effect.gen(function* () {
          const decoded = yield* Schema.decodeUnknownEffect(Schema.fromJsonString(Schema.Unknown))(payload).pipe(
            Effect.mapError(() => new InvalidRequest({ reason: `--payload is not JSON: ${payload}` }))
          )
          const result = yield* (yield* Operations).signal(
            id,
            { name, payload: decoded, idempotencyKey: Option.getOrUndefined(idempotencyKey) },
            { actor: cliActor(), reason: Option.getOrUndefined(reason) }
          )
          yield* Console.log(
            result.signal.duplicate
              ? `signal ${name} was already received (same idempotency key): nothing stored`
              : `signalled ${name} to run ${id}${result.signal.claimed ? " (a waiting step took it)" : ""}: it is ${result.run.status}`
          )
        })
      )
  ).pipe(Command.withDescription("Send a signal to a run"))

  return Command.make("workflows").pipe(
    Command.withDescription("Inspect and act on workflow runs"),
    Command.withSubcommands([
      list,
      show,
      counts,
      attention,
      verb("pause", "pause", "Pause a run"),
      verb("resume", "resume", "Resume a paused run"),
      cancel,
      signal
    ])
  )
}
