/**
 * The outside verbs: each locks the run, checks the transition table, acts and writes its event.
 *
 * @since 0.1.0
 */
import { Cause, Effect, Exit, Metric, Option, Schema } from "effect"
import type { SqlError } from "effect/sql/SqlError"
import {
  isPassingFailure,
  retryTransient,
  serverError,
  statementNow,
  toDatabaseError,
  withTransaction
} from "../../Database.ts"
import type { Message } from "../../Queue/Message.ts"
import type { LocalSlot } from "../../Queue/Notifier.ts"
import type { SignalOptions, SignalReceipt, VerbOptions, WorkflowClientShape, WorkflowRef } from "../Client.ts"
import { isSignalMatcher } from "../Runtime.ts"
import * as States from "../States.ts"
import { makeChildWake } from "../verbs/child.ts"
import {
  type DatabaseError,
  InvalidSignal,
  InvalidTransition,
  NotOngoing,
  NotPaused,
  RunNotFound,
  type SignalError,
  SingletonRunInProgress,
  UnknownStep
} from "../WorkflowError.ts"
import { CHILD_WAIT_PREFIX, type ClaimRow, POLL_WAIT, type RunRow } from "../WorkflowSql.ts"
import type { EngineContext } from "./Context.ts"
import type { makeOutcomes } from "./Outcomes.ts"
import type { makeQueries } from "./Queries.ts"
import {
  cancelledTotal,
  declaredMatcher,
  deliveryKey,
  isSqlError,
  isTagged,
  matchSignal,
  NO_MATCH,
  toRunInfo
} from "./Shared.ts"
import type { makeStarts } from "./Starts.ts"

/** A refusal of migration 0019's singleton index (another run holds the slot). */
const isSingletonViolation = (error: SqlError): boolean => {
  const server = serverError(error)
  return server.code === "23505" && server.message.includes("workflow_runs_singleton_idx")
}

