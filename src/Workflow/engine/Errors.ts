/**
 * Errors as the engine records and reports them: a step row's error, an event's reason, the
 * reporter the policies' `report` calls.
 *
 * @since 0.1.0
 */
import { Context, Effect } from "effect"
import type { SqlError } from "effect/sql/SqlError"
import { storableText } from "../../internal/storable.ts"

/**
 * Where step errors are reported (per the policies' `report`). The default logs them.
 *
 * @category services
 */
export const ErrorReporter = Context.Reference<{
  readonly report: (
    error: unknown,
    context: {
      readonly workflow: string
      readonly workflowId: string
      readonly step: string
      readonly attempt: number
      readonly outcome: string
    }
  ) => Effect.Effect<void>
}>("effect-pgbus/Workflow/ErrorReporter", {
  defaultValue: () => ({
    report: (error, context) =>
      Effect.logError(
        `pgbus: workflow ${context.workflow} step ${context.step} failed (${context.outcome})`,
        error
      ).pipe(Effect.annotateLogs({ workflow_id: context.workflowId, attempt: context.attempt }))
  })
})

/** Whether a value is a non-null object. */
export const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

/** Whether a failure is the driver's `SqlError`. */
export const isSqlError = (u: unknown): u is SqlError => isObject(u) && u._tag === "SqlError"

/** Whether a failure is one of the engine's own typed errors (passed through as is). */
export const isTagged = (u: unknown): boolean =>
  isObject(u) &&
  typeof u._tag === "string" &&
  ["RunNotFound", "NotOngoing", "InvalidTransition", "DatabaseError"].includes(u._tag)

/** An error as a step row records it: tag, message, cause chain, capped stack, worker, revision. */
export const encodeError = (error: unknown, backtraceLines: number, worker: string, revision: string | undefined) => {
  // an error is only recorded: what PostgreSQL cannot store (a NUL, a lone surrogate) is replaced
  const describe = (e: unknown) =>
    isObject(e)
      ? {
          tag: storableText(typeof e._tag === "string" ? e._tag : typeof e.name === "string" ? e.name : "Error"),
          message: storableText(typeof e.message === "string" ? e.message : String(e))
        }
      : { tag: typeof e, message: storableText(String(e)) }
  const causes: Array<{ tag: string; message: string }> = []
  let cause = isObject(error) ? error.cause : undefined
  while (cause !== undefined && causes.length < 5) {
    causes.push(describe(cause))
    cause = isObject(cause) ? cause.cause : undefined
  }
  const stack =
    isObject(error) && typeof error.stack === "string"
      ? storableText(error.stack.split("\n").slice(0, backtraceLines).join("\n"))
      : undefined
  return {
    ...describe(error),
    ...(causes.length > 0 ? { causes } : {}),
    ...(stack ? { stack } : {}),
    worker,
    ...(revision ? { app_revision: revision } : {})
  }
}

/** An error's message, as an event's reason records it (what PostgreSQL cannot store replaced). */
export const messageOf = (error: unknown): string =>
  storableText(isObject(error) && typeof error.message === "string" ? error.message : String(error))

/** A reason given to a flow-control verb, as an event records it. */
export const textOf = (reason: string | undefined): string | null =>
  reason === undefined ? null : storableText(reason)
