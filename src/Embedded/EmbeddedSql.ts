/**
 * The embedded server's statements: its databases (`pg_database`), nothing of effect-pgbus's
 * own tables.
 */
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"

/** Creates `database` unless the server has one of that name (two creators at once: one wins, no error). */
export const databaseEnsure = (sql: SqlClient.SqlClient, database: string) =>
  Effect.gen(function* () {
    const rows = yield* sql<{
      readonly present: boolean
    }>`SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = ${database}) AS present`
    if (rows[0]?.present === true) return
    yield* sql`CREATE DATABASE ${sql(database)}`.pipe(
      Effect.catchReason("SqlError", "UniqueViolation", () => Effect.void)
    )
  })

/** Drops `database` if it exists, ending its sessions (PostgreSQL 13+). */
export const databaseDrop = (sql: SqlClient.SqlClient, database: string) =>
  sql`DROP DATABASE IF EXISTS ${sql(database)} WITH (FORCE)`.pipe(Effect.asVoid)
