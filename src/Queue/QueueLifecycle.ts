/**
 * A queue's life: create (with its dead-letter queue), drop, list, purge, and the archive's
 * retention clean-up.
 * Part of the queue store (`QueueStore.ts` assembles it).
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import type { SqlError } from "effect/sql/SqlError"
import { statementNow, withTransaction } from "../Database.ts"
import * as QueueName from "./QueueName.ts"
import type { CreateOptions, QueueInfo } from "./QueueStore.ts"
import { type QueueStoreContext, toNumber } from "./QueueStoreContext.ts"

/** Builds this part of the queue store on its shared context. */
export const makeQueueLifecycle = ({
  config,
  sql,
  statements,
  orderStatements,
  prefix,
  validateName,
  fail
}: QueueStoreContext) => {
  const create = (queue: string, options?: CreateOptions) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const dead = QueueName.deadLetterOf(name)
      const physicals = QueueName.isDeadLetter(name) ? [name.physical] : [name.physical, dead.physical]
      const lookUp = statements
        .queueObjectsPresent(physicals)
        .pipe(Effect.map((rows) => new Set(rows.map((row) => `${row.kind}:${row.name}`))))
      const missingOf = (present: ReadonlySet<string>) =>
        physicals.flatMap((physical) => {
          const names = statements.queueRelationNames(physical)
          return [
            ...(present.has(`queue:${physical}`) ? [] : [`queue:${physical}`]),
            ...Object.values(names).flatMap((n) => (present.has(`relation:${n}`) ? [] : [`relation:${n}`]))
          ]
        })
      // An existing queue (every boot of every supervisor): a catalog read, no DDL, no lock
      // on its tables, so nothing a busy worker's statements can meet in the other order.
      if (missingOf(yield* lookUp.pipe(Effect.mapError(fail("create queue", queue)))).length === 0) return
      yield* withTransaction(
        sql,
        Effect.gen(function* () {
          yield* statements.queueLockTransaction(name.physical)
          // again under the lock: another process may have made some of it meanwhile
          const present = yield* lookUp
          const makeTables = (physical: string) => {
            const names = statements.queueRelationNames(physical)
            const step = (relation: string, statement: Effect.Effect<unknown, SqlError>) =>
              present.has(`relation:${relation}`) ? Effect.void : statement
            return Effect.all(
              [
                step(names.messages, statements.queueCreateMessageTable(physical)),
                step(names.visibilityIndex, statements.queueCreateVisibilityIndex(physical)),
                step(names.archive, statements.queueCreateArchiveTable(physical)),
                step(names.archiveIndex, statements.queueCreateArchiveIndex(physical))
              ],
              { discard: true }
            )
          }
          const register = (physical: string, deadLetterOf: string | null) =>
            present.has(`queue:${physical}`)
              ? Effect.succeed(false)
              : Effect.map(statements.queueRegister(physical, deadLetterOf), (rows) => rows.length > 0)
          yield* makeTables(name.physical)
          const fresh = yield* register(name.physical, null)
          // only on a new queue: on a populated one a plain build would block its writes
          if (options?.fairIndex === true && fresh && !QueueName.isDeadLetter(name)) {
            yield* statements.queueCreateFairIndex(name.physical)
          }
          if (options?.orderIndex === true && fresh && !QueueName.isDeadLetter(name)) {
            yield* orderStatements.queueCreateOrderIndex(name.physical)
          }
          if (!QueueName.isDeadLetter(name)) {
            yield* makeTables(dead.physical)
            yield* register(dead.physical, name.physical)
          }
        })
      ).pipe(Effect.mapError(fail("create queue", queue)))
    }).pipe(Effect.withSpan("QueueStore.create", { attributes: { queue } }))

  const drop = (queue: string) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const dead = QueueName.deadLetterOf(name)
      return yield* withTransaction(
        sql,
        Effect.gen(function* () {
          yield* statements.queueLockTransaction(name.physical)
          const removed = yield* statements.queueUnregister(name.physical)
          yield* statements.queueDropTables(name.physical)
          if (!QueueName.isDeadLetter(name)) {
            yield* statements.queueUnregister(dead.physical)
            yield* statements.queueDropTables(dead.physical)
          }
          return removed.length > 0
        })
      ).pipe(Effect.mapError(fail("drop queue", queue)))
    }).pipe(Effect.withSpan("QueueStore.drop", { attributes: { queue } }))

  const list = statements.queueList().pipe(
    Effect.map((rows) =>
      rows.flatMap((row): Array<QueueInfo> => {
        const name = QueueName.fromPhysical(row.name, prefix)
        if (name === undefined) return []
        const parent = row.dead_letter_of === null ? undefined : QueueName.fromPhysical(row.dead_letter_of, prefix)
        return [{ name, physical: row.name, deadLetterOf: parent, createdAt: row.created_at }]
      })
    ),
    Effect.mapError(fail("list queues", "*"))
  )

  const purge = (queue: string) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const rows = yield* statements.messagePurge(name.physical).pipe(Effect.mapError(fail("purge", queue)))
      return toNumber(rows[0]?.n ?? 0n)
    })

  const CLEANUP_BATCH = 5_000
  const cleanupArchive = (retention?: Duration.Input) =>
    Effect.gen(function* () {
      const keep = retention === undefined ? config.archiveRetention : Duration.fromInputUnsafe(retention)
      if (keep === undefined) return []
      const retentionMs = Duration.toMillis(keep)
      const queues = yield* list
      const report: Array<{ queue: string; deleted: number }> = []
      for (const q of queues) {
        let deleted = 0
        while (true) {
          const now = yield* statementNow
          const [row] = yield* statements
            .archiveDeleteOlderThan(q.physical, retentionMs, CLEANUP_BATCH, now)
            .pipe(Effect.mapError(fail("clean archive of", q.name)))
          const n = toNumber(row?.n ?? 0n)
          deleted += n
          if (n < CLEANUP_BATCH) break
        }
        if (deleted > 0) report.push({ queue: q.name, deleted })
      }
      return report as ReadonlyArray<{ readonly queue: string; readonly deleted: number }>
    })

  return { create, drop, list, purge, cleanupArchive }
}
