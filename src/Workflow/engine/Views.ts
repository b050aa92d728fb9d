/**
 * Rows as the client shows them: runs, step attempts, audit events, and list cursors.
 *
 * @since 0.1.0
 */
import type { AuditEvent, RunInfo, StepAttempt } from "../Client.ts"
import * as States from "../States.ts"
import type { EventRow, RunRow, StepRow } from "../WorkflowSql.ts"

/** A run row as the `RunInfo` callers see. */
export const toRunInfo = (row: RunRow): RunInfo => ({
  id: row.id,
  workflow: row.workflow,
  subject: row.subject ?? undefined,
  resourceId: row.resource_id ?? undefined,
  payload: row.payload,
  status: row.status,
  currentStep: row.current_step ?? undefined,
  idempotencyKey: row.idempotency_key ?? undefined,
  pausedReason: row.paused_reason ?? undefined,
  error: row.error ?? undefined,
  output: row.output ?? undefined,
  engineVersion: row.engine_version,
  definitionVersion: row.definition_version ?? undefined,
  definitionHash: row.definition_hash ?? undefined,
  rerunOf: row.rerun_of ?? undefined,
  priority: row.priority ?? undefined,
  singleton: row.singleton,
  scheduledFor: row.scheduled_for ?? undefined,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
  finishedAt: row.finished_at ?? undefined,
  availableActions: States.availableActions(row.status),
  ...(row.parent_run_id == null ? {} : { parentRunId: row.parent_run_id, parentStep: row.parent_step ?? undefined })
})

/** A step row as a `StepAttempt`. */
export const toStepAttempt = (row: StepRow): StepAttempt => ({
  id: row.id,
  name: row.name,
  attempt: row.attempt,
  position: row.position,
  status: row.status,
  queue: row.queue,
  scheduledAt: row.scheduled_at,
  dueAt: row.due_at,
  startedAt: row.started_at ?? undefined,
  finishedAt: row.finished_at ?? undefined,
  worker: row.worker ?? undefined,
  appRevision: row.app_revision ?? undefined,
  output: row.output ?? undefined,
  error: row.error ?? undefined,
  waitingFor: row.status === "waiting" ? (row.wait_for ?? undefined) : undefined,
  batchId: row.batch_id ?? undefined
})

/** An audit-trail row as an `AuditEvent`. */
export const toAuditEvent = (row: EventRow): AuditEvent => ({
  id: row.id,
  type: row.type,
  step: row.step ?? undefined,
  attempt: row.attempt ?? undefined,
  actor: row.actor,
  reason: row.reason ?? undefined,
  details: row.details ?? undefined,
  at: row.at
})

/** The opaque cursor of a listing's last row (its time and id). */
export const encodeCursor = (row: { readonly cursor_at: string; readonly id: string }) =>
  Buffer.from(`${row.cursor_at}|${row.id}`).toString("base64url")
/** A cursor's time and id, or undefined for a malformed cursor. */
export const decodeCursor = (cursor: string): { readonly createdAt: string; readonly id: string } | undefined => {
  const [at, id] = Buffer.from(cursor, "base64url").toString("utf8").split("|")
  const valid = at !== undefined && !Number.isNaN(new Date(at).getTime())
  return id && valid && /^[0-9a-f-]{36}$/i.test(id) ? { createdAt: at, id } : undefined
}
