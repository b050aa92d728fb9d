/**
 * Queue-side failures as the operations service answers them: an unknown queue (or its missing
 * table) is `NotFound`, a database failure stays one, anything else is an `InvalidRequest`.
 *
 * @since 0.1.0
 */
import type { SqlError } from "effect/sql/SqlError"
import { type DatabaseError, serverError, toDatabaseError } from "../../Database.ts"
import type { QueueError } from "../../Queue/QueueError.ts"
import { InvalidRequest, NotFound } from "../OperationsError.ts"

/** A queue error as the operations service reports it. */
export const fromQueueError =
  (queue: string) =>
  (error: QueueError): NotFound | InvalidRequest | DatabaseError => {
    switch (error._tag) {
      case "QueueNotFound":
        return new NotFound({ kind: "queue", id: queue })
      case "DatabaseError":
        return error
      default:
        return new InvalidRequest({ reason: error.message })
    }
  }

/** A statement's error on a queue table: a missing table is an unknown queue. */
export const fromSql =
  (queue: string, operation: string) =>
  (error: SqlError): NotFound | DatabaseError =>
    serverError(error).code === "42P01"
      ? new NotFound({ kind: "queue", id: queue })
      : toDatabaseError(`${operation} ${queue}`)(error)
