import { Effect } from "effect"
import type { SqlClient, Statement } from "effect/sql"

/** One statement's plan under one plan cache mode. */
export interface PlanOf {
  readonly mode: string
  readonly text: string
  readonly lines: string
}

/**
 * The EXPLAIN of each statement with a prepared statement's custom plan and with its generic
 * plan (`plan_cache_mode`), the two a driver's prepared statement may run with.
 */
export const plansInBothModes = (sql: SqlClient.SqlClient, statements: ReadonlyArray<Statement.Statement<unknown>>) =>
  Effect.forEach(
    ["force_custom_plan", "force_generic_plan"].flatMap((mode) => statements.map((statement) => ({ mode, statement }))),
    ({ mode, statement }) => {
      const [text, params] = statement.compile()
      return sql
        .withTransaction(
          Effect.andThen(
            sql.unsafe(`SET LOCAL plan_cache_mode = ${mode}`),
            sql.unsafe<{ readonly "QUERY PLAN": string }>(`EXPLAIN ${text}`, params)
          )
        )
        .pipe(Effect.map((plan): PlanOf => ({ mode, text, lines: plan.map((row) => row["QUERY PLAN"]).join("\n") })))
    }
  )
