/**
 * The JSON API's handlers: each route decodes its input, checks the caller (tenant scope, write
 * role), calls the operations service and maps its errors to the API's (404, 409 with the run's
 * status, 400, 500 with the error in the log).
 *
 * @since 0.1.0
 */
import { type Duration, Effect, Layer } from "effect"
import { HttpApiBuilder, type HttpApiGroup } from "effect/http-api"
import type { Change, View } from "../Operations/Deps.ts"
import { locksView } from "../Operations/Locks.ts"
import { Operations } from "../Operations/Operations.ts"
import { NotFound, type OperationsError } from "../Operations/OperationsError.ts"
import { jobRateView } from "../Operations/Rates.ts"
import { recurringExecutionView, recurringFireView, recurringTaskView } from "../Operations/Recurring.ts"
import type { RunFilter } from "../Operations/Workflows.ts"
import { type RunStatus, RunStatuses } from "../Workflow/States.ts"
import { type ApiAccess, Caller, type CallerShape, requireClusterWide, requireWrite } from "./Access.ts"
import type { MountedApi } from "./Api.ts"
import { ApiBadRequest, ApiConflict, ApiInternal, ApiNotFound } from "./ApiError.ts"

/** A failure of a read as the API answers it (a read never conflicts). */
const toReadError = (error: OperationsError): Effect.Effect<never, ApiNotFound | ApiBadRequest | ApiInternal> => {
  switch (error._tag) {
    case "NotFound":
      return Effect.fail(new ApiNotFound({ error: "not_found", message: error.message }))
    case "Conflict":
    case "InvalidRequest":
      return Effect.fail(new ApiBadRequest({ error: "validation", message: error.message }))
    case "DatabaseError":
      return Effect.logError("pgbus api: a request failed", error).pipe(
        Effect.andThen(
          Effect.fail(new ApiInternal({ error: "internal", message: "internal error (see the pgbus log)" }))
        )
      )
  }
}

/** A failure of a write as the API answers it: 409 with the run's current status. */
export const toApiError = (
  error: OperationsError
): Effect.Effect<never, ApiNotFound | ApiConflict | ApiBadRequest | ApiInternal> =>
  error._tag === "Conflict"
    ? Effect.fail(
        new ApiConflict({
          error: "conflict",
          message: error.message,
          verb: error.verb,
          status: error.current,
          allowed: error.allowed
        })
      )
    : toReadError(error)

const viewOf = (caller: CallerShape): View => ({ resourceId: caller.resourceId, payloads: caller.payloads })

/** A read of the caller's runs (scoped by its resource). */
const scoped = <A, R>(f: (view: View) => Effect.Effect<A, OperationsError, R>) =>
  Effect.flatMap(Caller, (caller) => f(viewOf(caller)).pipe(Effect.catch(toReadError)))

/** A read of cluster-wide data: refused to a tenant-scoped caller. */
const clusterWide = <A, R>(f: (view: View) => Effect.Effect<A, OperationsError, R>) =>
  Effect.flatMap(requireClusterWide, (caller) => f(viewOf(caller)).pipe(Effect.catch(toReadError)))

/** A write: refused without the write role; cluster-wide ones also to a tenant-scoped caller. */
const write = <A, R>(
  f: (change: Change, view: View) => Effect.Effect<A, OperationsError, R>,
  options: { readonly clusterWide: boolean },
  reason: string | undefined
) =>
  Effect.gen(function* () {
    const caller = yield* requireWrite
    if (options.clusterWide) yield* requireClusterWide
    return yield* f({ actor: `api:${caller.actor}`, reason }, viewOf(caller)).pipe(Effect.catch(toApiError))
  })

const badRequest = (message: string) => Effect.fail(new ApiBadRequest({ error: "validation", message }))

/** An ISO 8601 time from a query or body, or 400. */
const timeOf = (name: string, text: string | undefined): Effect.Effect<Date | undefined, ApiBadRequest> => {
  if (text === undefined) return Effect.succeed(undefined)
  const date = new Date(text)
  return Number.isNaN(date.getTime())
    ? badRequest(`${name} must be an ISO 8601 time (got ${text})`)
    : Effect.succeed(date)
}

/** Run statuses from a comma-separated query, or 400. */
const statusesOf = (
  text: string | ReadonlyArray<string> | undefined
): Effect.Effect<ReadonlyArray<RunStatus> | undefined, ApiBadRequest> => {
  if (text === undefined) return Effect.succeed(undefined)
  const parts = (typeof text === "string" ? text.split(",") : text).map((s) => s.trim()).filter((s) => s !== "")
  const bad = parts.filter((s) => !(RunStatuses as ReadonlyArray<string>).includes(s))
  return bad.length > 0
    ? badRequest(`unknown status ${bad.join(", ")} (one of ${RunStatuses.join(", ")})`)
    : Effect.succeed(parts as ReadonlyArray<RunStatus>)
}

