/**
 * Starting runs: one statement (`runStartMany`) per start, or shared by concurrent starts into one queue.
 *
 * @since 0.1.0
 */
import { Context, Effect, Exit, type Fiber, Option, Schema } from "effect"
import { statementNowOf } from "../../Database.ts"
import { makeBatcher } from "../../internal/Batcher.ts"
import { withHotSpanOf } from "../../internal/span.ts"
import type { QueueError } from "../../Queue/QueueError.ts"
import type { RunHandle, StartOptions, WorkflowRef } from "../Client.ts"
import { AlreadyRunning, type DatabaseError, InvalidWorkflowPayload, SingletonRunInProgress } from "../WorkflowError.ts"
import type { RunRow, StartEntry } from "../WorkflowSql.ts"
import type { EngineContext } from "./Context.ts"
import { CARRIED_INPUT_LIMIT, ENGINE_VERSION } from "./Messages.ts"

/** The payload encoders, one per Schema (a new encoder per call compiled its parser's closure anew). */
const encoders = new WeakMap<object, (payload: unknown) => Effect.Effect<unknown, Schema.SchemaError>>()
const encoderOf = (schema: WorkflowRef<unknown>["payload"]) => {
  let encode = encoders.get(schema)
  if (encode === undefined) {
    encode = Schema.encodeEffect(schema) as (payload: unknown) => Effect.Effect<unknown, Schema.SchemaError>
    encoders.set(schema, encode)
  }
  return encode
}

