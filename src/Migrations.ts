/**
 * Migrations: the numbered `.sql` files in `migrations/`, fed to effect's SQL Migrator and
 * recorded in `<schema>.schema_migrations`. Guards what the Migrator does not: a database
 * migrated by newer code, and a file numbered below one already applied.
 *
 * @since 0.1.0
 */
import { readFile } from "node:fs/promises"
import { NodeFileSystem } from "@effect/platform-node"
import { Effect, FileSystem, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Migrator from "effect/sql/Migrator"
import type { SqlError } from "effect/sql/SqlError"
import { PgBusConfig } from "./Config.ts"
import { type DatabaseError, MIGRATE_CURE, toDatabaseError } from "./Database.ts"
import { MIGRATION_FILES } from "./internal/MigrationFiles.ts"
import { splitStatements } from "./internal/splitStatements.ts"

/**
 * Migrating failed: the database was migrated by a newer effect-pgbus (`newer_database`), a
 * migration file is numbered below one already applied (`missing_migration`), a supervisor
 * booting on a database with pending migrations (`not_migrated`, the cure in its detail), the
 * files cannot be read (`unreadable`) or a migration failed (`failed`).
 *
 * @category errors
 */
export class MigrationError extends Schema.TaggedError<MigrationError>()("MigrationError", {
  reason: Schema.Literals(["newer_database", "missing_migration", "not_migrated", "unreadable", "failed"]),
  detail: Schema.String
}) {
  override get message(): string {
    return `migration ${this.reason}: ${this.detail}`
  }
}

/** One migration file. */
export interface MigrationFile {
  readonly id: number
  readonly name: string
  readonly text: string
}

/** The folder of the `.sql` migrations in the package (the code carries them too: see `migrate`). */
export const migrationsDirectory: string = new URL("../migrations/", import.meta.url).pathname

/** Name of the table that records applied migrations, inside the configured schema. */
export const MIGRATIONS_TABLE = "schema_migrations"

const quoteIdentifier = (identifier: string): string => `"${identifier.replaceAll('"', '""')}"`

/** Orders migration files (`NNNN_name.sql`; other names are ignored) and refuses duplicate ids. */
const parseFiles = (
  entries: ReadonlyArray<{ readonly file: string; readonly text: string }>,
  where: string
): Effect.Effect<ReadonlyArray<MigrationFile>, MigrationError> => {
  const files: Array<MigrationFile> = []
  for (const { file, text } of entries) {
    const match = /^(\d+)_([a-z0-9_]+)\.sql$/.exec(file)
    if (match) files.push({ id: Number(match[1]), name: match[2]!, text })
  }
  files.sort((a, b) => a.id - b.id)
  if (new Set(files.map((f) => f.id)).size !== files.length) {
    return Effect.fail(new MigrationError({ reason: "unreadable", detail: `duplicate migration ids in ${where}` }))
  }
  return Effect.succeed(files)
}

/** Whether `migrationsDirectory` is effect-pgbus's own: its parent holds effect-pgbus's package.json. */
const ownFolder = Effect.promise(() =>
  readFile(new URL("../package.json", import.meta.url), "utf8").then(
    (text) => (JSON.parse(text) as { readonly name?: unknown }).name === "effect-pgbus",
    () => false
  )
)

/**
 * The migrations this version of effect-pgbus ships: the package's `migrations/` folder when it
 * is there (a checkout, an installed package), else the copy carried in the code (a bundled
 * app, where no folder is found relative to the code, or only the app's own).
 */
export const shippedMigrations: Effect.Effect<ReadonlyArray<MigrationFile>, MigrationError> = Effect.flatMap(
  ownFolder,
  (own) => (own ? readMigrations(migrationsDirectory) : parseFiles(MIGRATION_FILES, "the package"))
)

/** The copy of the migrations carried in the code (kept equal to the folder by a test). */
export const bundledMigrations: Effect.Effect<ReadonlyArray<MigrationFile>, MigrationError> = parseFiles(
  MIGRATION_FILES,
  "the package"
)

/** Reads and orders the migration files (`NNNN_name.sql`) of a directory. */
export const readMigrations = (directory: string) =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const entries: Array<{ readonly file: string; readonly text: string }> = []
    for (const file of yield* fs.readDirectory(directory)) {
      if (/^\d+_[a-z0-9_]+\.sql$/.test(file))
        entries.push({ file, text: yield* fs.readFileString(`${directory}/${file}`) })
    }
    return yield* parseFiles(entries, directory)
  }).pipe(
    Effect.catchTag("PlatformError", (error) =>
      Effect.fail(new MigrationError({ reason: "unreadable", detail: error.message }))
    ),
    Effect.provide(NodeFileSystem.layer)
  )