/** The Workflows list's filter from a query or a bulk body. */
const filterOf = (q: {
  readonly workflow?: string | undefined
  readonly status?: string | ReadonlyArray<string> | undefined
  readonly step?: string | undefined
  readonly errorClass?: string | undefined
  readonly subject?: string | undefined
  readonly id?: string | undefined
  readonly stuckReason?: RunFilter["stuckReason"]
  readonly createdFrom?: string | undefined
  readonly createdTo?: string | undefined
  readonly endedFrom?: string | undefined
  readonly endedTo?: string | undefined
}): Effect.Effect<RunFilter, ApiBadRequest> =>
  Effect.gen(function* () {
    return {
      workflow: q.workflow,
      status: yield* statusesOf(q.status),
      step: q.step,
      errorClass: q.errorClass,
      subject: q.subject,
      id: q.id,
      stuckReason: q.stuckReason,
      createdFrom: yield* timeOf("createdFrom", q.createdFrom),
      createdTo: yield* timeOf("createdTo", q.createdTo),
      endedFrom: yield* timeOf("endedFrom", q.endedFrom),
      endedTo: yield* timeOf("endedTo", q.endedTo)
    }
  })

/** The handlers of every group, on the operations service. */
export const handlers = (
  api: MountedApi
): Layer.Layer<
  | HttpApiGroup.Service<"pgbus", "health">
  | HttpApiGroup.Service<"pgbus", "queues">
  | HttpApiGroup.Service<"pgbus", "deadLetters">
  | HttpApiGroup.Service<"pgbus", "workflows">
  | HttpApiGroup.Service<"pgbus", "bus">
  | HttpApiGroup.Service<"pgbus", "flow">
  | HttpApiGroup.Service<"pgbus", "recurring">,
  never,
  Operations | ApiAccess
