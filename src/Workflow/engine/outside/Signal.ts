/**
 * The signal verbs: `signal` (stored under the run's row lock; the waiting step it matches is
 * woken, or handed to a reader of this process), `signalSubject` and `fastForward`.
 *
 * @since 0.1.0
 */
import { Cause, Effect, Exit, Option, Schema } from "effect"
import { isPassingFailure, retryTransient } from "../../../Database.ts"
import type { Message } from "../../../Queue/Message.ts"
import type { LocalSlot } from "../../../Queue/Notifier.ts"
import type { SignalOptions, SignalReceipt, WorkflowClientShape } from "../../Client.ts"
import { isSignalMatcher } from "../../Runtime.ts"
import * as States from "../../States.ts"
import { InvalidSignal, NotOngoing, RunNotFound, type SignalError } from "../../WorkflowError.ts"
import { CHILD_WAIT_PREFIX, type ClaimRow, POLL_WAIT } from "../../WorkflowSql.ts"
import { isSqlError, isTagged } from "../Errors.ts"
import { deliveryKey } from "../Messages.ts"
import { declaredMatcher, matchSignal, NO_MATCH } from "../Signals.ts"
import { toRunInfo } from "../Views.ts"
import type { OutsideEnv } from "./Transaction.ts"

/** The signal verbs. */
export const makeSignalVerbs = ({ ctx, client, queries, outcomes, tx }: OutsideEnv) => {
  const { config, sql, store, notifier, statements, worker, preclaimed, revision, db, queueOf } = ctx
  const { getRow, toReceipt } = queries
  const { releaseStep } = outcomes
  const { verb } = tx

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
      if (text === undefined || size > config.maxPayloadSize) {
        return yield* new InvalidSignal({
          workflow: definition?.name ?? "",
          signal: name,
          issue: text === undefined ? "not JSON" : `${size} bytes, over the limit of ${config.maxPayloadSize}`
        })
      }
      const key = options.idempotencyKey?.trim() ? options.idempotencyKey : null
      // Local dispatch: when a reader of this process has a free slot, the woken step's message
      // is inserted claimed for it and handed over after the commit (no NOTIFY, no read). Not
      // inside the caller's transaction: its outcome is not known here.
      const local = Option.isNone(yield* Effect.serviceOption(sql.transactionService))
      let slot: LocalSlot | undefined
      let handover: { readonly message: Message; readonly claim: ClaimRow } | undefined
      /** The step a hand-over woke and claimed, and its queue (released by the slot's mark if the reply is lost). */
      let handedStep: { readonly workflow: string; readonly stepId: bigint; readonly queue: string } | undefined
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
          const [stored] = yield* statements.signalInsert({
            runId: run.id,
            name,
            payload: text!,
            idempotencyKey: key,
            actor: options.actor ?? "app",
            reason: options.reason ?? null,
            now
          })
          if (stored === undefined) {
            const [existing] = yield* statements.signalByKey(run.id, key ?? "")
            return toReceipt(existing!, true)
          }
          const [waiting] = yield* statements.stepWaitingOf(run.id)
          if (waiting === undefined || waiting.wait_for !== name) return toReceipt(stored, false)
          const canJudge = !waiting.wait_matcher || (definition !== undefined && declaredMatcher(definition, name))
          const matched = canJudge
            ? definition === undefined || (yield* matchSignal(definition, name, stored.payload)) !== NO_MATCH
            : true
          if (!matched) return toReceipt(stored, false)
          const physical = queueOf(waiting.queue || config.workflowQueue).physical
          if (canJudge) {
            yield* statements.signalClaim({ runId: run.id, signalId: stored.id, stepId: waiting.id, now })
          }
          // a matcher this process cannot run is judged at the gate: wake the step to decide
          if (run.status === "waiting") {
            slot = local
              ? notifier.reserveLocal(physical, { inOrder: false, runs: { workflow: run.workflow } })
              : undefined
            if (slot === undefined) {
              yield* statements.stepWake({
                workflow: run.workflow,
                runId: run.id,
                stepId: waiting.id,
                timedOut: false,
                physicalQueue: physical,
                now
              })
            } else {
              // woken and claimed for this process's worker: it runs the step with no claim of its own
              handedStep = {
                workflow: run.workflow,
                stepId: waiting.id,
                queue: queueOf(waiting.queue || config.workflowQueue).queue
              }
              const [claimRow] = yield* statements.stepWakeClaim({
                workflow: run.workflow,
                runId: run.id,
                stepId: waiting.id,
                physicalQueue: physical,
                claim: { claimedBy: slot.claimedBy, visibilityMs: slot.visibilityMs },
                worker,
                appRevision: revision,
                now
              })
              const message =
                claimRow === undefined
                  ? undefined
                  : store.claimedMessage(queueOf(waiting.queue || config.workflowQueue).queue, claimRow)
              handover = message === undefined || claimRow === undefined ? undefined : { message, claim: claimRow }
            }
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
        Effect.onExit((exit) =>
          Effect.suspend(() => {
            const taken = slot
            slot = undefined
            if (taken === undefined) return Effect.void
            const handed = handedStep
            if (Exit.isSuccess(exit) && handover !== undefined && handed !== undefined) {
              const { message, claim } = handover
              const key = deliveryKey(message.msgId, message.readCt)
              preclaimed.set(key, claim)
              // a refused hand-over (the worker is stopping, or has no free executor for it) has its
              // step released before the message goes back: the message's next delivery is no stall
              const release = releaseStep({
                workflow: handed.workflow,
                stepId: handed.stepId,
                claimedBy: taken.claimedBy,
                reason: "handed to a worker of this process that could not take it (stopping, or no free slot)"
              }).pipe(Effect.catchCause((cause) => Effect.logWarning("pgbus: releasing a refused step failed", cause)))
              return taken.deliver(message, Effect.asVoid(release)).pipe(
                Effect.tap((took) => Effect.sync(() => (took ? undefined : preclaimed.delete(key)))),
                Effect.asVoid
              )
            }
            taken.cancel()
            if (handed === undefined || Exit.isSuccess(exit) || !isPassingFailure(Cause.squash(exit.cause))) {
              return Effect.void
            }
            // the wake-and-claim may have committed with its reply lost: once the database answers,
            // its step is released (a new attempt) and its message given back, both by the slot's
            // mark, in the background (the caller has its error, and may send the signal again)
            return Effect.forkDetach(
              retryTransient(
                releaseStep({
                  workflow: handed.workflow,
                  stepId: handed.stepId,
                  claimedBy: taken.claimedBy,
                  reason: "the hand-over's reply was lost with its connection"
                })
              ).pipe(
                Effect.andThen(retryTransient(store.releaseClaim(handed.queue, taken.claimedBy))),
                Effect.catchCause((cause) => Effect.logWarning("pgbus: releasing a lost hand-over failed", cause))
              )
            ).pipe(Effect.asVoid)
          })
        )
      )
    }) as Effect.Effect<SignalReceipt, SignalError>

  /** run_now (at null) and reschedule: the scheduled step's message is due at `at` instead. */

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
