/**
 * Child workflows: a parent step's child run, the link a child run keeps to its parent, the
 * children whose parent was not woken (the sweep), a parent's ongoing children (cancel).
 *
 * @since 0.1.0
 */
import { isTerminal, OngoingStatuses, RunStatuses } from "../States.ts"
import type { WorkflowSqlContext } from "./Context.ts"
import { CHILD_WAIT_PREFIX, type RunRow } from "./Rows.ts"

/** What a child run knows of its parent (and what wakes it). */
export interface ChildLink {
  readonly id: string
  readonly workflow: string
  readonly status: RunRow["status"]
  readonly paused_reason: string | null
  readonly parent_run_id: string | null
  readonly parent_step: string | null
  readonly parent_wake_on_pause: boolean
}

/** Child statements of one schema. */
export const makeChildSql = (ctx: WorkflowSqlContext) => {
  const { runs, steps, signals, sql, fromIn } = ctx
  const list = (values: ReadonlyArray<string>) => sql.literal(`(${values.map((v) => `'${v}'`).join(", ")})`)
  const terminal = list(RunStatuses.filter(isTerminal))
  const ongoing = list(OngoingStatuses)
  const linkColumns = sql`id, workflow, status, paused_reason, parent_run_id, parent_step, parent_wake_on_pause`

  /** The child run a parent's step started (one per step: the unique index on the parent's run and step). */
  const runChildOf = (parentRunId: string, step: string) =>
    sql<RunRow>`SELECT * FROM ${runs} WHERE parent_run_id = ${parentRunId}::uuid AND parent_step = ${step}`

  /** A run's link to its parent (null columns for a run that is no child). */
  const runParentLink = (runId: string) => sql<ChildLink>`SELECT ${linkColumns} FROM ${runs} WHERE id = ${runId}::uuid`

  /**
   * Children whose parent still waits on them although they ended (or paused, when the parent
   * raises a pause) and hold no wake-up: a wake-up lost (an end the runner did not make, such as
   * the sweep's own). The parent's step waits, its run waits, it holds no signal.
   */
  const childrenUnwoken = (limit: number) =>
    sql<ChildLink>`SELECT c.id, c.workflow, c.status, c.paused_reason, c.parent_run_id, c.parent_step,
        c.parent_wake_on_pause
      FROM ${steps} st
      JOIN ${runs} p ON p.id = st.run_id
      JOIN ${runs} c ON c.parent_run_id = st.run_id AND c.parent_step = st.name
      WHERE st.status = 'waiting' AND st.wait_for = ${CHILD_WAIT_PREFIX} || st.name
        AND ${fromIn("p.status", "wake")}
        AND (c.status IN ${terminal}
          OR (c.status = 'paused' AND c.parent_wake_on_pause AND c.paused_reason IS DISTINCT FROM 'manual'))
        AND NOT EXISTS (SELECT 1 FROM ${signals} sg WHERE sg.claimed_by_step = st.id AND sg.status = 'claimed')
      LIMIT ${limit}`

  /** A parent's children that have not ended (an outside cancel with `cancelChildren`). */
  const runChildrenOngoing = (parentRunId: string) =>
    sql<{ readonly id: string }>`SELECT id FROM ${runs}
      WHERE parent_run_id = ${parentRunId}::uuid AND status IN ${ongoing} ORDER BY created_at, id`

  return { runChildOf, runParentLink, childrenUnwoken, runChildrenOngoing }
}
