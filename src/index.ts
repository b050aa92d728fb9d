/**
 * effect-pgbus: PostgreSQL-native jobs, event bus and durable workflows for Effect 4.
 *
 * @since 0.1.0
 */

export * as Cli from "./Cli/Cli.ts"
export * as Config from "./Config.ts"
export { ConfigurationError, PgBusConfig } from "./Config.ts"
export * as Database from "./Database.ts"
export { DatabaseError } from "./Database.ts"
export * as Executor from "./Job/Executor.ts"
export * as Job from "./Job/Job.ts"
export { JobClient } from "./Job/JobClient.ts"
export * as JobError from "./Job/JobError.ts"
export { Registry } from "./Job/Registry.ts"
export * as Retry from "./Job/Retry.ts"
export * as Migrations from "./Migrations.ts"
export { MigrationError } from "./Migrations.ts"
export * as PgBus from "./PgBus.ts"
export * as Message from "./Queue/Message.ts"
export { Notifier } from "./Queue/Notifier.ts"
export * as QueueError from "./Queue/QueueError.ts"
export * as QueueName from "./Queue/QueueName.ts"
export { QueueStore } from "./Queue/QueueStore.ts"
export * as Capsule from "./Supervisor/Capsule.ts"
export { Processes } from "./Supervisor/Processes.ts"
export * as Supervisor from "./Supervisor/Supervisor.ts"
export { VERSION } from "./version.ts"
