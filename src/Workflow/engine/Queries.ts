/**
 * Reads of runs, steps, events and signals, and the handles the client returns.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type {
  ListOptions,
  RunHandle,
  RunPage,
  RunProgress,
  SignalReceipt,
  WorkflowClientShape,
  WorkflowRef
} from "../Client.ts"
import * as States from "../States.ts"
import { RunNotFound } from "../WorkflowError.ts"
import type { RunRow, SignalRow } from "../WorkflowSql.ts"
import type { EngineContext } from "./Context.ts"
import { decodeCursor, encodeCursor, toAuditEvent, toRunInfo, toStepAttempt } from "./Views.ts"

/** Reads of runs, steps, events and signals, and the handles the client returns. */
export const makeQueries = (ctx: EngineContext, client: () => WorkflowClientShape) => {
  const { statements, db } = ctx

  const getRow = (id: string, resourceId: string | null) =>
    statements.runGet(id, resourceId).pipe(
      db("get run"),
      Effect.flatMap((rows) => (rows[0] ? Effect.succeed(rows[0]) : Effect.fail(new RunNotFound({ id }))))
    )

  const isUuid = (id: string) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(id)

  /** A handle made from a definition checks signals against its declared Schemas. */
  const makeHandle = (row: RunRow, duplicateStart: boolean, definition?: WorkflowRef<unknown>): RunHandle => ({
    id: row.id,
    info: toRunInfo(row),
    duplicateStart,
    refresh: Effect.map(getRow(row.id, null), (r) => makeHandle(r, false, definition)),
    pause: (o) => client().pause(row.id, o),
    resume: (o) => client().resume(row.id, o),
    resumeAt: (step, o) => client().resumeAt(row.id, step, o),
    cancel: (o) => client().cancel(row.id, o),
    runNow: (o) => client().runNow(row.id, o),
    reschedule: (at, o) => client().reschedule(row.id, at, o),
    rerun: (o) => client().rerun(row.id, o),
    events: client().events(row.id),
    steps: client().steps(row.id),
    progress: client().progress(row.id),
    signal: (name, payload, o) =>
      client().signal(
        row.id,
        name,
        payload,
        definition?.signals === undefined
          ? o
          : { workflow: { name: definition.name, signals: definition.signals, queue: definition.queue }, ...o }
      ),
    skip: (o) => client().skip(row.id, o)
  })

  const reread = (id: string) => Effect.map(statements.runGet(id, null), (rows) => toRunInfo(rows[0]!))

  const toReceipt = (row: SignalRow, duplicate: boolean): SignalReceipt => ({
    id: row.id,
    runId: row.run_id,
    name: row.name,
    payload: row.payload,
    status: row.status,
    duplicate,
    claimed: row.status !== "pending"
  })

  const queries = {
    get: (id, options) =>
      isUuid(id)
        ? Effect.map(getRow(id, options?.resourceId ?? null), (row) => makeHandle(row, false))
        : Effect.fail(new RunNotFound({ id })),

    findBySubject: (workflow, subject) =>
      statements.runFindBySubject(workflow, subject).pipe(
        db("find run by subject"),
        Effect.flatMap((rows) =>
          rows[0]
            ? Effect.succeed(makeHandle(rows[0], false))
            : Effect.fail(new RunNotFound({ id: `${workflow}:${subject}` }))
        )
      ),

    list: (options: ListOptions = {}) =>
      Effect.gen(function* () {
        const limit = Math.min(500, Math.max(1, options.limit ?? 50))
        const before = options.cursor ? decodeCursor(options.cursor) : undefined
        const rows = yield* statements
          .runList({
            workflow: options.workflow,
            status:
              options.status === undefined
                ? undefined
                : typeof options.status === "string"
                  ? [options.status]
                  : options.status,
            subject: options.subject,
            resourceId: options.resourceId,
            pausedReason: options.pausedReason,
            createdFrom: options.createdFrom,
            createdTo: options.createdTo,
            before,
            limit: limit + 1
          })
          .pipe(db("list runs"))
        const page = rows.slice(0, limit)
        return {
          runs: page.map(toRunInfo),
          next: rows.length > limit ? encodeCursor(page[page.length - 1]!) : undefined
        } satisfies RunPage
      }),

    counts: (options = {}) =>
      statements.runCounts(options.workflow ?? null, options.resourceId ?? null).pipe(
        db("count runs"),
        Effect.map((rows) => {
          const out = Object.fromEntries(States.RunStatuses.map((s) => [s, 0])) as Record<States.RunStatus, number>
          for (const r of rows) out[r.status] = Number(r.n)
          return out
        })
      ),

    steps: (id) =>
      isUuid(id)
        ? statements.stepsOf(id).pipe(
            db("list steps"),
            Effect.map((rows) => rows.map(toStepAttempt))
          )
        : Effect.succeed([]),

    events: (id) =>
      isUuid(id)
        ? statements.eventsOf(id).pipe(
            db("list events"),
            Effect.map((rows) => rows.map(toAuditEvent))
          )
        : Effect.succeed([]),

    progress: (id) =>
      Effect.map(client().steps(id), (attempts): RunProgress => {
        const byName = new Map<
          string,
          { name: string; status: States.StepStatus; attempts: number; position: number }
        >()
        for (const a of attempts) {
          if (a.name.startsWith("patch:")) continue
          byName.set(a.name, { name: a.name, status: a.status, attempts: a.attempt, position: a.position })
        }
        const steps = [...byName.values()].sort((a, b) => a.position - b.position)
        return {
          completedSteps: steps.filter((s) => s.status === "completed" || s.status === "skipped").length,
          steps: steps.map(({ name, status, attempts }) => ({ name, status, attempts }))
        }
      }),

    signals: (id) =>
      isUuid(id)
        ? statements.signalsOf(id).pipe(
            db("list signals"),
            Effect.map((rows) => rows.map((row) => toReceipt(row, false)))
          )
        : Effect.succeed([])
  } satisfies Partial<WorkflowClientShape>

  return { getRow, isUuid, makeHandle, reread, toReceipt, queries }
}
export type Queries = ReturnType<typeof makeQueries>
