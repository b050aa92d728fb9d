/**
 * Every SQL statement on the workflow tables (runs, step attempts, signals, the audit trail),
 * gathered from its transition family under `sql/`: run lifecycle (`StartSql`), claims
 * (`ClaimSql`), step outcomes (`FinishSql` for one run, `OutcomeManySql` for many, `OutcomeSql` for the rest), waits and signals (`WaitSql`), the outside verbs
 * (`VerbSql`), the sweep (`SweepSql`), reads (`ReadSql`) and child workflows (`ChildSql`). The runner's transitions are single
 * statements (data-modifying CTEs): the run row is locked, each change is a guarded UPDATE whose
 * from-states come from `States.ts`, the audit events and the next step's message are written in
 * the same statement. Messages are written through the queue store's CTE builder, which owns the
 * queue tables.
 *
 * @since 0.1.0
 */
import type { SqlClient } from "effect/sql"
import { makeChildSql } from "./sql/ChildSql.ts"
import { makeClaimSql } from "./sql/ClaimSql.ts"
import { makeWorkflowSqlContext } from "./sql/Context.ts"
import { makeDeadlineSql } from "./sql/DeadlineSql.ts"
import { makeEventSql } from "./sql/EventSql.ts"
import { makeFinishSql } from "./sql/FinishSql.ts"
import { makeOutcomeManySql } from "./sql/OutcomeManySql.ts"
import { makeOutcomeSql } from "./sql/OutcomeSql.ts"
import { makeReadSql } from "./sql/ReadSql.ts"
import type { MessageCtes } from "./sql/Rows.ts"
import { makeSignalSql } from "./sql/SignalSql.ts"
import { makeStartSql } from "./sql/StartSql.ts"
import { makeSweepSql } from "./sql/SweepSql.ts"
import { makeVerbSql } from "./sql/VerbSql.ts"
import { makeWaitSql } from "./sql/WaitSql.ts"

export type { ChildLink } from "./sql/ChildSql.ts"
export {
  CHILD_WAIT_PREFIX,
  type ClaimFirstEntry,
  type ClaimRow,
  type EventRow,
  FAN_OUT_JOB,
  FAN_OUT_WAIT,
  type FinishManyEntry,
  type FinishRow,
  type HistoryEntry,
  type MessageCtes,
  type NextAction,
  type OnTimeout,
  POLL_WAIT,
  type RunFilter,
  type RunRow,
  type SignalRow,
  STEP_JOB,
  type StartEntry,
  type StepRow
} from "./sql/Rows.ts"

/** The statements of one schema. */
export const makeWorkflowSql = (sql: SqlClient.SqlClient, schema: string, messageCtes: MessageCtes) => {
  const ctx = makeWorkflowSqlContext(sql, schema, messageCtes)
  const claims = makeClaimSql(ctx)
  return {
    ...makeStartSql(ctx),
    ...claims,
    ...makeOutcomeSql(ctx),
    ...makeFinishSql(ctx),
    ...makeOutcomeManySql(ctx, claims.claimFirstParts),
    ...makeEventSql(ctx),
    ...makeWaitSql(ctx),
    ...makeSignalSql(ctx),
    ...makeDeadlineSql(ctx),
    ...makeVerbSql(ctx),
    ...makeSweepSql(ctx),
    ...makeReadSql(ctx),
    ...makeChildSql(ctx)
  }
}

/** The statements of one schema. */
export type WorkflowSql = ReturnType<typeof makeWorkflowSql>
