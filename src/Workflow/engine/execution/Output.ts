/**
 * A completed step's value as it is stored: encoded by its `output` Schema, checked to come back
 * the same from JSON, storable, and within the payload limit. A value that fails a check is the
 * step's failure (the policies decide), never a stored output replay would read differently.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import { jsonMismatch } from "../../../internal/jsonSafe.ts"
import { isStorableJson } from "../../../internal/storable.ts"
import { OutputNotJson, OutputNotStorable, OutputTooLarge } from "../../WorkflowError.ts"
import type { StepEnd } from "./End.ts"
import type { RunnerStepOptions, Target } from "./State.ts"

/** How a failed attempt ends, before the policies resolve it. */
export const failedWith = (error: unknown): StepEnd => ({ _tag: "Failed", error })

/** A step's encoded value, checked: `Completed` with its stored text, or `Failed`. */
const checkedEnd = <A>(
  step: Target,
  value: A,
  encoded: unknown,
  hasSchema: boolean,
  maxPayloadSize: number
): StepEnd => {
  // what is stored must come back the same from JSON, or replay sees another value (or
  // fails to decode it): the output itself, or what its Schema encodes it to
  const mismatch = encoded === undefined ? undefined : jsonMismatch(encoded, hasSchema ? "encoded output" : "output")
  if (mismatch !== undefined) return failedWith(new OutputNotJson({ step: step.name, detail: mismatch }))
  let outputText: string | undefined
  try {
    outputText = encoded === undefined ? undefined : JSON.stringify(encoded)
  } catch (e) {
    return failedWith(e)
  }
  if (outputText !== undefined) {
    if (!isStorableJson(outputText)) return failedWith(new OutputNotStorable({ step: step.name }))
    const size = Buffer.byteLength(outputText, "utf8")
    if (size > maxPayloadSize) {
      return failedWith(new OutputTooLarge({ step: step.name, size, limit: maxPayloadSize }))
    }
  }
  return { _tag: "Completed", value, output: outputText ?? null } as const
}

/**
 * A step's value, encoded and checked: `Completed` with its stored text, or `Failed`. Without an
 * `output` Schema nothing is encoded: the checks run at once, with no Effect of their own.
 */
export const completedEnd = <A>(
  step: Target,
  value: A,
  options: RunnerStepOptions<A>,
  maxPayloadSize: number
): Effect.Effect<StepEnd> =>
  options.output === undefined
    ? Effect.succeed(checkedEnd(step, value, value, false, maxPayloadSize))
    : Effect.map(Effect.result(Schema.encodeEffect(options.output)(value)), (encoded) =>
        encoded._tag === "Failure"
          ? failedWith(encoded.failure)
          : checkedEnd(step, value, encoded.success, true, maxPayloadSize)
      )
