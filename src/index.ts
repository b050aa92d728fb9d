/**
 * effect-pgbus: PostgreSQL-native jobs, event bus and durable workflows for Effect 4.
 *
 * @since 0.1.0
 */
export * as Config from "./Config.ts"
export { ConfigurationError, PgBusConfig } from "./Config.ts"
export * as Database from "./Database.ts"
export { DatabaseError } from "./Database.ts"
export * as Migrations from "./Migrations.ts"
export { MigrationError } from "./Migrations.ts"
export * as PgBus from "./PgBus.ts"
export * as Message from "./Queue/Message.ts"
export { Notifier } from "./Queue/Notifier.ts"
export * as QueueError from "./Queue/QueueError.ts"
export * as QueueName from "./Queue/QueueName.ts"
export { QueueStore } from "./Queue/QueueStore.ts"
