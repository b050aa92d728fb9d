/**
 * The signal verbs: `signal` (stored under the run's row lock; the waiting step it matches is
 * woken, or handed to a reader of this process: `SignalWake.ts`), `signalSubject` and `fastForward`.
 *
 * @since 0.1.0
 */
import { Effect, Option, Schema } from "effect"
import type { SignalOptions, SignalReceipt, WorkflowClientShape } from "../../Client.ts"
import { isSignalMatcher } from "../../Runtime.ts"
import * as States from "../../States.ts"
import { InvalidSignal, NotOngoing, RunNotFound, type SignalError } from "../../WorkflowError.ts"
import { CHILD_WAIT_PREFIX, POLL_WAIT } from "../../WorkflowSql.ts"
import { isSqlError, isTagged } from "../Errors.ts"
import { declaredMatcher, matchSignal, NO_MATCH } from "../Signals.ts"
import { toRunInfo } from "../Views.ts"
import { makeSignalInOneStatement } from "./SignalInOneStatement.ts"
import { emptyHandOver, makeSignalWake } from "./SignalWake.ts"
import type { OutsideEnv } from "./Transaction.ts"

/**
 * A signal's payload as stored: checked against the workflow's declared Schema (when the
 * definition is given) and encoded as JSON text within the payload size limit.
 */
const encodePayload = (
  maxPayloadSize: number,
  definition: SignalOptions["workflow"],
  name: string,
  payload: unknown
): Effect.Effect<string, InvalidSignal> =>
  Effect.gen(function* () {
    const declared = definition?.signals[name]
    const schema = declared === undefined ? undefined : isSignalMatcher(declared) ? declared.schema : declared
    const encoded =
      schema === undefined
        ? payload
        : yield* Schema.encodeUnknownEffect(schema)(payload).pipe(
            Effect.mapError(
              (e) => new InvalidSignal({ workflow: definition?.name ?? "", signal: name, issue: e.message })
            )
          )
    let text: string | undefined
    try {
      text = JSON.stringify(encoded ?? {})
    } catch (e) {
      return yield* new InvalidSignal({
        workflow: definition?.name ?? "",
        signal: name,
        issue: `not JSON: ${String(e)}`
      })
    }
    const size = Buffer.byteLength(text ?? "", "utf8")
    if (text === undefined || size > maxPayloadSize) {
      return yield* new InvalidSignal({
        workflow: definition?.name ?? "",
        signal: name,
        issue: text === undefined ? "not JSON" : `${size} bytes, over the limit of ${maxPayloadSize}`
      })
    }
    return text
  })

