/**
 * The workflow client's entry-point checks (the rules of `Input.ts`): what a start is given is
 * refused with a typed error before any SQL, rather than as PostgreSQL's refusal or a
 * `TypeError` thrown from a missing definition.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"
import * as Input from "../Input.ts"
import { InvalidWorkflowPayload } from "./WorkflowError.ts"

const START_OPTIONS = ["subject", "idempotencyKey", "resourceId", "actor", "reason"] as const

/** Checks a start's workflow and options; the error to fail with, or undefined. */
export const checkStart = (workflow: unknown, options: unknown): InvalidWorkflowPayload | undefined => {
  if (!Input.isPlainObject(workflow) || typeof workflow.name !== "string" || !Schema.isSchema(workflow.payload)) {
    return new InvalidWorkflowPayload({
      workflow: String(workflow),
      issue: "not a workflow definition (Workflow.make)"
    })
  }
  const name = String(workflow.name)
  const invalid = (issue: string) => new InvalidWorkflowPayload({ workflow: name, issue })
  const problem = Input.optionsProblem(options, START_OPTIONS, "start options")
  if (problem !== undefined) return invalid(problem)
  if (options === undefined) return undefined
  const given = options as Readonly<Record<string, unknown>>
  for (const key of START_OPTIONS) {
    const value = given[key]
    if (value === undefined) continue
    const text = Input.textProblem(value, key)
    if (text !== undefined) return invalid(text)
  }
  return undefined
}
