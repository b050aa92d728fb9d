/**
 * The MCP server of effect-pgbus (`effect/ai`'s `McpServer`): over stdio (`pgbus mcp`, logs on
 * stderr) or mounted over HTTP (Streamable HTTP). The read tools answer with payloads redacted
 * unless the config allows them (`mcpAllowPayloads`) and the call sets `includePayloads`. The
 * write tools exist only when `mcpWriteTools` is on; each needs a reason and the status the agent
 * read, goes through the same guarded verb as the API and the CLI, and is recorded with actor
 * `mcp:<client name>`. A refused call answers `ok: false` and changes nothing.
 *
 * @since 0.1.0
 */
import { NodeStdio } from "@effect/platform-node"
import { type Duration, Effect, Layer, Logger } from "effect"
import { McpProtocol, McpServer } from "effect/ai"
import { McpRequestContext } from "effect/ai/McpSchema"
import { PgBusConfig } from "../Config.ts"
import type { View } from "../Operations/Deps.ts"
import { locksView } from "../Operations/Locks.ts"
import type { RunSummary } from "../Operations/Model.ts"
import { type ActVerb, Operations } from "../Operations/Operations.ts"
import type { OperationsError } from "../Operations/OperationsError.ts"
import { jobRateView } from "../Operations/Rates.ts"
import { recurringFireView, recurringTaskView } from "../Operations/Recurring.ts"
import { VERSION } from "../version.ts"
import { AllTools, ReadTools, type WriteResult } from "./Tools.ts"

/** The protocol versions served (newest first). */
export const protocols = [McpProtocol.v2025_11_25, McpProtocol.v2025_06_18, McpProtocol.v2025_03_26] as const

const INSTRUCTIONS =
  "effect-pgbus: jobs, events and durable workflows on PostgreSQL. Start with pgbus_health, then pgbus_queues, pgbus_dlq, pgbus_workflows_attention. Write tools need a reason and the status you read."

/** Who an MCP call is recorded as: `mcp:<client name>` (or `mcp`). */
const actorOf = Effect.map(McpRequestContext, (context) =>
  context.clientInfo?.name ? `mcp:${context.clientInfo.name}` : "mcp"
)

/** The read tools' handlers. */
const readHandlers = Effect.gen(function* () {
  const ops = yield* Operations
  const config = yield* PgBusConfig
  const view = (includePayloads: boolean | undefined): View => ({
    payloads: config.mcpAllowPayloads && includePayloads === true
  })
  return {
    pgbus_health: () => ops.health,
    pgbus_queues: () => Effect.map(ops.queues, (items) => ({ items })),
    pgbus_dlq: (p: {
      readonly queue?: string | undefined
      readonly errorClass?: string | undefined
      readonly cursor?: string | undefined
      readonly limit?: number | undefined
      readonly includePayloads?: boolean | undefined
    }) => ops.deadLetters(p, view(p.includePayloads)),
    pgbus_processes: () => Effect.map(ops.processes, (items) => ({ items })),
    pgbus_workflows: (p: {
      readonly workflowClass?: string | undefined
      readonly status?: ReadonlyArray<RunSummary["status"]> | undefined
      readonly step?: string | undefined
      readonly errorClass?: string | undefined
      readonly subject?: string | undefined
      readonly stuckReason?: RunSummary["stuckReason"] | undefined
      readonly cursor?: string | undefined
      readonly limit?: number | undefined
      readonly includePayloads?: boolean | undefined
    }) =>
      ops.workflows(
        {
          workflow: p.workflowClass,
          status: p.status,
          step: p.step,
          errorClass: p.errorClass,
          subject: p.subject,
          stuckReason: p.stuckReason ?? undefined,
          cursor: p.cursor,
          limit: p.limit
        },
        view(p.includePayloads)
      ),
    pgbus_workflow: (p: { readonly workflowId: string; readonly includePayloads?: boolean | undefined }) =>
      ops.workflow(p.workflowId, view(p.includePayloads)),
    pgbus_workflows_attention: (p: {
      readonly workflowClass?: string | undefined
      readonly includePayloads?: boolean | undefined
    }) =>
      Effect.map(ops.needsAttention({ workflow: p.workflowClass }, view(p.includePayloads)), (items) => ({ items })),
    pgbus_workflow_definitions: (p: { readonly windowMs?: number | undefined }) =>
      Effect.map(ops.workflowDefinitions({ windowMs: p.windowMs }), (items) => ({ items })),
    pgbus_workflow_stats: (p: { readonly workflowClass: string; readonly windowMs?: number | undefined }) =>
      ops.workflowStats(p.workflowClass, { windowMs: p.windowMs }),
    pgbus_locks: () => Effect.map(ops.locks, locksView),
    pgbus_job_rates: () => Effect.map(ops.jobRates, (rates) => ({ items: rates.map(jobRateView) })),
    pgbus_recurring: () => Effect.map(ops.recurringTasks, (tasks) => ({ items: tasks.map(recurringTaskView) }))
  }
})