/** The outside verbs: each locks the run, checks the transition table, acts and writes its event. */
export const makeVerbs = (
  ctx: EngineContext,
  client: () => WorkflowClientShape,
  queries: ReturnType<typeof makeQueries>,
  outcomes: ReturnType<typeof makeOutcomes>,
  starts: ReturnType<typeof makeStarts>
) => {
  const { config, sql, store, notifier, jobs, statements, worker, preclaimed, revision, db, queueOf } = ctx
  const { getRow, isUuid, reread, toReceipt } = queries
  const { releaseStep } = outcomes
  const { startRun } = starts
  const { wakeParentOf } = makeChildWake(ctx)

  const verbError = (verb: States.OutsideVerb, run: RunRow) => {
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
  const moveScheduled = (
    name: "run_now" | "reschedule",
    id: string,
    at: Date | null,
    options: VerbOptions | undefined
  ) =>
    verb(name, id, options, (run, now) =>
      Effect.gen(function* () {
        const [latest] = yield* statements.stepLatest(run.id)
        if (latest?.status !== "scheduled") {
          return yield* new InvalidTransition({ verb: name, current: `${run.status} (no scheduled step)`, run: run.id })
        }
        yield* statements.stepReschedule({
          workflow: run.workflow,
          stepId: latest.id,
          runId: run.id,
          at,
          physicalQueue: queueOf(latest.queue).physical,
          now
        })
        yield* event(run, name === "run_now" ? "run_now" : "rescheduled", options, now, {
          step: latest.name,
          attempt: latest.attempt,
          ...(at === null ? {} : { details: { at: at.toISOString() } })
        })
        return yield* reread(run.id)
      })
    )

  const verbs = {
    pause: (id, options) =>
      verb("pause", id, options, (run, now) =>
        Effect.gen(function* () {
          yield* setStatus(run, "pause", now, "manual")
          yield* event(run, "paused", options, now)
          return yield* reread(run.id)
        })
      ),

    resume: (id, options) =>
      verb("resume", id, options, (run, now) =>
        Effect.gen(function* () {
          const [latest] = yield* statements.stepLatest(run.id)
          const { physical } = queueOf(latest?.queue || config.workflowQueue)
          if (latest?.status === "in_progress") {
            // the step that ran at the outside pause still runs: the run goes on performing it
            yield* statements.runSetStatus({
              id: run.id,
              from: States.fromStates("unpause"),
              to: States.targetOf("unpause", run.status),
              now
            })
            yield* event(run, "resumed", options, now, { details: { transition: "unpause" } })
          } else if (latest?.status === "waiting") {
            // paused while it waited: it waits again (its deadline moved by the pause), or runs
            // now with the signal it took while paused
            const held = (yield* statements.signalHeldBy(latest.id))[0]
            yield* statements.runRewait(run.id, latest.id, now)
            if (held !== undefined) {
              yield* statements.stepWake({
                workflow: run.workflow,
                runId: run.id,
                stepId: latest.id,
                timedOut: false,
                physicalQueue: physical,
                now
              })
            }
            yield* event(run, "resumed", options, now, {
              step: latest.name,
              attempt: latest.attempt,
              details: { transition: held === undefined ? "rewait" : "wake" }
            })
          } else if (latest?.status === "failed" || latest?.status === "cancelled") {
            yield* jobs.ensureQueue(latest.queue)
            yield* setStatus(run, "resume", now)
            const [next] = yield* statements.stepInsertScheduled({
              workflow: run.workflow,
              runId: run.id,
              name: latest.name,
              attempt: latest.attempt + 1,
              position: latest.position,
              queue: latest.queue,
              physicalQueue: physical,
              reattempts: 0,
              actor: options?.actor ?? "app",
              now
            })
            // the next attempt runs with the signal the failed one held, without matching again
            if (next !== undefined) yield* statements.signalTransfer(latest.id, next.id)
            yield* event(run, "resumed", options, now, { step: latest.name, attempt: latest.attempt + 1 })
          } else if (latest?.status === "scheduled") {
            yield* setStatus(run, "resume", now)
            yield* statements.stepReschedule({
              workflow: run.workflow,
              stepId: latest.id,
              runId: run.id,
              at: latest.due_at,
              physicalQueue: physical,
              now
            })
            yield* event(run, "resumed", options, now, { step: latest.name, attempt: latest.attempt })
          } else {
            yield* setStatus(run, "resume", now)
            yield* statements.runSendContinue(
              run.workflow,
              run.id,
              queueOf(config.workflowQueue, run.priority ?? undefined).physical,
              now
            )
            yield* event(run, "resumed", options, now)
          }
          return yield* reread(run.id)
        })
      ),

    resumeAt: (id, step, options) =>
      verb("resume_at", id, options, (run, now) =>
        Effect.gen(function* () {
          const [latest] = yield* statements.stepLatestNamed(run.id, step)
          if (latest === undefined || step.startsWith("patch:")) return yield* new UnknownStep({ run: run.id, step })
          yield* jobs.ensureQueue(latest.queue)
          yield* statements.stepsCancelOpen(run.id, now)
          yield* setStatus(run, "resume_at", now)
          yield* statements.stepInsertScheduled({
            workflow: run.workflow,
            runId: run.id,
            name: latest.name,
            attempt: latest.attempt + 1,
            position: latest.position,
            queue: latest.queue,
            physicalQueue: queueOf(latest.queue).physical,
            reattempts: 0,
            actor: options?.actor ?? "app",
            now
          })
          yield* event(run, "resumed", options, now, {
            step,
            attempt: latest.attempt + 1,
            details: { resume_at: step }
          })
          return yield* reread(run.id)
        })
      ),

    cancel: (id, options) =>
      Effect.gen(function* () {
        const info = yield* verb("cancel", id, options, (run, now) =>
          Effect.gen(function* () {
            yield* statements.stepsCancelOpen(run.id, now)
            yield* setStatus(run, "cancel", now)
            yield* event(run, "cancelled", options, now)
            yield* Metric.update(cancelledTotal.pipe(Metric.withAttributes({ workflow_class: run.workflow })), 1)
            // a child's cancel wakes its parent in the same transaction
            if (run.parent_run_id != null) yield* wakeParentOf(run.id, now)
            return yield* reread(run.id)
          })
        )
        // asked for: the run's children are cancelled after it, each in its own transaction
        // (locking the parent before its children could deadlock with a child's end, which locks
        // the child, then its parent), and theirs after them
        if (options?.cancelChildren === true) {
          const children = yield* statements.runChildrenOngoing(info.id).pipe(db("find child runs"))
          for (const child of children) {
            yield* client()
              .cancel(child.id, { ...options, resourceId: undefined })
              .pipe(Effect.catchTag(["NotOngoing", "InvalidTransition"], () => Effect.void))
          }
        }
        return info
      }),

    runNow: (id, options) => moveScheduled("run_now", id, null, options),

    reschedule: (id, at, options) => moveScheduled("reschedule", id, at, options),

    rerun: (id, options) =>
      Effect.gen(function* () {
        const run = yield* verb("rerun", id, options, (row) => Effect.succeed(row))
        const ref: WorkflowRef<unknown> = {
          name: run.workflow,
          payload: Schema.Unknown,
          version: run.definition_version ?? undefined,
          queue: undefined
        }
        return yield* startRun(
          ref,
          run.payload,
          {
            subject: run.subject ?? undefined,
            resourceId: run.resource_id ?? undefined,
            actor: options?.actor,
            reason: options?.reason,
            // the new run keeps the old one's priority and its claim on a singleton's slot
            priority: run.priority ?? undefined,
            singleton: run.singleton
          },
          run.id
        )
      }),
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

    skip: (id, options) =>
      verb("skip", id, options, (run, now) =>
        Effect.gen(function* () {
          const [waiting] = yield* statements.stepWaitingOf(run.id)
          if (waiting === undefined) {
            return yield* new InvalidTransition({
              verb: "skip",
              current: `${run.status} (no waiting step)`,
              run: run.id
            })
          }
          yield* statements.stepResolveWaiting({
            workflow: run.workflow,
            runId: run.id,
            stepId: waiting.id,
            outcome: "skip",
            error: null,
            actor: options?.actor ?? "app",
            reason: options?.reason ?? null,
            eventType: "skipped",
            eventDetails: null,
            physicalQueue: queueOf(waiting.queue || config.workflowQueue).physical,
            now
          })
          return yield* reread(run.id)
        })
      ),

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
