/**
 * The engine's shared context: the services every part uses (config, client, queue store,
 * notifier, jobs, batches), the statements, this worker's name and the small helpers over them.
 *
 * @since 0.1.0
 */
import os from "node:os"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { Batches } from "../../Batch/Batch.ts"
import { PgBusConfig } from "../../Config.ts"
import { toDatabaseError, WorkerSession } from "../../Database.ts"
import { JobClient, physicalQueueOf } from "../../Job/JobClient.ts"
import { Notifier } from "../../Queue/Notifier.ts"
import * as QueueName from "../../Queue/QueueName.ts"
import type { MessageCtes } from "../../Queue/QueueRows.ts"
import { QueueStore } from "../../Queue/QueueStore.ts"
import type { DatabaseError } from "../WorkflowError.ts"
import { type ClaimRow, makeWorkflowSql, type WorkflowSql } from "../WorkflowSql.ts"

import { encodeError } from "./Errors.ts"

/** A step claimed before its execution, and whether the worker's read claimed it (not a signal). */
export interface Preclaimed {
  readonly claim: ClaimRow
  readonly inRead: boolean
}

/** Builds the shared context of the engine's parts. */
export const makeEngineContext = Effect.gen(function* () {
  const config = yield* PgBusConfig
  const sql = yield* SqlClient.SqlClient
  const store = yield* QueueStore
  const notifier = yield* Notifier
  const jobs = yield* JobClient
  const batches = yield* Batches
  const messageCtes: MessageCtes = (physical, name, rows, now, claim) =>
    store.messageCtes(physical, name, rows, now, claim)
  const statements: WorkflowSql = makeWorkflowSql(sql, config.schema, messageCtes)
  // the runner's shared statements (never in a caller's transaction), over the workers' session
  const sessionStatements: WorkflowSql = makeWorkflowSql(yield* WorkerSession, config.schema, messageCtes)
  const worker = `${os.hostname()}:${process.pid}`
  /**
   * Steps claimed for this process's worker before their execution, by the delivery of their
   * message: by a signal (local dispatch) or by the worker's read (`inRead`, ReadClaims.ts).
   */
  const preclaimed = new Map<string, Preclaimed>()
  /** When a signal of this process last handed a step over to its worker (clock ms). */
  const handOvers = { lastAt: Number.NEGATIVE_INFINITY }
  const revision = config.appRevision ?? null
  const db =
    (operation: string) =>
    <A>(effect: Effect.Effect<A, SqlError>): Effect.Effect<A, DatabaseError> =>
      Effect.mapError(effect, toDatabaseError(operation))

  /**
   * The logical and physical queue of a workflow's step messages. A step row keeps its queue
   * with its priority sub-queue (`workflows_p1`): given back without a priority, it stays that.
   */
  const queueOf = (logical: string, priority?: number) => {
    const isSubQueue = config.priorityLevels !== undefined && priority === undefined && /_p\d+$/.test(logical)
    const queue = isSubQueue
      ? logical
      : physicalQueueOf(config, { queue: logical, priority: undefined }, { queue: logical, priority })
    return { queue, physical: QueueName.physicalOf(config.queuePrefix, queue) }
  }

  const errorJson = (error: unknown) =>
    JSON.stringify(encodeError(error, config.workflowErrorBacktraceLines, worker, config.appRevision))

  return {
    config,
    sql,
    store,
    notifier,
    jobs,
    batches,
    statements,
    sessionStatements,
    worker,
    preclaimed,
    handOvers,
    revision,
    db,
    queueOf,
    errorJson
  }
})

/** The shared context of the engine's parts. */
export type EngineContext = Effect.Success<typeof makeEngineContext>
