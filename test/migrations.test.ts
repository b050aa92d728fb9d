import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { PgBusConfig } from "../src/Config.ts"
import * as Database from "../src/Database.ts"
import {
  bundledMigrations,
  checkMigrated,
  checkSchemaVersion,
  migrate,
  migrateFrom,
  migrationsDirectory,
  readMigrations
} from "../src/Migrations.ts"
import { urlFor } from "./support/server.ts"
import { emptyDatabase } from "./support/TestDatabase.ts"

/** Database services on a new empty database with the given schema. */
const onEmptyDatabase = (schema = "pgbus") =>
  Layer.unwrap(
    Effect.map(emptyDatabase, (name) =>
      Database.layer.pipe(
        Layer.provideMerge(PgBusConfig.layerWithoutEnvironment({ databaseUrl: urlFor(name), schema, poolSize: 3 }))
      )
    )
  ).pipe(Layer.orDie)

const tables = (schema: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly table_name: string }>`SELECT table_name FROM information_schema.tables
      WHERE table_schema = ${schema} ORDER BY table_name`.pipe(Effect.map((rows) => rows.map((r) => r.table_name)))
  )

const migrationsDir = (files: Record<string, string>) => {
  const dir = mkdtempSync(join(tmpdir(), "pgbus-migrations-"))
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text)
  return dir
}

describe("migrations", () => {
  it.effect("the code carries exactly the migrations/ folder (else run npm run migrations:bundle)", () =>
    Effect.gen(function* () {
      const shipped = yield* bundledMigrations
      const folder = yield* readMigrations(migrationsDirectory)
      assert.isAbove(folder.length, 0)
      assert.deepStrictEqual(
        shipped,
        folder,
        "src/internal/MigrationFiles.ts is out of step with migrations/: run npm run migrations:bundle"
      )
    })
  )

  it.live("migrate applies every file on a fresh database and is a no-op the second time", () =>
    Effect.gen(function* () {
      const first = yield* migrate
      assert.isAbove(first.length, 0)
      assert.deepStrictEqual(first[0], [1, "queues"])
      assert.include(yield* tables("pgbus"), "queues")
      assert.include(yield* tables("pgbus"), "schema_migrations")
      assert.deepStrictEqual(yield* migrate, [])
    }).pipe(Effect.provide(onEmptyDatabase()))
  )

  it.live("migrations go into the configured schema", () =>
    Effect.gen(function* () {
      yield* migrate
      assert.include(yield* tables("jobs_here"), "queues")
      assert.notInclude(yield* tables("pgbus"), "queues")
    }).pipe(Effect.provide(onEmptyDatabase("jobs_here")))
  )

  it.live("two migrators at once: both succeed, the work is done once", () =>
    Effect.gen(function* () {
      const [a, b] = yield* Effect.all([migrate, migrate], { concurrency: 2 })
      assert.strictEqual(a.length + b.length > 0, true)
      assert.isTrue(a.length === 0 || b.length === 0, "one of them found nothing to do")
    }).pipe(Effect.provide(onEmptyDatabase()))
  )

  it.live("a database migrated by a newer version is refused with a clear error", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* migrate
      yield* sql`INSERT INTO pgbus.schema_migrations (migration_id, name) VALUES (9999, 'from_the_future')`
      const error = yield* Effect.flip(migrate)
      assert.strictEqual(error._tag, "MigrationError")
      if (error._tag === "MigrationError") {
        assert.strictEqual(error.reason, "newer_database")
        assert.include(error.message, "9999")
        assert.include(error.message, "upgrade effect-pgbus")
      }
      const check = yield* Effect.flip(checkSchemaVersion())
      assert.strictEqual(check._tag, "MigrationError")
      // the supervisor's boot check says the same
      const boot = yield* Effect.flip(checkMigrated)
      assert.strictEqual(boot._tag === "MigrationError" ? boot.reason : boot._tag, "newer_database")
    }).pipe(Effect.provide(onEmptyDatabase()))
  )

  it.live("a file numbered below the latest applied is reported, not skipped silently", () =>
    Effect.gen(function* () {
      const one = "CREATE TABLE {{schema}}.one (id int);"
      const three = "CREATE TABLE {{schema}}.three (id int);"
      const two = "CREATE TABLE {{schema}}.two (id int);"
      assert.strictEqual((yield* migrateFrom(migrationsDir({ "1_one.sql": one, "3_three.sql": three }))).length, 2)
      const error = yield* Effect.flip(
        migrateFrom(migrationsDir({ "1_one.sql": one, "2_two.sql": two, "3_three.sql": three }))
      )
      assert.strictEqual(error._tag, "MigrationError")
      if (error._tag === "MigrationError") {
        assert.strictEqual(error.reason, "missing_migration")
        assert.include(error.message, "2_two")
      }
    }).pipe(Effect.provide(onEmptyDatabase()))
  )

  it.live("statements with semicolons in strings and function bodies are split correctly", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const text = `-- a comment; with a semicolon
CREATE TABLE {{schema}}.t (v text DEFAULT 'a;b');
CREATE FUNCTION {{schema}}.f() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  RETURN 'x;y';
END;
$$;
/* block; comment */
INSERT INTO {{schema}}.t (v) SELECT {{schema}}.f();
`
      yield* migrateFrom(migrationsDir({ "1_tricky.sql": text }))
      const rows = yield* sql<{ readonly v: string }>`SELECT v FROM pgbus.t`
      assert.deepStrictEqual(
        rows.map((r) => r.v),
        ["x;y"]
      )
    }).pipe(Effect.provide(onEmptyDatabase()))
  )

  it.live("a failing migration rolls back entirely and names the file", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(
        migrateFrom(
          migrationsDir({
            "1_ok.sql": "CREATE TABLE {{schema}}.ok (id int);",
            "2_bad.sql": "CREATE TABLE {{schema}}.bad (id nosuchtype);"
          })
        )
      )
      assert.strictEqual(error._tag, "MigrationError")
      assert.include(error.message, "2_bad")
      assert.notInclude(yield* tables("pgbus"), "ok")
    }).pipe(Effect.provide(onEmptyDatabase()))
  )
})
