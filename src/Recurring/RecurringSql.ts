/**
 * Every SQL statement on the recurring_tasks and recurring_executions tables.
 *
 * @since 0.1.0
 */
import type { SqlClient } from "effect/sql"

/** A task's definition as the scheduler's leader last synced it. */
export interface TaskRow {
  readonly key: string
  readonly schedule: string
  readonly cron: string
  readonly time_zone: string
  readonly kind: "job" | "workflow"
  readonly job: string
  readonly queue: string
  readonly payload: unknown
  readonly description: string | null
  readonly catch_up: string
  readonly catch_up_limit: number
  readonly active_since: Date
  readonly synced_at: Date
}

/** What a sync writes for one task. */
export interface TaskDefinition {
  readonly key: string
  readonly schedule: string
  readonly cron: string
  readonly timeZone: string
  /** `job` (enqueue a job) or `workflow` (start a run; `job` names the workflow). */
  readonly kind: "job" | "workflow"
  readonly job: string
  readonly queue: string
  readonly payload: unknown
  readonly description: string | null
  readonly catchUp: string
  readonly catchUpLimit: number
}

/** Who fired a task by hand, and why (a scheduled fire has neither). */
export interface FiredBy {
  readonly actor: string
  readonly reason: string | null
}

/** A task's latest manual fire: when, by whom, why (null actor: recorded before actors were). */
export interface ManualFireRow {
  readonly last_manual_run_at: Date | null
  readonly last_manual_actor: string | null
  readonly last_manual_reason: string | null
}

/** The statements of one schema. */
export const makeRecurringSql = (sql: SqlClient.SqlClient, schema: string) => {
  const tasks = sql(`${schema}.recurring_tasks`)
  const executions = sql(`${schema}.recurring_executions`)
  const NOW = (now: Date | null) => sql`coalesce(${now}::timestamptz, now())`

  /** The statement clock's now (the database's, or the bound one). */
  const recurringNow = (now: Date | null) => sql<{ readonly now: Date }>`SELECT ${NOW(now)} AS now`

  // A changed cron or zone makes the task active from now: its old slots never fire, its new
  // ones from the next on.
  const taskUpsert = (t: TaskDefinition, now: Date | null) =>
    sql`INSERT INTO ${tasks} AS t (key, schedule, cron, time_zone, kind, job, queue, payload, description, catch_up,
        catch_up_limit, active_since, synced_at)
      VALUES (${t.key}, ${t.schedule}, ${t.cron}, ${t.timeZone}, ${t.kind}, ${t.job}, ${t.queue}, ${JSON.stringify(t.payload)}::jsonb,
        ${t.description}, ${t.catchUp}, ${t.catchUpLimit}, ${NOW(now)}, ${NOW(now)})
      ON CONFLICT (key) DO UPDATE SET schedule = excluded.schedule, cron = excluded.cron, kind = excluded.kind,
        time_zone = excluded.time_zone, job = excluded.job, queue = excluded.queue, payload = excluded.payload,
        description = excluded.description, catch_up = excluded.catch_up, catch_up_limit = excluded.catch_up_limit,
        synced_at = excluded.synced_at,
        active_since = CASE WHEN (t.cron, t.time_zone) IS DISTINCT FROM (excluded.cron, excluded.time_zone)
          THEN excluded.active_since ELSE t.active_since END`

  /** Deletes the definitions the code no longer has (their ledger rows stay until retention). */
  const taskDeleteOthers = (keys: ReadonlyArray<string>) =>
    sql<{ readonly key: string }>`DELETE FROM ${tasks} WHERE NOT (key = ANY(${[...keys]}::text[])) RETURNING key`

  /** Each task's start: when it became active, and its latest scheduled fire. */
  const taskStarts = (keys: ReadonlyArray<string>) =>
    sql<{ readonly key: string; readonly active_since: Date; readonly last_run_at: Date | null }>`SELECT t.key,
        t.active_since,
        (SELECT max(e.run_at) FROM ${executions} e WHERE e.task_key = t.key AND NOT e.manual) AS last_run_at
      FROM ${tasks} t WHERE t.key = ANY(${[...keys]}::text[])`

  /** Every definition with its latest fire (scheduled or manual), its latest manual one, and fire count. */
  const taskList = () =>
    sql<TaskRow & ManualFireRow & { readonly last_run_at: Date | null; readonly fires: bigint }>`SELECT t.*,
        (SELECT max(e.run_at) FROM ${executions} e WHERE e.task_key = t.key) AS last_run_at,
        (SELECT count(*) FROM ${executions} e WHERE e.task_key = t.key) AS fires,
        m.run_at AS last_manual_run_at, m.actor AS last_manual_actor, m.reason AS last_manual_reason
      FROM ${tasks} t
      LEFT JOIN LATERAL (SELECT e.run_at, e.actor, e.reason FROM ${executions} e
        WHERE e.task_key = t.key AND e.manual ORDER BY e.run_at DESC LIMIT 1) m ON true
      ORDER BY t.key`

  /** One definition, locked for a run-now. */
  const taskFind = (key: string) => sql<TaskRow>`SELECT * FROM ${tasks} WHERE key = ${key} FOR SHARE`

  /**
   * Records a fire; no row back when the slot already fired (the unique key). A manual fire's
   * time is cut to milliseconds: it comes back as a JS Date, which later statements match on.
   * `by` is a manual fire's caller (null for a scheduled one).
   */
  const executionInsert = (
    key: string,
    runAt: Date | null,
    manual: boolean,
    queue: string,
    now: Date | null,
    by: FiredBy | null
  ) =>
    sql<{
      readonly run_at: Date
    }>`INSERT INTO ${executions} (task_key, run_at, manual, queue, created_at, actor, reason)
      VALUES (${key}, coalesce(${runAt}::timestamptz, date_trunc('milliseconds', ${NOW(now)})), ${manual}, ${queue}, ${NOW(now)},
        ${by?.actor ?? null}, ${by?.reason ?? null})
      ON CONFLICT (task_key, run_at) DO NOTHING RETURNING run_at`

  /** The message a fire enqueued (same transaction as the insert). */
  const executionSetMessage = (key: string, runAt: Date, msgId: bigint) =>
    sql`UPDATE ${executions} SET msg_id = ${msgId} WHERE task_key = ${key} AND run_at = ${runAt}`

  /** A task's fires, newest first. */
  const executionList = (key: string, limit: number) =>
    sql<{
      readonly run_at: Date
      readonly manual: boolean
      readonly queue: string
      readonly msg_id: bigint | null
      readonly created_at: Date
      readonly actor: string | null
      readonly reason: string | null
    }>`SELECT run_at, manual, queue, msg_id, created_at, actor, reason FROM ${executions}
      WHERE task_key = ${key} ORDER BY run_at DESC LIMIT ${limit}`

  /** Deletes fires older than the retention, keeping each task's latest scheduled one (its start). */
  const executionsDeleteOld = (retentionMs: number, now: Date | null) =>
    sql<{ readonly task_key: string }>`DELETE FROM ${executions} e
      WHERE e.created_at < ${NOW(now)} - ${retentionMs}::float8 * interval '1 millisecond'
        AND (e.manual OR e.run_at < (SELECT max(l.run_at) FROM ${executions} l WHERE l.task_key = e.task_key AND NOT l.manual))
      RETURNING e.task_key`

  return {
    recurringNow,
    taskUpsert,
    taskDeleteOthers,
    taskStarts,
    taskList,
    taskFind,
    executionInsert,
    executionSetMessage,
    executionList,
    executionsDeleteOld
  }
}
