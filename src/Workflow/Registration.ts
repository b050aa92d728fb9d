/**
 * Workflows as a process registers them: each with the services its code needs, and the
 * library's own jobs that run them (step messages, fan-out callbacks) under reserved names.
 *
 * @since 0.1.0
 */
import { Context, Effect } from "effect"
import { Finished as BatchFinished } from "../Batch/Batch.ts"
import type { PgBusConfigShape } from "../Config.ts"
import { internalJob } from "../Job/InternalJob.ts"
import type { RegisteredJob } from "../Job/RegisteredJob.ts"
import { isLastAttempt, resolvePolicy } from "../Job/Retry.ts"
import { isStepMessage, type RegisteredWorkflow, StepMessage, type WorkflowRunner } from "./Engine.ts"
import type { AnyWorkflow } from "./Workflow.ts"
import { InvalidWorkflowDefinition } from "./WorkflowError.ts"
import { FAN_OUT_JOB, STEP_JOB } from "./WorkflowSql.ts"

/**
 * The workflows a registry runs.
 *
 * @category models
 */
export interface RegisteredWorkflows {
  readonly workflows: ReadonlyMap<string, RegisteredWorkflow>
  /** The jobs of the library's own that run them (`pgbus.workflow.step`, `pgbus.workflow.fan_out_finished`). */
  readonly jobs: ReadonlyArray<RegisteredJob>
}

/**
 * Registers workflows with the services their code needs (`services`, captured by the
 * registry) and builds the jobs that run them. Fails with `InvalidWorkflowDefinition` for two
 * workflows with one name.
 */
export const registerWorkflows = (
  config: PgBusConfigShape,
  runner: WorkflowRunner["Service"],
  definitions: ReadonlyArray<AnyWorkflow>,
  services: Context.Context<never>
): Effect.Effect<RegisteredWorkflows, InvalidWorkflowDefinition> =>
  Effect.gen(function* () {
    const workflows = new Map<string, RegisteredWorkflow>()
    for (const definition of definitions) {
      if (workflows.has(definition.name)) {
        return yield* new InvalidWorkflowDefinition({
          workflow: definition.name,
          reason: "two workflows are registered with this name"
        })
      }
      workflows.set(definition.name, {
        workflow: definition,
        // one context update per execution: the services, then what the runner adds (its runtime)
        provide: (effect, also) =>
          Effect.updateContext(
            effect as Effect.Effect<unknown, unknown>,
            also === undefined
              ? Context.merge(services)
              : (context: Context.Context<never>) => also(Context.merge(context, services))
          ) as never
      })
    }
    // on a message's last delivery the runner pauses a run it cannot execute rather than see
    // its message dead-lettered
    const stepPolicy = resolvePolicy(config, undefined)
    const jobs = [
      // workflow step messages are jobs of their own, run by the workflow runner
      internalJob(
        config,
        STEP_JOB,
        StepMessage,
        config.workflowQueue,
        (payload, context) =>
          runner.execute(workflows, payload, {
            attempt: context.attempt,
            msgId: context.msgId,
            queue: context.queue,
            last: isLastAttempt(stepPolicy, context.attempt),
            settles: true
          }),
        // the step's outcome commits with the step (synchronously): a lost archive only makes the
        // message visible again, and its redelivery finds the step moved on; the run's rows and
        // audit trail record what the message did, so it is deleted rather than archived
        // a woken step is claimed by the worker's read that delivers its message (one round trip less)
        {
          accepts: isStepMessage,
          archiveIsLease: true,
          deleteOnSuccess: true,
          ...(runner.readClaim === undefined ? {} : { readClaim: runner.readClaim(workflows) })
        }
      ),
      // a fan-out batch's callback resumes the step waiting on it
      internalJob(config, FAN_OUT_JOB, BatchFinished, config.workflowQueue, (payload) => runner.fanOutFinished(payload))
    ]
    return { workflows, jobs }
  })