> => {
  const health = HttpApiBuilder.group(api, "health", (h) =>
    Effect.gen(function* () {
      const ops = yield* Operations
      return h
        .handle("verdict", () => ops.health)
        .handle("overview", () => clusterWide(() => ops.overview))
        .handle("processes", () => clusterWide(() => ops.processes))
    })
  )

  const queues = HttpApiBuilder.group(api, "queues", (h) =>
    Effect.gen(function* () {
      const ops = yield* Operations
      return h
        .handle("list", () => clusterWide(() => ops.queues))
        .handle("get", ({ params }) => clusterWide(() => ops.queue(params.queue)))
        .handle("pause", ({ params, payload }) =>
          Effect.flatMap(timeOf("until", payload.until), (until) =>
            write((change) => ops.pauseQueue(params.queue, { ...change, until }), { clusterWide: true }, payload.reason)
          )
        )
        .handle("resume", ({ params, payload }) =>
          write((change) => ops.resumeQueue(params.queue, change), { clusterWide: true }, payload.reason)
        )
        .handle("purge", ({ params, payload }) =>
          write((change) => ops.purgeQueue(params.queue, change), { clusterWide: true }, payload.reason)
        )
        .handle("jobs", ({ params, query }) =>
          clusterWide((view) =>
            ops.jobs(
              { queue: params.queue, state: query.state, job: query.job, cursor: query.cursor, limit: query.limit },
              view
            )
          )
        )
        .handle("job", ({ params }) => clusterWide((view) => ops.job(params.queue, params.id, view)))
    })
  )

  const deadLetters = HttpApiBuilder.group(api, "deadLetters", (h) =>
    Effect.gen(function* () {
      const ops = yield* Operations
      return h
        .handle("list", ({ query }) => clusterWide((view) => ops.deadLetters(query, view)))
        .handle("get", ({ params }) => clusterWide((view) => ops.deadLetter(params.id, view)))
        .handle("retry", ({ params, payload }) =>
          write((change) => ops.retryDeadLetter(params.id, change), { clusterWide: true }, payload.reason)
        )
        .handle("discard", ({ params, payload }) =>
          write((change) => ops.discardDeadLetter(params.id, change), { clusterWide: true }, payload.reason)
        )
        .handle("retryMany", ({ payload }) =>
          write((change) => ops.retryDeadLetters(payload, change), { clusterWide: true }, payload.reason)
        )
        .handle("discardMany", ({ payload }) =>
          write((change) => ops.discardDeadLetters(payload, change), { clusterWide: true }, payload.reason)
        )
    })
  )

  const workflows = HttpApiBuilder.group(api, "workflows", (h) =>
    Effect.gen(function* () {
      const ops = yield* Operations
      const verb =
        (name: "pause" | "resume" | "cancel" | "run_now" | "rerun" | "skip") =>
        ({
          params,
          payload
        }: {
          readonly params: { readonly id: string }
          readonly payload: {
            readonly reason?: string | undefined
            readonly expectedStatus?: RunStatus | undefined
            readonly cancelChildren?: boolean | undefined
          }
        }) =>
          write(
            (change, view) =>
              ops.act(
                params.id,
                name,
                { ...change, expectedStatus: payload.expectedStatus, cancelChildren: payload.cancelChildren },
                view
              ),
            { clusterWide: false },
            payload.reason
          )
      return h
        .handle("list", ({ query }) =>
          Effect.flatMap(filterOf(query), (filter) =>
            scoped((view) => ops.workflows({ ...filter, cursor: query.cursor, limit: query.limit }, view))
          )
        )
        .handle("counts", ({ query }) => scoped((view) => ops.workflowCounts(query, view)))
        .handle("attention", ({ query }) => scoped((view) => ops.needsAttention(query, view)))
        .handle("definitions", ({ query }) => scoped((view) => ops.workflowDefinitions(query, view)))
        .handle("stats", ({ params, query }) => scoped((view) => ops.workflowStats(params.workflow, query, view)))
        .handle("get", ({ params }) => scoped((view) => ops.workflow(params.id, view)))
        .handle("bulk", ({ params, payload }) =>
          Effect.gen(function* () {
            const filter = payload.filter === undefined ? undefined : yield* filterOf(payload.filter)
            return yield* write(
              (change, view) =>
                ops.actMany(
                  params.verb,
                  { ids: payload.ids, filter },
                  { ...change, cancelChildren: payload.cancelChildren },
                  view
                ),
              { clusterWide: false },
              payload.reason
            )
          })
        )
        .handle("pause", verb("pause"))
        .handle("resume", verb("resume"))
        .handle("cancel", verb("cancel"))
        .handle("runNow", verb("run_now"))
        .handle("rerun", verb("rerun"))
        .handle("skip", verb("skip"))
        .handle("resumeAt", ({ params, payload }) =>
          write(
            (change, view) =>
              ops.act(
                params.id,
                "resume_at",
                { ...change, step: payload.step, expectedStatus: payload.expectedStatus },
                view
              ),
            { clusterWide: false },
            payload.reason
          )
        )
        .handle("reschedule", ({ params, payload }) =>
          Effect.flatMap(timeOf("at", payload.at), (at) =>
            write(
              (change, view) =>
                ops.act(params.id, "reschedule", { ...change, at, expectedStatus: payload.expectedStatus }, view),
              { clusterWide: false },
              payload.reason
            )
          )
        )
        .handle("signal", ({ params, payload }) =>
          write(
            (change, view) =>
              ops.signal(
                params.id,
                { name: payload.name, payload: payload.payload, idempotencyKey: payload.idempotencyKey },
                { ...change, expectedStatus: payload.expectedStatus },
                view
              ),
            { clusterWide: false },
            payload.reason
          )
        )
    })
  )

  const bus = HttpApiBuilder.group(api, "bus", (h) =>
    Effect.gen(function* () {
      const ops = yield* Operations
      return h
        .handle("events", ({ query }) => clusterWide((view) => ops.events(query, view)))
        .handle("outbox", ({ query }) => clusterWide((view) => ops.outbox(query, view)))
        .handle("batches", ({ query }) => clusterWide(() => ops.batches(query)))
        .handle("batch", ({ params }) => clusterWide(() => ops.batch(params.id)))
    })
  )

  const flow = HttpApiBuilder.group(api, "flow", (h) =>
    Effect.gen(function* () {
      const ops = yield* Operations
      return h
        .handle("locks", () => clusterWide(() => Effect.map(ops.locks, locksView)))
        .handle("releaseUniqueKey", ({ payload }) =>
          write(
            (change) => ops.releaseUniqueKey(payload.job, payload.key, change),
            { clusterWide: true },
            payload.reason
          )
        )
        .handle("rates", () => clusterWide(() => Effect.map(ops.jobRates, (rates) => rates.map(jobRateView))))
        .handle("setRate", ({ params, payload }) =>
          write(
            (change) =>
              ops
                .setJobRate(params.job, { limit: payload.limit, period: payload.period as Duration.Input }, change)
                .pipe(
                  Effect.flatMap((rate) =>
                    rate === undefined
                      ? Effect.fail(new NotFound({ kind: "job", id: params.job }))
                      : Effect.succeed(jobRateView(rate))
                  )
                ),
            { clusterWide: true },
            payload.reason
          )
        )
        .handle("resetRate", ({ params, payload }) =>
          write(
            (change) =>
              Effect.map(ops.setJobRate(params.job, undefined, change), (rate) =>
                rate === undefined ? null : jobRateView(rate)
              ),
            { clusterWide: true },
            payload.reason
          )
        )
    })
  )

  const recurring = HttpApiBuilder.group(api, "recurring", (h) =>
    Effect.gen(function* () {
      const ops = yield* Operations
      return h
        .handle("list", () =>
          clusterWide(() => Effect.map(ops.recurringTasks, (tasks) => tasks.map(recurringTaskView)))
        )
        .handle("executions", ({ params, query }) =>
          clusterWide(() =>
            Effect.map(ops.recurringExecutions(params.key, query.limit), (r) =>
              r.executions.map(recurringExecutionView)
            )
          )
        )
        .handle("runNow", ({ params, payload }) =>
          write(
            (change) => Effect.map(ops.runRecurringNow(params.key, change), recurringFireView),
            { clusterWide: true },
            payload.reason
          )
        )
    })
  )

  return Layer.mergeAll(health, queues, deadLetters, workflows, bus, flow, recurring)
}
