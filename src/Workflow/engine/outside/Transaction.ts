/**
 * An outside verb's transaction: lock the run, check the transition table (`States.ts`), act,
 * and write its event; the errors a refused verb gives.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { SqlError } from "effect/sql/SqlError"
import { serverError, statementNow, toDatabaseError, withTransaction } from "../../../Database.ts"
import type { VerbOptions, WorkflowClientShape } from "../../Client.ts"
import * as States from "../../States.ts"
import {
  type DatabaseError,
  InvalidTransition,
  NotOngoing,
  NotPaused,
  RunNotFound,
  SingletonRunInProgress
} from "../../WorkflowError.ts"
import type { RunRow } from "../../WorkflowSql.ts"
import type { EngineContext } from "../Context.ts"
import { isSqlError } from "../Errors.ts"
import type { Outcomes } from "../Outcomes.ts"
import type { Queries } from "../Queries.ts"
import type { makeStarts } from "../Starts.ts"

/** A refusal of migration 0019's singleton index (another run holds the slot). */
const isSingletonViolation = (error: SqlError): boolean => {
  const server = serverError(error)
  return server.code === "23505" && server.message.includes("workflow_runs_singleton_idx")
}

/** The transaction every outside verb runs in, and its event and status writes. */
export const makeVerbTransaction = (ctx: EngineContext, queries: Queries) => {
  const { sql, statements } = ctx
  const { isUuid } = queries

  const verbError = (verb: States.OutsideVerb, run: Pick<RunRow, "id" | "status">) => {
    if (States.isTerminal(run.status) && verb !== "rerun") {
      return new NotOngoing({ verb, current: run.status, run: run.id })
    }
    if (verb === "resume" || verb === "resume_at") return new NotPaused({ verb, current: run.status, run: run.id })
    return new InvalidTransition({ verb, current: run.status, run: run.id })
  }

  /** The run holding a singleton's slot, as the error of a resume the unique index refused. */
  const singletonHolder = (workflow: string, error: SqlError) =>
    Effect.flatMap(
      Effect.orDie(statements.runFindConflicting(workflow, null, null, true)),
      ([holder]): Effect.Effect<never, SingletonRunInProgress | SqlError> =>
        holder === undefined
          ? Effect.fail(error)
          : Effect.fail(
              new SingletonRunInProgress({
                workflow,
                holder: { id: holder.id, workflow: holder.workflow, status: holder.status }
              })
            )
    )

  /** Runs an outside verb in a transaction: lock, check the table, act, write its event. */
  const verb = <A, E>(
    name: States.OutsideVerb,
    id: string,
    options: VerbOptions | undefined,
    act: (run: RunRow, now: Date | null) => Effect.Effect<A, E | SqlError>
  ): Effect.Effect<
    A,
    | Exclude<E, SqlError>
    | RunNotFound
    | InvalidTransition
    | NotPaused
    | NotOngoing
    | SingletonRunInProgress
    | DatabaseError
  > =>
    Effect.gen(function* () {
      if (!isUuid(id)) return yield* new RunNotFound({ id })
      const now = yield* statementNow
      let workflow: string | undefined
      return yield* withTransaction(
        sql,
        Effect.gen(function* () {
          const [run] = yield* statements.runLock(id, options?.resourceId ?? null)
          if (run === undefined) return yield* new RunNotFound({ id })
          if (!States.isLegal(name, run.status)) return yield* verbError(name, run)
          if (run.singleton) workflow = run.workflow
          return yield* act(run, now)
        })
      ).pipe(
        // a singleton's paused run resumed while another run holds the slot: the index refused it
        Effect.catchIf(
          (e) => workflow !== undefined && isSqlError(e) && isSingletonViolation(e),
          (e) => singletonHolder(workflow!, e as SqlError)
        ),
        Effect.mapError((e) => (isSqlError(e) ? toDatabaseError(`workflow ${name}`)(e) : e))
      )
    }).pipe(
      Effect.withSpan(`pgbus.workflow.${name}`, { attributes: { workflow_id: id } }, { captureStackTrace: false })
    ) as Effect.Effect<
      A,
      | Exclude<E, SqlError>
      | RunNotFound
      | InvalidTransition
      | NotPaused
      | NotOngoing
      | SingletonRunInProgress
      | DatabaseError
    >

  const event = (
    run: RunRow,
    type: string,
    options: VerbOptions | undefined,
    now: Date | null,
    extra: { step?: string; attempt?: number; details?: unknown } = {}
  ) =>
    statements.eventInsert({
      runId: run.id,
      type,
      step: extra.step ?? null,
      attempt: extra.attempt ?? null,
      actor: options?.actor ?? "app",
      reason: options?.reason ?? null,
      details: extra.details === undefined ? null : JSON.stringify(extra.details),
      now
    })

  const setStatus = (run: RunRow, name: States.Verb, now: Date | null, pausedReason?: string) =>
    statements.runSetStatus({
      id: run.id,
      from: States.fromStates(name),
      to: States.targetOf(name, run.status),
      pausedReason: pausedReason ?? null,
      now
    })

  return { verb, event, setStatus, verbError }
}

/** An outside verb's transaction. */
export type VerbTransaction = ReturnType<typeof makeVerbTransaction>

/** What each family of outside verbs is built from. */
export interface OutsideEnv {
  readonly ctx: EngineContext
  /** The engine's client (a verb that calls another, as `cancel` its children's). */
  readonly client: () => WorkflowClientShape
  readonly queries: Queries
  readonly outcomes: Outcomes
  readonly starts: ReturnType<typeof makeStarts>
  readonly tx: VerbTransaction
}
