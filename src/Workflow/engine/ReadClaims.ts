/**
 * A woken step claimed in the worker's read (issue 24): the read that delivers a step's message
 * claims the step in the same statement (`stepClaimInRead`), so that its execution has one round
 * trip of its own (its outcome) instead of two: for the messages an executor takes at once, and
 * for those expected to wait in the buffer briefly when their step allows the wait. The claims
 * reach the runner as local dispatch's do (`preclaimed`, by delivery); a message that goes back
 * unrun has its claim released.
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import type { Message } from "../../Queue/Message.ts"
import type { ReadClaim, ReadClaimRow } from "../../Queue/QueueRows.ts"
import type { ClaimRow } from "../WorkflowSql.ts"
import { STEP_JOB } from "../WorkflowSql.ts"
import type { EngineContext } from "./Context.ts"
import { claimMarkOf, deliveryKey, isStepMessage } from "./Messages.ts"
import type { Outcomes } from "./Outcomes.ts"
import type { RegisteredWorkflow } from "./Services.ts"

/** The step a message of a registered workflow names for a claim in the read, if any. */
const stepOf = (workflows: ReadonlyMap<string, RegisteredWorkflow>, m: Message) => {
  const envelope = m.message
  if (typeof envelope !== "object" || envelope === null || (envelope as { job?: unknown }).job !== STEP_JOB) return
  const payload = (envelope as { payload?: unknown }).payload
  if (!isStepMessage(payload) || payload.step === null || payload.deadline !== undefined) return
  return workflows.has(payload.workflow) ? { workflow: payload.workflow, stepId: BigInt(payload.step) } : undefined
}

/** A start's message carries the run's input (the statement claims none). */
const hasInput = (m: Message) => {
  const payload = (m.message as { payload?: unknown }).payload
  return typeof payload === "object" && payload !== null && "input" in payload
}

/** Builds, for the workflows a process registers, the claim its workers' reads make (per queue). */
export const makeReadClaims =
  (ctx: EngineContext, outcomes: Outcomes) =>
  (workflows: ReadonlyMap<string, RegisteredWorkflow>): ((logical: string) => ReadClaim | undefined) => {
    const { config, statements, worker, preclaimed, revision } = ctx
    const names = [...workflows.keys()]
    // the queues their step messages go to unless a step names its own (read the usual way)
    const queues = new Set([...workflows.values()].map((w) => w.workflow.queue ?? config.workflowQueue))
    // a step claimed for a message that waits in the buffer has its stall clock running there:
    // only one whose timeout and the sweep's threshold both allow a lease's wait (the read-ahead
    // keeps a buffered message's wait within a quarter of it, the worker's claims in the read
    // to an expected wait of SOON_WAIT_MS)
    const visibilityMs = Duration.toMillis(config.visibilityTimeout)
    const soonAllowed = Duration.toMillis(config.workflowStallThreshold) >= visibilityMs
    const claim: ReadClaim = {
      ctes: (queue, limit, soon, now) =>
        statements.stepClaimInRead({
          queue,
          workflows: names,
          limit,
          soon: soonAllowed ? soon : 0,
          soonMinTimeoutMs: visibilityMs,
          worker,
          appRevision: revision,
          now
        }),
      // as the statement's filter: a first delivery naming a step (no start, no deadline notice)
      claimable: (m) => m.readCt === 1 && stepOf(workflows, m) !== undefined && !hasInput(m),
      claimed: (_queue, rows: ReadonlyArray<ReadClaimRow>) => {
        for (const row of rows) {
          if (row.rc_msg_id !== null)
            preclaimed.set(deliveryKey(row.rc_msg_id, row.read_ct), { claim: row as unknown as ClaimRow, inRead: true })
        }
      },
      // released as a refused hand-over is: a new attempt, by this delivery's mark (nothing when
      // the read did not claim it); the message's next delivery then finds no claim of a dead worker
      release: (messages, taken) =>
        Effect.forEach(
          messages,
          (m) => {
            const step = stepOf(workflows, m)
            if (step === undefined) return Effect.void
            const key = deliveryKey(m.msgId, m.readCt)
            if (!preclaimed.delete(key) && taken) return Effect.void
            return outcomes
              .releaseStep({
                workflow: step.workflow,
                stepId: step.stepId,
                claimedBy: claimMarkOf({ attempt: m.readCt, msgId: m.msgId, queue: m.queue }) ?? undefined,
                reason: "claimed by a read whose message went back unrun (a drain, or the read's reply was lost)"
              })
              .pipe(
                Effect.catchCause((cause) =>
                  Effect.logWarning("pgbus: releasing a step claimed in a read failed", cause)
                )
              )
          },
          // a drain may give back a buffer's worth: a few at a time
          { discard: true, concurrency: 4 }
        )
    }
    return (logical) => (names.length > 0 && queues.has(logical) ? claim : undefined)
  }
