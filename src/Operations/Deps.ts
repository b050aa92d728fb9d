/**
 * What the operations modules share: the config, the services they call and the read-only
 * statements of each owner, built once per layer; and small helpers (times, cursors, limits).
 *
 * @since 0.1.0
 */
import { Effect, type Option } from "effect"
import type { SqlClient } from "effect/sql"
import { makeBatchQuerySql } from "../Batch/BatchQuerySql.ts"
import { makeBatchSql } from "../Batch/BatchSql.ts"
import type { PgBusConfigShape } from "../Config.ts"
import { makeEventQuerySql } from "../EventBus/EventQuerySql.ts"
import { makeOutboxQuerySql } from "../EventBus/OutboxQuerySql.ts"
import { makeJobStatsSql } from "../Job/JobStatsSql.ts"
import { makeQueueQuerySql } from "../Queue/QueueQuerySql.ts"
import type { QueueStates } from "../Queue/QueueStates.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import type { RecurringScheduler } from "../Recurring/Scheduler.ts"
import type { Registry } from "../Registry.ts"
import type { Processes } from "../Supervisor/Processes.ts"
import type { WorkflowClient } from "../Workflow/Client.ts"
import { makeWorkflowQuerySql } from "../Workflow/QuerySql.ts"
import { makeCatalogSql } from "./CatalogSql.ts"
import { InvalidRequest } from "./OperationsError.ts"

/** The services and statements the operations modules use. */
export interface Deps {
  readonly config: PgBusConfigShape
  readonly sql: SqlClient.SqlClient
  readonly store: QueueStore["Service"]
  readonly states: QueueStates["Service"]
  readonly processes: Processes["Service"]
  readonly workflows: WorkflowClient["Service"]
  readonly recurring: RecurringScheduler["Service"]
  readonly registry: Option.Option<Registry["Service"]>
  readonly queueSql: ReturnType<typeof makeQueueQuerySql>
  readonly workflowSql: ReturnType<typeof makeWorkflowQuerySql>
  readonly eventSql: ReturnType<typeof makeEventQuerySql>
  readonly outboxSql: ReturnType<typeof makeOutboxQuerySql>
  readonly batchSql: ReturnType<typeof makeBatchQuerySql>
  readonly batchRows: ReturnType<typeof makeBatchSql>
  readonly catalog: ReturnType<typeof makeCatalogSql>
  readonly jobStatsSql: ReturnType<typeof makeJobStatsSql>
}

/** Builds the statements of every owner for the configured schema. */
export const statementsOf = (sql: SqlClient.SqlClient, schema: string) => ({
  queueSql: makeQueueQuerySql(sql, schema),
  workflowSql: makeWorkflowQuerySql(sql, schema),
  eventSql: makeEventQuerySql(sql, schema),
  outboxSql: makeOutboxQuerySql(sql, schema),
  batchSql: makeBatchQuerySql(sql, schema),
  batchRows: makeBatchSql(sql, schema),
  catalog: makeCatalogSql(sql, schema),
  jobStatsSql: makeJobStatsSql(sql, schema)
})

/** How a caller sees data: one tenant's runs, payloads shown or redacted. */
export interface View {
  /** Only this resource's workflow runs are seen and acted on. */
  readonly resourceId?: string | undefined
  /** Show payloads, outputs, signal payloads, headers and error text (default: redacted). */
  readonly payloads?: boolean | undefined
}

/** Who acts, and why: recorded on the audit trail (workflows) or in the log (queues, dead letters). */
export interface Change {
  readonly actor: string
  readonly reason?: string | undefined
}

/** Most targets of one bulk call, and the page size cap. */
export const BULK_LIMIT = 500

/** Page size when none is given. */
export const DEFAULT_LIMIT = 50

/** An ISO 8601 time. */
export const iso = (date: Date): string => date.toISOString()

/** An optional time as ISO 8601, or null. */
export const isoOrNull = (date: Date | null | undefined): string | null => (date ? date.toISOString() : null)

/** A count from the database (`bigint`) as a number. */
export const count = (n: bigint | number | null | undefined): number => Number(n ?? 0)

/** Checks a page size: 1 to 500 (default 50). */
export const pageSize = (limit: number | undefined): Effect.Effect<number, InvalidRequest> => {
  if (limit === undefined) return Effect.succeed(DEFAULT_LIMIT)
  if (!Number.isInteger(limit) || limit < 1 || limit > BULK_LIMIT) {
    return Effect.fail(
      new InvalidRequest({ reason: `limit must be an integer from 1 to ${BULK_LIMIT} (got ${limit})` })
    )
  }
  return Effect.succeed(limit)
}

/** Encodes a cursor of parts (opaque to callers). */
export const encodeCursor = (...parts: ReadonlyArray<string>): string =>
  Buffer.from(JSON.stringify(parts), "utf8").toString("base64url")

/** Decodes a cursor into `n` string parts, or fails with `InvalidRequest`. */
export const decodeCursor = (cursor: string, n: number): Effect.Effect<ReadonlyArray<string>, InvalidRequest> =>
  Effect.suspend(() => {
    try {
      const parts: unknown = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8"))
      if (Array.isArray(parts) && parts.length === n && parts.every((p) => typeof p === "string")) {
        return Effect.succeed(parts as ReadonlyArray<string>)
      }
    } catch {
      // falls through to the error
    }
    return Effect.fail(new InvalidRequest({ reason: "invalid cursor (pass the `next` of the previous page)" }))
  })

/** A UUID (run and batch ids): anything else cannot name one. */
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** A positive int8 message id from text, or `InvalidRequest`. */
export const messageId = (text: string): Effect.Effect<bigint, InvalidRequest> =>
  /^\d{1,19}$/.test(text) && BigInt(text) >= 1n && BigInt(text) <= 9_223_372_036_854_775_807n
    ? Effect.succeed(BigInt(text))
    : Effect.fail(new InvalidRequest({ reason: `invalid message id ${JSON.stringify(text)}` }))

/** A duration in milliseconds in words: `850ms`, `42s`, `3m 4s`, `2h 5m`, `3d 4h`. */
export const inWords = (ms: number): string => {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))}ms`
  const s = Math.floor(ms / 1000)
  if (s < 60) return `${s}s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${m}m ${s % 60}s`
  const h = Math.floor(m / 60)
  if (h < 24) return `${h}h ${m % 60}m`
  return `${Math.floor(h / 24)}d ${h % 24}h`
}
