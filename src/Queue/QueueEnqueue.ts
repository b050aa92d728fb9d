/**
 * Enqueue: checks and encodes messages (their size, headers, schedule) and inserts them, one,
 * one already claimed (local dispatch) or a batch.
 * Part of the queue store (`QueueStore.ts` assembles it).
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { statementNow } from "../Database.ts"
import * as Input from "../Input.ts"
import { hotSpan } from "../internal/span.ts"
import { InvalidMessage, PayloadTooLarge, type QueueError } from "./QueueError.ts"
import type { EncodedMessage } from "./QueueRows.ts"
import type { BatchEntry, SendOptions } from "./QueueStore.ts"
import { isObject, type QueueStoreContext, toMessage } from "./QueueStoreContext.ts"

/** Builds this part of the queue store on its shared context. */
export const makeQueueEnqueue = ({ config, statements, validateName, fail }: QueueStoreContext) => {
  // Synchronous on purpose: it runs for every message of every batch (bench:queue).
  const encodeUnsafe = (
    queue: string,
    entry: BatchEntry,
    last?: { headers: BatchEntry["headers"]; text: string | null }
  ): EncodedMessage | QueueError => {
    if (!Input.isPlainObject(entry)) return new InvalidMessage({ queue, reason: "an entry must be an object" })
    const json = Input.storableJson(entry.message, "message")
    if (json.problem !== undefined) return new InvalidMessage({ queue, reason: json.problem })
    const message = json.text
    let headers: string | null = null
    // a batch usually shares one headers object (Job.enqueueMany): encoded once
    if (last !== undefined && entry.headers !== undefined && entry.headers === last.headers) {
      headers = last.text
    } else if (entry.headers !== undefined) {
      if (!isObject(entry.headers)) return new InvalidMessage({ queue, reason: "headers must be a JSON object" })
      const text = Input.storableJson(entry.headers, "headers")
      if (text.problem !== undefined) return new InvalidMessage({ queue, reason: text.problem })
      headers = text.text
      if (last !== undefined) {
        last.headers = entry.headers
        last.text = text.text
      }
    }
    // the headers count towards maxPayloadSize too (they are stored beside the message)
    const length = message.length + (headers?.length ?? 0)
    if (length * 3 > config.maxPayloadSize) {
      const size = Buffer.byteLength(message, "utf8") + (headers === null ? 0 : Buffer.byteLength(headers, "utf8"))
      if (size > config.maxPayloadSize) return new PayloadTooLarge({ queue, size, limit: config.maxPayloadSize })
    }
    let delayMs = 0
    if (entry.delay !== undefined) {
      const ms = Input.durationMillis(entry.delay)
      if (ms === undefined) {
        return new InvalidMessage({ queue, reason: "delay must be a finite, non-negative duration" })
      }
      delayMs = ms
    }
    let at: Date | null = null
    if (entry.at !== undefined) {
      if (!Input.isValidDate(entry.at)) {
        return new InvalidMessage({ queue, reason: "at must be a valid Date" })
      }
      if (entry.delay !== undefined) return new InvalidMessage({ queue, reason: "give either delay or at, not both" })
      at = entry.at
    }
    return { message, headers, delayMs, at }
  }

  const encodeAll = (
    queue: string,
    entries: ReadonlyArray<BatchEntry>
  ): Effect.Effect<ReadonlyArray<EncodedMessage>, QueueError> => {
    const out: Array<EncodedMessage> = new Array(entries.length)
    const last: { headers: BatchEntry["headers"]; text: string | null } = { headers: undefined, text: null }
    for (let i = 0; i < entries.length; i++) {
      const encoded = encodeUnsafe(queue, entries[i]!, last)
      if ("_tag" in encoded) return Effect.fail(encoded)
      out[i] = encoded
    }
    return Effect.succeed(out)
  }

  const send = (queue: string, message: unknown, options?: SendOptions) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const [encoded] = yield* encodeAll(queue, [{ ...options, message }])
      const now = yield* statementNow
      const rows = yield* statements
        .messageSendOne(name.physical, encoded!, now)
        .pipe(Effect.mapError(fail("send to", queue)))
      return rows[0]!.msg_id
    }).pipe(hotSpan("QueueStore.send", { queue }))

  const sendClaimed = (
    queue: string,
    message: unknown,
    headers: Readonly<Record<string, unknown>> | undefined,
    claim: { readonly claimedBy: string; readonly visibilityMs: number }
  ) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      const [encoded] = yield* encodeAll(queue, [{ message, headers }])
      const now = yield* statementNow
      const rows = yield* statements
        .messageSendOneClaimed(name.physical, encoded!, claim, now)
        .pipe(Effect.mapError(fail("send to", queue)))
      return toMessage(queue, rows[0]!)
    }).pipe(hotSpan("QueueStore.sendClaimed", { queue }))

  const sendBatch = (queue: string, entries: ReadonlyArray<BatchEntry>) =>
    Effect.gen(function* () {
      const name = yield* validateName(queue)
      if (!Array.isArray(entries)) return yield* new InvalidMessage({ queue, reason: "entries must be an array" })
      if (entries.length === 0) return [] as ReadonlyArray<bigint>
      const encoded = yield* encodeAll(queue, entries)
      const now = yield* statementNow
      // one headers value and one schedule for all (Job.enqueueMany): the messages as one
      // JSON array parameter, the rest as scalars
      const first = encoded[0]!
      const uniform = encoded.every(
        (e) => e.headers === first.headers && e.delayMs === first.delayMs && e.at === first.at
      )
      if (uniform) {
        const [row] = yield* statements
          .messageSendBatchUniform(name.physical, `[${encoded.map((e) => e.message).join(",")}]`, first, now)
          .pipe(Effect.mapError(fail("send batch to", queue)))
        return row?.ids ?? []
      }
      const rows = yield* statements
        .messageSendBatch(name.physical, encoded, now)
        .pipe(Effect.mapError(fail("send batch to", queue)))
      return rows.map((r) => r.msg_id)
    }).pipe(hotSpan("QueueStore.sendBatch", { queue, size: entries.length }))

  return { send, sendClaimed, sendBatch }
}
