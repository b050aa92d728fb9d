/**
 * Lookups on one queue: get, browse, whether a message is archived, payload search, where
 * messages are, and the queue's figures.
 * Part of the queue store (`QueueStore.ts` assembles it).
 *
 * @since 0.1.0
 */
import { Effect, Option } from "effect"
import { statementNow } from "../Database.ts"
import * as Input from "../Input.ts"
import type { Message } from "./Message.ts"
import * as QueueName from "./QueueName.ts"
import type { MessagePlace, QueueMetrics } from "./QueueStore.ts"
import { type QueueStoreContext, toMessage, toNumber } from "./QueueStoreContext.ts"

/** Builds this part of the queue store on its shared context. */
export const makeQueueLookups = ({ statements, validateName, fail, refuse }: QueueStoreContext) => {
  const get = (queue: string, msgId: bigint) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      yield* refuse(queue, Input.messageIdProblem(msgId, "msgId"))
      const rows = yield* statements.messageGet(name.physical, msgId).pipe(Effect.mapError(fail("get from", queue)))
      return Option.map(Option.fromNullishOr(rows[0]), (row) => toMessage(queue, row))
    })

  const claimedBy = (queue: string, mark: string) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const rows = yield* statements
        .messageClaimedBy(name.physical, mark)
        .pipe(Effect.mapError(fail("find a claim in", queue)))
      return rows.map((row) => toMessage(queue, row)) as ReadonlyArray<Message>
    })

  const browse = (queue: string, options?: { readonly limit?: number; readonly after?: bigint }) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      yield* refuse(
        queue,
        Input.optionsProblem(options, ["limit", "after"], "browse options") ??
          (options?.limit === undefined ? undefined : Input.intProblem(options.limit, 1, Input.INT4_MAX, "limit")) ??
          (options?.after === undefined ? undefined : Input.messageIdProblem(options.after, "after"))
      )
      const rows = yield* statements
        .messageList(name.physical, options?.limit ?? 100, options?.after ?? null)
        .pipe(Effect.mapError(fail("browse", queue)))
      return rows.map((row) => toMessage(queue, row))
    })

  const isArchived = (queue: string, msgId: bigint) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const rows = yield* statements
        .archiveGet(name.physical, msgId)
        .pipe(Effect.mapError(fail("read archive of", queue)))
      return rows.length > 0
    })

  const payloadValuesQueued = (queue: string, field: string, values: ReadonlyArray<string>) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      if (values.length === 0) return new Set<string>()
      const rows = yield* statements
        .messagePayloadValues(name.physical, field, values)
        .pipe(Effect.mapError(fail("search", queue)))
      return new Set(rows.map((r) => r.value))
    })

  const locate = (
    queue: string,
    targets: ReadonlyArray<{ readonly msgId: bigint | null; readonly marker: string }>,
    markerHeader: string
  ) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      if (targets.length === 0) return [] as ReadonlyArray<MessagePlace>
      const rows = yield* statements
        .messageLocate(
          name.physical,
          QueueName.deadLetterOf(name).physical,
          targets.map((t) => t.msgId),
          markerHeader,
          targets.map((t) => t.marker)
        )
        .pipe(Effect.mapError(fail("locate messages in", queue)))
      return rows.map((r) => r.place) as ReadonlyArray<MessagePlace>
    })

  const metrics = (queue: string) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const now = yield* statementNow
      const [row] = yield* statements.queueMetrics(name.physical, now).pipe(Effect.mapError(fail("metrics of", queue)))
      return {
        queue,
        depth: toNumber(row?.depth ?? 0n),
        visible: toNumber(row?.visible ?? 0n),
        oldestAgeMs: row?.oldest_age_ms ?? undefined,
        oldestVisibleAgeMs: row?.oldest_visible_age_ms ?? undefined,
        archiveSize: toNumber(row?.archive_size ?? 0n)
      } satisfies QueueMetrics
    })

  return { get, claimedBy, browse, isArchived, payloadValuesQueued, locate, metrics }
}
