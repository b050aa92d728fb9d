/**
 * Reading workflow runs: the list with the Workflows page's filters (paged by cursor), and one
 * run with its attempts, signals, audit trail and child runs. Scoped to the caller's resource.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { toDatabaseError } from "../../Database.ts"
import { type Deps, decodeCursor, encodeCursor, iso, isoOrNull, pageSize, UUID, type View } from "../Deps.ts"
import type { RunDetail, RunPage } from "../Model.ts"
import { InvalidRequest, type OperationsError } from "../OperationsError.ts"
import { payloadView } from "../Redact.ts"
import { queryOf, type RunFilter, type RunLookup, summaryOf, validateFilter } from "./Runs.ts"

/** Audit details without payload-bearing fields (signal payloads, outputs, error text). */
const redactDetails = (details: unknown): unknown => {
  if (typeof details !== "object" || details === null || Array.isArray(details)) return details ?? null
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(details)) {
    out[key] = /payload|output|message|error|stack|data/i.test(key) ? payloadView(value, false) : value
  }
  return out
}

/** The list of runs and one run's detail. */
export const makeRunReads = (deps: Deps, runs: RunLookup) => {
  const { workflows: client, workflowSql } = deps
  const { clock, rowOf, childrenOf } = runs

  /** Runs newest first; the filters combine and survive paging (`next`). */
  const list = (
    filter: RunFilter & { readonly cursor?: string | undefined; readonly limit?: number | undefined },
    view: View = {}
  ): Effect.Effect<RunPage, OperationsError> =>
    Effect.gen(function* () {
      yield* validateFilter(filter)
      const limit = yield* pageSize(filter.limit)
      const before =
        filter.cursor === undefined
          ? undefined
          : yield* Effect.map(decodeCursor(filter.cursor, 2), ([createdAt, id]) => ({ createdAt: createdAt!, id: id! }))
      if (before !== undefined && !UUID.test(before.id)) return yield* new InvalidRequest({ reason: "invalid cursor" })
      const rows = yield* workflowSql
        .runListFiltered({ ...queryOf(filter, view), before, limit: limit + 1 }, yield* clock)
        .pipe(Effect.mapError(toDatabaseError("list workflow runs")))
      const page = rows.slice(0, limit)
      const last = page.at(-1)
      return {
        runs: page.map((r) => summaryOf(r, view.payloads === true)),
        next: rows.length > limit && last !== undefined ? encodeCursor(last.cursor_at, last.id) : null
      }
    })

  /** One run with its payload, output, newest 100 attempts, signals and audit trail. */
  const show = (id: string, view: View = {}): Effect.Effect<RunDetail, OperationsError> =>
    Effect.gen(function* () {
      const row = yield* rowOf(id, view)
      const payloads = view.payloads === true
      const [steps, signals, events] = yield* Effect.all([
        client.steps(id),
        client.signals(id),
        client.events(id)
      ]).pipe(Effect.catchTag("InvalidInput", (error) => Effect.fail(new InvalidRequest({ reason: error.message }))))
      const children = yield* childrenOf(id, view)
      return {
        run: {
          ...summaryOf(row, payloads),
          payload: payloadView(row.payload, payloads),
          output: payloadView(row.output, payloads),
          idempotencyKey: row.idempotency_key,
          rerunOf: row.rerun_of,
          engineVersion: row.engine_version,
          definitionVersion: row.definition_version
        },
        steps: steps.slice(-100).map((s) => ({
          name: s.name,
          attempt: s.attempt,
          position: s.position,
          status: s.status,
          queue: s.queue,
          scheduledAt: iso(s.scheduledAt),
          dueAt: iso(s.dueAt),
          startedAt: isoOrNull(s.startedAt),
          finishedAt: isoOrNull(s.finishedAt),
          durationMs:
            s.startedAt !== undefined && s.finishedAt !== undefined
              ? s.finishedAt.getTime() - s.startedAt.getTime()
              : null,
          worker: s.worker ?? null,
          appRevision: s.appRevision ?? null,
          waitingFor: s.waitingFor ?? null,
          batchId: s.batchId ?? null,
          output: payloadView(s.output, payloads),
          error: payloadView(s.error, payloads)
        })),
        signals: signals.map((s) => ({
          id: String(s.id),
          name: s.name,
          status: s.status,
          payload: payloadView(s.payload, payloads),
          duplicate: s.duplicate
        })),
        events: events.map((e) => ({
          id: String(e.id),
          type: e.type,
          step: e.step ?? null,
          attempt: e.attempt ?? null,
          actor: e.actor,
          reason: e.reason ?? null,
          details: payloads ? (e.details ?? null) : redactDetails(e.details),
          at: iso(e.at)
        })),
        children: children.map((c) => ({ id: c.id, workflow: c.workflow, step: c.parent_step, status: c.status }))
      }
    })

  return { list, show }
}