/** Starting runs: one statement per start, or shared by concurrent starts into one queue. */
export const makeStarts = (
  ctx: EngineContext,
  handles: {
    readonly makeHandle: (row: RunRow, duplicateStart: boolean, definition?: WorkflowRef<unknown>) => RunHandle
  }
) => {
  const { config, sql, jobs, statements, db, queueOf } = ctx
  const { makeHandle } = handles

  /** Splits entries into consecutive runs with the same statement time. */
  const sameTimeRuns = (entries: ReadonlyArray<StartEntry>): Array<Array<StartEntry>> => {
    const out: Array<Array<StartEntry>> = []
    for (const e of entries) {
      const last = out[out.length - 1]
      if (last !== undefined && last[0]!.now?.getTime() === e.now?.getTime()) last.push(e)
      else out.push([e])
    }
    return out
  }

  /** One start alone (in a caller's transaction, a rerun): the new row, or none when refused. */
  const startOne = (entry: StartEntry, physical: string) =>
    statements.runStartMany([entry], physical, entry.now).pipe(
      db("start run"),
      Effect.map(([row]) => (row === undefined || row.id === null ? undefined : row))
    )

  // Starts made outside a transaction at the same time share a statement (one per queue out at
  // once): one round trip, one commit and one NOTIFY for several runs. Two starts that a unique
  // index could set against each other (one subject or key) never share one.
  const startBatchers = new Map<string, (entry: StartEntry) => Effect.Effect<RunRow | undefined, DatabaseError>>()
  const startBatched = (physical: string) => {
    let batcher = startBatchers.get(physical)
    if (batcher === undefined) {
      batcher = makeBatcher<StartEntry, RunRow | undefined, DatabaseError>({
        // one statement has one time: starts stamped at different times (a test clock; in
        // production `now` is the server's) go in one statement per time, in order
        many: (entries) =>
          Effect.map(
            Effect.forEach(sameTimeRuns(entries), (group) =>
              statements.runStartMany(group, physical, group[0]!.now).pipe(db("start runs"))
            ),
            (groups) => groups.flat().map((row) => (row.id === null ? undefined : row))
          ),
        one: (e) => startOne(e, physical),
        key: (e) =>
          e.singleton
            ? `${e.workflow}\u0000singleton`
            : e.subject === null && e.idempotencyKey === null
              ? e.id
              : `${e.workflow}\u0000${e.subject}\u0000${e.idempotencyKey}`
      })
      startBatchers.set(physical, batcher)
    }
    return batcher
  }

  /**
   * Starts a run: its payload encoded and checked, its row and start message in one statement
   * (shared by concurrent starts). One read of the fiber (the span, the statement time, a
   * caller's transaction) and no generator on the common path.
   */
  const startRun = <P>(
    workflow: WorkflowRef<P>,
    payload: P,
    options: StartOptions,
    rerunOf: string | null,
    attempt = 1
  ): Effect.Effect<RunHandle, InvalidWorkflowPayload | AlreadyRunning | SingletonRunInProgress | QueueError> =>
    withHotSpanOf("pgbus.workflow.start", { attributes: { workflow: workflow.name } }, (fiber) => {
      const encoding = encoderOf(workflow.payload)(payload)
      // a plain payload encodes at once (an Exit): no fiber work
      return Exit.isExit(encoding) && Exit.isSuccess(encoding)
        ? startEncoded(fiber, workflow, payload, encoding.value, options, rerunOf, attempt)
        : Effect.flatMap(
            Effect.mapError(encoding, (e) => new InvalidWorkflowPayload({ workflow: workflow.name, issue: e.message })),
            (encoded) => startEncoded(fiber, workflow, payload, encoded, options, rerunOf, attempt)
          )
    })

  /** `startRun` once the payload is encoded. */
  const startEncoded = <P>(
    fiber: Fiber.Fiber<unknown, unknown>,
    workflow: WorkflowRef<P>,
    payload: P,
    encoded: unknown,
    options: StartOptions,
    rerunOf: string | null,
    attempt: number
  ): Effect.Effect<RunHandle, InvalidWorkflowPayload | AlreadyRunning | SingletonRunInProgress | QueueError> => {
    let text: string | undefined
    try {
      text = JSON.stringify(encoded)
    } catch (e) {
      return Effect.fail(new InvalidWorkflowPayload({ workflow: workflow.name, issue: `not JSON: ${String(e)}` }))
    }
    if (text === undefined)
      return Effect.fail(new InvalidWorkflowPayload({ workflow: workflow.name, issue: "not JSON" }))
    const size = Buffer.byteLength(text, "utf8")
    if (size > config.maxPayloadSize) {
      return Effect.fail(
        new InvalidWorkflowPayload({
          workflow: workflow.name,
          issue: `${size} bytes, over the limit of ${config.maxPayloadSize}`
        })
      )
    }
    const payloadText = text
    const key = options.idempotencyKey?.trim() ? options.idempotencyKey : null
    const subject = options.subject ?? null
    // resolved once, kept on the run: every later message of the run goes to its sub-queue
    const priority = options.priority ?? workflow.priority ?? null
    const singleton = options.singleton ?? workflow.singleton ?? false
    const scheduledFor = options.scheduledFor ?? null
    const { queue, physical } = queueOf(workflow.queue ?? config.workflowQueue, priority ?? undefined)
    // a queue already known is an Exit: no fiber work
    return Effect.flatMapEager(jobs.ensureQueue(queue), () => {
      const now = statementNowOf(fiber)
      const id = crypto.randomUUID()
      const entry: StartEntry = {
        id,
        workflow: workflow.name,
        subject,
        resourceId: options.resourceId ?? null,
        payload: payloadText,
        idempotencyKey: key,
        engineVersion: ENGINE_VERSION,
        definitionVersion: workflow.version ?? null,
        actor: options.actor ?? "app",
        reason: options.reason ?? null,
        priority,
        singleton,
        scheduledFor,
        // a prioritized or scheduled run is claimed before its first replay (the claim reads both)
        carryInput: size <= CARRIED_INPUT_LIMIT && priority === null && scheduledFor === null,
        now
      }
      // outside a transaction, concurrent starts into one queue share a statement
      const inserted =
        rerunOf === null && Option.isNone(Context.getOption(fiber.context, sql.transactionService))
          ? startBatched(physical)(entry)
          : startOne({ ...entry, rerunOf }, physical)
      // the start returns the new row: no read-back
      return Effect.flatMap(inserted, (row) =>
        row !== undefined
          ? Effect.succeed(makeHandle(row, false, workflow))
          : refused(workflow, payload, options, rerunOf, attempt, subject, key, singleton)
      )
    })
  }

  /** A start the statement refused (a run holds its subject, key or singleton): the holder's handle, a retry or the error. */
  const refused = <P>(
    workflow: WorkflowRef<P>,
    payload: P,
    options: StartOptions,
    rerunOf: string | null,
    attempt: number,
    subject: string | null,
    key: string | null,
    singleton: boolean
  ) =>
    Effect.gen(function* () {
      const [holder] = yield* statements.runFindConflicting(workflow.name, subject, key, singleton).pipe(db("find run"))
      // the holder ended between the refused insert and this read: start again
      if (holder === undefined && attempt < 3) return yield* startRun(workflow, payload, options, rerunOf, attempt + 1)
      if (holder === undefined) return yield* Effect.die(new Error("start found neither a new run nor a conflict"))
      if (key !== null && holder.idempotency_key === key) return makeHandle(holder, true, workflow)
      if (singleton && (subject === null || holder.subject !== subject)) {
        return yield* new SingletonRunInProgress({
          workflow: workflow.name,
          holder: { id: holder.id, workflow: holder.workflow, status: holder.status }
        })
      }
      return yield* new AlreadyRunning({
        workflow: workflow.name,
        subject: subject ?? "",
        run: { id: holder.id, workflow: holder.workflow, status: holder.status }
      })
    })

  return { startRun }
}
