/**
 * A signal in one statement (`signalStoreWake`) instead of the verb's transaction of three: for
 * a signal sent where no reader of this process could take the woken step (local dispatch needs
 * the transaction), with the workflow's definition or without it. A sender off the workers'
 * process then has one round trip where it had five (BEGIN, the lock, the store, the wake,
 * COMMIT). Whatever the statement cannot decide alone, it leaves to the transaction.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { statementNow, toDatabaseError } from "../../../Database.ts"
import type { SignalOptions, SignalReceipt } from "../../Client.ts"
import * as States from "../../States.ts"
import { RunNotFound, type SignalError } from "../../WorkflowError.ts"
import type { SignalRow } from "../../WorkflowSql.ts"
import { isSqlError } from "../Errors.ts"
import { declaredMatcher, matchSignal } from "../Signals.ts"
import type { OutsideEnv } from "./Transaction.ts"

/** The one-statement signal: its receipt, or undefined when the verb's transaction must send it. */
export const makeSignalInOneStatement = ({ ctx, queries, tx }: Pick<OutsideEnv, "ctx" | "queries" | "tx">) => {
  const { config, statements, notifier, queueOf, jobs } = ctx
  const { isUuid, toReceipt } = queries

  /** Sends the signal in one statement when it can: undefined when the transaction must. */
  const trySignal = (
    id: string,
    name: string,
    payloadText: string,
    /** The idempotency key, blank made null (as the transaction takes it). */
    key: string | null,
    options: SignalOptions,
    local: boolean
  ): Effect.Effect<SignalReceipt | undefined, SignalError> => {
    const definition = options.workflow
    // without the definition: the workflow's queue taken as the default one (a step on another
    // makes the statement step aside), and the payload stored unchecked, as the transaction does
    const queue = definition?.queue ?? config.workflowQueue
    const { physical } = queueOf(queue)
    // a reader here may take the step claimed (local dispatch): that is the transaction's way
    if (local && notifier.hasLocalReader(physical)) return Effect.succeed(undefined)
    if (!isUuid(id)) return Effect.fail(new RunNotFound({ id }))
    return Effect.gen(function* () {
      // a matcher, or a payload its Schema would not decode back, is for the transaction to judge
      if (definition !== undefined) {
        if (declaredMatcher(definition, name)) return undefined
        const decodes = yield* matchSignal(definition, name, JSON.parse(payloadText)).pipe(
          Effect.as(true),
          Effect.orElseSucceed(() => false)
        )
        if (!decodes) return undefined
      }
      // the statement names the queue's table: a definition that moved its queue since the run
      // started names one that may not exist yet (known once per process, then no round trip)
      yield* jobs.ensureQueue(queue)
      const [row] = yield* statements.signalStoreWake({
        runId: id,
        name,
        payload: payloadText,
        idempotencyKey: key,
        actor: options.actor ?? "app",
        reason: options.reason ?? null,
        workflow: definition?.name ?? null,
        resourceId: options.resourceId ?? null,
        queue,
        defaultQueue: config.workflowQueue,
        physicalQueue: physical,
        now: yield* statementNow
      })
      if (row === undefined) return yield* new RunNotFound({ id })
      if (!States.isLegal("signal", row.run_status))
        return yield* tx.verbError("signal", { id, status: row.run_status })
      if (definition !== undefined && row.run_workflow !== definition.name) return yield* new RunNotFound({ id })
      // stepped aside, or a repeated key (nothing stored): the transaction answers the duplicate
      if (row.fallback || row.id === null) return undefined
      return toReceipt(row as SignalRow, false)
    }).pipe(
      Effect.mapError((e) => (isSqlError(e) ? toDatabaseError("workflow signal")(e) : e)),
      Effect.withSpan("pgbus.workflow.signal", { attributes: { workflow_id: id } }, { captureStackTrace: false })
    ) as Effect.Effect<SignalReceipt | undefined, SignalError>
  }

  return { trySignal }
}
