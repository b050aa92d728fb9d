/**
 * Exception policies: which policy applies to a step's failure, and what it decides. The step's
 * own policies come first, then the workflow's policies that name the error, then (for a
 * database failure that may pass) a reattempt with backoff, then its blanket ones, then pause.
 *
 * @since 0.1.0
 */
import { Duration, Effect } from "effect"
import { isTransientDatabaseFailure } from "../Database.ts"
import type { ErrorMatcher, ErrorPolicy, PolicyDecision } from "./Runtime.ts"

/** What a failure leads to. */
export interface Resolution {
  readonly action: "reattempt" | "cancel" | "pause" | "skip"
  /** Delay before the next attempt, for `reattempt`. */
  readonly waitMs: number
  /** Whether to hand the error to the ErrorReporter. */
  readonly report: boolean
  /** The policy that decided (none: the default pause). */
  readonly policy: ErrorPolicy | undefined
  /** True when `maxReattempts` was spent and the terminal action applied. */
  readonly terminal: boolean
}

/** The names an error answers to: a typed error's `_tag`, its `name` and its class name. */
export const namesOf = (error: unknown): ReadonlyArray<string> => {
  if (typeof error !== "object" || error === null) return [typeof error]
  const names: Array<string> = []
  const e = error as { readonly _tag?: unknown; readonly name?: unknown }
  if (typeof e._tag === "string") names.push(e._tag)
  if (typeof e.name === "string") names.push(e.name)
  const ctor = (error as { readonly constructor?: { readonly name?: unknown } }).constructor
  if (ctor && typeof ctor.name === "string" && ctor.name !== "Object") names.push(ctor.name)
  return names
}

const messageOf = (error: unknown): string =>
  typeof error === "object" && error !== null && typeof (error as { message?: unknown }).message === "string"
    ? (error as { message: string }).message
    : String(error)

const matchOne = (matcher: ErrorMatcher, error: unknown): boolean => {
  if (typeof matcher === "string") return namesOf(error).includes(matcher)
  if (matcher instanceof RegExp) return matcher.test(messageOf(error))
  try {
    return matcher(error)
  } catch {
    return false
  }
}

/** Whether a policy names this error (a blanket policy names none). */
export const names = (policy: ErrorPolicy, error: unknown): boolean => {
  if (policy.match === undefined) return false
  const matchers = Array.isArray(policy.match) ? policy.match : [policy.match as ErrorMatcher]
  return matchers.some((m) => matchOne(m, error))
}

const toMs = (wait: Duration.Input | undefined): number =>
  wait === undefined ? 0 : Duration.toMillis(Duration.fromInputUnsafe(wait))

/** Consecutive reattempts of a step failing with a passing database failure before its run pauses. */
export const TRANSIENT_MAX_REATTEMPTS = 10

/**
 * What a database failure that may pass (a lost connection, a server restarting, a deadlock)
 * leads to when no policy names it: it is not the step's failure, so the step is reattempted
 * with backoff (1 s doubling to 30 s, about three minutes over ten reattempts), then the run
 * pauses. Reported only then (a restart logs its warnings elsewhere).
 */
export const transientResolution = (reattempts: number): Resolution =>
  reattempts >= TRANSIENT_MAX_REATTEMPTS
    ? { action: "pause", waitMs: 0, report: true, policy: undefined, terminal: true }
    : {
        action: "reattempt",
        waitMs: Math.min(1_000 * 2 ** reattempts, 30_000),
        report: false,
        policy: undefined,
        terminal: false
      }

/**
 * Resolves a failure. `reattempts` is how many consecutive reattempts the step has had (the
 * failing attempt included). A policy function that fails or dies pauses. A database failure
 * that may pass goes, unless a step policy or a workflow policy naming it decides, to
 * `transientResolution` before the workflow's blanket policies.
 */
export const resolve = (
  error: unknown,
  stepPolicies: ReadonlyArray<ErrorPolicy>,
  workflowPolicies: ReadonlyArray<ErrorPolicy>,
  reattempts: number
): Effect.Effect<Resolution> =>
  Effect.gen(function* () {
    const chosen =
      stepPolicies.find((p) => p.match === undefined || names(p, error)) ??
      workflowPolicies.find((p) => names(p, error))
    if (chosen === undefined && isTransientDatabaseFailure(error)) return transientResolution(reattempts)
    const policy = chosen ?? workflowPolicies.find((p) => p.match === undefined)
    if (policy === undefined) {
      return { action: "pause", waitMs: 0, report: true, policy: undefined, terminal: true } satisfies Resolution
    }
    const decision: PolicyDecision =
      typeof policy.action === "string"
        ? policy.action === "reattempt"
          ? { _tag: "reattempt", wait: policy.wait }
          : { _tag: policy.action }
        : yield* policy.action(error).pipe(Effect.catchCause(() => Effect.succeed({ _tag: "pause" } as const)))
    const mode = policy.report ?? "always"
    if (decision._tag === "reattempt") {
      const spent = policy.maxReattempts !== undefined && reattempts >= policy.maxReattempts
      if (spent) {
        return {
          action: policy.terminalAction ?? "pause",
          waitMs: 0,
          report: mode !== "never",
          policy,
          terminal: true
        } satisfies Resolution
      }
      return {
        action: "reattempt",
        waitMs: toMs(decision.wait ?? policy.wait),
        report: mode === "always",
        policy,
        terminal: false
      } satisfies Resolution
    }
    return { action: decision._tag, waitMs: 0, report: mode !== "never", policy, terminal: true } satisfies Resolution
  })
