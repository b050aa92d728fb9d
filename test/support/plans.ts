import { Data, Effect } from "effect"
import type { SqlClient, Statement } from "effect/sql"

/** One statement's plan under one plan cache mode. */
export interface PlanOf {
  readonly mode: string
  readonly text: string
  readonly lines: string
}

/**
 * `EXPLAIN (<options>) EXECUTE` of the statement prepared under its own name, in the current
 * transaction, with the plan cache mode already set: `EXPLAIN <statement>` with bound parameters
 * plans with their values (a custom plan) whatever `plan_cache_mode` says. `EXECUTE`'s arguments
 * cannot be parameters either: the values are stored in a temporary table, with the types
 * PostgreSQL inferred for the prepared statement, and passed by functions that read them.
 */
const explainPrepared = <Row extends object>(
  sql: SqlClient.SqlClient,
  statement: Statement.Statement<unknown>,
  options: string
) =>
  Effect.gen(function* () {
    const [text, params] = statement.compile()
    yield* sql.unsafe(`PREPARE pgbus_plan_probe AS ${text}`)
    const [prepared] = yield* sql.unsafe<{ readonly types: ReadonlyArray<string> | string }>(
      "SELECT parameter_types::text[] AS types FROM pg_prepared_statements WHERE name = 'pgbus_plan_probe'"
    )
    const types = typesOf(prepared?.types)
    const columns = types.map((type, i) => `a${i + 1} ${type}`).join(", ")
    yield* sql.unsafe(`CREATE TEMP TABLE pgbus_plan_args (${columns}) ON COMMIT DROP`)
    if (types.length > 0) {
      const values = types.map((_, i) => `$${i + 1}`).join(", ")
      yield* sql.unsafe(`INSERT INTO pgbus_plan_args VALUES (${values})`, params)
    }
    for (const [i, type] of types.entries()) {
      yield* sql.unsafe(
        `CREATE FUNCTION pg_temp.pgbus_plan_arg${i + 1}() RETURNS ${type} LANGUAGE sql STABLE AS 'SELECT a${i + 1} FROM pgbus_plan_args'`
      )
    }
    const call = types.map((_, i) => `pg_temp.pgbus_plan_arg${i + 1}()`).join(", ")
    const plan = yield* sql.unsafe<Row>(
      `EXPLAIN (${options}) EXECUTE pgbus_plan_probe${types.length === 0 ? "" : `(${call})`}`
    )
    for (const i of types.keys()) yield* sql.unsafe(`DROP FUNCTION pg_temp.pgbus_plan_arg${i + 1}()`)
    yield* sql.unsafe("DEALLOCATE pgbus_plan_probe")
    return { text, plan }
  })

/** Each statement under each plan cache mode: a prepared statement's custom plan, then its generic one. */
const inBothModes = <A, E, R>(
  statements: ReadonlyArray<Statement.Statement<unknown>>,
  f: (statement: Statement.Statement<unknown>, mode: string) => Effect.Effect<A, E, R>
) =>
  Effect.forEach(
    ["force_custom_plan", "force_generic_plan"].flatMap((mode) => statements.map((statement) => ({ mode, statement }))),
    ({ mode, statement }) => f(statement, mode)
  )

/**
 * The EXPLAIN of each statement with a prepared statement's custom plan and with its generic
 * plan (`plan_cache_mode`), the two a driver's prepared statement may run with.
 */
export const plansInBothModes = (sql: SqlClient.SqlClient, statements: ReadonlyArray<Statement.Statement<unknown>>) =>
  inBothModes(statements, (statement, mode) =>
    sql
      .withTransaction(
        Effect.andThen(
          sql.unsafe(`SET LOCAL plan_cache_mode = ${mode}`),
          explainPrepared<{ readonly "QUERY PLAN": string }>(sql, statement, "COSTS ON")
        )
      )
      .pipe(
        Effect.map(({ text, plan }): PlanOf => ({ mode, text, lines: plan.map((row) => row["QUERY PLAN"]).join("\n") }))
      )
  )

/** A `text[]` as the driver returns it: an array, or its literal when the type is not decoded. */
const typesOf = (value: ReadonlyArray<string> | string | undefined): ReadonlyArray<string> =>
  value === undefined
    ? []
    : typeof value === "string"
      ? value === "{}"
        ? []
        : value
            .slice(1, -1)
            .split(",")
            .map((t) => t.replace(/^"|"$/g, ""))
      : value

class RolledBack extends Data.TaggedError("RolledBack")<{ readonly text: string; readonly buffers: number }> {}

/**
 * The shared buffers (hit + read) each statement's execution reads under EXPLAIN (ANALYZE,
 * BUFFERS), with a prepared statement's custom and generic plans, each in a transaction rolled back.
 */
export const buffersInBothModes = (sql: SqlClient.SqlClient, statements: ReadonlyArray<Statement.Statement<unknown>>) =>
  inBothModes(statements, (statement, mode) =>
    sql
      .withTransaction(
        Effect.gen(function* () {
          yield* sql.unsafe(`SET LOCAL plan_cache_mode = ${mode}`)
          const { text, plan: rows } = yield* explainPrepared<{
            readonly "QUERY PLAN": ReadonlyArray<{ readonly Plan: Record<string, unknown> }>
          }>(sql, statement, "ANALYZE, BUFFERS, FORMAT JSON")
          const plan = rows[0]?.["QUERY PLAN"][0]?.Plan ?? {}
          const count = (key: string) => (typeof plan[key] === "number" ? plan[key] : 0)
          return yield* new RolledBack({ text, buffers: count("Shared Hit Blocks") + count("Shared Read Blocks") })
        })
      )
      .pipe(Effect.catchTag("RolledBack", ({ text, buffers }) => Effect.succeed({ mode, text, buffers })))
  )
