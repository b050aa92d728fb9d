/**
 * Matching a stored signal against a wait: its declared Schema, and its predicate when it has one.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import { isSignalMatcher, type SignalDeclarations, type SignalMatcher } from "../Runtime.ts"

/** What `matchSignal` gives when the signal does not match. */
export const NO_MATCH: unique symbol = Symbol("pgbus/no-match")

/** Whether a declared signal has a predicate (only code that loads the workflow can evaluate it). */
export const declaredMatcher = (workflow: { readonly signals: SignalDeclarations }, name: string): boolean => {
  const declared = workflow.signals[name]
  return isSignalMatcher(declared) && declared.matches !== undefined
}

/**
 * Matches a stored signal payload against a wait: decodes it with the declared (or the
 * matcher's) Schema and applies the predicate. Gives the decoded payload, or NO_MATCH. A Schema
 * or a predicate that fails is an error of the step (the exception policies decide).
 */
export const matchSignal = (
  workflow: { readonly signals: SignalDeclarations },
  waitFor: string | SignalMatcher,
  payload: unknown,
  options: { readonly decodeOnly?: boolean } = {}
): Effect.Effect<unknown, unknown> =>
  Effect.gen(function* () {
    const name = typeof waitFor === "string" ? waitFor : waitFor.name
    const declared = workflow.signals[name]
    const matcher: SignalMatcher | undefined =
      typeof waitFor !== "string" ? waitFor : isSignalMatcher(declared) ? declared : undefined
    const schema = matcher?.schema ?? (declared !== undefined && !isSignalMatcher(declared) ? declared : undefined)
    const decoded = schema === undefined ? payload : yield* Schema.decodeUnknownEffect(schema)(payload)
    // a held signal was matched when it was claimed: later attempts only decode it
    if (matcher?.matches === undefined || options.decodeOnly === true) return decoded
    const matches = matcher.matches
    return yield* Effect.try({ try: () => matches(decoded), catch: (e) => e }).pipe(
      Effect.map((ok) => (ok ? decoded : NO_MATCH))
    )
  })
