/**
 * Applying a step's outcome: one statement, the shared statements of the common case, releases.
 *
 * @since 0.1.0
 */
import { Effect, Metric } from "effect"
import { statementNow } from "../../Database.ts"
import { makeBatcher } from "../../internal/Batcher.ts"
import { type DatabaseError, StepInterrupted, type StepStalled } from "../WorkflowError.ts"
import type {
  ClaimFirstEntry,
  ClaimRow,
  FinishManyEntry,
  FinishRow,
  NextAction,
  StepRow,
  WorkflowSql
} from "../WorkflowSql.ts"
import type { EngineContext } from "./Context.ts"
import type { Target } from "./execution/State.ts"
import { stepMetrics } from "./Metrics.ts"

/** Applying a step's outcome: one statement, the shared statements of the common case, releases. */
export const makeOutcomes = (ctx: EngineContext) => {
  const { config, statements, sessionStatements, worker, revision, db, queueOf, errorJson } = ctx

  /** A new attempt of the step, due at once, counting `reattempts` consecutive reattempts. */
  const nextAttemptNow = (step: StepRow, reattempts: number): NextAction => ({
    _tag: "schedule",
    name: step.name,
    attempt: step.attempt + 1,
    position: step.position,
    queue: step.queue,
    physicalQueue: queueOf(step.queue || config.workflowQueue).physical,
    delayMs: 0,
    timeoutMs: step.timeout_ms,
    reattempts,
    reattempt: true
  })

  /** What `workflowStallAction` does to a step found stalled (a redelivered claim, or the sweep). */
  const stallNext = (step: StepRow, stalled: StepStalled): NextAction => {
    switch (config.workflowStallAction) {
      case "reattempt":
        return nextAttemptNow(step, step.reattempts + 1)
      case "cancel":
        return { _tag: "cancel", reason: "stalled" }
      case "pause":
        return { _tag: "pause", reason: "stalled", error: errorJson(stalled), message: `step ${step.name} stalled` }
    }
  }

  const finishOn = (on: WorkflowSql) => (p: Omit<Parameters<WorkflowSql["stepFinish"]>[0], "worker" | "appRevision">) =>
    on.stepFinish({ ...p, worker, appRevision: revision }).pipe(db("apply step outcome"))
  const finish = finishOn(statements)
  const finishOnSession = finishOn(sessionStatements)

  /**
   * Releases an attempt this process claimed and will not finish (a drain interrupted its
   * execution, or a hand-over was refused or lost): it fails with `StepInterrupted` and a new
   * attempt is due at once, after a `step_interrupted` event saying why. Not the step's failure:
   * it does not count as a reattempt. Guarded: an attempt no longer in progress, or held by
   * another claim than `claimedBy`, is left alone. True when it released it.
   */
  const releaseStep = (p: {
    readonly workflow: string
    readonly stepId: bigint
    readonly claimedBy?: string | undefined
    readonly reason: string
  }) =>
    Effect.gen(function* () {
      const [step] = yield* statements.stepGet(p.stepId).pipe(db("find step"))
      if (step === undefined || step.status !== "in_progress") return false
      const now = yield* statementNow
      const [r] = yield* finish({
        workflow: p.workflow,
        runId: step.run_id,
        stepId: step.id,
        status: "failed",
        output: null,
        error: errorJson(new StepInterrupted({ step: step.name, reason: p.reason })),
        definitionHash: null,
        // not the step's failure: no reattempt counted
        next: nextAttemptNow(step, step.reattempts),
        onlyIfClaimedBy: p.claimedBy,
        stepEvent: { type: "step_interrupted", reason: p.reason },
        now
      })
      if (r?.applied !== 1n) return false
      yield* Metric.update(stepMetrics(p.workflow, step.name, "interrupted").total, 1)
      return true
    })

  // Outcomes of the common case (completed, holding no signal or one the step was claimed with in
  // the worker's read, consumed with the outcome; the next step claimed at once or the run
  // finished) from concurrent executions share a statement: while one is out, the next ones
  // pile up and leave together (one round trip and one commit for several runs; W3 went from
  // 5.4 to 3.1 statements per run). Idle, an outcome leaves at once, alone.
  // Claims of fresh runs with their first step pile up with them and leave in the same statement
  // (claimAndFinishMany): one statement for both, where taking turns took two (which took W3
  // from 1.9 to 1.3-1.5 statements per run).
  // Two batches out at once, pipelined on the session: the executions split in cohorts that take
  // turns, PostgreSQL applying one's outcomes while this process runs the other's next steps (a
  // second batch leaves only with three outcomes and a quarter of those in play: see
  // internal/Batcher.ts). With one out, the database and this process took turns and each idled
  // while the other worked (W3 of 3,000 runs, 16 alternated pairs on 2026-12-05: faster in 12,
  // by 5-11% at the median). Not behind a transaction pooler: there the session is not
  // pipelined, and the second batch would go on a second connection, where two backends writing
  // the same tables cost PostgreSQL a third more CPU and were slower than one batch out.
  // They go over the workers' session (never in a caller's transaction: see execution/Outcome.ts).
  const one = (e: FinishManyEntry) =>
    // alone, the same outcome through the single statement; it reads the workflow's name and the
    // queue only to send a scheduled step's message, which a shared outcome never has
    finishOnSession({
      workflow: "",
      runId: e.runId,
      stepId: e.stepId,
      status: "completed",
      output: e.output,
      error: null,
      definitionHash: e.definitionHash,
      next: e.next._tag === "claim" ? { ...e.next, physicalQueue: "" } : e.next,
      mayHoldSignal: e.mayHoldSignal === true,
      now: e.now
    }).pipe(Effect.map((rows) => rows[0]))

  /** A fresh run claimed with its first step, alone (its statement is the shared one's, for one run). */
  const claimFirstOn = (on: WorkflowSql) => (entry: ClaimFirstEntry) =>
    on.runClaimFirstMany([entry], worker, revision).pipe(
      db("claim run"),
      Effect.map((rows) => rows.flatMap((row) => (row.id === null ? [] : [row as ClaimRow])))
    )
  const claimFirst = claimFirstOn(statements)
  const claimFirstOnSession = claimFirstOn(sessionStatements)

  /** A claim of a fresh run's first step, or a common outcome: what the shared statement takes. */
  type Shared =
    | { readonly _tag: "claim"; readonly entry: ClaimFirstEntry }
    | { readonly _tag: "finish"; readonly entry: FinishManyEntry }
  /** The claims' rows then the outcomes', in the order of `items`. */
  const sendShared = (
    items: ReadonlyArray<Shared>
  ): Effect.Effect<ReadonlyArray<ClaimRow | FinishRow | undefined>, DatabaseError> => {
    const claims = items.flatMap((i) => (i._tag === "claim" ? [i.entry] : []))
    const finishes = items.flatMap((i) => (i._tag === "finish" ? [i.entry] : []))
    const inOrder = (
      claimRows: ReadonlyArray<ClaimRow | undefined>,
      finishRows: ReadonlyArray<FinishRow | undefined>
    ) => {
      let c = 0
      let f = 0
      return items.map((i) => (i._tag === "claim" ? claimRows[c++] : finishRows[f++]))
    }
    if (finishes.length === 0) {
      return sessionStatements.runClaimFirstMany(claims, worker, revision).pipe(
        db("claim runs"),
        Effect.map((rows) =>
          inOrder(
            rows.map((row) => (row.id === null ? undefined : row)),
            []
          )
        )
      )
    }
    if (claims.length === 0) {
      return sessionStatements.stepFinishMany(finishes, worker, revision).pipe(
        db("apply step outcomes"),
        Effect.map((rows) => inOrder([], rows))
      )
    }
    return sessionStatements.claimAndFinishMany(claims, finishes, worker, revision).pipe(
      db("claim runs and apply step outcomes"),
      Effect.map((rows) => {
        const claimRows: Array<ClaimRow | undefined> = []
        const finishRows: Array<FinishRow | undefined> = []
        for (const row of rows) {
          if (row.kind === "c") claimRows.push(row.id === null ? undefined : row)
          else {
            finishRows.push({
              before: row.f_before,
              applied: row.f_applied ?? 0n,
              next_id: row.f_next_id,
              next_status: row.f_next_status,
              after: row.f_after
            })
          }
        }
        return inOrder(claimRows, finishRows)
      })
    )
  }
  const sharedBatched = makeBatcher<Shared, ClaimRow | FinishRow | undefined, DatabaseError>({
    many: sendShared,
    one: (i) => (i._tag === "claim" ? Effect.map(claimFirstOnSession(i.entry), (rows) => rows[0]) : one(i.entry)),
    key: (i) => i.entry.runId,
    maxOut: config.transactionPooler ? 1 : 2
  })
  const finishBatched = (entry: FinishManyEntry) =>
    sharedBatched({ _tag: "finish", entry }) as Effect.Effect<FinishRow | undefined, DatabaseError>
  // Fresh runs claimed with their first step by concurrent executions share a statement, with
  // outcomes (`finishBatched`).
  const claimFirstBatched = (entry: ClaimFirstEntry) =>
    sharedBatched({ _tag: "claim", entry }) as Effect.Effect<ClaimRow | undefined, DatabaseError>

  const lateCompletion = (runId: string, step: Target, now: Date | null) =>
    statements
      .eventInsert({
        runId,
        type: "late_completion_ignored",
        step: step.name,
        attempt: step.attempt,
        actor: "system",
        reason: "the step was moved on while it ran (cancelled, or found stalled)",
        details: null,
        now
      })
      .pipe(db("record late completion"))

  return {
    finish,
    releaseStep,
    finishBatched,
    claimFirst,
    claimFirstBatched,
    lateCompletion,
    nextAttemptNow,
    stallNext
  }
}

/** Applying a step's outcome. */
export type Outcomes = ReturnType<typeof makeOutcomes>