/** The signal verbs. */
export const makeSignalVerbs = ({ ctx, client, queries, outcomes, tx }: OutsideEnv) => {
  const { config, sql, statements, db } = ctx
  const { getRow, toReceipt } = queries
  const { verb } = tx
  const { wake, settle } = makeSignalWake(ctx, outcomes)
  const { trySignal } = makeSignalInOneStatement({ ctx, queries, tx })

  /**
   * Stores a signal under the run's row lock and, when the run's waiting step waits for it,
   * claims it and wakes the step (a paused run takes it and stays paused). With the workflow's
   * definition the payload is checked against its declared Schema and matchers run here: an
   * error reaches the caller and nothing is stored.
   */
  const sendSignal = (
    id: string,
    name: string,
    payload: unknown,
    options: SignalOptions
  ): Effect.Effect<SignalReceipt, SignalError> =>
    Effect.gen(function* () {
      const definition = options.workflow
      const text = yield* encodePayload(config.maxPayloadSize, definition, name, payload)
      const key = options.idempotencyKey?.trim() ? options.idempotencyKey : null
      // Local dispatch: when a reader of this process has a free slot, the woken step's message
      // is inserted claimed for it and handed over after the commit (no NOTIFY, no read). Not
      // inside the caller's transaction: its outcome is not known here.
      const local = Option.isNone(yield* Effect.serviceOption(sql.transactionService))
      const sent = yield* trySignal(id, name, text, key, options, local)
      if (sent !== undefined) return sent
      const handOver = emptyHandOver()
      return yield* verb("signal", id, options, (run, now) =>
        Effect.gen(function* () {
          if (definition !== undefined && definition.name !== run.workflow) {
            return yield* new RunNotFound({ id })
          }
          if (key !== null) {
            const [existing] = yield* statements.signalByKey(run.id, key)
            if (existing !== undefined) {
              yield* statements.eventInsert({
                runId: run.id,
                type: "signal_received",
                step: null,
                attempt: null,
                actor: options.actor ?? "app",
                reason: options.reason ?? null,
                details: JSON.stringify({ name, idempotency_key: key, duplicate: true }),
                now
              })
              return toReceipt(existing, true)
            }
          }
          // stored, with the step the run waits at, in one round trip
          const [stored] = yield* statements.signalStore({
            runId: run.id,
            name,
            payload: text,
            idempotencyKey: key,
            actor: options.actor ?? "app",
            reason: options.reason ?? null,
            now
          })
          if (stored === undefined) {
            const [existing] = yield* statements.signalByKey(run.id, key ?? "")
            return toReceipt(existing!, true)
          }
          const waitingId = stored.waiting_step_id
          if (waitingId === null || stored.waiting_for !== name) return toReceipt(stored, false)
          const canJudge = !stored.waiting_matcher || (definition !== undefined && declaredMatcher(definition, name))
          const matched = canJudge
            ? definition === undefined || (yield* matchSignal(definition, name, stored.payload)) !== NO_MATCH
            : true
          if (!matched) return toReceipt(stored, false)
          const claimed = canJudge ? stored.id : undefined
          // a matcher this process cannot run is judged at the gate: wake the step to decide
          if (run.status === "waiting") {
            yield* wake(run, { id: waitingId, queue: stored.waiting_queue }, claimed, local, handOver, now)
          } else if (claimed !== undefined) {
            yield* statements.signalClaim({ runId: run.id, signalId: claimed, stepId: waitingId, now })
          }
          return {
            ...toReceipt(stored, false),
            status: canJudge ? "claimed" : "pending",
            claimed: canJudge
          } as SignalReceipt
        }).pipe(
          Effect.mapError((e) =>
            isSqlError(e) || isTagged(e)
              ? e
              : new InvalidSignal({ workflow: run.workflow, signal: name, issue: String(e) })
          )
        )
      ).pipe(
        // committed (verb's transaction is the outermost): the claimed message goes to its reader
        Effect.onExit((exit) => settle(handOver, exit))
      )
    }) as Effect.Effect<SignalReceipt, SignalError>

  const verbs = {
    signal: (id, name, payload, options) => sendSignal(id, name, payload, options ?? {}),

    signalSubject: (workflow, subject, name, payload, options = {}) =>
      Effect.gen(function* () {
        const rows = yield* statements.runFindBySubject(workflow, subject).pipe(db("find run by subject"))
        const run = rows[0]
        if (run === undefined || States.isTerminal(run.status)) {
          if (options.missing === "ignore") return undefined
          return yield* new NotOngoing({
            verb: "signal",
            current: run?.status ?? "none",
            run: `${workflow}:${subject}`
          })
        }
        return yield* sendSignal(run.id, name, payload, options)
      }),

    fastForward: (id, data, options) =>
      Effect.gen(function* () {
        const run = yield* getRow(id, options?.resourceId ?? null)
        if (run.status === "paused") return yield* client().resume(id, options)
        if (run.status === "waiting") {
          const [waiting] = yield* statements.stepWaitingOf(run.id).pipe(db("find waiting step"))
          // a step waiting on a child goes on when the child ends: nothing to fast-forward
          if (waiting?.wait_for && !waiting.wait_for.startsWith(CHILD_WAIT_PREFIX)) {
            yield* sendSignal(id, waiting.wait_for, data ?? {}, {
              ...options,
              reason: options?.reason ?? "fast-forward"
            })
          }
          return toRunInfo(yield* getRow(id, null))
        }
        if (run.status === "ready") {
          const [latest] = yield* statements.stepLatest(run.id).pipe(db("find step"))
          if (latest?.status === "scheduled" && latest.wait_for === POLL_WAIT && data !== undefined) {
            // a poll between checks: its result is `data`
            yield* verb("signal", id, options, (locked, now) =>
              Effect.gen(function* () {
                const [stored] = yield* statements.signalInsert({
                  runId: locked.id,
                  name: POLL_WAIT,
                  payload: JSON.stringify(data),
                  idempotencyKey: null,
                  actor: options?.actor ?? "app",
                  reason: options?.reason ?? "fast-forward",
                  now
                })
                if (stored !== undefined) {
                  yield* statements.signalClaim({ runId: locked.id, signalId: stored.id, stepId: latest.id, now })
                }
              })
            )
          }
          if (latest?.status === "scheduled") return yield* client().runNow(id, options)
        }
        return toRunInfo(run)
      })
  } satisfies Partial<WorkflowClientShape>

  return { sendSignal, verbs }
}
