/**
 * Making and finding batches: `Batch.make` checks its options and callbacks and inserts the
 * batch; `Batch.find` reads one. Both give a handle whose `enqueue` adds members.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { statementNow } from "../Database.ts"
import * as Input from "../Input.ts"
import type { BatchOptions } from "./Batch.ts"
import type { BatchCallbacks } from "./BatchCallbacks.ts"
import { type BatchContext, isPlainObject } from "./BatchContext.ts"
import { BatchNotFound, InvalidBatchOptions } from "./BatchError.ts"
import type { BatchJoin } from "./BatchJoin.ts"

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

const OPTION_KEYS = new Set(["onFinish", "onSuccess", "onFailure", "description", "properties"])

/** Builds `make` and `find` of the batch service. */
export const makeBatchCreation = (
  { config, statements, db }: BatchContext,
  { callbackSpec }: BatchCallbacks,
  { handleOf }: BatchJoin
) => {
  const makeBatch = (options: BatchOptions = {}) =>
    Effect.gen(function* () {
      const invalid = (option: string, reason: string) => Effect.fail(new InvalidBatchOptions({ option, reason }))
      if (typeof options !== "object" || options === null) return yield* invalid("options", "must be an object")
      for (const key of Object.keys(options)) if (!OPTION_KEYS.has(key)) return yield* invalid(key, "unknown option")
      const { description, properties = {} } = options
      if (description !== undefined && (typeof description !== "string" || description.length > 1_000)) {
        return yield* invalid("description", "must be a string of at most 1,000 characters")
      }
      const descriptionProblem = description === undefined ? undefined : Input.textProblem(description)
      if (descriptionProblem !== undefined) return yield* invalid("description", descriptionProblem)
      if (!isPlainObject(properties)) return yield* invalid("properties", "must be a plain object")
      const json = Input.storableJson(properties)
      if (json.problem !== undefined) return yield* invalid("properties", `must be storable JSON: ${json.problem}`)
      const propertiesJson = json.text
      // stored once, and copied into each callback job's payload: bounded like one
      if (propertiesJson.length * 3 > config.maxPayloadSize) {
        const size = Buffer.byteLength(propertiesJson, "utf8")
        if (size > config.maxPayloadSize) {
          return yield* invalid("properties", `${size} bytes, over maxPayloadSize (${config.maxPayloadSize})`)
        }
      }
      const callbacks = {
        onFinish: yield* callbackSpec("onFinish", options.onFinish),
        onSuccess: yield* callbackSpec("onSuccess", options.onSuccess),
        onFailure: yield* callbackSpec("onFailure", options.onFailure)
      }
      const now = yield* statementNow
      const [row] = yield* statements
        .batchInsert({
          id: crypto.randomUUID(),
          description: description ?? null,
          properties: propertiesJson,
          callbacks,
          now
        })
        .pipe(db("create batch"))
      return handleOf(row!)
    }).pipe(Effect.withSpan("pgbus.batch.make", {}, { captureStackTrace: false }))

  const find = (id: string) =>
    Effect.gen(function* () {
      if (typeof id !== "string" || !UUID.test(id)) return yield* new BatchNotFound({ batchId: String(id) })
      const [row] = yield* statements.batchGet(id).pipe(db("find batch"))
      if (row === undefined) return yield* new BatchNotFound({ batchId: id })
      return handleOf(row)
    })

  return { makeBatch, find }
}

/** `make` and `find` of the batch service. */
export type BatchCreation = ReturnType<typeof makeBatchCreation>
