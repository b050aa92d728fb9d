/**
 * The event bus's services in one layer, for `PgBus.layer`: publishing and registration
 * (`EventBus`), idempotency claims (`ProcessedEvents`) and the transactional outbox (`Outbox`).
 *
 * @since 0.1.0
 */
import { Layer } from "effect"
import type { SqlClient } from "effect/sql"
import type { PgBusConfig } from "../Config.ts"
import type { DatabaseError } from "../Database.ts"
import type { JobClient } from "../Job/JobClient.ts"
import type { QueueStore } from "../Queue/QueueStore.ts"
import { EventBus } from "./EventBus.ts"
import { Outbox } from "./Outbox.ts"
import { ProcessedEvents } from "./ProcessedEvents.ts"

/** Everything the event bus provides. */
export type EventBusServices = EventBus | ProcessedEvents | Outbox

/**
 * The event bus, processed events and the outbox on the app's database (the outbox relays to
 * `busDatabaseUrl` when it is set; building that connection may fail with `DatabaseError`).
 *
 * @category layers
 */
export const layer: Layer.Layer<
  EventBusServices,
  DatabaseError,
  PgBusConfig | SqlClient.SqlClient | QueueStore | JobClient
> = Layer.mergeAll(EventBus.layer, ProcessedEvents.layer, Outbox.layer)