/** A migration's statements with the schema placeholder replaced. */
export const renderMigration = (file: MigrationFile, schema: string): ReadonlyArray<string> =>
  splitStatements(file.text.replaceAll("{{schema}}", quoteIdentifier(schema)))

/** The migrations a database has recorded, oldest first (empty when it has none). */
export const appliedMigrations: Effect.Effect<
  ReadonlyArray<{ readonly id: number; readonly name: string }>,
  DatabaseError,
  SqlClient.SqlClient | PgBusConfig
> = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const { schema } = yield* PgBusConfig
  const table = `${quoteIdentifier(schema)}.${quoteIdentifier(MIGRATIONS_TABLE)}`
  const [exists] = yield* sql<{ readonly present: boolean }>`SELECT to_regclass(${table}) IS NOT NULL AS present`
  if (!exists?.present) return []
  const rows = yield* sql<{ readonly migration_id: number; readonly name: string }>`
    SELECT migration_id, name FROM ${sql(`${schema}.${MIGRATIONS_TABLE}`)} ORDER BY migration_id`
  return rows.map((r) => ({ id: r.migration_id, name: r.name }))
}).pipe(Effect.mapError(toDatabaseError("read applied migrations")))

/** Refuses a database that is ahead of the files, or that skipped a file below its latest. */
const checkCompatible = (
  files: ReadonlyArray<MigrationFile>,
  applied: ReadonlyArray<{ readonly id: number; readonly name: string }>
): Effect.Effect<void, MigrationError> => {
  const latestApplied = applied.at(-1)
  const latestKnown = files.at(-1)?.id ?? 0
  if (latestApplied && latestApplied.id > latestKnown) {
    return Effect.fail(
      new MigrationError({
        reason: "newer_database",
        detail:
          `the database is at migration ${latestApplied.id} (${latestApplied.name}) but this version of ` +
          `effect-pgbus knows migrations up to ${latestKnown}: upgrade effect-pgbus before running it against this database`
      })
    )
  }
  const appliedIds = new Set(applied.map((m) => m.id))
  const skipped = files.filter((f) => latestApplied && f.id < latestApplied.id && !appliedIds.has(f.id))
  if (skipped.length > 0) {
    return Effect.fail(
      new MigrationError({
        reason: "missing_migration",
        detail: `migrations ${skipped.map((f) => `${f.id}_${f.name}`).join(", ")} are numbered below the latest applied (${latestApplied?.id}) but were never applied`
      })
    )
  }
  return Effect.void
}

/** Fails with `not_migrated` when some of `files` are not among the applied migrations. */
const checkApplied = (
  files: ReadonlyArray<MigrationFile>,
  applied: ReadonlyArray<{ readonly id: number; readonly name: string }>
): Effect.Effect<void, MigrationError, PgBusConfig> =>
  Effect.gen(function* () {
    const appliedIds = new Set(applied.map((m) => m.id))
    const pending = files.filter((f) => !appliedIds.has(f.id))
    if (pending.length === 0) return
    const { schema } = yield* PgBusConfig
    return yield* new MigrationError({
      reason: "not_migrated",
      detail:
        appliedIds.size === 0
          ? `the database has no effect-pgbus tables (schema ${schema}): ${MIGRATE_CURE}`
          : `the database has ${pending.length} pending migration(s) (${pending.map((f) => `${f.id}_${f.name}`).join(", ")}): ${MIGRATE_CURE}`
    })
  })