/** The write tools' handlers: every outcome is an answer, never a tool error. */
const writeHandlers = Effect.gen(function* () {
  const ops = yield* Operations

  /** The run as it is now (null when it cannot be read). */
  const current = (id: string) =>
    ops.workflowSummary(id).pipe(
      Effect.map((run): RunSummary | null => run),
      Effect.orElseSucceed(() => null)
    )

  /** A refusal or failure as an answer; an unexpected failure answers a fixed reason (the error is logged). */
  const refused = (id: string | undefined, error: OperationsError): Effect.Effect<WriteResult> =>
    Effect.gen(function* () {
      const workflow = id === undefined ? null : yield* current(id)
      switch (error._tag) {
        case "Conflict":
          return {
            ok: false,
            reason: error.message,
            workflow,
            code: error.reason,
            status: error.current,
            allowed: error.allowed
          }
        case "NotFound":
        case "InvalidRequest":
          return { ok: false, reason: error.message, workflow, code: error._tag }
        case "DatabaseError":
          yield* Effect.logError("pgbus mcp: a write tool failed", error)
          return { ok: false, reason: "the action failed unexpectedly (see the pgbus log)", workflow }
      }
    })

  const verb =
    (name: ActVerb) =>
    (p: {
      readonly workflowId: string
      readonly reason: string
      readonly expectedStatus: RunSummary["status"]
      readonly step?: string | undefined
      readonly cancelChildren?: boolean | undefined
    }) =>
      Effect.gen(function* () {
        const actor = yield* actorOf
        return yield* ops
          .act(p.workflowId, name, {
            actor,
            reason: p.reason.trim(),
            expectedStatus: p.expectedStatus,
            step: p.step,
            cancelChildren: p.cancelChildren
          })
          .pipe(
            Effect.map((r): WriteResult => ({ ok: true, reason: r.summary, workflow: r.run })),
            Effect.catch((error) => refused(p.workflowId, error))
          )
      })

  return {
    pgbus_workflow_resume: verb("resume"),
    pgbus_workflow_cancel: verb("cancel"),
    pgbus_workflow_skip_step: verb("skip"),
    pgbus_workflow_resume_at: verb("resume_at"),
    pgbus_workflow_run_now: verb("run_now"),
    pgbus_workflow_signal: (p: {
      readonly workflowId: string
      readonly reason: string
      readonly expectedStatus: RunSummary["status"]
      readonly name: string
      readonly payload: Readonly<Record<string, unknown>>
      readonly idempotencyKey?: string | undefined
    }) =>
      Effect.gen(function* () {
        const actor = yield* actorOf
        return yield* ops
          .signal(
            p.workflowId,
            { name: p.name, payload: p.payload, idempotencyKey: p.idempotencyKey },
            { actor, reason: p.reason.trim(), expectedStatus: p.expectedStatus }
          )
          .pipe(
            Effect.map(
              (r): WriteResult => ({
                ok: true,
                reason: r.signal.duplicate
                  ? `signal ${p.name} was already received (same idempotency key): nothing stored`
                  : `signalled ${p.name}${r.signal.claimed ? " (a waiting step took it)" : ""}`,
                workflow: r.run
              })
            ),
            Effect.catch((error) => refused(p.workflowId, error))
          )
      }),
    pgbus_dlq_retry: (p: { readonly id: string; readonly reason: string }) =>
      Effect.gen(function* () {
        const actor = yield* actorOf
        return yield* ops.retryDeadLetter(p.id, { actor, reason: p.reason.trim() }).pipe(
          Effect.map(
            (r): WriteResult => ({
              ok: true,
              reason: `retried ${r.id} to ${r.queue} as message ${r.messageId}`,
              workflow: null
            })
          ),
          Effect.catch((error) => refused(undefined, error))
        )
      }),
    pgbus_job_rate_set: (p: {
      readonly job: string
      readonly limit?: number | undefined
      readonly period?: string | undefined
      readonly reset?: boolean | undefined
      readonly reason: string
    }) =>
      Effect.gen(function* () {
        const actor = yield* actorOf
        const change = { actor, reason: p.reason.trim() }
        if (p.reset !== true && (p.limit === undefined || p.period === undefined)) {
          return { ok: false, reason: "give limit and period, or reset: true", workflow: null, code: "InvalidRequest" }
        }
        const rate =
          p.reset === true || p.limit === undefined || p.period === undefined
            ? undefined
            : { limit: p.limit, period: p.period as Duration.Input }
        return yield* ops.setJobRate(p.job, rate, change).pipe(
          Effect.map(
            (r): WriteResult => ({
              ok: true,
              reason:
                rate === undefined
                  ? `rate of ${p.job} reset to its definition's`
                  : `rate of ${p.job} set to ${rate.limit} per ${p.period}`,
              workflow: null,
              rate: r === undefined ? null : jobRateView(r)
            })
          ),
          Effect.catch((error) => refused(undefined, error))
        )
      }),
    pgbus_unique_key_release: (p: { readonly job: string; readonly key: string; readonly reason: string }) =>
      Effect.gen(function* () {
        const actor = yield* actorOf
        return yield* ops.releaseUniqueKey(p.job, p.key, { actor, reason: p.reason.trim() }).pipe(
          Effect.map(
            (r): WriteResult => ({
              ok: true,
              reason: `released key ${r.key} of ${r.job} (held by ${r.holder})`,
              workflow: null
            })
          ),
          Effect.catch((error) => refused(undefined, error))
        )
      }),
    pgbus_recurring_run_now: (p: { readonly key: string; readonly reason: string }) =>
      Effect.gen(function* () {
        const actor = yield* actorOf
        return yield* ops.runRecurringNow(p.key, { actor, reason: p.reason.trim() }).pipe(
          Effect.map((fire): WriteResult => {
            const view = recurringFireView(fire)
            return { ok: true, reason: view.summary, workflow: null, fire: view }
          }),
          Effect.catch((error) => refused(undefined, error))
        )
      })
  }
})

