/**
 * The embedded server's statements: its databases (`pg_database`), nothing of effect-pgbus's
 * own tables.
 */
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"
import { isSqlError, type SqlError } from "effect/sql/SqlError"
import { serverError } from "../Database.ts"

/** SQLSTATE `duplicate_database`: created by another creator since this one looked. */
const DUPLICATE_DATABASE = "42P04"

/**
 * Whether a refused CREATE DATABASE found the database made meanwhile: `duplicate_database`, or
 * the catalog's unique index when both creations ran at once.
 */
const createdMeanwhile = (error: SqlError): boolean =>
  error.reason._tag === "UniqueViolation" || serverError(error).code === DUPLICATE_DATABASE

/** Creates `database`; one that another creator made meanwhile is no error. */
export const databaseCreate = (sql: SqlClient.SqlClient, database: string) =>
  sql`CREATE DATABASE ${sql(database)}`.pipe(
    Effect.asVoid,
    Effect.catchIf(
      (error) => isSqlError(error) && createdMeanwhile(error),
      () => Effect.void
    )
  )

/** Creates `database` unless the server has one of that name (two creators at once: one wins, no error). */
export const databaseEnsure = (sql: SqlClient.SqlClient, database: string) =>
  Effect.gen(function* () {
    const rows = yield* sql<{
      readonly present: boolean
    }>`SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = ${database}) AS present`
    if (rows[0]?.present === true) return
    yield* databaseCreate(sql, database)
  })

/** An error as text: the server's own message and SQLSTATE where it has them, not the driver's "Query failed". */
export const describeSqlError = (error: unknown): string => {
  if (!isSqlError(error)) return error instanceof Error ? error.message : String(error)
  const { code, message } = serverError(error)
  // a socket's error has a code too (ECONNREFUSED): only the server's five characters are a SQLSTATE
  return code !== undefined && /^[0-9A-Z]{5}$/.test(code) ? `${message} (SQLSTATE ${code})` : message
}

/** Drops `database` if it exists, ending its sessions (PostgreSQL 13+). */
export const databaseDrop = (sql: SqlClient.SqlClient, database: string) =>
  sql`DROP DATABASE IF EXISTS ${sql(database)} WITH (FORCE)`.pipe(Effect.asVoid)
