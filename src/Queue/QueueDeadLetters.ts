/**
 * Dead letters: moving a message to its queue's dead-letter queue with the block, retrying
 * dead letters, and decoding the block of one.
 * Part of the queue store (`QueueStore.ts` assembles it).
 *
 * @since 0.1.0
 */
import { Effect, Option } from "effect"
import { statementNow } from "../Database.ts"
import * as Input from "../Input.ts"
import { DEAD_LETTER_HEADER, encodeFailure, type Message } from "./Message.ts"
import { QueueNotFound } from "./QueueError.ts"
import * as QueueName from "./QueueName.ts"
import type { DeadLetter, DeadLetterOptions, Target } from "./QueueStore.ts"
import { decodeDeadLetter, type QueueStoreContext } from "./QueueStoreContext.ts"

/** Builds this part of the queue store on its shared context. */
export const makeQueueDeadLetters = ({ config, statements, validateName, fail, refuse }: QueueStoreContext) => {
  const moveToDeadLetter = (queue: string, target: Target, options: DeadLetterOptions) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const dead = QueueName.deadLetterOf(name)
      yield* refuse(queue, Input.targetProblem(target))
      const now = yield* statementNow
      const msgId = typeof target === "bigint" ? target : target.msgId
      const readCt = typeof target === "bigint" ? null : target.readCt
      const rows = yield* statements
        .messageMoveToDeadLetter(
          name.physical,
          dead.physical,
          msgId,
          readCt,
          {
            reason: options.reason ?? "max_retries_exceeded",
            source: options.source,
            maxRetries: options.maxRetries ?? config.maxRetries,
            error: options.failure ? JSON.stringify(encodeFailure(options.failure)) : null
          },
          now
        )
        .pipe(Effect.mapError(fail("dead-letter in", queue)))
      return Option.fromNullishOr(rows[0]?.msg_id)
    }).pipe(Effect.withSpan("QueueStore.moveToDeadLetter"))

  const retryDeadLetters = (deadLetterQueue: string, ids: ReadonlyArray<bigint> | "all") =>
    Effect.gen(function* () {
      const dead = yield* validateName(deadLetterQueue)
      if (ids !== "all") yield* refuse(deadLetterQueue, Input.listProblem(ids, Input.messageIdProblem, "ids"))
      const found = yield* statements
        .queueFind(dead.physical)
        .pipe(Effect.mapError(fail("find queue", deadLetterQueue)))
      const origin = found[0]?.dead_letter_of
      if (!origin) return yield* new QueueNotFound({ queue: deadLetterQueue })
      if (ids !== "all" && ids.length === 0) return [] as ReadonlyArray<bigint>
      const now = yield* statementNow
      const rows = yield* statements
        .messageRetryDeadLetter(dead.physical, origin, ids === "all" ? null : ids, now)
        .pipe(Effect.mapError(fail("retry dead letters of", deadLetterQueue)))
      return rows.map((r) => r.msg_id)
    })

  const deadLetterOf = (message: Message): DeadLetter => ({
    ...message,
    deadLetter: Option.getOrUndefined(decodeDeadLetter(message.headers[DEAD_LETTER_HEADER]))
  })

  return { moveToDeadLetter, retryDeadLetters, deadLetterOf }
}