/**
 * The tools' registrations: the read tools, and the write tools when `mcpWriteTools` is on.
 * Give it to a transport (`layerStdio`, `layerHttp`) or to `McpTest.makeClient`.
 *
 * @category layers
 */
export const registrations = Layer.unwrap(
  Effect.map(PgBusConfig, (config) =>
    config.mcpWriteTools
      ? McpServer.toolkit(AllTools).pipe(
          Layer.provide(
            AllTools.toLayer(Effect.map(Effect.all([readHandlers, writeHandlers]), ([r, w]) => ({ ...r, ...w })))
          )
        )
      : McpServer.toolkit(ReadTools).pipe(Layer.provide(ReadTools.toLayer(readHandlers)))
  )
).pipe(Layer.provide(Operations.layer))

/**
 * The MCP server over stdio (`pgbus mcp`): JSON-RPC on stdout, so every log line goes to stderr.
 *
 * @category layers
 */
export const layerStdio = McpServer.layerStdio({
  name: "pgbus",
  version: VERSION,
  protocols,
  instructions: INSTRUCTIONS,
  registrations
}).pipe(Layer.provide(NodeStdio.layer))

/** Every log line on stderr (stdout carries the protocol in stdio mode). */
export const logToStderr = Logger.layer([Logger.withConsoleError(Logger.formatSimple)])

/**
 * The MCP server on the app's `HttpRouter` at `path` (default `/pgbus/mcp`). It does no
 * authentication of its own: mount it inside the app's authenticated routes. With the write
 * tools on it logs a warning at boot, as anyone who reaches it can change workflow runs.
 *
 * @category layers
 */
export const layerHttp = (
  options: {
    readonly path?: `/${string}` | undefined
    readonly allowedOrigins?: ReadonlyArray<string> | undefined
  } = {}
) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const config = yield* PgBusConfig
      if (config.mcpWriteTools) {
        yield* Effect.logWarning(
          "pgbus mcp: the write tools are on: whoever reaches the MCP endpoint can change workflow runs; mount it behind authentication"
        )
      }
      return McpServer.layerHttp({
        name: "pgbus",
        version: VERSION,
        protocols,
        instructions: INSTRUCTIONS,
        path: options.path ?? "/pgbus/mcp",
        allowedOrigins: options.allowedOrigins,
        registrations
      })
    })
  )
