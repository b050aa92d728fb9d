/**
 * Reads of runs, steps and events by id, subject and filter (the engine's and the client's).
 *
 * @since 0.1.0
 */
import type { Statement } from "effect/sql"
import { OngoingStatuses, type RunStatus } from "../States.ts"
import type { WorkflowSqlContext } from "./Context.ts"
import type { EventRow, RunFilter, RunRow, StepRow } from "./Rows.ts"

/** Read statements of one schema. */
export const makeReadSql = (ctx: WorkflowSqlContext) => {
  const { runs, steps, events, textArray, sql } = ctx

  const runGet = (id: string, resourceId: string | null) =>
    sql<RunRow>`SELECT * FROM ${runs}
      WHERE id = ${id}::uuid AND (${resourceId}::text IS NULL OR resource_id = ${resourceId}::text)`

  const runFindBySubject = (workflow: string, subject: string) =>
    sql<RunRow>`SELECT * FROM ${runs}
      WHERE workflow = ${workflow} AND subject = ${subject}
      ORDER BY (status = ANY(${textArray(OngoingStatuses)}::text[])) DESC, created_at DESC LIMIT 1`

  const runList = (f: RunFilter) => {
    const conditions: Array<Statement.Fragment> = []
    if (f.workflow !== undefined) conditions.push(sql`workflow = ${f.workflow}`)
    if (f.status !== undefined) conditions.push(sql`status = ANY(${textArray(f.status)}::text[])`)
    if (f.subject !== undefined) conditions.push(sql`subject = ${f.subject}`)
    if (f.resourceId !== undefined) conditions.push(sql`resource_id = ${f.resourceId}`)
    if (f.pausedReason !== undefined) conditions.push(sql`paused_reason = ${f.pausedReason}`)
    if (f.createdFrom !== undefined) conditions.push(sql`created_at >= ${f.createdFrom}`)
    if (f.createdTo !== undefined) conditions.push(sql`created_at < ${f.createdTo}`)
    if (f.before !== undefined) {
      conditions.push(sql`(created_at, id) < (${f.before.createdAt}::timestamptz, ${f.before.id}::uuid)`)
    }
    // the cursor carries created_at as text: a JS Date would drop its microseconds
    return sql<RunRow & { readonly cursor_at: string }>`SELECT *, created_at::text AS cursor_at FROM ${runs}
      ${conditions.length > 0 ? sql`WHERE ${sql.and(conditions)}` : sql``}
      ORDER BY created_at DESC, id DESC LIMIT ${f.limit}`
  }

  const runCounts = (workflow: string | null, resourceId: string | null) =>
    sql<{ readonly status: RunStatus; readonly n: bigint }>`SELECT status, count(*) AS n FROM ${runs}
      WHERE (${workflow}::text IS NULL OR workflow = ${workflow}::text)
        AND (${resourceId}::text IS NULL OR resource_id = ${resourceId}::text)
      GROUP BY status`

  const stepsOf = (runId: string) =>
    sql<StepRow>`SELECT * FROM ${steps} WHERE run_id = ${runId}::uuid ORDER BY position, attempt`

  const eventsOf = (runId: string) => sql<EventRow>`SELECT * FROM ${events} WHERE run_id = ${runId}::uuid ORDER BY id`

  /** A step attempt by id. */
  const stepGet = (stepId: bigint) => sql<StepRow>`SELECT * FROM ${steps} WHERE id = ${stepId}`

  /** The attempt of a run in progress, if any. */
  const stepInProgress = (runId: string) =>
    sql<StepRow>`SELECT * FROM ${steps} WHERE run_id = ${runId}::uuid AND status = 'in_progress' ORDER BY id DESC LIMIT 1`

  return { runGet, runFindBySubject, runList, runCounts, stepsOf, eventsOf, stepGet, stepInProgress }
}