/** Fails with `not_migrated` when some shipped migrations are not applied (a supervisor's boot check). */
export const requireMigrated: Effect.Effect<void, MigrationError | DatabaseError, SqlClient.SqlClient | PgBusConfig> =
  Effect.gen(function* () {
    const files = yield* shippedMigrations
    yield* checkApplied(files, yield* appliedMigrations)
  })

/**
 * The supervisor's boot check: `checkSchemaVersion` and `requireMigrated` from one read of the
 * shipped files and one of the database (read side by side), so the workers start sooner.
 */
export const checkMigrated: Effect.Effect<void, MigrationError | DatabaseError, SqlClient.SqlClient | PgBusConfig> =
  Effect.gen(function* () {
    const [files, applied] = yield* Effect.all([shippedMigrations, appliedMigrations], { concurrency: 2 })
    yield* checkCompatible(files, applied)
    yield* checkApplied(files, applied)
  })

/**
 * Fails with `MigrationError` `newer_database` when the database was migrated by newer code;
 * services call it at boot so old code never runs against a newer schema. `directory` checks
 * against a folder of migrations instead of the shipped ones.
 */
export const checkSchemaVersion = (
  directory?: string
): Effect.Effect<void, MigrationError | DatabaseError, SqlClient.SqlClient | PgBusConfig> =>
  Effect.gen(function* () {
    const files = yield* directory === undefined ? shippedMigrations : readMigrations(directory)
    const applied = yield* appliedMigrations
    yield* checkCompatible(files, applied)
  })

/** Applies the pending migrations among `files` (in one transaction, safe from several processes at once). */
const migrateFiles = (
  loaded: Effect.Effect<ReadonlyArray<MigrationFile>, MigrationError>
): Effect.Effect<
  ReadonlyArray<readonly [id: number, name: string]>,
  MigrationError | DatabaseError,
  SqlClient.SqlClient | PgBusConfig
> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const { schema } = yield* PgBusConfig
    const files = yield* loaded
    yield* sql`CREATE SCHEMA IF NOT EXISTS ${sql(schema)}`.pipe(
      // two processes creating the schema at once: the loser sees a unique violation
      Effect.catchReason("SqlError", "UniqueViolation", () => Effect.void),
      Effect.mapError(toDatabaseError("create schema"))
    )
    yield* checkCompatible(files, yield* appliedMigrations)
    const loader: Migrator.Loader = Effect.succeed(
      files.map(
        (file): Migrator.ResolvedMigration => [
          file.id,
          file.name,
          Effect.succeed(
            // a migration may rewrite a large table: the pool's statement timeout does not apply
            // (SET LOCAL: for this transaction only, also behind a transaction-mode pooler)
            Effect.forEach(
              ["SET LOCAL statement_timeout = 0", ...renderMigration(file, schema)],
              (statement) => sql.unsafe(statement).unprepared,
              { discard: true }
            )
          )
        ]
      )
    )
    return yield* Migrator.make({})({ loader, table: `${schema}.${MIGRATIONS_TABLE}` }).pipe(
      Effect.mapError((error: Migrator.MigrationError | SqlError) =>
        error._tag === "SqlError"
          ? toDatabaseError("migrate")(error)
          : new MigrationError({
              reason: "failed",
              detail: `${error.message}${error.cause ? `: ${describeCause(error.cause)}` : ""}`
            })
      )
    )
  })

/** Applies the pending migrations of a directory (tests and tools; apps use `migrate`). */
export const migrateFrom = (directory: string) => migrateFiles(readMigrations(directory))

/**
 * Applies every pending migration of effect-pgbus in one transaction and returns what it
 * applied (`[]` when the database is up to date). Safe to run from several processes at once.
 */
export const migrate = migrateFiles(shippedMigrations)

const describeCause = (cause: unknown): string => {
  if (typeof cause === "object" && cause !== null && "_tag" in cause && cause._tag === "SqlError") {
    return toDatabaseError("migration statement")(cause as SqlError).detail
  }
  return String(cause)
}
